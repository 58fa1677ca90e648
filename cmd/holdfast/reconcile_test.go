package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

// inFlight adds n jobs, each with its own repository and slowData bytes of data, starts a run of
// each and waits until every run has reported progress. The world's daemons run slowBackups, and
// the runs stay in flight by cause: held (holdBackups) or at stuckKiBps.
func (w *world) inFlight(n int) (ids []string, repos [][2]string) {
	w.t.Helper()
	for i := range n {
		name := fmt.Sprintf("job%d", i)
		repo, pw := w.resticRepo("repo-" + name)
		data := w.sampleData("data-"+name, 6, slowData)
		w.mustRun("job", "add", name, "--repo", repo, "--password-file", pw, "--path", data)
		repos = append(repos, [2]string{repo, pw})
	}
	for i := range n {
		ids = append(ids, w.startRun(fmt.Sprintf("job%d", i)))
	}
	for _, id := range ids {
		w.waitRun(id, "progress", func(r runJSON) bool { return r.Progress != nil && r.Progress.BytesDone > 0 || ended(r) })
	}
	for _, id := range ids {
		if r := w.show(id); ended(r) {
			w.t.Fatalf("run %s ended before all %d were in flight: hold them (holdBackups) or run them at stuckKiBps", id, n)
		}
	}
	return ids, repos
}

// Graceful reboot: the manager stops every unit (restic gets SIGINT, exits 130, ExecStopPost
// writes the marker), a new manager starts, and every run is restarted as attempt 2 and succeeds.
func TestGracefulReboot(t *testing.T) {
	parallel(t)
	w := newWorldOwnManager(t) // it stops or freezes its manager
	w.slowBackups()
	w.backupRate(stuckKiBps)
	w.startDaemon()
	ids, repos := w.inFlight(5)
	w.backupRate(0) // the attempts after the reboot
	w.mgr.Exit(t)
	w.mgr.Start(t)
	for i, id := range ids {
		r := w.waitEnd(id)
		if r.Status != "succeeded" || len(r.Attempts) != 2 {
			t.Fatalf("run %d = %+v, want succeeded in attempt 2", i, r)
		}
		if a := r.Attempts[0]; a.ExitCode != "exited" || a.ExitStatus != "130" {
			t.Fatalf("run %d attempt 1 ended %s %s %s, want exited 130 (SIGINT from the stopping manager)", i, a.ServiceResult, a.ExitCode, a.ExitStatus)
		}
		if r.Attempts[0].Unit == r.Attempts[1].Unit {
			t.Fatalf("run %d: both attempts used unit %s", i, r.Attempts[0].Unit)
		}
		w.restartCharges(r)
		w.noLocks(repos[i][0])
	}
	w.checkInvariants()
}

// Hard crash: the manager and every unit's process are SIGKILLed, no marker is written; after the
// spawn grace every run is restarted and succeeds.
func TestHardCrash(t *testing.T) {
	parallel(t)
	w := newWorldOwnManager(t) // it stops or freezes its manager
	w.spawnGrace = "3s"
	w.slowBackups()
	w.backupRate(stuckKiBps)
	w.startDaemon()
	ids, repos := w.inFlight(3)
	w.backupRate(0) // the attempts after the crash
	w.mgr.Kill(t)
	w.mgr.Start(t)
	for i, id := range ids {
		r := w.waitEnd(id)
		if r.Status != "succeeded" || len(r.Attempts) != 2 {
			t.Fatalf("run %d = %+v, want succeeded in attempt 2", i, r)
		}
		if a := r.Attempts[0]; a.ServiceResult != "" {
			t.Fatalf("run %d attempt 1 has marker fields %+v after a power loss", i, a)
		}
		// restic was SIGKILLed and left its lock. A backup's lock is shared, so attempt 2 was not
		// blocked by it, and `restic unlock` (each attempt's ExecStartPre) removes it once restic
		// sees it stale: here, once PID 1 has reaped the killed process.
		w.staleLocksCleared(repos[i][0], repos[i][1])
		w.restartCharges(r)
	}
	w.checkInvariants()
}

// A run stopped just before the manager exits ends stopped and is not restarted; a run stopped
// before it was ever spawned ends stopped without a unit; a run stopped while systemd could not
// be reached still ends stopped.
func TestStopVersusReboot(t *testing.T) {
	parallel(t)
	w := newWorldOwnManager(t) // it stops or freezes its manager
	w.spawnGrace = "3s"

	// Stopped before any daemon spawned it.
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 4, slowData)
	w.mustRun("job", "add", "early", "--repo", repo, "--password-file", pw, "--path", data)
	early := w.startRun("early")
	w.mustRun("run", "stop", early)
	w.mustRun("job", "add", "late", "--repo", repo, "--password-file", pw, "--path", data)
	w.mustRun("job", "add", "cut", "--repo", repo, "--password-file", pw, "--path", data)

	w.slowBackups()
	w.backupRate(stuckKiBps) // every run here is stopped
	w.startDaemon()
	r := w.waitEnd(early)
	if r.Status != "stopped" || len(r.Attempts) != 1 || r.Attempts[0].Unit != "" {
		t.Fatalf("early = %+v, want stopped with no unit", r)
	}

	late := w.startRun("late")
	cut := w.startRun("cut")
	for _, id := range []string{late, cut} {
		w.waitRun(id, "progress", w.underway)
	}
	for _, id := range []string{late, cut} {
		if r := w.show(id); ended(r) {
			t.Fatalf("run %s ended before the stop: give it more data", id)
		}
	}
	// The operator stops one run, and the manager goes down right after.
	w.mustRun("run", "stop", late)
	w.mgr.Exit(t)
	// The other is stopped while systemd cannot be reached: the intent alone must hold.
	res := w.run("run", "stop", cut)
	if res.code != 0 {
		t.Fatalf("stop with the manager down: exit %d, %q", res.code, res.stderr)
	}
	w.mgr.Start(t)
	if r := w.waitEnd(late); r.Status != "stopped" || len(r.Attempts) != 1 {
		t.Fatalf("run %s = %+v, want stopped in its one attempt (never restarted)", late, r)
	}
	// cut was interrupted by the manager's exit before its stop was asked for, so a pass may
	// have opened attempt 2 in between: that attempt must never have been given a unit.
	r = w.waitEnd(cut)
	if r.Status != "stopped" || len(r.Attempts) > 2 || (len(r.Attempts) == 2 && r.Attempts[1].Unit != "") {
		t.Fatalf("run %s = %+v, want stopped, with no unit after the stop", cut, r)
	}
	// Stopping the attempt whose unit was recorded had to ask systemd, which was down.
	if len(r.Attempts) == 1 && !strings.Contains(res.stderr, "systemd was not reached") {
		t.Fatalf("stop with the manager down said %q, want that systemd was not reached", res.stderr)
	}
	w.checkInvariants()
	w.noLocks(repo)
}

// Three backups run; the operator stops one, and the manager exits gracefully right after, as at
// a reboot. The stopped run ends stopped in its one attempt; the other two, interrupted by the
// exit, are restarted as attempt 2 by the daemon once a manager is back, and succeed. How long
// the stop and the exit took to reach each restic (its "signal interrupt received", by the
// journal's clock, against the test's when the CLI's stop and the exit returned) is logged as a
// figure: the machine may be loaded, so it is read, not asserted.
func TestStopThenGracefulExit(t *testing.T) {
	parallel(t)
	w := newWorldOwnManager(t) // it stops its manager
	w.spawnGrace = "3s"
	w.slowBackups()
	w.backupRate(stuckKiBps)
	w.startDaemon()
	ids, repos := w.inFlight(3)
	units := make([]string, len(ids))
	for i, id := range ids {
		units[i] = w.show(id).Attempts[0].Unit
	}
	w.mustRun("run", "stop", ids[2])
	stopped := time.Now()
	w.mgr.Exit(t)
	exited := time.Now()
	w.backupRate(0) // the next attempts run at full speed
	w.mgr.Start(t)
	for i, id := range ids {
		r := w.waitEnd(id)
		switch {
		case i == 2 && (r.Status != "stopped" || len(r.Attempts) != 1):
			t.Fatalf("the run stopped before the exit: %+v, want stopped in its one attempt", r)
		case i < 2 && (r.Status != "succeeded" || len(r.Attempts) != 2 || r.Attempts[0].ExitStatus != "130"):
			t.Fatalf("run %s interrupted by the exit: %+v, want restarted after restic's SIGINT (130), succeeded in attempt 2", id, r)
		}
	}
	interrupted := w.journalTimes("signal interrupt received", units...)
	for i, u := range units {
		at, ok := interrupted[u]
		switch {
		case !ok && i == 2:
			t.Fatalf("restic of %s never logged its SIGINT; the journal has %v", u, interrupted)
		case !ok:
			// Its exit status (130) says restic got SIGINT. The test's journald dies with its
			// manager, as soon as the last unit is gone, and may not have read the line yet.
			t.Logf("restic of %s: no SIGINT line in the journal (its journald ended with the manager)", u)
		case i == 2:
			t.Logf("the stop reached restic %s after run stop returned", at.Sub(stopped).Round(time.Millisecond))
		default:
			t.Logf("the exit reached restic of %s %s after the stop returned (the exit returned %s after it)", u,
				at.Sub(stopped).Round(time.Millisecond), exited.Sub(stopped).Round(time.Millisecond))
		}
	}
	w.checkInvariants()
	for _, r := range repos {
		w.noLocks(r[0])
	}
}

// journalTimes returns, for each of units, when its first line in the journal of the world's
// manager containing text was written (testenv.JournalLineAt).
func (w *world) journalTimes(text string, units ...string) map[string]time.Time {
	w.t.Helper()
	at := map[string]time.Time{}
	for _, u := range units {
		if when, ok := testenv.JournalLineAt(w.t, w.mgr.JournalDir, u, text); ok {
			at[u] = when
		}
	}
	return at
}

// With the manager unreachable (frozen) for several passes, no run changes state; afterwards the
// sweep goes on and every run ends normally, in its first attempt.
func TestSystemdUnreachable(t *testing.T) {
	parallel(t)
	w := newWorldOwnManager(t) // it stops or freezes its manager
	w.spawnGrace = "3s"
	w.slowBackups()
	d := w.startWatchedDaemon("--run-budget", "1s")
	release := w.holdBackups() // no unit ends before the thaw
	ids, _ := w.inFlight(2)
	before := map[string]runJSON{}
	for _, id := range ids {
		before[id] = w.show(id)
	}
	offset := len(d.log.String())
	w.mgr.Freeze(t)
	// A unit that ended just before the freeze left its marker, and its run may end on it; no
	// marker can be written while the manager is frozen, so every other run must stay as it was.
	unmarked := 0
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(w.state, "markers", id+".a1.json")); err == nil {
			delete(before, id)
		} else {
			unmarked++
		}
	}
	if unmarked == 0 {
		w.mgr.Thaw(t)
		t.Fatal("every run ended before systemd was frozen, though their backups were held")
	}
	// A budget of 1s per pass: several passes fail to ask, each in trouble.
	for deadline := time.Now().Add(2 * time.Minute); len(d.troubledPasses(offset)) < 3; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			w.mgr.Thaw(t)
			t.Fatalf("%d passes in trouble in 2 minutes with systemd frozen, want 3", len(d.troubledPasses(offset)))
		}
	}
	for _, id := range ids {
		r := w.show(id)
		if _, watched := before[id]; !watched {
			continue
		}
		if r.Status != before[id].Status || len(r.Attempts) != 1 {
			w.mgr.Thaw(t)
			t.Fatalf("run %s changed while systemd was unreachable: %+v -> %+v", id, before[id], r)
		}
	}
	w.mgr.Thaw(t)
	release()
	for _, id := range ids {
		r := w.waitEnd(id)
		if r.Status != "succeeded" || len(r.Attempts) != 1 {
			t.Fatalf("run %s = %+v, want succeeded in attempt 1", id, r)
		}
	}
	w.checkInvariants()
}

// A run over its runtime limit is stopped by systemd and ends failed, saying so; restic got
// SIGINT and left no lock.
func TestRuntimeLimit(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 8, slowData)
	w.mustRun("job", "add", "slow", "--repo", repo, "--password-file", pw, "--path", data, "--runtime-max", "4s")
	w.slowBackups()
	w.backupRate(stuckKiBps)
	w.startDaemon()
	r := w.waitEnd(w.startRun("slow"))
	if r.Status != "failed" || !strings.Contains(r.Reason, "runtime limit") || len(r.Attempts) != 1 {
		t.Fatalf("run = %+v, want failed for its runtime limit, not restarted", r)
	}
	if a := r.Attempts[0]; a.ServiceResult != "timeout" {
		t.Fatalf("attempt ended %+v, want service result timeout", a)
	}
	w.noLocks(repo)
	w.checkInvariants()
}

// resume continues a stopped run as a new attempt; anything else is refused with its status.
func TestResume(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 2, 1<<20)
	w.mustRun("job", "add", "again", "--repo", repo, "--password-file", pw, "--path", data)
	id := w.startRun("again")
	w.mustRun("run", "stop", id)
	w.startDaemon()
	w.waitRun(id, "stopped", func(r runJSON) bool { return r.Status == "stopped" })
	w.mustRun("run", "resume", id[:8])
	r := w.waitEnd(id)
	if r.Status != "succeeded" || len(r.Attempts) != 2 || r.StopRequested != nil {
		t.Fatalf("resumed run = %+v, want succeeded in attempt 2", r)
	}
	res := w.run("run", "resume", id)
	if res.code != 2 || !strings.Contains(res.stderr, "is succeeded") || !strings.Contains(res.stderr, "only a stopped or paused run") {
		t.Fatalf("resume of a succeeded run: exit %d, %q", res.code, res.stderr)
	}
	w.checkInvariants()
}
