package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/testenv"
)

// The daemon's /metrics, scraped and parsed with Prometheus's own text parser: each job's and
// account's figures are the database's, and the histograms count the runs this daemon closed.
// Without credentials /metrics, the dashboard and its API answer 401, on localhost too; with
// them but another site's name in Host (DNS rebinding), 421.
func TestMetrics(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	addr := testenv.FreeAddr(t)
	w.mustRun("account", "add", "team", "--quota", "10GiB")
	w.mustRun("job", "add", "good", "--engine", "command", "--command", "/bin/true", "--account", "team")
	w.mustRun("job", "add", "bad", "--engine", "command", "--command", "/bin/false", "--alert-failures", "1")
	w.startDaemon("--listen", addr, "--watch-interval", "500ms", "--web-auth-file", webAuthFile(t))
	good, bad := w.startRun("good"), w.startRun("bad")
	w.waitEnd(good)
	w.waitEnd(bad)
	for _, path := range []string{"/metrics", "/", "/runs", "/runs/" + good, "/api/runs/" + good, "/api/runs/" + good[:8],
		"/jobs/good", "/accounts/team", "/static/app.js"} {
		for _, c := range []struct {
			what  string
			host  string
			token string
			want  int
		}{
			{"no credentials", "", "", http.StatusUnauthorized},
			{"no credentials, as localhost", "localhost", "", http.StatusUnauthorized},
			{"a wrong token", "", "Bearer " + webToken[:len(webToken)-1] + "x", http.StatusUnauthorized},
			{"another site's name", "attacker.example", "Bearer " + webToken, http.StatusMisdirectedRequest},
			{"another site's name on this port", "attacker.example:" + addr[strings.LastIndex(addr, ":")+1:], "Bearer " + webToken, http.StatusMisdirectedRequest},
			{"the token", "", "Bearer " + webToken, http.StatusOK},
			{"the token as localhost", "localhost", "Bearer " + webToken, http.StatusOK},
		} {
			resp := webGet(t, "http://"+addr+path, c.host, c.token)
			if resp.StatusCode != c.want {
				t.Errorf("GET %s, %s: %s, want %d", path, c.what, resp.Status, c.want)
			}
			if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("GET %s, %s: headers %v lack frame-ancestors 'none' or nosniff", path, c.what, resp.Header)
			}
		}
	}
	waitJob := func(name string, cond func(jobJSON) bool) {
		t.Helper()
		await(t, "job "+name, func() string { return "" }, func() jobJSON { return w.job(name) }, cond)
	}
	waitJob("bad", func(j jobJSON) bool { return j.OverdueSince != nil })

	families := scrape(t, "http://"+addr+"/metrics")
	gauge := func(name string, labels ...string) float64 {
		t.Helper()
		f, ok := families[name]
		if !ok {
			t.Fatalf("no metric %s", name)
		}
		for _, m := range f.Metric {
			if matches(m, labels) {
				if m.Gauge != nil {
					return m.Gauge.GetValue()
				}
				if m.Histogram != nil {
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return 0
	}
	st := w.store()
	ctx := context.Background()
	facts, err := st.FiguresGet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range facts.Jobs {
		if j.LastRunEnd == nil || gauge("holdfast_job_last_run_timestamp_seconds", "job_name", j.Name) != float64(j.LastRunEnd.UnixNano())/1e9 {
			t.Errorf("job %s: last run %v, metric %v", j.Name, j.LastRunEnd, gauge("holdfast_job_last_run_timestamp_seconds", "job_name", j.Name))
		}
	}
	goodRun := w.show(good)
	finished, _ := time.Parse(time.RFC3339Nano, *goodRun.FinishedAt)
	if got := gauge("holdfast_job_last_success_timestamp_seconds", "job_name", "good"); got != float64(finished.UnixNano())/1e9 {
		t.Errorf("good's last success: metric %v, run ended %s", got, finished)
	}
	if _, ok := families["holdfast_job_last_success_timestamp_seconds"]; ok {
		for _, m := range families["holdfast_job_last_success_timestamp_seconds"].Metric {
			if matches(m, []string{"job_name", "bad"}) {
				t.Error("bad never succeeded, yet has a last success")
			}
		}
	}
	if gauge("holdfast_job_overdue", "job_name", "bad") != 1 || gauge("holdfast_job_overdue", "job_name", "good") != 0 {
		t.Error("holdfast_job_overdue: want bad 1 and good 0")
	}
	if gauge("holdfast_runs_live", "status", "running") != 0 || gauge("holdfast_runs_live", "status", "queued") != 0 {
		t.Error("holdfast_runs_live: want none")
	}
	if got := gauge("holdfast_account_quota_bytes", "account", "team"); got != 10<<30 {
		t.Errorf("team's quota: %v", got)
	}
	var team float64
	for _, a := range facts.Accounts {
		if a.Name == "team" {
			team = float64(a.Balance())
		}
	}
	if got := gauge("holdfast_account_balance_bytes", "account", "team"); got != team {
		t.Errorf("team's balance: metric %v, database %v", got, team)
	}
	if n := gauge("holdfast_run_duration_seconds", "kind", "backup", "status", "succeeded"); n != 1 {
		t.Errorf("run duration histogram holds %v succeeded runs, want 1", n)
	}
	if n := gauge("holdfast_run_duration_seconds", "kind", "backup", "status", "failed"); n != 1 {
		t.Errorf("run duration histogram holds %v failed runs, want 1", n)
	}
	if gauge("holdfast_sweep_duration_seconds") == 0 {
		t.Error("no sweep observed")
	}
	if gauge("holdfast_database_up") != 1 || gauge("holdfast_build_info", "version", "dev") != 1 {
		t.Error("holdfast_database_up or holdfast_build_info missing")
	}
	if v, err := engine.ResticVersionOf(t.Context(), testenv.Restic(t)); err != nil || gauge("holdfast_restic_info", "version", v.String()) != 1 {
		t.Errorf("holdfast_restic_info of restic %s (%v) missing", v, err)
	}
	host, _ := os.Hostname()
	if gauge("holdfast_host_up", "host", host) != 1 || gauge("holdfast_host_heartbeat_timestamp_seconds", "host", host) == 0 {
		t.Errorf("holdfast_host_up or its heartbeat for %s missing", host)
	}
}

// A daemon asked to listen without credentials, or off localhost without TLS, does not start:
// one line says why and how to make them, and it exits 78 (a configuration error, not retried).
func TestListenNeedsCredentials(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	for _, c := range []struct {
		what string
		args []string
		want string
	}{
		{"no auth file", []string{"--listen", testenv.FreeAddr(t), "--web-auth-file="},
			"serves only with credentials, and no --web-auth-file is given nor /etc/holdfast/web.auth there: run holdfast setup, or (umask 077; echo \"bearer $(head -c 24 /dev/urandom | base64)\" >/etc/holdfast/web.auth)"},
		{"an auth file others can read", []string{"--listen", testenv.FreeAddr(t), "--web-auth-file", openAuthFile(t)}, "has mode 0644"},
		{"off localhost without TLS", []string{"--listen", "0.0.0.0:0", "--web-auth-file", webAuthFile(t)},
			"--listen 0.0.0.0:0 is reachable from elsewhere: give --tls-cert and --tls-key"},
	} {
		r := w.runBinary(append([]string{"daemon"}, c.args...)...)
		if r.code != 78 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("daemon with %s: exit %d, stderr %q; want 78 and one line with %q", c.what, r.code, r.stderr, c.want)
		}
	}
}

// webToken is the bearer token of the test daemons' auth files (webAuthFile).
const webToken = "holdfast-test-token-4f6b0c1e9a"

// webAuthFile is an auth file holding webToken: root's, 0600, as holdfast setup makes it.
func webAuthFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "web.auth")
	if err := os.WriteFile(path, []byte("bearer "+webToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// openAuthFile is an auth file its group and others may read.
func openAuthFile(t *testing.T) string {
	t.Helper()
	path := webAuthFile(t)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// webGet GETs url with the Host header host ("" the URL's) and the Authorization header auth
// ("" none), and returns the response with its body read.
func webGet(t *testing.T, url, host, auth string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// scrape reads the metrics at url with the test daemons' token.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+webToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return families
}

// matches reports whether m carries every name/value pair of labels.
func matches(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.Label {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// readmeCode is the README's code block of language lang after heading.
func readmeCode(t *testing.T, heading, lang string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(text), heading)
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	_, block, ok := strings.Cut(after, "```"+lang+"\n")
	if !ok {
		t.Fatalf("README.md has no %s block after %q", lang, heading)
	}
	block, _, _ = strings.Cut(block, "```\n")
	return block
}

// Debian's Prometheus scrapes a daemon with the README's rule file: the failing job's overdue
// alert fires with its name in job_name beside the scrape's own job label, and none fires for
// the job that succeeds.
func TestPrometheusAlert(t *testing.T) {
	parallel(t)
	prom := testenv.Prometheus(t)
	w := newWorld(t)
	addr := testenv.FreeAddr(t)
	w.mustRun("job", "add", "good", "--engine", "command", "--command", "/bin/true")
	w.mustRun("job", "add", "bad", "--engine", "command", "--command", "/bin/false", "--alert-failures", "1")
	w.startDaemon("--listen", addr, "--watch-interval", "500ms", "--web-auth-file", webAuthFile(t))
	w.waitEnd(w.startRun("good"))
	w.waitEnd(w.startRun("bad"))

	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	rules := write("rules.yml", readmeCode(t, "Alerting with Prometheus.", "yaml"), 0o644)
	token := write("token", webToken, 0o600)
	config := write("prometheus.yml", fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: holdfast
    authorization: {credentials_file: %q}
    static_configs: [{targets: [%q]}]
`, rules, token, addr), 0o644)
	web := testenv.FreeAddr(t)
	cmd := exec.Command(prom, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web, "--log.level=warn")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	type alert struct {
		Labels map[string]string `json:"labels"`
		State  string            `json:"state"`
	}
	var alerts []alert
	fired := testenv.Eventually(2*time.Minute, func() bool {
		resp, err := http.Get("http://" + web + "/api/v1/alerts")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Alerts []alert `json:"alerts"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil {
			return false
		}
		alerts = body.Data.Alerts
		for _, a := range alerts {
			if a.Labels["alertname"] == "HoldfastJobOverdue" && a.State == "firing" {
				return true
			}
		}
		return false
	})
	if !fired {
		t.Fatalf("no HoldfastJobOverdue alert fired: %+v\nprometheus:\n%s", alerts, log.String())
	}
	for _, a := range alerts {
		if a.Labels["alertname"] != "HoldfastJobOverdue" {
			continue
		}
		if a.Labels["job_name"] != "bad" || a.Labels["job"] != "holdfast" || a.Labels["exported_job"] != "" {
			t.Fatalf("overdue alert labels %v, want job_name=bad beside the scrape's job=holdfast", a.Labels)
		}
	}
}
