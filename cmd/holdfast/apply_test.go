package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

type configPlanJSON struct {
	Changes []struct {
		Kind   string   `json:"kind"`
		Name   string   `json:"name"`
		Action string   `json:"action"`
		Fields []string `json:"fields"`
	} `json:"changes"`
	Warnings []string `json:"warnings"`
}

// writeConfig writes a configuration file under the world's directory.
// writeMode writes text to path with mode, past the umask, and returns path.
func writeMode(t testing.TB, path, text string, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func (w *world) writeConfig(name, text string) string {
	w.t.Helper()
	path := filepath.Join(w.dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return path
}

// applyPlan runs apply with args and --json and returns its plan.
func (w *world) applyPlan(args ...string) configPlanJSON {
	w.t.Helper()
	return w.applyPlanInput("", args...)
}

// applyPlanInput is applyPlan with stdin as apply's standard input.
func (w *world) applyPlanInput(stdin string, args ...string) configPlanJSON {
	w.t.Helper()
	var p configPlanJSON
	args = append([]string{"apply", "--json"}, args...)
	res := w.runInput(stdin, args...)
	if res.code != 0 {
		w.t.Fatalf("holdfast %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.code, res.stdout, res.stderr)
	}
	if err := json.Unmarshal([]byte(res.stdout), &p); err != nil {
		w.t.Fatalf("%v: %v\n%s", args, err, res.stdout)
	}
	return p
}

// rowVersions are the jobs' row versions (xmin): a row written again gets a new one.
func (w *world) rowVersions() string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, w.dsn)
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(name || '@' || xmin::text, ',' ORDER BY name), '') FROM jobs`).Scan(&v); err != nil {
		w.t.Fatal(err)
	}
	return v
}

func summarize(p configPlanJSON) []string {
	var s []string
	for _, c := range p.Changes {
		s = append(s, c.Action+" "+c.Kind+" "+c.Name+" "+strings.Join(c.Fields, ","))
	}
	return s
}

// A file with two jobs: the dry run plans two creates and changes nothing; apply creates them;
// a second apply plans and writes nothing; a schedule edit is an update of schedule only. A job
// dropped from the file stays (a warning) unless --prune, which deletes it, but never one with
// a live run.
func TestApplyPlanAndPrune(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	openToAll(t, repo)
	data := w.sampleData("data", 1, 1024)
	quota := "10GiB"
	config := func(schedule string, withBeta bool) string {
		text := "accounts:\n  team:\n    quota: " + quota + "\n    allowance: 1GiB\n    period: month\n" +
			"jobs:\n  alpha:\n    repo: " + repo + "\n    password-file: " + pw + "\n    path: [" + data + "]\n" +
			"    schedule: \"" + schedule + "\"\n    tz: Europe/Berlin\n    retry-max: 3\n    keep-daily: 7\n    account: team\n"
		if withBeta {
			text += "  beta:\n    repo: " + repo + "\n    password-file: " + pw + "\n    path:\n      - " + data + "\n    user: nobody\n"
		}
		text += "notify:\n  ops:\n    webhook: https://hooks.example.com/holdfast\n    events: [failed, overdue]\n    job: alpha\n"
		return w.writeConfig("holdfast.yaml", text)
	}
	// Another host's job: outside this host's apply, never warned about or pruned.
	w.mustRun("job", "add", "elsewhere", "--repo", repo, "--password-file", pw, "--path", data, "--host", "web9")
	file := config("0 2 * * *", true)
	before := w.dbDigest()
	if p := w.applyPlan("--dry-run", file); strings.Join(summarize(p), ";") != "create account team ;create job alpha ;create job beta ;create notify ops " {
		t.Fatalf("dry run = %v, want four creates", summarize(p))
	}
	if after := w.dbDigest(); after != before {
		t.Fatalf("the dry run changed the database:\n%s\n%s", before, after)
	}
	w.mustRun("apply", file)
	var alpha struct {
		Schedule  string `json:"schedule"`
		TimeZone  string `json:"time_zone"`
		RetryMax  int    `json:"retry_max"`
		Retention *struct {
			KeepDaily int `json:"keep_daily"`
		} `json:"retention"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("job", "show", "alpha", "--json")), &alpha); err != nil || alpha.Schedule != "0 2 * * *" ||
		alpha.TimeZone != "Europe/Berlin" || alpha.RetryMax != 3 || alpha.Retention == nil || alpha.Retention.KeepDaily != 7 {
		t.Fatalf("job alpha after apply: %+v (%v)", alpha, err)
	}
	var targets []struct {
		Name   string   `json:"name"`
		Job    string   `json:"job"`
		Events []string `json:"events"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("notify", "list", "--json")), &targets); err != nil || len(targets) != 1 ||
		targets[0].Job != "alpha" || strings.Join(targets[0].Events, ",") != "failed,overdue" {
		t.Fatalf("notification targets after apply: %+v (%v)", targets, err)
	}
	if show := w.mustRun("job", "show", "alpha"); !strings.Contains(show, "holdfast.yaml") {
		t.Fatalf("job show does not say which file applied the job:\n%s", show)
	}

	versions, digest := w.rowVersions(), w.dbDigest()
	if p := w.applyPlan(file); len(p.Changes) != 0 {
		t.Fatalf("a second apply planned %v", summarize(p))
	}
	if v, d := w.rowVersions(), w.dbDigest(); v != versions || d != digest {
		t.Fatalf("a second apply wrote to the database:\n%s\n%s", versions, v)
	}

	file = config("30 3 * * *", true)
	if p := w.applyPlan(file); strings.Join(summarize(p), ";") != "update job alpha schedule" {
		t.Fatalf("a schedule edit = %v, want an update of alpha's schedule only", summarize(p))
	}
	if j := w.job("alpha"); j.NextRunAt == nil {
		t.Fatalf("alpha has no next run after its schedule was applied: %+v", j)
	}

	// A quota raised in the file is a grant of the difference; one lowered is refused, at its line.
	quota = "12GiB"
	file = config("30 3 * * *", true)
	if p := w.applyPlan(file); strings.Join(summarize(p), ";") != "update account team quota" {
		t.Fatalf("a raised quota = %v, want an update of team's quota", summarize(p))
	}
	var team struct {
		QuotaBytes *int64 `json:"quota_bytes"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("ledger", "show", "team", "--json")), &team); err != nil || team.QuotaBytes == nil || *team.QuotaBytes != 12<<30 {
		t.Fatalf("team after its quota was raised: %+v (%v), want 12 GiB", team, err)
	}
	quota = "5GiB"
	if res := w.run("apply", config("30 3 * * *", true)); res.code != 2 || !strings.Contains(res.stderr, "holdfast.yaml:3: accounts.team.quota: ") {
		t.Fatalf("a lowered quota: exit %d %q, want a refusal at its line", res.code, res.stderr)
	}
	quota = "12GiB"

	// beta leaves the file: it stays, with a warning; --prune deletes it.
	file = config("30 3 * * *", false)
	p := w.applyPlan(file)
	if len(p.Changes) != 0 || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "job beta") {
		t.Fatalf("apply without beta = %+v, want no change and a warning about beta", p)
	}
	if p := w.applyPlan("--prune", "--dry-run", file); strings.Join(summarize(p), ";") != "delete job beta " {
		t.Fatalf("--prune --dry-run = %v, want beta's delete", summarize(p))
	}
	live := w.startRun("beta") // no daemon runs: it stays queued, live
	res := w.run("apply", "--prune", file)
	if res.code != 2 || !strings.Contains(res.stderr, "job beta") || !strings.Contains(res.stderr, live) {
		t.Fatalf("--prune with beta's run live: exit %d %q, want a refusal naming beta and its run", res.code, res.stderr)
	}
	w.mustRun("run", "stop", live)
	w.startDaemon()
	w.waitEnd(live)
	w.mustRun("apply", "--prune", file)
	if res := w.run("job", "show", "beta"); res.code == 0 {
		t.Fatal("beta is still there after apply --prune")
	}
	if res := w.run("job", "show", "elsewhere"); res.code != 0 {
		t.Fatalf("apply --prune deleted another host's job: %s", res.stderr)
	}
	w.checkInvariants()
}

// Bad files are refused with FILE:LINE and what is wrong, the database as it was, byte for byte.
func TestApplyRefusals(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	openToAll(t, repo)
	data := w.sampleData("data", 1, 1024)
	good := "  good:\n    repo: " + repo + "\n    password-file: " + pw + "\n    path: [" + data + "]\n"
	w.mustRun("account", "add", "team", "--quota", "2GiB")
	w.mustRun("apply", w.writeConfig("first.yaml", "jobs:\n"+good))
	before := w.dbDigest()
	for _, tc := range []struct {
		name, text, want string
	}{
		{"unknown key", "jobs:\n" + good + "    tzz: UTC\n", `unknown-key.yaml:6: jobs.good.tzz: unknown key (did you mean tz?)`},
		{"bad cron", "jobs:\n" + good + "    schedule: \"0 2 30 2 *\"\n", `bad-cron.yaml:6: jobs.good.schedule: `},
		{"good and bad", "jobs:\n" + good + "  bad:\n    repo: " + repo + "\n    password-file: /nonexistent/pw\n    path: [" + data + "]\n",
			`good-and-bad.yaml:8: jobs.bad.password-file: `},
		{"wrong type", "jobs:\n" + good + "    retry-max: lots\n", `wrong-type.yaml:6: jobs.good.retry-max: "lots"`},
		{"unknown section", "jbos:\n" + good, `unknown-section.yaml:1: jbos: unknown key (did you mean jobs?)`},
		{"list for one value", "jobs:\n" + good + "    schedule: [a, b]\n", `list-for-one-value.yaml:6: jobs.good.schedule: give one value`},
		{"not YAML", "jobs: [\n", `not-YAML.yaml: line 1: `},
		{"target of no job", "jobs:\n" + good + "notify:\n  ops:\n    webhook: https://hooks.example.com/x\n    job: nosuch\n",
			`target-of-no-job.yaml:9: notify.ops.job: no job nosuch`},
		{"lowered quota", "accounts:\n  team:\n    quota: 1GiB\njobs:\n" + good, `lowered-quota.yaml:3: accounts.team.quota: 1.0 GiB is less than`},
	} {
		file := w.writeConfig(strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.text)
		res := w.run("apply", file)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line with %q", tc.name, res.code, res.stderr, tc.want)
		}
	}
	// The same job in two files.
	dup := w.writeConfig("dup.yaml", "jobs:\n"+good)
	if res := w.run("apply", filepath.Join(w.dir, "first.yaml"), dup); res.code != 2 ||
		!regexp.MustCompile(`dup\.yaml:2: jobs\.good is declared twice: first at .*first\.yaml:2`).MatchString(res.stderr) {
		t.Errorf("a job in two files: exit %d %q", res.code, res.stderr)
	}
	if after := w.dbDigest(); after != before {
		t.Fatalf("a refused apply changed the database:\n%s\n%s", before, after)
	}
}

// apply reads only a file that no one but root and the operator could have written or put in
// its place: each refusal is one line naming the path and the fix (exit 2) and changes nothing.
// The file declares what an attacker would: a webhook to the cloud metadata address. The same
// text on standard input (apply -, the operator's choice) is applied.
func TestApplyRefusesUnsafeFiles(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	const text = "notify:\n  imds:\n    webhook: http://169.254.169.254/latest/meta-data/\n"
	mkdir := func(t *testing.T, name string, mode os.FileMode) string {
		t.Helper()
		dir := filepath.Join(w.dir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return dir
	}
	write := func(t *testing.T, dir, name string, mode os.FileMode) string {
		t.Helper()
		return writeMode(t, filepath.Join(dir, name), text, mode)
	}
	before := w.dbDigest()
	for _, tc := range []struct {
		name string
		root bool // needs root, to give a file away
		// setup makes the file (or directory) and returns apply's argument and what the one line says.
		setup func(t *testing.T) (arg string, want []string)
	}{
		{"0666 in a world-writable directory", false, func(t *testing.T) (string, []string) {
			dir := mkdir(t, "open", 0o777)
			f := write(t, dir, "imds.yaml", 0o666)
			return f, []string{f + ": " + dir + " has mode 0777", "chmod go-w " + dir}
		}},
		{"writable by its group", false, func(t *testing.T) (string, []string) {
			f := write(t, mkdir(t, "safe", 0o755), "group.yaml", 0o664)
			return f, []string{f + " has mode 0664", "chmod go-w " + f}
		}},
		{"writable by others", false, func(t *testing.T) (string, []string) {
			f := write(t, mkdir(t, "safe", 0o755), "others.yaml", 0o646)
			return f, []string{f + " has mode 0646", "chmod go-w " + f}
		}},
		{"another user's", true, func(t *testing.T) (string, []string) {
			f := write(t, mkdir(t, "safe", 0o755), "nobody.yaml", 0o644)
			if err := os.Chown(f, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return f, []string{f + " is owned by uid 65534", "chown root " + f}
		}},
		{"below a directory its group may write", false, func(t *testing.T) (string, []string) {
			f := write(t, mkdir(t, "grouped/etc", 0o755), "imds.yaml", 0o644)
			top := mkdir(t, "grouped", 0o775)
			return f, []string{f + ": " + top + " has mode 0775", "chmod go-w " + top}
		}},
		{"a symbolic link", false, func(t *testing.T) (string, []string) {
			link := filepath.Join(mkdir(t, "safe", 0o755), "link.yaml")
			if err := os.Symlink(write(t, mkdir(t, "safe", 0o755), "target.yaml", 0o644), link); err != nil {
				t.Fatal(err)
			}
			return link, []string{link + " is a symbolic link: give the file itself"}
		}},
		{"a FIFO", false, func(t *testing.T) (string, []string) {
			fifo := filepath.Join(mkdir(t, "safe", 0o755), "fifo.yaml")
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Fatal(err)
			}
			return fifo, []string{fifo + " is not a regular file"}
		}},
		{"over 1 MiB", false, func(t *testing.T) (string, []string) {
			f := write(t, mkdir(t, "safe", 0o755), "huge.yaml", 0o644)
			if err := os.WriteFile(f, []byte(text+strings.Repeat("#", 1<<20)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return f, []string{f + " is larger than 1 MiB"}
		}},
		{"an unsafe file of a directory", false, func(t *testing.T) (string, []string) {
			dir := mkdir(t, "holdfast.d", 0o755)
			write(t, dir, "a-good.yaml", 0o644)
			f := write(t, dir, "b-bad.yaml", 0o666)
			return dir, []string{f + " has mode 0666", "chmod go-w " + f}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("needs root to give a file away")
			}
			arg, want := tc.setup(t)
			res := w.run("apply", arg)
			line := strings.TrimSpace(res.stderr)
			if res.code != 2 || strings.Contains(line, "\n") {
				t.Fatalf("apply %s: exit %d, stderr %q; want exit 2 and one line", arg, res.code, res.stderr)
			}
			for _, s := range want {
				if !strings.Contains(line, s) {
					t.Errorf("apply %s: %q does not say %q", arg, line, s)
				}
			}
			if after := w.dbDigest(); after != before {
				t.Fatalf("a refused apply changed the database:\n%s\n%s", before, after)
			}
		})
	}
	if res := w.runInput(text, "apply", "-", "-"); res.code != 2 || !strings.Contains(res.stderr, "- is given twice") {
		t.Fatalf("apply - -: exit %d %q, want a refusal", res.code, res.stderr)
	}
	if p := summarize(w.applyPlanInput(text, "-")); strings.Join(p, ";") != "create notify imds " {
		t.Fatalf("apply - = %v, want the target made", p)
	}
	if list := w.mustRun("notify", "list", "--json"); !strings.Contains(list, `"imds"`) {
		t.Fatalf("apply - made no target imds:\n%s", list)
	}
}

// export prints what apply accepts: applied again, it plans no change, for jobs with every
// kind of setting set.
func TestExportRoundTrips(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	openToAll(t, repo)
	data := w.sampleData("data", 1, 1024)
	w.mustRun("account", "add", "team", "--quota", "10GiB")
	w.mustRun("job", "add", "every", "--repo", repo, "--password-file", pw, "--path", data, "--path", w.sampleData("more", 1, 10),
		"--exclude", "*.cache", "--exclude", "tmp", "--user", "nobody", "--group", "nogroup", "--runtime-max", "6h", "--nice", "5",
		"--alert-after", "2h", "--alert-failures", "3", "--stall-after", "20m", "--stall-action", "stop", "--limit-upload", "512",
		"--io-class", "idle", "--schedule", "30 2 * * *", "--tz", "Europe/Berlin", "--catch-up", "--retry-max", "2",
		"--retry-backoff", "5m", "--window", "Sat 01:00-05:00", "--window", "Sun 01:00-02:00", "--priority", "7",
		"--account", "team", "--max-added", "5GiB", "--any-host", "--prune-schedule", "@weekly", "--keep-daily", "7",
		"--keep-weekly", "4", "--keep-within", "36h", "--retention-tz", "Europe/Berlin", "--retention-max-delete", "30",
		"--retention-min-keep", "3", "--verify-schedule", "@monthly", "--verify-read-data", "5%", "--verify-alert-after", "1000h",
		"--drill-schedule", "@weekly", "--drill-files", "4", "--before", "/bin/echo 'a b' c", "--before", "/bin/true")
	w.mustRun("job", "add", "cmd", "--engine", "command", "--command", "/bin/echo", "--command", "a b", "--expect-every", "168h",
		"--depends-on", "every")
	w.mustRun("job", "add", "plain", "--repo", repo, "--password-file", pw, "--path", data, "--preset", "gfs",
		"--append-only", "--prune-host", "vault", "--prune-repository", "local:"+repo+"/", "--prune-env-file", "/etc/holdfast/vault.env")
	w.mustRun("job", "add", "dump", "--repo", repo, "--password-file", pw, "--stdin-from", "/bin/echo 'a dump'", "--stdin-filename", "a.dump",
		"--after", "/bin/true", "--copy-to", filepath.Join(w.dir, "offsite"), "--copy-password-file", pw)
	w.mustRun("notify", "add", "hook", "--webhook", "https://hooks.example.com/x", "--job", "every", "--events", "failed,verify_failed")
	w.mustRun("notify", "add", "mail", "--command", "/usr/local/bin/holdfast-mail", "--command", "--to=ops")
	exported := w.mustRun("export")
	file := w.writeConfig("exported.yaml", exported)
	versions := w.rowVersions()
	if p := w.applyPlan("--dry-run", file); len(p.Changes) != 0 || len(p.Warnings) != 0 {
		t.Fatalf("export then apply --dry-run planned %v %v; the export:\n%s", summarize(p), p.Warnings, exported)
	}
	if p := w.applyPlan(file); len(p.Changes) != 0 {
		t.Fatalf("export then apply planned %v", summarize(p))
	}
	if v := w.rowVersions(); v != versions {
		t.Fatalf("applying the export wrote to the database")
	}
	if !strings.Contains(exported, "append-only: true") || !strings.Contains(exported, "prune-repository: "+repo+"\n") {
		t.Fatalf("the export lacks plain's pruning host, or its repository spelled as stored:\n%s", exported)
	}
	// The export is the settings, not secrets: the password file is a path.
	if !strings.Contains(exported, "password-file: "+pw) || strings.Contains(exported, "correct horse") {
		t.Fatalf("the export does not keep the password as a file path:\n%s", exported)
	}
	// Applied to an empty database with its URLs whole (--show-secrets), it makes the same jobs
	// and targets.
	other := newWorld(t)
	whole := w.mustRun("export", "--show-secrets")
	other.mustRun("apply", w.writeConfig("whole.yaml", whole)) // the account too
	if !strings.Contains(exported, "accounts:\n  team:\n    quota: 10GiB\n") {
		t.Fatalf("the export lacks account team's quota:\n%s", exported)
	}
	if again := other.mustRun("export"); stripHeader(again) != stripHeader(exported) {
		t.Fatalf("the export applied elsewhere exports differently:\n%s\n---\n%s", exported, again)
	}
	if again := other.mustRun("export", "--show-secrets"); stripHeader(again) != stripHeader(whole) {
		t.Fatalf("the export applied elsewhere exports its URLs differently:\n%s\n---\n%s", whole, again)
	}
	// Drift: a CLI edit of a declared job is an update the next dry run shows.
	w.mustRun("job", "edit", "plain", "--priority", "9")
	if p := w.applyPlan("--dry-run", file); strings.Join(summarize(p), ";") != "update job plain priority" {
		t.Fatalf("drift after a CLI edit = %v, want plain's priority", summarize(p))
	}
}

// export prints a webhook's or a check's URL with its secret part hidden (its path, query, user
// or fragment), and whole with --show-secrets. Applied back, a hidden URL keeps the stored one:
// no change, or an update of other settings that leaves the URL as it was. A hidden URL that
// stands for no stored one (a new target, or one whose URL hides differently) is refused with
// one line and nothing changed; notify add refuses one too.
func TestExportHidesSecretURLs(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	targets := []struct {
		name, flag, url string
		hidden          string // as export prints it
		secret          string // a part of url that export leaves out ("": nothing to hide)
	}{
		{"check", "healthchecks", "https://hc-ping.com/0d2b1c7e-4b6f-4d8a-9a57-3f0a1b2c3d4e", "https://hc-ping.com/…", "0d2b1c7e"},
		{"slack", "webhook", "https://hooks.slack.com/services/T0001/B0002/s3cr3tPathToken", "https://hooks.slack.com/…", "s3cr3tPathToken"},
		{"query", "webhook", "https://hooks.example.com/in?token=s3cr3tQueryToken", "https://hooks.example.com/…", "s3cr3tQueryToken"},
		{"userinfo", "webhook", "https://holdfast:s3cr3tPassword@hooks.example.com", "https://hooks.example.com/…", "s3cr3tPassword"},
		{"bare", "webhook", "https://hooks.example.com:8443", "https://hooks.example.com:8443", ""},
	}
	for _, tg := range targets {
		w.mustRun("notify", "add", tg.name, "--"+tg.flag, tg.url, "--events", "failed")
	}
	exported := w.mustRun("export")
	whole := w.mustRun("export", "--show-secrets")
	for _, tg := range targets {
		line := "  " + tg.name + ":\n    " + tg.flag + ": " + tg.hidden
		if tg.secret != "" {
			line += " # hidden: apply keeps the stored URL"
		}
		if !strings.Contains(exported, line) || tg.secret != "" && strings.Contains(exported, tg.secret) {
			t.Errorf("export of target %s: want %q and no %q:\n%s", tg.name, line, tg.secret, exported)
		}
		if !strings.Contains(whole, "  "+tg.name+":\n    "+tg.flag+": "+tg.url+"\n") {
			t.Errorf("export --show-secrets does not print target %s's URL whole:\n%s", tg.name, whole)
		}
	}

	// Applied back, the hidden URLs keep the stored ones.
	file := w.writeConfig("exported.yaml", exported)
	before := w.dbDigest()
	if p := w.applyPlan(file); len(p.Changes) != 0 {
		t.Fatalf("apply of the export planned %v; the export:\n%s", summarize(p), exported)
	}
	if p := w.applyPlan(w.writeConfig("whole.yaml", whole)); len(p.Changes) != 0 {
		t.Fatalf("apply of the export --show-secrets planned %v", summarize(p))
	}
	if after := w.dbDigest(); after != before {
		t.Fatalf("applying the exports changed the database:\n%s\n%s", before, after)
	}
	edited := strings.Replace(exported, "  check:\n    healthchecks: https://hc-ping.com/… # hidden: apply keeps the stored URL; export --show-secrets prints it whole\n    events: failed\n",
		"  check:\n    healthchecks: https://hc-ping.com/…\n    events: [failed, overdue]\n", 1)
	if edited == exported {
		t.Fatalf("the export does not declare check as expected:\n%s", exported)
	}
	if p := w.applyPlan(w.writeConfig("edited.yaml", edited)); strings.Join(summarize(p), ";") != "update notify check events" {
		t.Fatalf("apply of a changed event list = %v, want an update of check's events", summarize(p))
	}
	stored, err := w.store().TargetList(context.Background(), "check")
	if err != nil || len(stored) != 1 || stored[0].URL != targets[0].url || strings.Join(stored[0].Events, ",") != "failed,overdue" {
		t.Fatalf("target check after the update: %+v (%v), want its URL as it was and the new events", stored, err)
	}

	// A hidden URL that stands for no stored one is refused, with nothing changed.
	before = w.dbDigest()
	for _, tc := range []struct {
		name, text, want string
	}{
		{"a new target", "notify:\n  check2:\n    healthchecks: https://hc-ping.com/…\n",
			"a-new-target.yaml:3: notify.check2.healthchecks: https://hc-ping.com/… is a URL with its secret part hidden, as export prints it, and there is no target check2 to keep a URL of: give the whole URL, or take the file from holdfast export --show-secrets"},
		{"another host", "notify:\n  slack:\n    webhook: https://hooks.example.com/…\n    events: failed\n",
			"another-host.yaml:3: notify.slack.webhook: https://hooks.example.com/… is a URL with its secret part hidden, as export prints it, and target slack's URL is https://hooks.slack.com/…: give the whole URL"},
		{"another kind", "notify:\n  check:\n    webhook: https://hc-ping.com/…\n",
			"another-kind.yaml:3: notify.check.webhook: https://hc-ping.com/… is a URL with its secret part hidden, as export prints it, and target check is a healthchecks target, with no webhook URL to keep"},
		{"a URL that hides nothing", "notify:\n  bare:\n    webhook: https://hooks.example.com:8443/…\n",
			"target bare's URL is https://hooks.example.com:8443: give the whole URL"},
	} {
		res := w.run("apply", w.writeConfig(strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.text))
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line with %q", tc.name, res.code, res.stderr, tc.want)
		}
	}
	res := w.run("notify", "add", "pasted", "--webhook", "https://hooks.slack.com/…")
	if res.code != 2 || !strings.Contains(res.stderr, "--webhook https://hooks.slack.com/… is a URL with its secret part hidden") {
		t.Errorf("notify add of a hidden URL: exit %d %q, want a refusal", res.code, res.stderr)
	}
	if after := w.dbDigest(); after != before {
		t.Fatalf("a refused hidden URL changed the database:\n%s\n%s", before, after)
	}
}

func stripHeader(s string) string {
	_, rest, _ := strings.Cut(s, "\n")
	return rest
}

// The man pages (make man, and the package's) include apply, export and restore, with their flags.
func TestManPages(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	dir := filepath.Join(w.dir, "man")
	w.mustRun("man", dir)
	for page, flags := range map[string][]string{
		"holdfast-apply.1":   {"dry-run", "prune", "json"},
		"holdfast-export.1":  {"job", "show-secrets"},
		"holdfast-restore.1": {"target", "snapshot", "include", "overwrite"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Fatalf("no man page %s: %v", page, err)
		}
		for _, f := range flags {
			if !strings.Contains(string(b), `\fB--`+f+`\fP`) {
				t.Errorf("man page %s does not describe --%s", page, f)
			}
		}
	}
}
