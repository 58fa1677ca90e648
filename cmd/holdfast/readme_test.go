package main_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/testenv"
)

// readmeExamples runs the README's operator examples, each block as one bash script exactly as
// written, on a host where holdfast was installed as the README says and the README's backup of
// /home was made (TestBootedHostInstall). The test only prepares the world the examples speak
// of — the data of /srv/projects, a run in flight for $RUN, snapshots for $SNAPSHOT, a webhook
// that answers at hooks.example.com, a second host web2 — and then checks what each block did.
// A README change that breaks one of its commands fails here.
func readmeExamples(t *testing.T, b *bootedWorld) {
	h := b.h
	hook := newHookReceiver(t, h.PID1())
	// hooks.example.com is the test's receiver; its certificate is trusted through SSL_CERT_FILE,
	// which the service gets from its environment file and the examples from the shell.
	h.WriteFile(t, "/etc/holdfast/hooks-ca.pem", hook.caPEM, 0o644)
	h.Run(t, "sh", "-c", "echo '127.0.0.1 hooks.example.com' >>/etc/hosts && echo SSL_CERT_FILE=/etc/holdfast/hooks-ca.pem >>/etc/holdfast/holdfast.env")
	h.Run(t, "systemctl", "restart", "holdfast.service")
	env := map[string]string{"SSL_CERT_FILE": "/etc/holdfast/hooks-ca.pem"}

	// The data the examples back up, readable by their user.
	h.Run(t, "mkdir", "-p", "/srv/projects/site", "/srv/bulk")
	h.WriteFile(t, "/srv/projects/site/index.html", []byte("<p>hello</p>\n"), 0o644)
	h.WriteFile(t, "/srv/projects/site/x.cache", []byte("not backed up\n"), 0o644)
	h.Run(t, "dd", "if=/dev/urandom", "of=/srv/bulk/data", "bs=1M", "count=4", "status=none")

	// Scheduling: a scheduled job on home's repository and a prune of it.
	b.readmeBlock(readmeScheduling, env)
	nightly := b.jobJSON("nightly")
	if nightly["schedule"] != "@daily" || nightly["catch_up"] != true {
		t.Fatalf("job nightly after the scheduling examples: %v; want @daily with catch-up", nightly)
	}
	prune := b.lastRun("nightly")
	if r := b.waitRun(prune.ID, "the prune's end", ended); r.Status != "succeeded" {
		t.Fatalf("the README's prune run: %s (%s)", r.Status, r.Reason)
	}

	// Using it: a second job on the repository runs while a slow backup of it ($RUN) is in
	// flight; that one is then stopped, leaving no figure of its own: a deferred settlement.
	b.mustHoldfast("job", "add", "bulk", "--repo", "/srv/backup/home", "--password-file", "/etc/holdfast/home.pw",
		"--path", "/srv/bulk", "--user", "homebackup", "--limit-upload", "16")
	bulk := b.startRun("bulk")
	b.waitRun(bulk, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	env["RUN"] = bulk[:8]
	b.readmeBlock(readmeUsing, env)
	if r := b.lastRun("projects"); r.Status != "succeeded" {
		t.Fatalf("the README's projects run: %s (%s)", r.Status, r.Reason)
	}
	r := b.waitRun(bulk, "stopped", ended)
	if r.Status != "stopped" || len(r.Attempts) != 1 || r.Attempts[0].SettleDeferred == "" {
		t.Fatalf("run %s after run stop: %s (%s), attempts %+v; want stopped with its settlement deferred", bulk, r.Status, r.Reason, r.Attempts)
	}

	// Storage quotas: the deferred settlement settled by hand, and the run resumed to its end.
	b.mustHoldfast("job", "edit", "bulk", "--limit-upload", "0")
	b.readmeBlock(readmeQuotas, env)
	if r := b.waitRun(bulk, "the resumed run's end", ended); r.Status != "succeeded" || len(r.Attempts) != 2 {
		t.Fatalf("run %s after settle and resume: %s (%s) in %d attempts; want succeeded in a second", bulk, r.Status, r.Reason, len(r.Attempts))
	}
	projects := b.jobJSON("projects")
	if projects["account"] != "team" {
		t.Fatalf("job projects after the quota examples: %v; want account team", projects)
	}

	// Watching: alerts, notification targets, a test notification, the metrics listener.
	b.readmeBlock(readmeWatching, env)
	if got := hook.received(); len(got) != 1 || got[0].signature == "" || !strings.Contains(got[0].body, `"test"`) {
		t.Fatalf("the webhook received %+v after notify test; want one signed test event", got)
	}
	b.waitService()
	// The listener answers with the token of the host's auth file, and without it 401.
	if mode := strings.TrimSpace(h.Run(t, "stat", "-c", "%U %a %F", "/etc/holdfast/web.auth")); mode != "root 600 regular file" {
		t.Fatalf("/etc/holdfast/web.auth: %s, want root 600 regular file", mode)
	}
	var token string
	for _, line := range strings.Split(h.Run(t, "cat", "/etc/holdfast/web.auth"), "\n") {
		if f := strings.Fields(line); token == "" && len(f) == 2 && f[0] == "bearer" {
			token = f[1]
		}
	}
	if token == "" {
		t.Fatal("/etc/holdfast/web.auth holds no bearer token")
	}
	metrics := httpGet(t, h.PID1(), "http://127.0.0.1:9750/metrics", "Bearer "+token, http.StatusOK)
	if !strings.Contains(metrics, "holdfast_job_snapshots") {
		t.Fatalf("/metrics after the watching examples:\n%.2000s", metrics)
	}
	for _, path := range []string{"/metrics", "/", "/api/runs/" + bulk} {
		httpGet(t, h.PID1(), "http://127.0.0.1:9750"+path, "", http.StatusUnauthorized)
	}

	// Retention: three snapshots of home; the oldest held and locked, so the plan deletes one.
	for range 2 {
		b.mustHoldfast("run", "start", "home", "--wait")
	}
	snaps := b.snapshots("home")
	if len(snaps) != 3 {
		t.Fatalf("home has %d snapshots before the retention examples, want 3: %+v", len(snaps), snaps)
	}
	oldest := snaps[0]
	env["SNAPSHOT"] = oldest.ID[:8]
	b.readmeBlock(readmeRetention, env)
	after := b.snapshots("home")
	var ids []string
	for _, s := range after {
		ids = append(ids, s.ID)
	}
	if len(after) != 2 || after[0].ID != oldest.ID || !after[0].LegalHold || after[1].ID != snaps[2].ID {
		t.Fatalf("home's snapshots after retention apply: %v; want the held %s and the newest %s", ids, oldest.ID, snaps[2].ID)
	}

	// Restores and verification: the latest snapshot restored as homebackup, equal to /home's
	// files it could read; the held one over it; a check of a tenth of the data, a drill, and
	// their schedules.
	// A dump of the host's own holdfast database, streamed into a snapshot and given back.
	b.readmeBlock(readmeDumps, env)
	if r := b.lastRun("db"); r.Status != "succeeded" {
		t.Fatalf("the README's dump: %s (%s)", r.Status, r.Reason)
	}
	if n := h.Run(t, "runuser", "-u", "postgres", "--", "psql", "-Atc", "SELECT count(*) FROM jobs WHERE name = 'db'", "holdfast_copy"); strings.TrimSpace(n) != "1" {
		t.Fatalf("the database restored from the README's dump lists job db %q times, want once", n)
	}

	// The database lost (dropped under the running daemon) and rebuilt from that dump, taken
	// while its own backup ran: every job is back, the backup live in the dump ends as it did, in
	// its one attempt, and the examples after this one run on the recovered database.
	var dumpRun string
	for _, r := range b.runsOf("db") {
		if r.Kind == "backup" {
			dumpRun = r.ID
		}
	}
	jobsBefore := b.mustHoldfast("job", "list")
	h.Run(t, "runuser", "-u", "postgres", "--", "dropdb", "--force", "holdfast")
	b.readmeBlock(readmeRecover, env)
	if jobs := b.mustHoldfast("job", "list"); jobs != jobsBefore {
		t.Fatalf("jobs after the recovery:\n%s\nwant\n%s", jobs, jobsBefore)
	}
	if r := b.waitRun(dumpRun, "the end of the backup live in the dump", ended); r.Status != "succeeded" || len(r.Attempts) != 1 || r.SnapshotID == "" {
		t.Fatalf("the backup live in the dump, after the recovery: %s (%s), snapshot %q, %d attempts; want succeeded in one", r.Status, r.Reason, r.SnapshotID, len(r.Attempts))
	}
	if j := b.jobJSON("db"); j["alert_after_seconds"] != float64(26*3600) {
		t.Fatalf("job db after the recovery: %v; want alert-after 26h", j)
	}

	b.readmeBlock(readmeRestores, env)
	// restic gives back the mode and ACL (an ACL's mask shows as the group's bits); the owner
	// is the job's user, which cannot give files away.
	if d := h.Run(t, "sh", "-c", "diff -r /home/alice /srv/restore/home/home/alice && stat -c '%a' /home/alice/notes.txt && "+
		"stat -c '%U %a' /srv/restore/home/home/alice/notes.txt"); !regexp.MustCompile(`^(\d+)\nhomebackup (\d+)\n$`).MatchString(d) ||
		strings.Fields(d)[0] != strings.Fields(d)[2] {
		t.Fatalf("alice's restored home: %q, want it equal to hers, notes.txt homebackup's with her file's mode", d)
	}
	var restores, verifies int
	for _, r := range b.runsOf("home") {
		if r.Kind != "restore" && r.Kind != "verify" {
			continue
		}
		if r.Status != "succeeded" {
			t.Fatalf("the README's %s run %s: %s (%s)", r.Kind, r.ID, r.Status, r.Reason)
		}
		if r.Kind == "restore" {
			restores++
		} else {
			verifies++
		}
	}
	if restores != 2 || verifies != 2 {
		t.Fatalf("home has %d restores and %d verifications after the README's examples, want 2 and 2 (a check and a drill)", restores, verifies)
	}
	if j := b.jobJSON("home"); j["verify_schedule"] != "@weekly" || j["verify_read_data"] != "5%" ||
		j["drill_schedule"] != "@monthly" || j["drill_files"] != float64(20) {
		t.Fatalf("job home after the README's verify schedule: %v", j)
	}

	// A root job's restore gives files back to their owners, as they were (under the system
	// manager: a user manager maps root in a user namespace, where chown cannot).
	h.Run(t, "restic", "init", "--repo", "/srv/backup/root", "--password-file", "/etc/holdfast/home.pw")
	b.mustHoldfast("job", "add", "rootjob", "--repo", "/srv/backup/root", "--password-file", "/etc/holdfast/home.pw", "--path", "/home/alice")
	b.mustHoldfast("run", "start", "rootjob", "--wait")
	b.mustHoldfast("restore", "rootjob", "--target", "/srv/restore-root", "--wait")
	if d := h.Run(t, "sh", "-c", "diff -r /home/alice /srv/restore-root/home/alice && stat -c '%U %a' /home/alice/notes.txt /srv/restore-root/home/alice/notes.txt"); !regexp.MustCompile(`^alice (\d+)\nalice (\d+)\n$`).MatchString(d) ||
		strings.Fields(d)[1] != strings.Fields(d)[3] {
		t.Fatalf("a root job's restore of alice's home: %q, want her files hers, with their mode", d)
	}
	// Her notes, deleted, back where they were from the README's lines: hers, as they were.
	h.Run(t, "sh", "-c", "stat -c '%U %a %Y' /home/alice/notes.txt > /root/notes.stat && cp /home/alice/notes.txt /root/notes.copy && rm /home/alice/notes.txt")
	b.readmeBlock(readmeToOriginal, env)
	if d := h.Run(t, "sh", "-c", "stat -c '%U %a %Y' /home/alice/notes.txt | diff - /root/notes.stat && cmp /home/alice/notes.txt /root/notes.copy && ls -A /home | grep -c holdfast-restore || true"); d != "0\n" {
		t.Fatalf("alice's notes put back by the README's restore --to-original: %q, want them hers with their mode and time, and no stage left", d)
	}

	// Configuration as code: the file's job and target are made, the second apply plans
	// nothing, and the export names the job's settings.
	b.readmeBlock(readmeConfig, env)
	if j := b.jobJSON("site"); j["schedule"] != "15 3 * * *" || j["user"] != "homebackup" {
		t.Fatalf("job site after the README's apply: %v", j)
	}
	if out := h.Run(t, "cat", "/root/site-exported.yaml"); !strings.Contains(out, "15 3 * * *") || !strings.Contains(out, "keep-daily: 14") {
		t.Fatalf("the README's export of site:\n%s", out)
	}
	if out := b.mustHoldfast("apply", "--json", "/etc/holdfast/holdfast.d"); !strings.Contains(out, `"changes": []`) {
		t.Fatalf("apply of the README's file, again, planned changes:\n%s", out)
	}
	if out := b.mustHoldfast("notify", "list", "--json"); !strings.Contains(out, `"site-failures"`) {
		t.Fatalf("the README's apply made no notification target site-failures:\n%s", out)
	}

	// Several hosts: a second host's daemon ran once; it is drained and forgotten.
	h.Run(t, "systemd-run", "--unit", "holdfast-web2", "--property", "EnvironmentFile=/etc/holdfast/holdfast.env",
		"/usr/bin/holdfast", "daemon", "--host", "web2", "--state-dir", "/var/lib/holdfast-web2", "--listen=")
	if !testenv.Eventually(time.Minute, func() bool { return b.hostState("web2") == "alive" }) {
		t.Fatalf("host web2 never came up: %s", h.Run(t, "journalctl", "--no-pager", "-u", "holdfast-web2"))
	}
	h.Run(t, "systemctl", "stop", "holdfast-web2")
	if !testenv.Eventually(time.Minute, func() bool { return b.hostState("web2") != "alive" }) {
		t.Fatal("host web2 is still alive a minute after its daemon stopped")
	}
	b.readmeBlock(readmeHosts, env)
	if s := b.hostState("web2"); s != "" {
		t.Fatalf("host web2 after host forget: %q, want gone", s)
	}

	// A second copy, under the system manager: both passwords reach the unit as credentials.
	b.readmeBlock(readmeCopy, env)
	var copied bool
	for _, r := range b.runsOf("home") {
		if r.Kind != "copy" {
			continue
		}
		if end := b.waitRun(r.ID, "the copy's end", ended); end.Status != "succeeded" {
			t.Fatalf("the README's copy run: %s (%s)", end.Status, end.Reason)
		}
		copied = true
	}
	if n := h.Run(t, "sh", "-c", "restic --repo /srv/offsite/home --password-file /etc/holdfast/offsite.pw --no-cache snapshots --json | grep -o '\"id\"' | wc -l"); !copied || strings.TrimSpace(n) != "1" {
		t.Fatalf("after the README's copy: a copy run %v, %s snapshot(s) in the copy repository; want one", copied, n)
	}
	// The README's ntfy channel: whatever it was sent reached the receiver, and nothing failed.
	var deliveries []struct {
		State     string `json:"state"`
		LastError string `json:"last_error"`
	}
	if err := json.Unmarshal([]byte(b.mustHoldfast("notify", "log", "--target", "phone", "--json")), &deliveries); err != nil {
		t.Fatal(err)
	}
	delivered := 0
	for _, d := range deliveries {
		if d.State == "failed" || d.LastError != "" {
			t.Fatalf("a delivery to the README's ntfy channel failed: %+v", d)
		}
		if d.State == "delivered" {
			delivered++
		}
	}
	hook.mu.Lock()
	got := len(hook.ntfy)
	hook.mu.Unlock()
	if got < delivered {
		t.Fatalf("%d deliveries to the ntfy channel recorded, %d messages received", delivered, got)
	}
	if c := b.holdfast("check"); c.code != 0 {
		t.Fatalf("holdfast check after the README's examples: exit %d\n%s%s", c.code, c.stdout, c.stderr)
	}
}

// The README's blocks, by the heading or text they follow.
const (
	readmeWatching   = "## Knowing when backups do not happen"
	readmeUsing      = "## Using it"
	readmeScheduling = "Scheduling (a job without"
	readmeRetention  = "Retention (restic jobs)"
	readmeQuotas     = "Storage quotas (the ledger)"
	readmeHosts      = "## Several hosts, one database"
	readmeRestores   = "Restores and verification (restic jobs)"
	readmeToOriginal = "Putting files back where they were (restic jobs)."
	readmeConfig     = "Configuration as code."
	readmeDumps      = "Streamed database dumps (restic jobs)."
	readmeRecover    = "Everything else survives a reboot; holdfast's own database may not."
	readmeCopy       = "A second copy (restic jobs)."
)

// readmeBlock runs the README's sh block after heading as one bash script (-euo pipefail, each
// command traced) in root's home on the host, with env set; it fails the test if any command
// fails.
func (b *bootedWorld) readmeBlock(heading string, env map[string]string) {
	b.t.Helper()
	script := strings.Join(readmeBlock(b.t, heading), "\n")
	argv := []string{"env", "HOME=/root"}
	for k, v := range env {
		argv = append(argv, k+"="+v)
	}
	argv = append(argv, "bash", "-euo", "pipefail", "-xc", "cd /root\n"+script)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := b.h.Command(ctx, argv...).CombinedOutput()
	if err != nil {
		b.t.Fatalf("the README's block after %q: %v\n%s", heading, err, out)
	}
	b.t.Logf("the README's block after %q:\n%s", heading, out)
}

func (b *bootedWorld) jobJSON(name string) map[string]any {
	b.t.Helper()
	var j map[string]any
	if err := json.Unmarshal([]byte(b.mustHoldfast("job", "show", name, "--json")), &j); err != nil {
		b.t.Fatal(err)
	}
	return j
}

// runsOf lists the job's runs.
func (b *bootedWorld) runsOf(job string) []struct {
	ID, Kind, Status, Reason string
} {
	b.t.Helper()
	var runs []struct {
		ID, Kind, Status, Reason string
	}
	if err := json.Unmarshal([]byte(b.mustHoldfast("run", "list", "--job", job, "--limit", "100", "--json")), &runs); err != nil {
		b.t.Fatalf("run list --job %s: %v", job, err)
	}
	return runs
}

// lastRun is the job's newest run.
func (b *bootedWorld) lastRun(job string) runJSON {
	b.t.Helper()
	var runs []runJSON
	if err := json.Unmarshal([]byte(b.mustHoldfast("run", "list", "--job", job, "--limit", "1", "--json")), &runs); err != nil || len(runs) != 1 {
		b.t.Fatalf("run list --job %s: %v %+v", job, err, runs)
	}
	return b.show(runs[0].ID)
}

type snapshotJSON struct {
	ID        string `json:"id"`
	Time      string `json:"time"`
	Job       string `json:"job"`
	LegalHold bool   `json:"legal_hold"`
}

// snapshots lists the job's snapshots as its repository has them now, oldest first.
func (b *bootedWorld) snapshots(job string) []snapshotJSON {
	b.t.Helper()
	var all, snaps []snapshotJSON
	if err := json.Unmarshal([]byte(b.mustHoldfast("snapshot", "list", job, "--refresh", "--json")), &all); err != nil {
		b.t.Fatal(err)
	}
	for _, s := range all { // the repository's, whichever job made them
		if s.Job == job {
			snaps = append(snaps, s)
		}
	}
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].Time < snaps[j].Time })
	return snaps
}

// hostState is the host's state as host list --json says it ("alive", "down", …), or "" if
// holdfast does not know the host.
func (b *bootedWorld) hostState(name string) string {
	b.t.Helper()
	var hosts []struct {
		Name  string `json:"name"`
		Alive bool   `json:"alive"`
	}
	if err := json.Unmarshal([]byte(b.mustHoldfast("host", "list", "--json")), &hosts); err != nil {
		b.t.Fatal(err)
	}
	for _, h := range hosts {
		if h.Name == name {
			if h.Alive {
				return "alive"
			}
			return "down"
		}
	}
	return ""
}

// waitService waits until holdfast.service is active again after a restart.
func (b *bootedWorld) waitService() {
	b.t.Helper()
	if !testenv.Eventually(time.Minute, func() bool { return b.isActive("holdfast.service") == "active" }) {
		b.t.Fatalf("holdfast.service is %s a minute after its restart", b.isActive("holdfast.service"))
	}
}

// httpGet GETs url with the Authorization header auth ("" none) in the network of the host
// whose PID 1 is pid1, retrying for a minute until it answers status, and returns the body.
func httpGet(t *testing.T, pid1 int, url, auth string, status int) string {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = inNetwork(pid1, func() error {
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
	defer client.CloseIdleConnections()
	var body string
	var code int
	if !testenv.Eventually(time.Minute, func() bool {
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			return false
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body, code = string(b), resp.StatusCode
		return err == nil && resp.StatusCode == status
	}) {
		t.Fatalf("GET %s: no %d within a minute; last %d %q", url, status, code, body)
	}
	return body
}

// hookReceiver is https://hooks.example.com as the README's webhook target: a TLS server of the
// test's on 127.0.0.1:443 in the booted host's own network.
type hookReceiver struct {
	caPEM []byte
	mu    sync.Mutex
	posts []hookPost
	ntfy  []string // the messages of the README's ntfy channel
}

type hookPost struct{ signature, body string }

func newHookReceiver(t *testing.T, pid1 int) *hookReceiver {
	t.Helper()
	r := &hookReceiver{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.URL.Path == "/our-backups" { // the README's ntfy channel: answered as ntfy answers
			r.ntfy = append(r.ntfy, string(body))
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"readme","time":1764770000,"event":"message","topic":"our-backups"}`)
			return
		}
		r.posts = append(r.posts, hookPost{req.Header.Get("X-Holdfast-Signature"), string(body)})
	}))
	var ln net.Listener
	err := inNetwork(pid1, func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:443")
		return err
	})
	if err != nil {
		t.Fatalf("the README's webhook needs 127.0.0.1:443: %v", err)
	}
	srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS() // httptest's certificate names *.example.com
	t.Cleanup(srv.Close)
	r.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return r
}

func (r *hookReceiver) received() []hookPost {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookPost(nil), r.posts...)
}

// inNetwork runs f on a thread of its own in the network namespace of process pid: the sockets
// f makes belong to that network for good. The thread is never returned to the runtime, which
// ends it with its goroutine.
func inNetwork(pid int, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is in another network from now on
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			done <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("enter the network of process %d: %w", pid, err)
			return
		}
		done <- f()
	}()
	return <-done
}
