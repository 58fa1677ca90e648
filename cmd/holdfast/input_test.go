package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/testenv"
)

// dbDigest is a digest of every row of every table holdfast owns: equal digests mean nothing
// was changed.
func (w *world) dbDigest() string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, w.dsn)
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		w.t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		w.t.Fatal(err)
	}
	var b strings.Builder
	for _, table := range tables {
		var digest string
		q := fmt.Sprintf(`SELECT count(*) || ':' || md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM %s t`,
			pgx.Identifier{table}.Sanitize())
		if err := conn.QueryRow(ctx, q).Scan(&digest); err != nil {
			w.t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%s\n", table, digest)
	}
	return b.String()
}

// Every bad input is refused with a one-line message saying what is wrong and what to do, the
// exit status for bad input (2; 78 for the daemon's configuration, which systemd does not
// restart on), and nothing changed in the database.
func TestBadInputRefused(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	openToAll(t, repo)
	data := w.sampleData("data", 1, 1024)
	rootOnlyPW := filepath.Join(w.dir, "root-only.password")
	if err := os.WriteFile(rootOnlyPW, []byte(testenv.ResticPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rootOnlyDir := filepath.Join(w.dir, "root-only")
	if err := os.Mkdir(rootOnlyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A link the job's user may follow to a file it may not read: checked as the user, refused.
	linkToRootOnly := filepath.Join(w.dir, "link-to-root-only.password")
	if err := os.Symlink(rootOnlyPW, linkToRootOnly); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(w.dir, "snapshots.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(w.dir, "huge.json")
	if f, err := os.Create(huge); err != nil {
		t.Fatal(err)
	} else {
		if err := f.Truncate(64<<20 + 1); err != nil { // sparse: no disk used
			t.Fatal(err)
		}
		f.Close()
	}
	notExecutable := filepath.Join(w.dir, "restic-not-executable")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mustRun("job", "add", "good", "--repo", repo, "--password-file", pw, "--path", data, "--user", "nobody")
	w.mustRun("job", "add", "idle", "--engine", "command", "--command", "/bin/true")

	add := func(extra ...string) []string {
		return append([]string{"job", "add", "new", "--repo", repo, "--password-file", pw, "--path", data}, extra...)
	}
	// The daemon's configuration is checked before PostgreSQL is asked: an unreachable one
	// must not turn a bad flag into "database unreachable".
	daemon := func(extra ...string) []string {
		return append([]string{"daemon", "--dsn", "postgres://holdfast@127.0.0.1:1/none?connect_timeout=30"}, extra...)
	}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"relative --state-dir", []string{"--state-dir", "state", "job", "list"}, 2, `--state-dir "state" is a relative path`},
		{"relative --journal-dir", []string{"--journal-dir", "journal", "run", "list"}, 2, `--journal-dir "journal" is a relative path`},
		{"relative --restic", []string{"snapshot", "list", "good", "--refresh", "--restic", "bin/restic"}, 2, `--restic "bin/restic" is a relative path`},
		{"missing --restic", []string{"retention", "apply", "good", "--restic", "/nonexistent/restic"}, 2, "--restic /nonexistent/restic: no such file or directory"},
		{"--runtime-max under 1s", add("--runtime-max", "500ms"), 2, "--runtime-max 500ms is too short: give at least 1s"},
		{"negative --runtime-max", add("--runtime-max", "-1h"), 2, "--runtime-max -1h0m0s is too short"},
		{"negative --limit-upload", add("--limit-upload", "-1"), 2, "--limit-upload -1 is out of range: give a rate in KiB/s"},
		{"setup: relative --env-file", []string{"setup", "--env-file", "etc/holdfast.env"}, 2, `environment file "etc/holdfast.env" is a relative path`},
		{"negative --retry-backoff", add("--retry-backoff", "-5m"), 2, "--retry-backoff -5m0s must be positive"},
		{"zero --retry-backoff", add("--retry-backoff", "0"), 2, "--retry-backoff 0s must be positive"},
		{"--retry-backoff past the cap", add("--retry-backoff", "2h"), 2, "past the cap of 1h0m0s"},
		{"cron on 30 February", add("--schedule", "0 2 30 2 *"), 2, `schedule "0 2 30 2 *" never fires`},
		{"cron on 31 April", add("--schedule", "0 0 31 4 *"), 2, `schedule "0 0 31 4 *" never fires`},
		{"prune cron that never fires", add("--prune-schedule", "0 0 31 4 *"), 2, "never fires"},
		{"--priority above 32 bits", add("--priority", "2147483648"), 2, "--priority 2147483648 is out of range"},
		{"--priority below 32 bits", add("--priority", "-2147483649"), 2, "--priority -2147483649 is out of range"},
		{"password file the user cannot read", add("--user", "nobody", "--password-file", rootOnlyPW), 2,
			"password file " + rootOnlyPW + " cannot be read by user nobody: permission denied"},
		{"password file through a link to one the user cannot read", add("--user", "65534", "--password-file", linkToRootOnly), 2,
			"password file " + linkToRootOnly + " cannot be read by user 65534: permission denied"},
		{"password file that is a directory", add("--password-file", data), 2, "is not a regular file"},
		{"password file that is a FIFO", add("--password-file", fifo), 2, "is not a regular file"},
		{"path the user cannot read", append(add("--user", "nobody"), "--path", rootOnlyDir), 2,
			"path " + rootOnlyDir + " cannot be read by user nobody: permission denied"},
		{"path that does not exist", append(add(), "--path", "/nonexistent/data"), 2, "path /nonexistent/data cannot be read by user root: no such file or directory"},
		{"numeric user that does not exist", add("--user", "4000000000"), 2, `user "4000000000" does not exist on this host`},
		{"user 65535 (16-bit -1)", add("--user", "65535"), 2, "not a user or group name systemd accepts"},
		{"user with a colon", add("--user", "a:b"), 2, "not a user or group name systemd accepts"},
		{"user with a leading zero", add("--user", "0123"), 2, "not a user or group name systemd accepts"},
		{"group with a slash", add("--group", "a/b"), 2, "not a user or group name systemd accepts"},
		{"relative local: repository", []string{"job", "add", "new", "--repo", "local:repo", "--password-file", pw, "--path", data}, 2, "is a relative path"},
		{"--keep-within with weeks", add("--keep-within", "2w"), 2, "restic has no weeks"},
		{"--keep-within without a unit", add("--keep-within", "7"), 2, "has no unit"},
		{"edit: negative --retry-backoff", []string{"job", "edit", "good", "--retry-backoff", "-1m"}, 2, "--retry-backoff -1m0s must be positive"},
		{"edit: --runtime-max under 1s", []string{"job", "edit", "good", "--runtime-max", "1ms"}, 2, "too short"},
		{"edit: password file the user cannot read", []string{"job", "edit", "good", "--password-file", rootOnlyPW}, 2, "cannot be read by user nobody"},
		{"edit: cron that never fires", []string{"job", "edit", "good", "--schedule", "0 2 30 2 *"}, 2, "never fires"},
		{"simulate from a FIFO", []string{"retention", "simulate", "--snapshots", fifo, "--keep-last", "1"}, 2, "is not a regular file"},
		{"simulate from a directory", []string{"retention", "simulate", "--snapshots", data, "--keep-last", "1"}, 2, "is not a regular file"},
		{"simulate from a device", []string{"retention", "simulate", "--snapshots", "/dev/zero", "--keep-last", "1"}, 2, "is not a regular file"},
		{"simulate from a file past 64 MiB", []string{"retention", "simulate", "--snapshots", huge, "--keep-last", "1"}, 2, "more than the 67108864 a listing may have"},
		{"simulate --keep-within 6x", []string{"retention", "simulate", "--snapshots", huge, "--keep-within", "6x"}, 2, `invalid duration "6x"`},
		{"simulate --restic-version 0.9.6", []string{"retention", "simulate", "--snapshots", huge, "--keep-last", "1", "--restic-version", "0.9.6"}, 2, `--restic-version "0.9.6": give a restic release such as 0.16.4, 0.14.0 or later`},
		{"run list --limit 0", []string{"run", "list", "--limit", "0"}, 2, "--limit must be at least 1"},
		{"ledger show --limit -1", []string{"ledger", "show", "--limit", "-1"}, 2, "--limit -1: give at least 1"},
		{"retention history --limit 0", []string{"retention", "history", "--limit", "0"}, 2, "--limit 0: give at least 1"},
		{"daemon: relative --state-dir", append(daemon(), "--state-dir", "state"), 78, "is a relative path"},
		{"daemon: relative --restic", daemon("--restic", "restic"), 78, `--restic "restic" is a relative path`},
		{"daemon: missing --restic", daemon("--restic", "/nonexistent/restic"), 78, "no such file or directory"},
		{"daemon: --restic not executable", daemon("--restic", notExecutable), 78, "is not an executable file"},
		{"daemon: --restic not restic", daemon("--restic", "/bin/true"), 78, "--restic: restic /bin/true: `version` printed \"\", not restic's"},
		{"daemon: relative --holdfast-binary", daemon("--holdfast-binary", "holdfast"), 78, "is a relative path"},
		{"daemon: zero --sweep-interval", daemon("--sweep-interval", "0s"), 78, "--sweep-interval 0s must be positive"},
		{"daemon: negative --spawn-grace", daemon("--spawn-grace", "-1s"), 78, "--spawn-grace -1s must be positive"},
		{"daemon: zero --depends-wait", daemon("--depends-wait", "0s"), 78, "--depends-wait 0s must be positive"},
		{"daemon: negative --late-grace", daemon("--late-grace", "-1m"), 78, "--late-grace -1m0s is negative"},
		{"daemon: zero --workers", daemon("--workers", "0"), 78, "--workers 0 is out of range"},
		{"daemon: zero --max-attempts", daemon("--max-attempts", "0"), 78, "--max-attempts 0 is out of range"},
		{"daemon: negative --max-running", daemon("--max-running", "-1"), 78, "--max-running -1 is out of range"},
		{"daemon: bad --window", daemon("--window", "Someday 25:00-26:00"), 78, "Someday"},
		{"daemon: unknown --window-tz", daemon("--window-tz", "Mars/Olympus"), 78, "Mars/Olympus"},
		{"daemon: unknown --systemd", daemon("--systemd", "pid1"), 78, "pid1"},
		{"daemon: unknown --log-level", daemon("--log-level", "loud"), 78, `--log-level "loud": want debug, info, warn or error`},
		{"daemon: unknown flag", daemon("--frobnicate"), 78, "unknown flag"},
		{"daemon: not a duration", daemon("--sweep-interval", "soon"), 78, "soon"},
	}
	before := w.dbDigest()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := w.run(tc.args...)
			msg := strings.TrimSpace(r.stderr)
			if r.code != tc.code || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") || r.stdout != "" {
				t.Fatalf("holdfast %s: exit %d, stderr %q, stdout %q; want exit %d and one line containing %q",
					strings.Join(tc.args, " "), r.code, r.stderr, r.stdout, tc.code, tc.want)
			}
			if strings.Contains(msg, "panic") || strings.Contains(msg, "connect") {
				t.Fatalf("holdfast %s: %q", strings.Join(tc.args, " "), msg)
			}
			if d := time.Since(start); d > time.Minute {
				t.Fatalf("holdfast %s took %s: did it wait for something?", strings.Join(tc.args, " "), d)
			}
		})
	}
	if after := w.dbDigest(); after != before {
		t.Fatalf("the database changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// What systemd and restic accept is accepted: numeric --user and --group, and a local:
// repository, which is measured as a local one; a run of such a job succeeds.
func TestInputSystemdAndResticAccept(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	openToAll(t, repo)
	data := w.sampleData("data", 2, 1<<20)
	w.mustRun("job", "add", "numeric", "--repo", "local:"+repo+"/", "--password-file", pw, "--path", data,
		"--user", "65534", "--group", "65534", "--priority", "2147483647", "--runtime-max", "1s", "--retry-backoff", "1h")
	w.mustRun("job", "edit", "numeric", "--runtime-max", "1h", "--keep-within", "6m", "--schedule", "0 0 29 2 *")
	var j struct {
		Repository string `json:"repository"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("job", "show", "numeric", "--json")), &j); err != nil || j.Repository != repo {
		t.Fatalf("repository stored as %q (%v), want %q: one spelling per local repository", j.Repository, err, repo)
	}
	show := w.mustRun("job", "show", "numeric")
	if !strings.Contains(show, "from the last 6 months") {
		t.Fatalf("job show does not read --keep-within 6m as six months:\n%s", show)
	}
	w.startDaemon()
	r := w.waitEnd(w.startRun("numeric"))
	if r.Status != "succeeded" || r.BytesAdded == nil {
		t.Fatalf("run of a job with --user 65534 and a local: repository = %+v, want succeeded", r)
	}
	if len(r.Attempts) != 1 || r.Attempts[0].SettleDeferred != "" || r.SettledBytes <= 0 {
		t.Fatalf("run = %+v, want one attempt settled", r)
	}
	w.checkInvariants()
}

// A job whose user was removed from the host fails with that reason, permanently, instead of
// being retried forever; `holdfast check` passes.
func TestDeletedJobUserFailsTheRun(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	name := fmt.Sprintf("hf%d", time.Now().UnixNano()%1_000_000_000)
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v\n%s", err, out)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			_ = exec.Command("userdel", name).Run()
		}
	})
	w.mustRun("job", "add", "orphan", "--engine", "command", "--command", "/bin/true", "--user", name, "--retry-max", "3")
	if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
		t.Fatalf("userdel: %v\n%s", err, out)
	}
	deleted = true
	w.startDaemon()
	id := w.startRun("orphan")
	r := w.waitEnd(id)
	want := "job user " + name + " does not exist on this host"
	if r.Status != "failed" || r.FailureClass != "permanent" || r.Reason != want {
		t.Fatalf("run = %+v, want failed, permanent, %q", r, want)
	}
	if runs := w.runs("orphan"); len(runs) != 1 {
		t.Fatalf("%d runs of the job, want 1 (a permanent failure is not retried)", len(runs))
	}
	w.checkInvariants()
}
