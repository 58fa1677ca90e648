// Command holdfast-demo runs one backup through a throwaway holdfast
// installation, as `make demo` does.
//
// It starts a private PostgreSQL 15 server and a private systemd user manager
// with its own journald (package testenv), writes a sample directory of random
// data and a restic repository, and then drives the real holdfast binary as an
// operator would, printing each command before it runs it: migrate, job add,
// the daemon in the background, run start --wait (with progress), run list,
// run show, run logs, and restic snapshots. At the end, or on Ctrl-C, it stops
// the daemon, the manager and PostgreSQL, in that order. Everything lives in
// one directory, HOLDFAST_DEMO_DIR (default /tmp/holdfast-demo), which is
// wiped at the start and kept at the end.
//
// Usage:
//
//	holdfast-demo [--holdfast ./bin/holdfast] [--keep]
//
// With --keep, the services stay up after the backup, and holdfast-demo
// prints the settings and commands to go on exploring from another shell,
// until it is interrupted. It needs root.
package main

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

const (
	jobName     = "sample"
	sampleFiles = 40
	logLines    = 15
	lockName    = ".holdfast-demo" // marks a directory as the demo's, and locks it while a demo runs
)

// The demo's children get a parent-death signal (Pdeathsig), which Linux sends when the thread
// that forked them ends, not the process. Go ends threads (one whose goroutine exited locked to
// it, as testenv's do), so the main goroutine, which starts every child, keeps the main thread,
// which lives as long as the process.
func init() { runtime.LockOSThread() }

func main() {
	bin := flag.String("holdfast", "./bin/holdfast", "holdfast binary to run")
	keep := flag.Bool("keep", false, "leave everything running after the backup, until interrupted")
	sampleMiB := flag.Int("sample-size", 300, "MiB of random sample data to back up")
	pgbouncer := flag.Bool("pgbouncer", os.Getenv(testenv.PooledEnv) == "1",
		"put a private PgBouncer in transaction mode between holdfast and PostgreSQL (default from HOLDFAST_TEST_PGBOUNCER=1)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "holdfast-demo: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	dir := os.Getenv("HOLDFAST_DEMO_DIR")
	if dir == "" {
		dir = "/tmp/holdfast-demo"
	}
	// holdfast refuses a relative --state-dir, and units do not run in this directory.
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}

	// The first Ctrl-C cancels ctx; further ones are swallowed until the
	// teardown is done, so it cannot be cut short.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	start := time.Now()
	d := &demo{keep: *keep, sampleSize: int64(max(*sampleMiB, 1)) << 20, pooled: *pgbouncer}
	err := d.run(ctx, dir, *bin)
	if d.running() {
		fmt.Println("\n==> stopping the holdfast daemon, the systemd manager and PostgreSQL")
	}
	err = errors.Join(err, d.teardown())
	if err != nil {
		msg := err.Error()
		// The step and first line last, so the final line says what failed.
		if first, rest, ok := strings.Cut(msg, "\n"); ok {
			fmt.Fprintln(os.Stderr, rest)
			msg = first
		}
		fmt.Fprintf(os.Stderr, "holdfast-demo: %s\n", msg)
		if ctx.Err() != nil {
			os.Exit(130) // as a shell reports an interrupted command
		}
		os.Exit(1)
	}
	fmt.Printf("==> demo done in %.1fs; its files stay in %s\n", time.Since(start).Seconds(), d.dir)
}

// demo is one run of the demo and what it started.
type demo struct {
	keep       bool
	sampleSize int64
	pooled     bool // behind a private PgBouncer (docs/ARCHITECTURE.md, Behind PgBouncer)

	dir      string // the demo directory
	bin      string // absolute path of the holdfast binary
	sample   string // the directory backed up
	repo     string // the restic repository
	password string // its password file
	env      []string
	exports  []string // the holdfast settings, as NAME=value

	lock   *os.File
	pg     *testenv.PostgresServer
	pooler *testenv.PgBouncer
	mgr    *testenv.Manager
	daemon *daemon
}

type step struct {
	name string
	fn   func(context.Context) error
}

func (d *demo) run(ctx context.Context, dir, bin string) error {
	var err error
	if d.dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	if d.bin, err = filepath.Abs(bin); err != nil {
		return err
	}
	d.sample = filepath.Join(d.dir, "sample")
	d.repo = filepath.Join(d.dir, "repo")
	d.password = filepath.Join(d.dir, "repo.password")
	steps := []step{
		{"check prerequisites", d.check},
		{"prepare " + d.dir, d.prepare},
		{"start PostgreSQL", d.startPostgres},
		{"start the systemd manager", d.startManager},
		{"write sample data", d.writeSample},
		{"restic init", d.initRepo},
		{"holdfast migrate", d.cli("migrate")},
		{"holdfast job add", d.cli("job", "add", jobName, "--repo", d.repo, "--password-file", d.password,
			"--path", d.sample, "--exclude", "*.tmp")},
		{"start holdfast daemon", d.startDaemon},
		{"back up " + d.sample, d.backup},
		{"restic snapshots", d.restic("snapshots")},
	}
	if d.keep {
		steps = append(steps, step{"keep running", d.wait})
	}
	for _, s := range steps {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: interrupted", s.name)
		}
		if err := s.fn(ctx); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%s: interrupted", s.name)
			}
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

func (d *demo) check(context.Context) error {
	if os.Geteuid() != 0 {
		return errors.New("run it as root: the private systemd manager mounts in a mount namespace of its own")
	}
	if _, err := os.Stat(d.bin); err != nil {
		return fmt.Errorf("holdfast binary: %w (make build makes it)", err)
	}
	if _, err := exec.LookPath("restic"); err != nil {
		return fmt.Errorf("%w (scripts/install-deps installs it)", err)
	}
	return nil
}

// prepare empties the demo directory, creating it if needed.
func (d *demo) prepare(context.Context) error {
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return err
	}
	lockPath := filepath.Join(d.dir, lockName)
	if _, err := os.Stat(lockPath); len(ents) > 0 && err != nil {
		return fmt.Errorf("%s is not empty and has no %s: not wiping a directory the demo did not make; set HOLDFAST_DEMO_DIR", d.dir, lockName)
	}
	if d.lock, err = os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return err
	}
	// A demo still running with --keep holds the lock: wiping would pull
	// PostgreSQL's data from under it.
	if err := syscall.Flock(int(d.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("another holdfast-demo is using %s (it holds a lock on %s); stop it first", d.dir, lockPath)
	}
	for _, e := range ents {
		if e.Name() != lockName {
			if err := os.RemoveAll(filepath.Join(d.dir, e.Name())); err != nil {
				return err
			}
		}
	}
	// PostgreSQL runs as postgres and units may run as nobody.
	return os.Chmod(d.dir, 0o755)
}

func (d *demo) startPostgres(ctx context.Context) error {
	dir := filepath.Join(d.dir, "postgres")
	fmt.Printf("==> starting a private PostgreSQL 15 in %s\n", dir)
	pg, err := testenv.StartPostgresServer(dir)
	if err != nil {
		return err
	}
	d.pg = pg
	if err := pg.CreateDatabase(ctx, "holdfast"); err != nil {
		return err
	}
	if !d.pooled {
		d.exports = append(d.exports, "HOLDFAST_DSN="+pg.DSN("holdfast"))
		return nil
	}
	fmt.Printf("==> starting a private PgBouncer in transaction mode in front of it\n")
	if d.pooler, err = testenv.StartPgBouncer(filepath.Join(d.dir, "pgbouncer"), pg.DSN("holdfast")); err != nil {
		return err
	}
	d.exports = append(d.exports, "HOLDFAST_DSN="+d.pooler.DSN("holdfast", "postgres"), "HOLDFAST_SESSION_DSN="+pg.DSN("holdfast"))
	return nil
}

func (d *demo) startManager(context.Context) error {
	dir := filepath.Join(d.dir, "systemd")
	fmt.Printf("==> starting a private systemd --user manager with its own journald in %s\n", dir)
	mgr, err := testenv.StartManager(dir)
	if err != nil {
		return err
	}
	d.mgr = mgr
	d.exports = append(d.exports,
		"HOLDFAST_SYSTEMD=user",
		"HOLDFAST_SYSTEMD_ADDRESS="+mgr.Address,
		"HOLDFAST_STATE_DIR="+filepath.Join(d.dir, "state"),
		"HOLDFAST_JOURNAL_DIR="+mgr.JournalDir,
		"HOLDFAST_ENV_FILE=/dev/null", // not the settings of a holdfast installed on this machine
	)
	// mgr.Env lets systemctl --user reach the manager.
	d.exports = append(d.exports, mgr.Env()...)
	d.env = append(os.Environ(), d.exports...)
	return nil
}

// writeSample writes sampleFiles files of random data, about d.sampleSize
// bytes in all: by default enough for the backup to take a few seconds.
// Two small ones match the job's exclude pattern.
func (d *demo) writeSample(ctx context.Context) error {
	var seed [32]byte
	crand.Read(seed[:])
	rng := rand.NewChaCha8(seed)
	sizes := rand.New(rng)
	buf := make([]byte, 1<<20)
	var total int64
	start := time.Now()
	for i := range sampleFiles {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := filepath.Join([]string{"documents", "photos", "projects", "music"}[i%4], fmt.Sprintf("file-%02d.dat", i))
		avg := d.sampleSize / (sampleFiles - 2)
		size := avg/2 + sizes.Int64N(avg+1) // avg ± 50%
		if i%20 == 19 {
			name = fmt.Sprintf("scratch-%02d.tmp", i)
			size = 1 << 20
		}
		path := filepath.Join(d.sample, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := writeRandom(path, size, rng, buf); err != nil {
			return err
		}
		total += size
	}
	fmt.Printf("==> wrote %d files of random data (%d MiB) to %s in %.1fs\n",
		sampleFiles, total>>20, d.sample, time.Since(start).Seconds())
	return nil
}

func writeRandom(path string, size int64, r io.Reader, buf []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(f, io.LimitReader(r, size), buf); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (d *demo) initRepo(ctx context.Context) error {
	pw := make([]byte, 16)
	crand.Read(pw)
	if err := os.WriteFile(d.password, []byte(hex.EncodeToString(pw)+"\n"), 0o600); err != nil {
		return err
	}
	return d.restic("init")(ctx)
}

// restic returns a step that runs restic on the demo's repository.
func (d *demo) restic(args ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		argv := append([]string{"restic", "--repo", d.repo, "--password-file", d.password, "--no-cache"}, args...)
		return d.command(ctx, os.Stdout, argv...)
	}
}

// cli returns a step that runs the holdfast CLI.
func (d *demo) cli(args ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		return d.holdfast(ctx, os.Stdout, args...)
	}
}

func (d *demo) holdfast(ctx context.Context, stdout io.Writer, args ...string) error {
	return d.command(ctx, stdout, append([]string{"holdfast"}, args...)...)
}

// command prints argv as a shell command line and runs it, with stderr on
// the terminal.
func (d *demo) command(ctx context.Context, stdout io.Writer, argv ...string) error {
	fmt.Printf("\n$ %s\n", shellJoin(argv))
	if err := d.newCmd(ctx, stdout, argv...).Run(); err != nil {
		return fmt.Errorf("%s: %w", argv[0], err)
	}
	return nil
}

// newCmd returns argv, holdfast being the demo's binary, set up to run with
// the demo's settings and stderr on the terminal.
func (d *demo) newCmd(ctx context.Context, stdout io.Writer, argv ...string) *exec.Cmd {
	path := argv[0]
	if path == "holdfast" {
		path = d.bin
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Env = d.env
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	// Out of the terminal's process group, so that Ctrl-C reaches the demo
	// alone, which passes it on: the step then reliably ends as interrupted,
	// and the command as it would at the terminal. Pdeathsig: see startDaemon.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// daemon is the `holdfast daemon` running in the background.
type daemon struct {
	cmd    *exec.Cmd
	log    string
	notify *net.UnixConn // the daemon's NOTIFY_SOCKET, read as a service manager would
	done   chan struct{} // closed when it has exited
	err    error         // its exit, once done is closed
}

// readyTimeout bounds the wait for the daemon's first pass: generous, for a loaded machine.
const readyTimeout = 2 * time.Minute

// startDaemon starts the daemon and returns once it says READY=1 (sd_notify(3)): by then it
// holds its host's lease and has ended its first pass, so `run start --wait` finds a live
// daemon. A daemon that exits first is reported with its log's last line.
func (d *demo) startDaemon(ctx context.Context) error {
	argv := []string{"holdfast", "daemon", "--sweep-interval", "1s"}
	logPath := filepath.Join(d.dir, "daemon.log")
	fmt.Printf("\n$ %s >%s 2>&1 &\n", shellJoin(argv), shellQuote(logPath))
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	sock := filepath.Join(d.dir, "daemon.notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify socket: %w", err)
	}
	cmd := exec.Command(d.bin, argv[1:]...)
	cmd.Env = append(d.env, "NOTIFY_SOCKET="+sock)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Out of the terminal's process group: Ctrl-C reaches the demo,
		// which stops the daemon before the services it uses.
		Setpgid: true,
		// Should the demo be killed, the daemon goes too (see init).
		Pdeathsig: syscall.SIGTERM,
	}
	if err := cmd.Start(); err != nil {
		notify.Close()
		return err
	}
	dm := &daemon{cmd: cmd, log: logPath, notify: notify, done: make(chan struct{})}
	d.daemon = dm
	go func() {
		dm.err = cmd.Wait()
		close(dm.done)
	}()
	ready := make(chan string, 1)
	go dm.readNotifications(ready)
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case status := <-ready:
		fmt.Printf("==> the daemon is ready: %s\n", status)
		return nil
	case <-dm.done:
		return dm.exited()
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fmt.Errorf("holdfast daemon not ready after %v; its last log line: %s", readyTimeout, lastLine(dm.log))
	}
}

// readNotifications reads the daemon's notifications until the socket is closed, sending the
// status that came with READY=1 on ready. It keeps reading after that: a receiver that stops
// would in the end block the daemon's next notification.
func (dm *daemon) readNotifications(ready chan<- string) {
	buf := make([]byte, 4096)
	for {
		n, err := dm.notify.Read(buf)
		if err != nil {
			return
		}
		var isReady bool
		var status string
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			isReady = isReady || line == "READY=1"
			if s, ok := strings.CutPrefix(line, "STATUS="); ok {
				status = s
			}
		}
		if isReady {
			select {
			case ready <- status:
			default:
			}
		}
	}
}

// exited describes the daemon's exit, with the last line of its log.
func (dm *daemon) exited() error {
	return fmt.Errorf("holdfast daemon exited (%v); its last log line: %s", dm.err, lastLine(dm.log))
}

// lastLine returns the last non-empty line of the file at path.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if last := lines[len(lines)-1]; last != "" {
		return last
	}
	return "(the log is empty)"
}

// stop ends the daemon with SIGTERM, as systemd would.
func (dm *daemon) stop() error {
	defer dm.notify.Close()
	select {
	case <-dm.done:
		return nil // its exit was reported when it happened
	default:
	}
	dm.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-dm.done:
		return dm.err
	case <-time.After(15 * time.Second):
		dm.cmd.Process.Kill()
		<-dm.done
		return errors.New("did not stop within 15s of SIGTERM; killed")
	}
}

// runOut is what the demo reads of `holdfast run list --json`.
type runOut struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// backup runs the job, waiting for the run with progress, and shows the
// run as an operator would look at it.
func (d *demo) backup(ctx context.Context) error {
	// Without the daemon nothing would end the wait: stop waiting if it exits.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-d.daemon.done:
			cancel(d.daemon.exited())
		case <-ctx.Done():
		}
	}()
	err := d.holdfast(ctx, os.Stdout, "run", "start", jobName, "--wait")
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if s, ok := map[int]string{3: "partial", 4: "failed", 5: "stopped", 6: "paused"}[exit.ExitCode()]; ok {
			return fmt.Errorf("the run ended %s, not succeeded (see %s)", s, d.daemon.log)
		}
	}
	if err != nil {
		return err
	}

	// The run's id, from the listing meant for scripts.
	var out bytes.Buffer
	if err := d.newCmd(ctx, &out, "holdfast", "run", "list", "--job", jobName, "--limit", "1", "--json").Run(); err != nil {
		return fmt.Errorf("holdfast run list --json: %w", err)
	}
	var runs []runOut
	if err := json.Unmarshal(out.Bytes(), &runs); err != nil || len(runs) == 0 {
		return fmt.Errorf("holdfast run list --json: no run in %q", out.String())
	}
	run := runs[0]
	if run.Status != "succeeded" {
		return fmt.Errorf("run %s ended %s: %s", run.ID, run.Status, run.Reason)
	}
	id := run.ID[:min(8, len(run.ID))] // a unique prefix is enough

	if err := d.holdfast(ctx, os.Stdout, "run", "list"); err != nil {
		return err
	}
	if err := d.holdfast(ctx, os.Stdout, "run", "show", id); err != nil {
		return err
	}
	if err := d.logsTail(ctx, id); err != nil {
		return err
	}
	// What the run was charged, and what a retention policy would keep: nothing is deleted.
	if err := d.holdfast(ctx, os.Stdout, "ledger", "show", "default", "--limit", "5"); err != nil {
		return err
	}
	return d.holdfast(ctx, os.Stdout, "retention", "plan", jobName, "--preset", "7d")
}

// logsTail shows the last lines of the run's logs.
func (d *demo) logsTail(ctx context.Context, id string) error {
	fmt.Printf("\n$ holdfast run logs %s | tail -n %d\n", id, logLines)
	var out bytes.Buffer
	if err := d.newCmd(ctx, &out, "holdfast", "run", "logs", id).Run(); err != nil {
		return fmt.Errorf("holdfast run logs: %w", err)
	}
	var lines []string
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for _, l := range lines[max(0, len(lines)-logLines):] {
		fmt.Println(l)
	}
	return nil
}

// wait prints how to go on from another shell and waits for an interrupt.
func (d *demo) wait(ctx context.Context) error {
	fmt.Printf("\n==> everything is still running. In another shell, as root:\n\n")
	fmt.Printf("export PATH=%s:\"$PATH\"\n", shellQuote(filepath.Dir(d.bin)))
	for _, kv := range d.exports {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Printf("export %s=%s\n", k, shellQuote(v))
	}
	fmt.Printf(`
holdfast run start %[1]s --wait        # another run: restic adds little this time
holdfast run list
holdfast job show %[1]s
holdfast run logs RUN                  # a prefix of the run id is enough
holdfast ledger show default           # holds and settlements
holdfast retention plan %[1]s --preset gfs   # what a policy keeps, and why
systemctl --user list-units 'holdfast-*'   # the units of live runs
psql "$HOLDFAST_DSN"
restic --repo %[2]s --password-file %[3]s --no-cache snapshots
tail -f %[4]s

==> press Ctrl-C here (or kill -TERM %[5]d) to stop the daemon, the systemd manager and PostgreSQL
`, jobName, shellQuote(d.repo), shellQuote(d.password), shellQuote(d.daemon.log), os.Getpid())
	select {
	case <-ctx.Done():
		fmt.Println()
		return nil
	case <-d.daemon.done:
		return d.daemon.exited()
	}
}

// running reports whether teardown has anything to stop.
func (d *demo) running() bool {
	return d.pg != nil || d.pooler != nil || d.mgr != nil || d.daemon != nil
}

// teardown stops what the demo started, the daemon first: it uses the
// manager and the database.
func (d *demo) teardown() error {
	var errs []error
	if d.daemon != nil {
		if err := d.daemon.stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop holdfast daemon: %w", err))
		}
	}
	if d.mgr != nil {
		if err := d.mgr.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop systemd --user: %w", err))
		}
	}
	if d.pooler != nil {
		d.pooler.Stop()
	}
	if d.pg != nil {
		if err := d.pg.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop PostgreSQL: %w", err))
		}
	}
	if d.lock != nil {
		d.lock.Close()
	}
	return errors.Join(errs...)
}

// shellJoin renders argv as a command line a POSIX shell would split back
// into argv; it is for display only.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("-_./=:,+@%", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
