package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/testenv"
)

// crashCase puts a world at one crash point and proves the recovery: what the killed process
// wrote is there once or not at all, a fresh daemon or the same command again carries on, and
// nothing is lost or doubled.
type crashCase func(t *testing.T, w *world, point string)

// crashCases has a case for every point in crashpoint.Points.
var crashCases = map[string]crashCase{
	"admit-slot-before-commit":  crashSlot,
	"admit-slot-after":          crashSlot,
	"admit-prune-before-commit": crashPrune,
	"admit-prune-after":         crashPrune,
	"run-start-before-commit":   crashRunStart,
	"run-start-after":           crashRunStart,
	"spawn-before-claim":        crashRunPath,
	"spawn-claimed":             crashRunPath,
	"spawn-started":             crashRunPath,
	"spawn-armed":               crashArmed,
	"journal-applied":           crashRunPath,
	"quarantine-before":         crashQuarantine,
	"quarantine-after":          crashQuarantine,
	"stop-recorded":             crashStop,
	"finish-before":             crashRunPath,
	"retry-before-commit":       crashRetry,
	"finish-after":              crashRunPath,
	"retry-after":               crashRetry,
	"inventory-before-commit":   crashInventory,
	"restart-before":            crashRunPath,
	"restart-after":             crashRunPath,
	"grant-before-commit":       crashGrant,
	"grant-after":               crashGrant,
	"resume-before-commit":      crashResume,
	"resume-after":              crashResume,
	"settle-before-commit":      crashSettle,
	"settle-after":              crashSettle,
	"retention-apply-before":    crashRetention,
	"retention-apply-after":     crashRetention,
	"protect-before-commit":     crashProtect,
	"protect-after":             crashProtect,
	"job-edit-before-commit":    crashJobEdit,
	"job-remove-before-commit":  crashJobRemove,
}

// holdfast is SIGKILLed at every crash point, the daemon or the command that writes there; a
// fresh daemon, or the command run again, finishes the step once, and `holdfast check` passes.
func TestCrashPoints(t *testing.T) {
	// Its cases share the slots with the other tests instead of running alone, and take theirs
	// first: 33 of them queued behind every other test were the package's last minute.
	defer parallelParent(t, true)()
	bin := crashBinary(t)
	for _, point := range crashpoint.Points {
		c, ok := crashCases[point]
		if !ok {
			t.Errorf("crash point %s has no recovery test", point)
			continue
		}
		t.Run(point, func(t *testing.T) {
			parallelLong(t)
			w := newWorldWith(t, bin)
			w.spawnGrace = "3s"
			c(t, w, point)
			w.checkInvariants()
		})
	}
}

// crashBinary builds holdfast with its crash points compiled in, removed when t ends.
func crashBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "holdfast-crash-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Units run the binary as the job's user: the directory must be reachable by it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "holdfast")
	if err := testenv.BuildCommand("./cmd/holdfast", bin, "-tags", "holdfast_crashpoints"); err != nil {
		t.Fatalf("build holdfast with crash points: %v", err)
	}
	return bin
}

// crashDaemon starts a daemon that dies at point.
func (w *world) crashDaemon(point string) *daemon {
	w.t.Helper()
	w.daemonEnv = []string{crashpoint.Env + "=" + point}
	d := w.startDaemon()
	w.daemonEnv = nil
	return d
}

// crashed waits for the daemon to die at its crash point.
func (w *world) crashed(d *daemon, point string) {
	w.t.Helper()
	select {
	case <-d.done:
	case <-time.After(2 * time.Minute):
		w.t.Fatalf("the daemon never reached crash point %s", point)
	}
	killedBy(w.t, d.cmd.ProcessState, "the daemon at "+point)
}

// crashCLI runs a holdfast command that must die at point.
func (w *world) crashCLI(point string, args ...string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bin, args...)
	cmd.Env = append(w.env(), crashpoint.Env+"="+point)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		w.t.Fatalf("holdfast %s never reached crash point %s: %v\n%s", strings.Join(args, " "), point, err, out)
	}
	killedBy(w.t, exitErr.ProcessState, "holdfast "+strings.Join(args, " ")+" at "+point+": "+string(out))
}

func killedBy(t *testing.T, ps *os.ProcessState, what string) {
	t.Helper()
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("%s: ended %v, want killed by SIGKILL at the crash point", what, ps)
	}
}

// mustRefuse runs a command that the current state refuses (exit 2) with a message containing want.
func (w *world) mustRefuse(want string, args ...string) {
	w.t.Helper()
	if r := w.run(args...); r.code != 2 || !strings.Contains(r.stderr, want) {
		w.t.Fatalf("holdfast %s: exit %d, %q; want exit 2 saying %q", strings.Join(args, " "), r.code, r.stderr, want)
	}
}

// waitNoLive waits until the job has no queued or running run and returns its runs.
func (w *world) waitNoLive(job string) []listedRun {
	w.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		// The store, read in this process, says when it is worth running `run list`.
		if !w.anyLive(job) {
			runs := w.runs(job)
			live := 0
			for _, r := range runs {
				if r.Status == "queued" || r.Status == "running" {
					live++
				}
			}
			if live == 0 {
				return runs
			}
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("job %s still has live runs: %+v", job, w.runs(job))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// firstRunSucceeded reports whether the store reads the job's first run as succeeded.
func (w *world) firstRunSucceeded(job string) bool {
	runs, err := w.storeRuns(job)
	return err == nil && len(runs) > 0 && runs[len(runs)-1].Status == model.StatusSucceeded
}

// anyLive reports whether the job has a queued or running run, or its runs could not be read.
func (w *world) anyLive(job string) bool {
	runs, err := w.storeRuns(job)
	return err != nil || slices.ContainsFunc(runs, func(r model.Run) bool { return model.Live(r.Status) })
}

// crashRunPath: a backup's own steps (spawn, journal, finish, restart). Every run reaches the
// right end, with no run holding two live attempts and no attempt two units, and one backup
// process made it to the end.
func crashRunPath(t *testing.T, w *world, point string) {
	restart := strings.HasPrefix(point, "restart-")
	size := int64(2 << 20)
	if restart {
		size = slowData // long enough to be interrupted
		w.slowBackups()
		w.backupRate(stuckKiBps)
	}
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 4, size)
	w.mustRun("job", "add", "crashy", "--repo", repo, "--password-file", pw, "--path", data)
	d := w.crashDaemon(point)
	id := w.startRun("crashy")
	if restart {
		// An interruption nobody asked for: restic gets SIGINT from outside holdfast.
		r := w.waitRun(id, "progress", w.underway)
		w.backupRate(0) // the attempt after the interruption
		w.mgr.Systemctl(t, "kill", "--signal=SIGINT", r.Attempts[0].Unit)
	}
	w.crashed(d, point)
	w.startDaemon()
	r := w.waitEnd(id)
	wantAttempts := 1
	if restart || point == "spawn-claimed" {
		wantAttempts = 2 // an interruption, or a claimed unit that never appeared
	}
	if point == "restart-after" && len(r.Attempts) == 3 && r.Attempts[1].ServiceResult == "" && r.Attempts[1].Settlement == "the attempt never ran" {
		// The restart's notification named attempt 2 to the crashing daemon's own named spawns,
		// which claimed it and died before systemd had its unit: as at spawn-claimed, the claim
		// ran out and a third attempt ran.
		wantAttempts = 3
	}
	if r.Status != "succeeded" || len(r.Attempts) != wantAttempts {
		t.Fatalf("run = %+v, want succeeded in %d attempt(s)", r, wantAttempts)
	}
	// The journal's figures were applied once: the summary's, not a sum of batches read twice.
	if r.FilesProcessed == nil || *r.FilesProcessed != 4 || r.BytesAdded == nil || r.SettledBytes < *r.BytesAdded && !restart {
		t.Fatalf("run = %+v, want 4 files processed and charged at least restic's figure", r)
	}
	out := w.restic(repo, pw, "snapshots", "--json", "--tag", "holdfast-run="+id)
	if n := strings.Count(out, `"short_id"`); n != 1 {
		t.Fatalf("%d snapshots of the run, want 1", n)
	}
	w.noLocks(repo)
}

// crashArmed: the daemon dies just after systemd armed the timer of a run admitted ahead of its
// slot. systemd starts the unit at the slot all the same; a fresh daemon follows it, and the run
// succeeds in its one attempt.
func crashArmed(t *testing.T, w *world, point string) {
	w.mustRun("job", "add", "tick", "--engine", "command", "--command", "/bin/true", "--schedule", "@every 5s")
	first := parseTime(t, w.job("tick").NextRunAt)
	d := w.crashDaemon(point)
	w.crashed(d, point)
	var id string
	for _, r := range w.runs("tick") {
		if r.PlannedAt != nil && parseTime(t, r.PlannedAt).Equal(first) {
			id = r.ID
		}
	}
	if id == "" {
		t.Fatalf("after the crash: no run of the slot %s: %+v", first, w.runs("tick"))
	}
	w.startDaemon()
	r := w.waitEnd(id)
	if r.Status != "succeeded" || len(r.Attempts) != 1 {
		t.Fatalf("run = %+v, want succeeded in its one armed attempt", r)
	}
	w.mustRun("job", "edit", "tick", "--schedule", "")
	w.waitNoLive("tick")
}

// crashSlot: the daemon dies admitting a scheduled slot. The slot runs once: never lost, never
// admitted twice, and later slots each once. The period outlasts a restart on a loaded machine;
// a slot that a later one overtook while no daemon ran is missed by design, and counted so.
func crashSlot(t *testing.T, w *world, point string) {
	w.mustRun("job", "add", "tick", "--engine", "command", "--command", "/bin/true", "--schedule", "@every 30s")
	// The first slot now, not a period from now.
	ctx := context.Background()
	db, err := pgx.Connect(ctx, w.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, `UPDATE jobs SET next_run_at = date_trunc('second', now()) + interval '1 second' WHERE name = 'tick'`); err != nil {
		t.Fatal(err)
	}
	first := parseTime(t, w.job("tick").NextRunAt)
	d := w.crashDaemon(point)
	w.crashed(d, point)
	runs := w.runs("tick")
	if want := map[bool]int{true: 0, false: 1}[strings.HasSuffix(point, "-before-commit")]; len(runs) != want {
		t.Fatalf("after the crash: %d runs, want %d", len(runs), want)
	}
	w.startDaemon()
	w.waitRuns("tick", "a second slot admitted", func(runs []listedRun) bool { return len(runs) >= 2 })
	w.mustRun("job", "edit", "tick", "--schedule", "")
	runs = w.waitNoLive("tick")
	planned := map[time.Time]bool{}
	for _, r := range runs {
		at := parseTime(t, r.PlannedAt)
		if planned[at] || r.Status != "succeeded" {
			t.Fatalf("runs %+v: slot %s admitted twice, or a run did not succeed", runs, at)
		}
		planned[at] = true
	}
	if !planned[first] && w.job("tick").MissedSlots == 0 {
		t.Fatalf("runs %+v: the slot %s the daemon died admitting never ran, nor was it counted missed", runs, first)
	}
}

// crashPrune: the daemon dies admitting a scheduled prune. The prune runs, once per admission.
func crashPrune(t *testing.T, w *world, point string) {
	repo, pw := w.resticRepo("repo")
	w.mustRun("job", "add", "pr", "--repo", repo, "--password-file", pw, "--path", w.sampleData("data", 1, 64<<10),
		"--prune-schedule", "@every 3s")
	d := w.crashDaemon(point)
	w.crashed(d, point)
	runs := w.runs("pr")
	if want := map[bool]int{true: 0, false: 1}[strings.HasSuffix(point, "-before-commit")]; len(runs) != want {
		t.Fatalf("after the crash: %d runs, want %d", len(runs), want)
	}
	w.startDaemon()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		// Newest first: the last is the first prune admitted. The store, read in this process,
		// says when `run list` can show it succeeded.
		if w.firstRunSucceeded("pr") {
			if runs = w.runs("pr"); len(runs) > 0 && runs[len(runs)-1].Status == "succeeded" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first prune never succeeded: %+v", runs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.mustRun("job", "edit", "pr", "--prune-schedule", "")
	for _, r := range w.waitNoLive("pr") {
		if r.Status != "succeeded" {
			t.Fatalf("prune run %+v, want succeeded", r)
		}
	}
	w.noLocks(repo)
}

// crashRunStart: `run start` dies admitting the run. Run again, it admits the run, or finds it
// admitted; the job gets one run either way.
func crashRunStart(t *testing.T, w *world, point string) {
	w.mustRun("job", "add", "once", "--engine", "command", "--command", "/bin/true")
	w.crashCLI(point, "run", "start", "once")
	if point == "run-start-after" {
		if n := len(w.runs("once")); n != 1 {
			t.Fatalf("after the crash: %d runs, want the committed one", n)
		}
		w.mustRefuse("already has a live run", "run", "start", "once")
	} else {
		if n := len(w.runs("once")); n != 0 {
			t.Fatalf("after the crash: %d runs, want none", n)
		}
		w.mustRun("run", "start", "once")
	}
	w.startDaemon()
	runs := w.waitNoLive("once")
	if len(runs) != 1 || runs[0].Status != "succeeded" {
		t.Fatalf("runs %+v, want one, succeeded", runs)
	}
}

// crashStop: `run stop` dies between recording the stop and asking systemd. The daemon stops
// the unit; the run ends stopped and is not restarted.
func crashStop(t *testing.T, w *world, point string) {
	w.mustRun("job", "add", "long", "--engine", "command", "--command", "/bin/sleep", "--command", "300")
	w.startDaemon()
	id := w.startRun("long")
	w.waitRun(id, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	w.crashCLI(point, "run", "stop", id)
	r := w.waitEnd(id)
	if r.Status != "stopped" || len(r.Attempts) != 1 || r.StopRequested == nil {
		t.Fatalf("run = %+v, want stopped in its one attempt", r)
	}
	w.mustRefuse("already stopped", "run", "stop", id)
}

// crashQuarantine: the daemon dies as it quarantines an unreadable journal. The next daemon
// quarantines it (once) and the run still ends right.
func crashQuarantine(t *testing.T, w *world, point string) {
	// The command runs until the test has corrupted its journal.
	goOn := filepath.Join(w.dir, "go-on")
	w.mustRun("job", "add", "q", "--engine", "command", "--command", "/bin/sh", "--command", "-c",
		"--command", "while [ ! -e "+goOn+" ]; do sleep 0.1; done")
	d := w.crashDaemon(point)
	id := w.startRun("q")
	journal := filepath.Join(w.state, "runs", id, "a1", "journal.jsonl")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(journal); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run's journal never appeared")
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.corruptJournal(id)
	if err := os.WriteFile(goOn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.crashed(d, point)
	w.startDaemon()
	r := w.waitEnd(id)
	if r.Status != "succeeded" || len(r.Attempts) != 1 || r.Attempts[0].QuarantineReason == "" {
		t.Fatalf("run = %+v, want succeeded in one attempt, its journal quarantined with a reason", r)
	}
}

// crashRetry: the daemon dies ending a transiently failed run with its retry. There is one
// retry, and it runs.
func crashRetry(t *testing.T, w *world, point string) {
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 1, 64<<10)
	w.restic(repo, pw, "backup", data) // something for the lock's prune to chew on
	w.mustRun("job", "add", "locked", "--repo", repo, "--password-file", pw, "--path", data,
		"--retry-max", "1", "--retry-backoff", "1s")
	release := w.lockRepo(repo, pw)
	d := w.crashDaemon(point)
	first := w.startRun("locked")
	w.crashed(d, point)
	release()
	w.startDaemon()
	runs := w.waitNoLive("locked")
	if len(runs) != 2 {
		t.Fatalf("runs %+v, want the failed one and one retry", runs)
	}
	retry, failed := runs[0], runs[1]
	if failed.ID != first || failed.Status != "failed" || failed.FailureClass != "transient" || failed.RetriedBy != retry.ID ||
		retry.Trigger != "retry" || retry.RetryOf != first || retry.Status != "succeeded" {
		t.Fatalf("runs %+v, want %s failed (transient) and retried once, successfully", runs, first)
	}
	w.noLocks(repo)
}

// crashInventory: `snapshot list --refresh` dies writing the repository's listing. The backup
// before it put its snapshot in the inventory from its own summary, with its ending (no listing
// runs after a backup). Before the commit nothing of the listing is written: the row is still
// the summary's; the command run again completes that row in place, once.
func crashInventory(t *testing.T, w *world, point string) {
	repo, pw := w.resticRepo("repo")
	w.mustRun("job", "add", "inv", "--repo", repo, "--password-file", pw, "--path", w.sampleData("data", 1, 64<<10))
	w.startDaemon()
	id := w.startRun("inv")
	if r := w.waitEnd(id); r.Status != "succeeded" || len(r.Attempts) != 1 {
		t.Fatalf("run = %+v, want succeeded in one attempt", r)
	}
	list := func(args ...string) []snapshotOut {
		t.Helper()
		var snaps []snapshotOut
		if err := json.Unmarshal([]byte(w.mustRun(append([]string{"snapshot", "list", "inv", "--json"}, args...)...)), &snaps); err != nil {
			t.Fatal(err)
		}
		if len(snaps) != 1 || snaps[0].RunID == nil || *snaps[0].RunID != id {
			t.Fatalf("inventory %+v, want the run's one snapshot", snaps)
		}
		return snaps
	}
	before := list()
	if before[0].Source != "summary" {
		t.Fatalf("inventory %+v after the backup, want the row from its summary", before)
	}
	w.crashCLI(point, "snapshot", "list", "inv", "--refresh")
	if after := list(); after[0].ID != before[0].ID || after[0].Source != before[0].Source {
		t.Fatalf("after the crash: inventory %+v, want %+v unchanged", after, before)
	}
	if done := list("--refresh"); done[0].Source != "listing" || len(done[0].ID) != 64 || !strings.HasPrefix(done[0].ID, before[0].ID) {
		t.Fatalf("inventory %+v after the listing, want the summary's row %s completed", done, before[0].ID)
	}
}

type snapshotOut struct {
	ID        string  `json:"id"`
	RunID     *string `json:"run_id"`
	LegalHold bool    `json:"legal_hold"`
	HoldAt    *string `json:"legal_hold_at"`
	Source    string  `json:"source"`
}

// crashGrant: `account grant` dies granting. Before its commit nothing was granted and the
// command run again grants once; after it, the grant is there once, as `ledger show` tells.
func crashGrant(t *testing.T, w *world, point string) {
	w.mustRun("account", "add", "team", "--quota", "1MiB")
	w.crashCLI(point, "account", "grant", "team", "10MiB", "--why", "q1")
	grants := func() (n int) {
		for _, e := range w.ledger("team").Entries {
			if e.Kind == "grant" && e.Note == "q1" && e.Bytes == 10<<20 {
				n++
			}
		}
		return n
	}
	if point == "grant-before-commit" {
		if n := grants(); n != 0 {
			t.Fatalf("after the crash: %d grants, want none", n)
		}
		w.mustRun("account", "grant", "team", "10MiB", "--why", "q1")
	}
	if n, l := grants(), w.ledger("team"); n != 1 || l.QuotaBytes == nil || *l.QuotaBytes != 11<<20 {
		t.Fatalf("ledger %+v: %d grants of 10MiB, want one and a quota of 11MiB", l, n)
	}
}

// crashResume: `run resume` dies taking the new attempt's hold. Before its commit the run is
// still paused and the command run again resumes it; after it, the run is queued and a second
// resume is refused. One hold, one new attempt, and the run ends.
func crashResume(t *testing.T, w *world, point string) {
	w.mustRun("account", "add", "team", "--quota", "1MiB")
	repo, pw := w.resticRepo("repo")
	w.mustRun("job", "add", "capped", "--repo", repo, "--password-file", pw, "--path", w.sampleData("data", 1, 64<<10),
		"--account", "team", "--max-added", "10MiB")
	res := w.run("run", "start", "capped", "--json")
	var r runJSON
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil || res.code != 6 || r.Status != "paused" {
		t.Fatalf("run start: exit %d, %s%s; want exit 6, paused", res.code, res.stdout, res.stderr)
	}
	w.mustRun("account", "grant", "team", "20MiB", "--why", "more")
	w.crashCLI(point, "run", "resume", r.ID)
	if point == "resume-before-commit" {
		if s := w.show(r.ID); s.Status != "paused" || len(s.Attempts) != 1 {
			t.Fatalf("after the crash: run %+v, want still paused with one attempt", s)
		}
		w.mustRun("run", "resume", r.ID)
	} else {
		w.mustRefuse("only a stopped or paused run", "run", "resume", r.ID)
	}
	w.startDaemon()
	end := w.waitEnd(r.ID)
	holds := w.ledger("team").entries(r.ID, "hold")
	if end.Status != "succeeded" || len(end.Attempts) != 2 || len(holds) != 1 || holds[2].Bytes != 10<<20 {
		t.Fatalf("run %+v, holds %+v; want succeeded in attempt 2, which held 10MiB once", end, holds)
	}
}

// crashSettle: `ledger settle` dies settling a deferred hold. Before its commit the hold is
// still open and the command run again settles it; after it, a second settlement is refused.
func crashSettle(t *testing.T, w *world, point string) {
	// A remote server without the repository: restic reports no figure, and there is no growth
	// to measure, so the hold stays open until it is settled by hand. It answers 404 at once
	// (restic 0.17 and later retry a server that cannot be reached for minutes).
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	pw := filepath.Join(w.dir, "pw")
	if err := os.WriteFile(pw, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mustRun("job", "add", "far", "--repo", "rest:"+srv.URL+"/", "--password-file", pw,
		"--path", w.sampleData("data", 1, 1<<10), "--max-added", "1MiB")
	w.startDaemon()
	id := w.startRun("far")
	r := w.waitEnd(id)
	if l := w.ledger("default"); r.Status != "failed" || len(l.Deferred) != 1 {
		t.Fatalf("run %+v, deferred %+v; want failed with its hold deferred", r, l.Deferred)
	}
	w.crashCLI(point, "ledger", "settle", id, "--bytes", "1KiB", "--why", "counted")
	if point == "settle-before-commit" {
		if l := w.ledger("default"); len(l.Deferred) != 1 {
			t.Fatalf("after the crash: deferred %+v, want the hold still open", l.Deferred)
		}
		w.mustRun("ledger", "settle", id, "--bytes", "1KiB", "--why", "counted")
	} else {
		w.mustRefuse("no open hold", "ledger", "settle", id, "--bytes", "1KiB", "--why", "counted")
	}
	l := w.ledger("default")
	if settles := l.entries(id, "settle"); len(l.Deferred) != 0 || len(settles) != 1 || settles[1].Bytes != 1<<10 {
		t.Fatalf("deferred %+v, settlements %+v; want one settlement of 1KiB", l.Deferred, settles)
	}
}

// threeSnapshots makes a repository with three snapshots of job web, a day apart, and the job
// with a policy that keeps the newest only.
func (w *world) threeSnapshots() (repo, pw string) {
	repo, pw = w.resticRepo("repo")
	data := w.sampleData("data", 1, 64<<10)
	host, err := os.Hostname()
	if err != nil {
		w.t.Fatal(err)
	}
	now := time.Now().UTC()
	for d := 3; d >= 1; d-- {
		w.resticTZ(repo, pw, "backup", "--time", now.Add(-time.Duration(d)*24*time.Hour).Format("2006-01-02 15:04:05"),
			"--host", host, "--tag", "holdfast-job=web", data)
	}
	w.mustRun("job", "add", "web", "--repo", repo, "--password-file", pw, "--path", data, "--keep-last", "1")
	return repo, pw
}

// crashRetention: `retention apply` dies around recording its plan. Before, nothing is
// recorded and the command run again applies the plan; after, the plan and its forget run are
// there once and a second apply is refused while it runs. The plan's snapshots are deleted once.
func crashRetention(t *testing.T, w *world, point string) {
	repo, pw := w.threeSnapshots()
	w.crashCLI(point, "retention", "apply", "web", "--force")
	var history []struct {
		Outcome string  `json:"outcome"`
		RunID   *string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("retention", "history", "web", "--json")), &history); err != nil {
		t.Fatal(err)
	}
	if point == "retention-apply-before" {
		if len(history) != 0 || len(w.runs("web")) != 0 {
			t.Fatalf("after the crash: plans %+v, runs %+v; want none", history, w.runs("web"))
		}
		w.mustRun("retention", "apply", "web", "--force")
	} else {
		if len(history) != 1 || history[0].Outcome != "applied" || history[0].RunID == nil {
			t.Fatalf("after the crash: plans %+v, want the applied one with its forget run", history)
		}
		w.mustRefuse("live run", "retention", "apply", "web", "--force")
	}
	w.startDaemon()
	runs := w.waitNoLive("web")
	if len(runs) != 1 || runs[0].Status != "succeeded" {
		t.Fatalf("runs %+v, want one forget run, succeeded", runs)
	}
	if left := w.resticSnapshots(repo, pw); len(left) != 1 {
		t.Fatalf("%d snapshots left, want the newest", len(left))
	}
	w.noLocks(repo)
}

// crashProtect: `snapshot hold` dies putting a snapshot under legal hold. Before its commit the
// snapshot is not held and the command run again holds it; after it, the command run again
// finds it held and keeps the first hold's time.
func crashProtect(t *testing.T, w *world, point string) {
	w.threeSnapshots()
	var snaps []snapshotOut
	if err := json.Unmarshal([]byte(w.mustRun("snapshot", "list", "web", "--refresh", "--json")), &snaps); err != nil || len(snaps) != 3 {
		t.Fatalf("inventory %+v (%v), want 3 snapshots", snaps, err)
	}
	id := snaps[2].ID
	show := func() snapshotOut {
		var list []snapshotOut
		if err := json.Unmarshal([]byte(w.mustRun("snapshot", "list", "web", "--json")), &list); err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			if s.ID == id {
				return s
			}
		}
		t.Fatalf("snapshot %s is gone from the inventory", id)
		return snapshotOut{}
	}
	w.crashCLI(point, "snapshot", "hold", id[:12], "--why", "audit")
	held := show()
	if held.LegalHold != (point == "protect-after") {
		t.Fatalf("after the crash: snapshot %+v, held %v; want %v", held, held.LegalHold, point == "protect-after")
	}
	w.mustRun("snapshot", "hold", id[:12], "--why", "audit")
	again := show()
	if !again.LegalHold || held.HoldAt != nil && *held.HoldAt != *again.HoldAt {
		t.Fatalf("snapshot %+v after %+v; want held, since the first hold", again, held)
	}
}

// crashJobEdit: `job edit` dies writing the new settings: none of them is kept; run again, all are.
func crashJobEdit(t *testing.T, w *world, point string) {
	w.mustRun("job", "add", "ed", "--engine", "command", "--command", "/bin/true")
	w.crashCLI(point, "job", "edit", "ed", "--schedule", "@daily")
	if j := w.job("ed"); j.NextRunAt != nil {
		t.Fatalf("after the crash: job %+v, want no schedule", j)
	}
	w.mustRun("job", "edit", "ed", "--schedule", "@daily")
	if j := w.job("ed"); j.NextRunAt == nil {
		t.Fatalf("job %+v, want scheduled", j)
	}
}

// crashJobRemove: `job remove` dies deleting the job: it is still there; run again, it is gone.
func crashJobRemove(t *testing.T, w *world, point string) {
	w.mustRun("job", "add", "gone", "--engine", "command", "--command", "/bin/true")
	w.crashCLI(point, "job", "remove", "gone")
	w.job("gone")
	w.mustRun("job", "remove", "gone")
	w.mustRefuse("not found", "job", "show", "gone")
}
