package main_test

import (
	"strings"
	"testing"
)

// The daemon's policy decides who jobs run as, whatever the database says. With --allow-users
// 65534 (nobody, by uid) a restic job without --user, which would run as root, ends failed,
// permanent, with a reason naming the rule and the flag, its unit never started and its hold
// released (a restic job's); a job as nobody runs. Without --allow-command-jobs a command job ends the same way,
// naming that flag. A daemon that allows both runs them. A bad list is refused before the
// daemon connects anywhere.
func TestDaemonPolicy(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	w.daemonFlags = nil // the defaults: every user, no command jobs
	repo, pw := w.resticRepo("repo")
	openToAll(t, repo)
	data := w.sampleData("data", 1, 64<<10)
	w.mustRun("job", "add", "as-nobody", "--repo", repo, "--password-file", pw, "--path", data, "--user", "nobody")
	// A root job's repository is root's alone: a unit writing as root refuses one others may write.
	rootRepo, rootPw := w.resticRepo("root-repo")
	// A ceiling, so that its runs hold at admission (a first backup without one holds from its spawn).
	w.mustRun("job", "add", "as-root", "--repo", rootRepo, "--password-file", rootPw, "--path", data, "--max-added", "64MiB")
	w.mustRun("job", "add", "cmd", "--engine", "command", "--command", "/bin/true", "--user", "nobody")

	for _, c := range []struct{ args, want string }{
		{"no-such-user", `user "no-such-user" does not exist`},
		{"nobody,,root", "an empty user name"},
		{"4294967295", "not a valid user"},
	} {
		r := w.run("daemon", "--allow-users", c.args)
		if r.code != 78 || !strings.Contains(r.stderr, "--allow-users") || !strings.Contains(r.stderr, c.want) ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("daemon --allow-users %q: exit %d, stderr %q; want exit 78 (bad configuration) and one line with %q", c.args, r.code, r.stderr, c.want)
		}
	}

	refused := func(id, rule string, held bool) {
		t.Helper()
		r := w.waitEnd(id)
		if r.Status != "failed" || r.FailureClass != "permanent" || !strings.Contains(r.Reason, "refused by this daemon's policy") ||
			!strings.Contains(r.Reason, rule) || r.HoldBytes != 0 || r.SettledBytes != 0 || r.Attempts[0].Unit != "" {
			t.Fatalf("run = %+v, want failed (permanent) naming %s, never started, its hold released", r, rule)
		}
		if _, ok := w.ledger("default").entries(id, "release")[1]; held && !ok {
			t.Fatalf("run %s: its hold was not released", id)
		}
	}
	d := w.startDaemon("--allow-users", "65534")
	refused(w.startRun("as-root"), "job as-root runs as root (it names no --user) (uid 0), which --allow-users (65534) does not include", true)
	refused(w.startRun("cmd"), "start the daemon with --allow-command-jobs", false) // a command job holds nothing
	if r := w.waitEnd(w.startRun("as-nobody")); r.Status != "succeeded" {
		t.Fatalf("run of a job as nobody under --allow-users 65534 = %+v, want succeeded", r)
	}
	w.checkInvariants()

	d.kill()
	w.startDaemon("--allow-users", "nobody,root", "--allow-command-jobs")
	for _, job := range []string{"cmd", "as-root"} {
		if r := w.waitEnd(w.startRun(job)); r.Status != "succeeded" {
			t.Fatalf("run of %s under a daemon that allows it = %+v, want succeeded", job, r)
		}
	}
	w.checkInvariants()
}
