package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/testenv"
)

// newPrivateWorld is a world whose PostgreSQL is its own, so the test may restart or freeze it.
func newPrivateWorld(t *testing.T) (*world, *testenv.PostgresServer) {
	t.Helper()
	srv, _ := testenv.PrivatePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.CreateDatabase(ctx, "holdfast"); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, bin: testenv.HoldfastBinary(t), dir: testenv.SharedDir(t), dsn: srv.DSN("holdfast"), spawnGrace: "10s", pool: newTestPool(t)}
	w.addr.DSN, w.addr.SessionDSN = testenv.Pooled(t, w.dsn)
	w.mgr = testenv.PrivateSystemd(t)
	w.state = w.dir + "/state"
	w.mustRun("migrate")
	return w, srv
}

// logBuffer is a daemon's output, safe to read while the daemon writes it.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// watchedDaemon is a running `holdfast daemon` whose log the test reads as it goes.
type watchedDaemon struct {
	cmd  *exec.Cmd
	log  *logBuffer
	done chan struct{}
}

func (w *world) startWatchedDaemon(args ...string) *watchedDaemon {
	w.t.Helper()
	args = append(append([]string{"daemon", "--spawn-grace", w.spawnGrace}, w.daemonFlags...), args...)
	cmd := exec.Command(w.bin, args...)
	cmd.Env = w.env()
	d := &watchedDaemon{cmd: cmd, log: &logBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.log, d.log
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(d.done) }()
	w.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-d.done
		if w.t.Failed() {
			w.t.Logf("daemon log:\n%s", d.log.String())
		}
	})
	return d
}

// running fails the test if the daemon has exited.
func (d *watchedDaemon) running(t *testing.T, when string) {
	t.Helper()
	select {
	case <-d.done:
		t.Fatalf("the daemon exited %s: %v", when, d.cmd.ProcessState)
	default:
	}
}

// logLine is one line of the daemon's slog text output.
type logLine struct {
	at   time.Time
	text string
}

var logTime = regexp.MustCompile(`^time=(\S+)`)

// lines returns the daemon's log lines from offset on that contain every one of words.
func (d *watchedDaemon) lines(offset int, words ...string) []logLine {
	var out []logLine
	for _, l := range strings.Split(d.log.String()[offset:], "\n") {
		ok := l != ""
		for _, w := range words {
			ok = ok && strings.Contains(l, w)
		}
		if !ok {
			continue
		}
		line := logLine{text: l}
		if m := logTime.FindStringSubmatch(l); m != nil {
			line.at, _ = time.Parse(time.RFC3339Nano, m[1])
		}
		out = append(out, line)
	}
	return out
}

// troubledPasses returns the log lines from offset on that report a pass in trouble: a sweep
// that failed, or a sweep in which some run could not be reconciled (one line per pass).
func (d *watchedDaemon) troubledPasses(offset int) []logLine {
	var out []logLine
	for _, l := range d.lines(offset, "level=") {
		switch {
		case strings.Contains(l.text, `msg="sweep failed"`),
			strings.Contains(l.text, "msg=sweep ") && !strings.Contains(l.text, " errors=0 "):
			out = append(out, l)
		}
	}
	return out
}

// endedRight waits for each run to end and checks that it succeeded in its first attempt (its
// unit was never disturbed) with restic's figures, settled once at restic's data_added with
// nothing left held.
func (w *world) endedRight(ids []string) {
	w.t.Helper()
	for _, id := range ids {
		r := w.waitEnd(id)
		if r.Status != "succeeded" || len(r.Attempts) != 1 || r.SnapshotID == "" || r.BytesAdded == nil || r.FilesProcessed == nil {
			w.t.Fatalf("run %s = %+v, want succeeded in one attempt with restic's figures", id, r)
		}
		l := w.ledger("default")
		holds, settles := l.entries(id, "hold"), l.entries(id, "settle")
		// The charge is restic's data_added, or the measured growth of the repository if that is
		// more (it also counts the index and the snapshot): never less than restic's figure.
		if len(holds) != 1 || len(settles) != 1 || r.HoldBytes != 0 || settles[1].Bytes < *r.BytesAdded ||
			!strings.Contains(settles[1].Note, "data_added") || r.SettledBytes != settles[1].Bytes {
			w.t.Fatalf("run %s: holds %+v, settles %+v, still held %d, charged %d; want one hold settled at no less than data_added %d",
				id, holds, settles, r.HoldBytes, r.SettledBytes, *r.BytesAdded)
		}
	}
}

// startAll starts a run of each job and waits until every one has reported progress.
func (w *world) startAll(jobs []string) []string {
	w.t.Helper()
	var ids []string
	for _, j := range jobs {
		ids = append(ids, w.startRun(j))
	}
	for _, id := range ids {
		w.waitRun(id, "progress", func(r runJSON) bool { return r.Progress != nil && r.Progress.BytesDone > 0 || ended(r) })
	}
	return ids
}

// PostgreSQL restarted, fast and then immediate, while backups run: the daemon stays up, listens
// again, and every run ends succeeded with its figures and its settlement.
func TestPostgresRestartWhileRunsLive(t *testing.T) {
	parallel(t)
	w, srv := newPrivateWorld(t)
	w.slowBackups()
	d := w.startWatchedDaemon("--db-statement-timeout", "5s", "--pass-timeout", "20s")
	// Each round's backups are held in their units until PostgreSQL is back: live across it.
	release := w.holdBackups()
	ids, _ := w.inFlight(3)
	jobs := []string{"job0", "job1", "job2"}
	for i, mode := range []string{testenv.Fast, testenv.Immediate} {
		if i > 0 {
			for _, j := range jobs {
				w.sampleData("data-"+j, 6, slowData) // new content: a backup of the old is over at once
			}
			release = w.holdBackups()
			ids = w.startAll(jobs)
		}
		offset := len(d.log.String())
		live := 0
		for _, id := range ids {
			if !ended(w.show(id)) {
				live++
			}
		}
		if live != len(ids) {
			t.Fatalf("%s restart: %d of %d runs live while their backups are held", mode, live, len(ids))
		}
		if err := srv.Restart(mode); err != nil {
			t.Fatal(err)
		}
		release()
		w.endedRight(ids)
		d.running(t, "after the "+mode+" restart")
		// Listening again may wait out its backoff (at most 45s) after the runs ended.
		for deadline := time.Now().Add(2 * time.Minute); len(d.lines(offset, "listening for notifications again")) == 0; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after the %s restart the daemon did not listen for notifications again", mode)
			}
		}
		w.checkInvariants()
		troubled := d.troubledPasses(offset)
		t.Logf("%s restart with %d runs live: all ended right; %d passes in trouble meanwhile", mode, live, len(troubled))
		for _, l := range troubled {
			t.Log(l.text)
		}
	}
}

// systemctl daemon-reexec while backups run: the units survive it with their ExecStopPost (the
// manager reloads every transient unit from its file, and must understand every key holdfast
// wrote there), every run ends succeeded in its first attempt with its charges settled, and the
// daemon reports no failure to ask systemd beyond the pass during the re-exec. Then backups
// released as the manager re-executes end across it, while the daemon's connection to the
// manager breaks and is made anew: each end is recorded once all the same.
func TestDaemonReexecWhileRunsLive(t *testing.T) {
	parallel(t)
	w, _ := newPrivateWorld(t)
	w.slowBackups()
	d := w.startWatchedDaemon()
	release := w.holdBackups() // the units are live across the re-exec
	ids, _ := w.inFlight(3)
	w.mgr.Systemctl(t, "daemon-reexec")
	// The manager answers a new connection: from here on, a pass that cannot ask it is a failure
	// of the daemon's, not the re-exec's. One pass may have begun before this answer, on the
	// connection the re-exec broke.
	if _, err := w.mgr.Conn(t).ListUnitsByNamesContext(context.Background(), []string{"holdfast-none.service"}); err != nil {
		t.Fatalf("the manager does not answer after daemon-reexec: %v", err)
	}
	offset := len(d.log.String())
	release()
	w.endedRight(ids) // each in its first attempt
	if unknown := w.managerUnknownKeys(); unknown != "" {
		t.Fatalf("the manager did not understand a unit setting holdfast wrote: %s", unknown)
	}
	// Runs started after the re-exec are spawned over the new connection.
	more := w.startAll([]string{"job0", "job1"})
	w.endedRight(more)
	d.running(t, "after daemon-reexec")
	if troubled := d.troubledPasses(offset); len(troubled) > 1 {
		t.Fatalf("%d passes in trouble after the manager answered again, want at most the one begun before:\n%v", len(troubled), troubled)
	}

	// Nothing new to back up: restic reads no bytes, and the runs are live once running.
	release = w.holdBackups()
	var racing []string
	for _, j := range []string{"job0", "job1", "job2"} {
		racing = append(racing, w.startRun(j))
	}
	for _, id := range racing {
		w.waitRun(id, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	}
	release()
	w.mgr.Systemctl(t, "daemon-reexec")
	w.endedRight(racing)
	d.running(t, "after runs ended across daemon-reexec")
	w.checkInvariants()
}

// managerUnknownKeys returns the manager's journal lines about unit file keys it ignored when it
// loaded a transient unit again ("" if none).
func (w *world) managerUnknownKeys() string {
	w.t.Helper()
	out, err := exec.Command("journalctl", "--directory", w.mgr.JournalDir, "--no-pager", "-o", "cat").CombinedOutput()
	if err != nil {
		w.t.Fatalf("journalctl: %v\n%s", err, out)
	}
	var unknown []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "Unknown key") {
			unknown = append(unknown, l)
		}
	}
	return strings.Join(unknown, "; ")
}

// PostgreSQL frozen (every process SIGSTOPped) for several statement timeouts while backups
// run: the daemon's loop keeps turning, each pass given up at its deadline and logged, and after
// the thaw every run ends right.
func TestPostgresFrozenWhileRunsLive(t *testing.T) {
	parallel(t)
	w, srv := newPrivateWorld(t)
	const passTimeout, statementTimeout = 2 * time.Second, time.Second
	w.slowBackups()
	// A lease that outlasts the freeze: a daemon whose lease lapsed stands by, and its loops
	// would then turn without a pass to fail.
	d := w.startWatchedDaemon("--db-statement-timeout", statementTimeout.String(), "--pass-timeout", passTimeout.String(),
		"--lease", "3m")
	release := w.holdBackups() // the units are live until after the thaw
	ids, _ := w.inFlight(3)
	offset := len(d.log.String())
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := srv.Thaw(); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer thaw()
	// A loop stuck in one pass logs one failure at most: two of the admission loop's and two of
	// the sweep's show each turning, each pass given up at its deadline, however slowly the
	// machine runs them.
	var admissions, sweeps, failures []logLine
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		admissions, sweeps = d.lines(offset, `msg="admission of due jobs failed"`), d.lines(offset, `msg="sweep failed"`)
		failures = append(admissions, sweeps...)
		if len(admissions) >= 2 && len(sweeps) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			thaw()
			t.Fatalf("%d failed admission passes and %d failed sweeps logged in 2 minutes with PostgreSQL frozen, want 2 of each: a loop froze:\n%v",
				len(admissions), len(sweeps), failures)
		}
	}
	thaw()
	d.running(t, "while PostgreSQL was frozen")
	for _, f := range failures {
		if !strings.Contains(f.text, "deadline exceeded") && !strings.Contains(f.text, "statement timeout") {
			t.Fatalf("a pass failed for another reason than its deadline while PostgreSQL was frozen:\n%s", f.text)
		}
	}
	t.Logf("PostgreSQL frozen: %d failed passes logged, each at its deadline", len(failures))
	release()
	w.endedRight(ids)
	// And the daemon works as before: a new run is admitted, spawned and settled.
	w.endedRight(w.startAll([]string{"job0"}))
	d.running(t, "after the thaw")
	w.checkInvariants()
}

// A due job that cannot be admitted (here: its slot was admitted before, as after a restore of
// an older database) is set aside with its reason in `job show`, logged once, and the other
// jobs' slots are admitted meanwhile; the daemon does not spin on it.
func TestAdmissionSetsStuckJobAside(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	// Command jobs: admission is what is looked at, and a backup every 3s would only cost CPU.
	w.mustRun("job", "add", "stuck", "--engine", "command", "--command", "/bin/true", "--schedule", "@every 1h")
	w.mustRun("job", "add", "busy", "--engine", "command", "--command", "/bin/true", "--schedule", "@every 3s")
	ctx := context.Background()
	db, err := pgx.Connect(ctx, w.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	slot := time.Now().Add(-time.Second).UTC().Truncate(time.Second)
	if _, err := db.Exec(ctx, `UPDATE jobs SET next_run_at = $1 WHERE name = 'stuck'`, slot); err != nil {
		t.Fatal(err)
	}
	d := w.startWatchedDaemon()
	var first string
	deadline := time.Now().Add(2 * time.Minute)
	for first == "" {
		if err := db.QueryRow(ctx, `SELECT coalesce(max(id::text), '') FROM runs WHERE job_name = 'stuck'`).Scan(&first); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the stuck job's slot was never admitted")
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.waitEnd(first)
	// The slot goes back to one already admitted: every admission of it now fails.
	if _, err := db.Exec(ctx, `UPDATE jobs SET next_run_at = $1 WHERE name = 'stuck'`, slot); err != nil {
		t.Fatal(err)
	}
	offset := len(d.log.String())
	busyRuns := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM runs WHERE job_name = 'busy' AND status = 'succeeded'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := busyRuns()
	deadline = time.Now().Add(2 * time.Minute)
	for busyRuns() < before+3 {
		if time.Now().After(deadline) {
			t.Fatalf("the other job's slots were not admitted while one job was stuck (%d runs before, %d now)", before, busyRuns())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Once until the time it was set aside for: then admission tries it again, and may log it
	// again, on a machine slow enough that the other job's slots took that long.
	aside := d.lines(offset, "job set aside", "job=stuck")
	if len(aside) == 0 || !strings.Contains(aside[0].text, "runs_one_per_slot") {
		t.Fatalf("the stuck job was not logged as set aside with the reason:\n%v", aside)
	}
	m := regexp.MustCompile(`set aside until ([0-9TZ:+-]+)`).FindStringSubmatch(aside[0].text)
	if m == nil {
		t.Fatalf("the set-aside line does not say until when: %s", aside[0].text)
	}
	until, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		t.Fatal(err)
	}
	if n := len(slices.DeleteFunc(aside, func(l logLine) bool { return !l.at.Before(until) })); n != 1 {
		t.Fatalf("the stuck job was logged %d times as set aside before %s, want once:\n%v", n, m[1], aside)
	}
	if failed := d.lines(offset, "admission of due jobs failed"); len(failed) > 0 {
		t.Fatalf("one stuck job failed the whole admission:\n%v", failed)
	}
	show := w.mustRun("job", "show", "stuck")
	if !strings.Contains(show, "not admitted:") || !strings.Contains(show, "runs_one_per_slot") {
		t.Fatalf("job show does not say why the job is not admitted:\n%s", show)
	}
	d.running(t, "with a stuck job")
	// The daemon does not spin on the job that stays due: the job is set aside until a time still
	// to come, which admission skips and the next-due time waits for, while its slot stays due.
	// (What the daemon costs while idle is a figure for bench/, not a bound here.)
	var later, due bool
	if err := db.QueryRow(ctx, `SELECT admission_retry_at > now(), next_run_at <= now() FROM jobs WHERE name = 'stuck'`).Scan(&later, &due); err != nil {
		t.Fatal(err)
	}
	if !later || !due {
		t.Fatalf("the stuck job: set aside until a time to come %v, its slot due %v; want both", later, due)
	}
}

// `holdfast exec` stopped while it prepares the engine, as a unit stopped right after it was
// started is: the stop is not lost, the engine is never started (not even for an instant), and
// exec ends at once with 130.
// Its environment credential is a FIFO here, which holds exec in its preparation until the test
// writes the credential, after the SIGTERM.
func TestExecStoppedWhilePreparing(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	credDir := filepath.Join(dir, "credentials")
	if err := os.Mkdir(credDir, 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(credDir, credentials.Env)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The engine is a script: the kernel opens it to start it, which an inotify watch sees even
	// if the stop then ends the engine before its first command.
	engineScript := filepath.Join(dir, "engine")
	if err := os.WriteFile(engineScript, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	watch, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(watch)
	if _, err := unix.InotifyAddWatch(watch, engineScript, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.HoldfastBinary(t), "exec", "--run", "00000000-0000-0000-0000-000000000001", "--attempt", "1",
		"--journal", filepath.Join(dir, "journal"), "--engine", "command", "--env-credential", "--", engineScript)
	// main writes stopAck once its context ended at the SIGTERM (HOLDFAST_TEST_STOP_ACK, a test
	// hook of cmd/holdfast/main.go).
	stopAck := filepath.Join(dir, "stop-ack")
	cmd.Env = append(os.Environ(), credentials.DirVariable+"="+credDir, "HOLDFAST_TEST_STOP_ACK="+stopAck)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = exec.Command("pkill", "-KILL", "-P", strconv.Itoa(cmd.Process.Pid)).Run()
		_ = cmd.Process.Kill()
	})
	// Blocked opening the FIFO: main has long caught SIGTERM, exec has not started the engine.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if openingFIFO(cmd.Process.Pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("holdfast exec never opened its credential")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The Go runtime hands a signal on to the program a moment after the kernel delivered it:
	// a stop in the same instant as the engine's start reaches the engine instead (it is
	// stopped at once). The case here is a stop that came first, so the credential is written
	// only once the program took the signal.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(stopAck); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("holdfast exec never took its SIGTERM")
		}
	}
	if err := os.WriteFile(fifo, []byte("A=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("holdfast exec still runs 30s after its SIGTERM: the stop was lost and the engine runs")
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("holdfast exec stopped while preparing: exit status %d, want 130", code)
	}
	events := make([]byte, 4096)
	if n, err := unix.Read(watch, events); n > 0 || err != unix.EAGAIN {
		t.Fatalf("the engine was started after the stop (its script was opened: %d bytes of events, %v)", n, err)
	}
}

// openingFIFO reports whether a thread of process pid waits in open(2) for a FIFO's other end.
func openingFIFO(pid int) bool {
	wchans, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
	for _, path := range wchans {
		if w, _ := os.ReadFile(path); strings.Contains(string(w), "wait_for_partner") {
			return true
		}
	}
	return false
}
