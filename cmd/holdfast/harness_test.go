package main_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	holdfast "github.com/holdfast-backup/holdfast/cmd/holdfast"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

// world is one holdfast installation for one test: its own database, systemd manager, state
// directory and daemon, all real.
type world struct {
	t          *testing.T
	bin        string
	spawnGrace string // the daemons' --spawn-grace
	daemonEnv  []string
	// daemonFlags are given to every daemon of the world: by default, command jobs may run.
	daemonFlags []string
	dsn         string        // the server's own
	addr        store.Address // what the daemons and commands connect with: dsn, or through PgBouncer (testenv.Pooled)
	mgr         *testenv.Manager
	state       string
	dir         string    // for repositories and sample data, reachable by units running as nobody
	pool        *testPool // the test's own pool for the database: see store
	// binaryCLI runs every command through the binary rather than in the test's process.
	binaryCLI bool
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldWith(t, testenv.HoldfastBinary(t))
}

// newWorldWith uses the given holdfast binary (e.g. one built with crash points).
func newWorldWith(t *testing.T, bin string) *world {
	t.Helper()
	return newWorldOn(t, bin, testenv.SharedSystemd)
}

// newWorldOwnManager is a world with a systemd manager of its own, for a test that stops, kills,
// freezes or re-executes it; the others share one (testenv.SharedSystemd).
func newWorldOwnManager(t *testing.T) *world {
	t.Helper()
	return newWorldOn(t, testenv.HoldfastBinary(t), testenv.PrivateSystemd)
}

func newWorldOn(t *testing.T, bin string, manager func(testing.TB) *testenv.Manager) *world {
	t.Helper()
	// The directory first: cleanups run last-in first-out, so the manager and its units are gone
	// before the files they use are removed.
	// The schema comes migrated: newPrivateWorld's and the booted host's tests run `migrate`.
	w := &world{t: t, bin: bin, dir: testenv.SharedDir(t), dsn: storetest.Migrated(t), spawnGrace: "10s",
		daemonFlags: []string{"--allow-command-jobs"}, pool: newTestPool(t)}
	w.addr.DSN, w.addr.SessionDSN = testenv.Pooled(t, w.dsn)
	w.mgr = manager(t)
	if w.mgr.Shared {
		// After the daemons (their cleanups come later, so run first), before the files go.
		t.Cleanup(w.stopUnits)
	}
	w.state = filepath.Join(w.dir, "state")
	return w
}

// stopUnits stops what is left of the world's units on a shared manager: the units and timers of
// every attempt in its database. It reads them through the test's own pool, closed after it.
func (w *world) stopUnits() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := w.store()
	if st == nil {
		w.t.Errorf("stop the world's units: %v", errNoStore)
		return
	}
	runs, err := st.RunList(ctx, "", 1<<20)
	if err != nil {
		w.t.Errorf("stop the world's units: %v", err)
		return
	}
	var units []string
	for _, r := range runs {
		attempts, err := st.AttemptList(ctx, r.ID)
		if err != nil {
			w.t.Errorf("stop the world's units: %v", err)
			return
		}
		for _, u := range model.UnitNames(attempts) {
			units = append(units, u, systemd.TimerName(u))
		}
	}
	if err := w.mgr.StopUnits(ctx, units); err != nil {
		w.t.Errorf("stop the world's units: %v", err)
	}
}

func (w *world) env() []string {
	env := append(os.Environ(),
		"HOLDFAST_DSN="+w.addr.DSN,
		"HOLDFAST_SESSION_DSN="+w.addr.SessionDSN,
		"HOLDFAST_SYSTEMD=user",
		"HOLDFAST_SYSTEMD_ADDRESS="+w.mgr.Address,
		"HOLDFAST_STATE_DIR="+w.state,
		"HOLDFAST_JOURNAL_DIR="+w.mgr.JournalDir,
		"HOLDFAST_ENV_FILE=/dev/null", // not an installed holdfast's settings
	)
	return append(env, w.mgr.Env()...)
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs a holdfast command and returns what it printed and its exit code. It runs in the
// test's process, as the binary's main runs it, with the world's environment and the test's own
// database pool: a process and a database connection per command were a third of this package's
// CPU. The daemon, the units and binaryCLI worlds run the binary.
func (w *world) run(args ...string) result {
	w.t.Helper()
	return w.runInput("", args...)
}

// runInput is run with stdin as the command's standard input.
func (w *world) runInput(stdin string, args ...string) result {
	w.t.Helper()
	if w.binaryCLI {
		return w.runBinaryInput(stdin, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := w.env()
	getenv := func(key string) string {
		for i := len(env) - 1; i >= 0; i-- { // the last setting wins, as in a process
			if k, v, _ := strings.Cut(env[i], "="); k == key {
				return v
			}
		}
		return ""
	}
	var stdout, stderr bytes.Buffer
	code := holdfast.Execute(ctx, w.bin, args, getenv, strings.NewReader(stdin), &stdout, &stderr, w.openStore)
	return result{stdout.String(), stderr.String(), code}
}

// openStore gives a command run in the test's process the test's own pool for the world's
// database, and a pool of its own for any other.
func (w *world) openStore(ctx context.Context, addr store.Address) (*store.Store, func(), error) {
	if addr == w.addr {
		if st := w.store(); st != nil {
			return st, func() {}, nil
		}
	}
	return holdfast.OpenOwnStore(ctx, addr)
}

// runBinary runs the holdfast binary and returns what it printed and its exit code.
func (w *world) runBinary(args ...string) result {
	w.t.Helper()
	return w.runBinaryInput("", args...)
}

// runBinaryInput is runBinary with stdin as the process's standard input.
func (w *world) runBinaryInput(stdin string, args ...string) result {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bin, args...)
	cmd.Env = w.env()
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	code := 0
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		w.t.Fatalf("holdfast %s: %v", strings.Join(args, " "), err)
	}
	return result{stdout.String(), stderr.String(), code}
}

func (w *world) mustRun(args ...string) string {
	w.t.Helper()
	r := w.run(args...)
	if r.code != 0 {
		w.t.Fatalf("holdfast %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// daemon is a running `holdfast daemon`.
type daemon struct {
	cmd  *exec.Cmd
	log  *logBuffer
	done chan struct{}
}

func (w *world) startDaemon(args ...string) *daemon {
	w.t.Helper()
	return w.startDaemonEnv(nil, args...)
}

// startDaemonEnv starts a daemon with env over the world's environment (another host's manager
// and state directory, say).
func (w *world) startDaemonEnv(env []string, args ...string) *daemon {
	w.t.Helper()
	args = append(append([]string{"daemon", "--spawn-grace", w.spawnGrace}, w.daemonFlags...), args...)
	cmd := exec.Command(w.bin, args...)
	cmd.Env = append(append(w.env(), w.daemonEnv...), env...)
	d := &daemon{cmd: cmd, log: &logBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.log, d.log // one writer: exec copies both through one pipe
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(d.done) }()
	w.t.Cleanup(func() {
		d.kill()
		if w.t.Failed() {
			w.t.Logf("daemon log:\n%s", d.log.String())
		}
	})
	w.awaitLease(d, daemonHost(append(cmd.Env, args...)))
	return d
}

// daemonHost is the host a daemon started with env and args goes by: --host, HOLDFAST_HOST or
// the host name.
func daemonHost(envAndArgs []string) string {
	host, _ := os.Hostname()
	for i, v := range envAndArgs {
		if h, ok := strings.CutPrefix(v, "HOLDFAST_HOST="); ok {
			host = h
		}
		if v == "--host" && i+1 < len(envAndArgs) {
			host = envAndArgs[i+1]
		}
	}
	return host
}

// awaitLease returns once the daemon holds its host's lease (or has exited), as `run start
// --wait` needs a live daemon able to take the run.
func (w *world) awaitLease(d *daemon, host string) {
	w.t.Helper()
	mine := fmt.Sprintf("/%d/", d.cmd.Process.Pid)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return
		default:
		}
		var hosts []model.Host
		if st := w.store(); st != nil {
			hosts, _ = st.HostList(context.Background()) // a test may have stopped PostgreSQL: wait
		}
		for _, h := range hosts {
			if h.Name == host && h.Alive && strings.Contains(h.Holder, mine) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.kill()
	w.t.Fatalf("daemon on host %s did not take its lease within a minute:\n%s", host, d.log.String())
}

// kill SIGKILLs the daemon, as a crash would.
func (d *daemon) kill() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// Backups that must stay in flight while a test acts on them (stops, reboots, restarts) run
// through slowRestic over a few MiB: restic's own --limit-upload keeps each in flight for
// seconds whatever the machine's load, at little CPU, where fast data would need hundreds of MiB.
const (
	slowKiBps  = 512 // a backup that ends by itself: slowData takes about 16s
	stuckKiBps = 16  // a backup the test interrupts: slowData would take over 8 minutes
	slowData   = 8 << 20
)

// slowBackups makes every daemon of the world run restic as slowRestic, at slowKiBps.
func (w *world) slowBackups() {
	w.t.Helper()
	w.daemonFlags = append(w.daemonFlags, "--restic", w.slowRestic())
	w.backupRate(slowKiBps)
}

// backupRate sets what each restic started from now on by slowRestic may write to its
// repository per second; 0 lifts the limit (for the attempts after an interruption).
func (w *world) backupRate(kibps int) {
	w.t.Helper()
	path := filepath.Join(w.dir, "restic-rate")
	if kibps == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(kibps)), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// slowRestic returns the real restic, run with --limit-upload (--limit-download for a restore) at the rate backupRate set when
// it starts, read as the job's user inside the unit. A backup started while holdBackups holds
// them has restic's summary line held back (restic has ended; its run is still in flight: its
// journal has no summary, its unit is active) until the hold is released or the unit is
// stopped; it then exits with restic's status. While it holds one, a file named for the run
// (heldMarker) is in the job's cache directory. SIGINT or SIGTERM (holdfast exec passes the
// unit's stop on as SIGINT) goes on to restic.
func (w *world) slowRestic() string {
	w.t.Helper()
	// bash for read -t: a held summary waits on a FIFO that nothing writes, where sleep 0.1 would
	// start ten processes a second for as long as the test holds it (minutes, in some).
	return w.script("slow-restic", `#!/bin/bash
rate=$(cat RATE 2>/dev/null)
case " $* " in
*" restore "*) exec REAL ${rate:+--limit-download "$rate"} "$@" ;;
*" backup "*) [ -e HOLD ] || exec REAL ${rate:+--limit-upload "$rate"} "$@" ;;
*) exec REAL ${rate:+--limit-upload "$rate"} "$@" ;;
esac
cache= held= prev=
for a; do
	case $prev in --cache-dir) cache=$a ;; --tag) case $a in holdfast-run=*) held=summary-held.${a#holdfast-run=} ;; esac ;; esac
	prev=$a
done
[ -n "$cache" ] && [ -n "$held" ] && held=$cache/$held || held=
out=$(mktemp -d) && mkfifo "$out/stdout" "$out/tick" && exec 4<> "$out/tick" || exit 1
REAL ${rate:+--limit-upload "$rate"} "$@" > "$out/stdout" 4<&- &
pid=$!
trap 'kill -INT $pid 2>/dev/null; stopped=1' INT TERM
exec 3< "$out/stdout"
while :; do
	if IFS= read -r line <&3; then
		case $line in *'"message_type":"summary"'*)
			[ -e HOLD ] && [ -n "$held" ] && : > "$held"
			while [ -z "$stopped" ] && [ -e HOLD ]; do read -r -t 0.1 -u 4; done
			[ -n "$held" ] && rm -f "$held" ;;
		esac
		printf '%s\n' "$line"
	elif [ -n "$stopped" ] && kill -0 $pid 2>/dev/null; then
		continue # a read cut by the stop: restic says the rest
	else
		break
	fi
done
wait $pid
status=$?
while kill -0 $pid 2>/dev/null; do wait $pid; status=$?; done
rm -rf "$out"
exit $status
`, "REAL", testenv.Restic(w.t), "RATE", filepath.Join(w.dir, "restic-rate"), "HOLD", filepath.Join(w.dir, "restic-hold"))
}

// heldMarker names the file slowRestic keeps in a job's cache directory while it holds the
// summary of run id: its holdfast-run tag.
func heldMarker(id string) string { return "summary-held." + id }

// underway reports whether run r's restic is at work, or past it: it reported progress, slowRestic
// holds its summary, or the run ended. A backup that fast may print no status line before its
// summary (restic 0.19).
func (w *world) underway(r runJSON) bool {
	if r.Progress != nil || ended(r) {
		return true
	}
	held, err := filepath.Glob(filepath.Join(w.dir, "state*", "cache", "*", "*", heldMarker(r.ID)))
	if err != nil {
		w.t.Fatal(err)
	}
	return len(held) > 0
}

// holdBackups holds back the summary of every backup that slowRestic starts from now on, until
// release: a run the test needs in flight across some disruption is then in flight, by cause,
// however fast restic was, and still ends by itself, with restic's figures.
func (w *world) holdBackups() (release func()) {
	w.t.Helper()
	path := filepath.Join(w.dir, "restic-hold")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		w.t.Fatal(err)
	}
	return func() {
		w.t.Helper()
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.t.Fatal(err)
		}
	}
}

// resticRepo creates a restic repository and its password file, readable by the job's user.
func (w *world) resticRepo(name string) (repo, passwordFile string) {
	w.t.Helper()
	repo = filepath.Join(w.dir, name)
	passwordFile = filepath.Join(w.dir, name+".password")
	if err := os.WriteFile(passwordFile, []byte(testenv.ResticPassword+"\n"), 0o644); err != nil {
		w.t.Fatal(err)
	}
	testenv.ResticRepo(w.t, repo)
	return repo, passwordFile
}

func (w *world) restic(repo, passwordFile string, args ...string) string {
	w.t.Helper()
	argv := append([]string{"--repo", repo, "--password-file", passwordFile, "--no-cache"}, args...)
	out, err := exec.Command("restic", argv...).CombinedOutput()
	if err != nil {
		w.t.Fatalf("restic %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// openToAll lets units running as another user read and write the repository.
func openToAll(t *testing.T, root string) {
	t.Helper()
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o666)
		if info.IsDir() {
			mode = 0o777
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// closeToOthers takes back what openToAll gave: the group's and others' write, which a unit
// writing as root refuses in a path it writes.
func closeToOthers(t *testing.T, root string) {
	t.Helper()
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, info.Mode().Perm()&^0o022)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sampleData writes files of random bytes, total about size bytes, under a new directory.
func (w *world) sampleData(name string, files int, size int64) string {
	w.t.Helper()
	dir := filepath.Join(w.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range files {
		f, err := os.Create(filepath.Join(dir, "file-"+string(rune('a'+i%26))+"-"+strings.Repeat("x", i/26)))
		if err != nil {
			w.t.Fatal(err)
		}
		for left := size / int64(files); left > 0; left -= int64(len(buf)) {
			n := min(left, int64(len(buf)))
			_, _ = rand.Read(buf[:n])
			if _, err := f.Write(buf[:n]); err != nil {
				w.t.Fatal(err)
			}
		}
		if err := f.Chmod(0o644); err != nil {
			w.t.Fatal(err)
		}
		f.Close()
	}
	return dir
}

type runJSON struct {
	ID             string  `json:"id"`
	Job            string  `json:"job"`
	Status         string  `json:"status"`
	PausedReason   string  `json:"paused_reason"`
	WaitingReason  string  `json:"waiting_reason"`
	Reason         string  `json:"reason"`
	BudgetBytes    *int64  `json:"budget_bytes"`
	HoldBytes      int64   `json:"hold_bytes"`
	SettledBytes   int64   `json:"settled_bytes"`
	FailureClass   string  `json:"failure_class"`
	SnapshotID     string  `json:"snapshot_id"`
	BytesAdded     *int64  `json:"bytes_added"`
	FilesProcessed *int64  `json:"files_processed"`
	FilesSkipped   int64   `json:"files_skipped"`
	StopRequested  *string `json:"stop_requested_at"`
	FinishedAt     *string `json:"finished_at"`
	Progress       *struct {
		PercentDone float64 `json:"percent_done"`
		BytesDone   int64   `json:"bytes_done"`
	} `json:"progress"`
	Attempts []struct {
		Attempt          int    `json:"attempt"`
		Unit             string `json:"unit"`
		BootID           string `json:"boot_id"`
		SpawnedAt        string `json:"spawned_at"`
		StalledAt        string `json:"stalled_at"`
		ServiceResult    string `json:"service_result"`
		ExitCode         string `json:"exit_code"`
		ExitStatus       string `json:"exit_status"`
		QuarantineReason string `json:"quarantine_reason"`
		HoldNote         string `json:"hold_note"`
		ResticVersion    string `json:"restic_version"`
		SettleDeferred   string `json:"settle_deferred"`
		Settlement       string `json:"settlement"`
	} `json:"attempts"`
}

func (w *world) show(id string) runJSON {
	w.t.Helper()
	var r runJSON
	if err := json.Unmarshal([]byte(w.mustRun("run", "show", id, "--json")), &r); err != nil {
		w.t.Fatal(err)
	}
	return r
}

// startRun admits a run without waiting and returns its id.
func (w *world) startRun(job string) string {
	w.t.Helper()
	var r runJSON
	if err := json.Unmarshal([]byte(w.mustRun("run", "start", job, "--json")), &r); err != nil {
		w.t.Fatal(err)
	}
	return r.ID
}

// waitRun polls until cond holds for the run as `run show --json` shows it, or fails the test.
func (w *world) waitRun(id string, what string, cond func(runJSON) bool) runJSON {
	w.t.Helper()
	return await(w.t, "run "+id+": "+what, func() string { return w.runFingerprint(id) }, func() runJSON { return w.show(id) }, cond)
}

// waitEnd waits until the run is final and returns it as `run show --json` shows it. The store,
// read in this process, says when: `run show` runs once the record is final, or every five
// seconds while the store cannot be read (a database restarted or frozen under the test).
func (w *world) waitEnd(id string) runJSON {
	w.t.Helper()
	uid, err := uuid.Parse(id)
	if err != nil {
		w.t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	var shown time.Time
	var last runJSON
	for {
		live, err := w.storeLive(uid)
		if err == nil && !live || err != nil && time.Since(shown) >= 5*time.Second {
			shown = time.Now()
			if last = w.show(id); ended(last) {
				return last
			}
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("run %s: the end: timed out; last: %+v", id, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// errNoStore is the test's own reader of the database failing to open.
var errNoStore = errors.New("the database cannot be opened now")

// storeRuns reads the job's runs ("" for every job's), newest first, as the store does in this
// process: a `run list` is a process and a database connection each time.
func (w *world) storeRuns(job string) ([]model.Run, error) {
	st := w.store()
	if st == nil {
		return nil, errNoStore
	}
	// Generous, for a thousand runs read on a loaded machine, maybe over a connection opened
	// anew; short enough that a poll of a frozen database fails and is tried again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return st.RunList(ctx, job, 1000)
}

// storeLive reports whether the store reads the run as queued or running.
func (w *world) storeLive(id uuid.UUID) (bool, error) {
	st := w.store()
	if st == nil {
		return false, errNoStore
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	run, err := st.RunGet(ctx, id)
	if err != nil {
		return false, err
	}
	return model.Live(run.Status), nil
}

// await polls until cond holds for what show (a holdfast command) prints, or fails the test
// after three minutes. show runs when fingerprint (the store's view of the same records, read
// in this process) changed, or five seconds after the last time: each command is a process and
// a database connection, and the machine's two cores are shared by six waiting tests.
func await[T any](t *testing.T, what string, fingerprint func() string, show func() T, cond func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var seen string
	var shown time.Time
	var last T
	for {
		if fp := fingerprint(); fp == "" || fp != seen || time.Since(shown) >= 5*time.Second {
			seen, shown = fp, time.Now()
			if last = show(); cond(last) {
				return last
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out; last: %+v", what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// testPool is a world's own pool for its database, shared by its subtests' copies of it.
type testPool struct {
	mu     sync.Mutex
	st     *store.Store
	closed bool
}

// newTestPool is a pool closed when t ends. Made with the world, before the cleanups that use
// it (stopUnits), it is closed after them.
func newTestPool(t *testing.T) *testPool {
	p := &testPool{}
	t.Cleanup(p.close)
	return p
}

func (p *testPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st != nil {
		p.st.Close()
	}
	p.closed = true
}

// store is the test's own pool for the world's database, opened on first use; nil if it
// cannot be opened now.
func (w *world) store() *store.Store {
	p := w.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st == nil && !p.closed {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := store.Connect(ctx, w.addr)
		if err != nil {
			return nil
		}
		p.st = st
	}
	return p.st
}

// runFingerprint is the run's record and its attempts' as the store reads them, progress only
// as whether there is some; "" if they could not be read.
func (w *world) runFingerprint(id string) string {
	st := w.store()
	if st == nil {
		return ""
	}
	return runFingerprint(st, id)
}

// runFingerprint is the run's record and its attempts' as st reads them ("" if it cannot).
func runFingerprint(st *store.Store, id string) string {
	uid, err := uuid.Parse(id)
	if err != nil {
		return ""
	}
	// A database that is restarted or frozen under the test answers late or not at all.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	run, err := st.RunGet(ctx, uid)
	if err != nil {
		return ""
	}
	attempts, err := st.AttemptList(ctx, uid)
	if err != nil {
		return ""
	}
	for i, a := range attempts {
		if a.Progress != nil {
			attempts[i].Progress = &model.Progress{BytesDone: min(a.Progress.BytesDone, 1)}
		}
		attempts[i].Cursor, attempts[i].LastEventAt = journal.Cursor{}, nil
	}
	fp, err := json.Marshal([]any{run, attempts})
	if err != nil {
		return ""
	}
	return string(fp)
}

func ended(r runJSON) bool { return r.Status != "queued" && r.Status != "running" }

// checkInvariants fails the test if `holdfast check` finds a violated invariant.
func (w *world) checkInvariants() {
	w.t.Helper()
	if r := w.run("check"); r.code != 0 {
		w.t.Fatalf("invariants violated:\n%s%s", r.stdout, r.stderr)
	}
}

// staleLocksCleared runs `restic unlock` until no lock is left, as the next backup's
// ExecStartPre would, and fails the test if one stays for a minute.
func (w *world) staleLocksCleared(repo, pw string) {
	w.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		w.restic(repo, pw, "unlock")
		locks := strings.TrimSpace(w.restic(repo, pw, "list", "locks"))
		if locks == "" {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("a lock in %s is not stale to restic after a minute: %q", repo, locks)
		}
		time.Sleep(time.Second)
	}
}

// noLocks fails the test if the local repository holds a lock file: what `restic list locks`
// lists, read without starting restic.
func (w *world) noLocks(repo string) {
	w.t.Helper()
	if n := lockFiles(repo); n > 0 {
		w.t.Fatalf("restic left %d lock(s) in %s", n, repo)
	}
}
