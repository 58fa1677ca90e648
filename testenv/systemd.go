package testenv

import (
	"bufio"
	"context"
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

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

const (
	systemdPath  = "/lib/systemd/systemd"
	journaldPath = "/lib/systemd/systemd-journald"

	hostAddress = "unix:path=/run/systemd/private"

	readyTimeout = 20 * time.Second
	// exitTimeout exceeds the manager's DefaultTimeoutStopSec (90s), after
	// which systemd kills a unit that ignores its stop signal.
	exitTimeout    = 100 * time.Second
	cleanupTimeout = 15 * time.Second
)

// managerScript runs inside a private mount namespace and becomes the
// manager. $1 is the directory that holds the journal, the other arguments
// are the manager's cgroups (see cgroup.go). A user manager refuses to
// start without /run/systemd/system; the tmpfs keeps the manager's
// /run/systemd (journald's sockets among it) apart from other managers, the
// bind mount keeps its journal apart and readable from outside, also after
// the manager is gone. journald's pid goes to fd 3; journald dies with the
// manager (pdeathsig). Without --log-target a user manager logs nowhere.
const managerScript = `set -eu
journal=$1
shift
for cg in "$@"; do
	echo "$$" >"$cg/cgroup.procs"
done
mount -t tmpfs -o mode=0755 tmpfs /run/systemd
mkdir /run/systemd/system
mount --bind "$journal" /run/log
if [ -d /var/log/journal ]; then mount -t tmpfs -o mode=0755 tmpfs /var/log/journal; fi
setpriv --pdeathsig TERM ` + journaldPath + ` </dev/null 3>&- &
echo "$!" >&3
exec 3>&-
i=0
while [ ! -S /run/systemd/journal/stdout ]; do
	i=$((i + 1))
	if [ "$i" -gt 1000 ]; then
		echo "testenv: systemd-journald did not create its sockets" >&2
		exit 1
	fi
	sleep 0.01
done
exec ` + systemdPath + ` --user --log-target=journal
`

// Manager is a running systemd manager that tests can launch transient
// units on.
//
// A private manager is a `systemd --user` running as root, so units may
// set User=. Its cgroup root is a subtree of its own: a unit's
// ControlGroup reads /holdfast-testenv-<pid>-<random>.slice/app.slice/<unit>.
// In its journal, unit output carries _SYSTEMD_UNIT=<unit> and
// SYSLOG_IDENTIFIER, the manager's own messages about a unit carry
// USER_UNIT=<unit>. Lines of a process that exits at once can lack
// _SYSTEMD_UNIT (journald reads the metadata too late), so match
// SYSLOG_IDENTIFIER (set SyslogIdentifier=) where that matters.
type Manager struct {
	RuntimeDir string // XDG_RUNTIME_DIR of the manager ("" for the host's system manager)
	Address    string // D-Bus address of the manager's private socket (peer to peer: no Hello)
	JournalDir string // directory for journalctl --directory ("" = host journal); kept across Exit, Kill and Start
	Private    bool   // true when testenv started it
	// Shared is true for the manager of SharedSystemd, which other tests use at the same time:
	// what would stop, kill, freeze or re-execute it is refused.
	Shared bool

	dir     string         // holds RuntimeDir, the journal and the manager's output
	logPath string         // the manager's and journald's stdout and stderr
	cgroup  *cgroupSubtree // the manager's cgroup root

	mu   sync.Mutex
	inst *instance // nil while stopped
}

// instance is one run of a private manager.
type instance struct {
	proc     *child // unshare, which execs sh, which execs systemd: proc's pid is the manager's
	journald int
	cgroup   *cgroupSubtree
}

// live private managers, stopped by RunMain if a test leaked one
var managers = struct {
	sync.Mutex
	set map[*Manager]struct{}
}{set: make(map[*Manager]struct{})}

// Systemd returns a systemd manager for the test. Normally that is a fresh
// private `systemd --user` with its own journald (see PrivateSystemd). With
// HOLDFAST_TEST_SYSTEMD=host it is the host's system manager if that is
// usable (PID 1 is systemd and /run/systemd/private accepts connections).
func Systemd(t testing.TB) *Manager {
	t.Helper()
	switch v := os.Getenv("HOLDFAST_TEST_SYSTEMD"); v {
	case "":
	case "host":
		if err := hostUsable(); err != nil {
			t.Logf("testenv: HOLDFAST_TEST_SYSTEMD=host, but the host's system manager is not usable (%v); starting a private one", err)
			break
		}
		return &Manager{Address: hostAddress}
	default:
		t.Fatalf("testenv: HOLDFAST_TEST_SYSTEMD=%q: want empty or \"host\"", v)
	}
	return PrivateSystemd(t)
}

func hostUsable() error {
	comm, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		return err
	}
	if c := strings.TrimSpace(string(comm)); c != "systemd" {
		return fmt.Errorf("PID 1 is %s, not systemd", c)
	}
	if fi, err := os.Stat("/run/systemd/system"); err != nil || !fi.IsDir() {
		return errors.New("/run/systemd/system is not a directory")
	}
	conn, err := dialPrivate(context.Background(), hostAddress)
	if err != nil {
		return err
	}
	return conn.Close()
}

// PrivateSystemd starts a private `systemd --user` with its own journald in
// its own mount namespace (see StartManager), for tests that kill or restart
// the manager. It is stopped at t.Cleanup: gracefully, and killed if that
// does not work. It needs root.
func PrivateSystemd(t testing.TB) *Manager {
	t.Helper()
	dir, err := os.MkdirTemp("", "holdfast-systemd-*")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	m, err := StartManager(dir)
	if err != nil {
		os.RemoveAll(dir)
		var u *unavailableError
		if errors.As(err, &u) {
			unavailable(t, "%s", u.msg)
		}
		t.Fatalf("testenv: %v", err)
	}
	managers.Lock()
	managers.set[m] = struct{}{}
	managers.Unlock()
	t.Cleanup(func() {
		if err := m.teardown(); err != nil {
			t.Errorf("testenv: stop systemd manager: %v", err)
		}
	})
	return m
}

// shared is the manager of SharedSystemd, started once per test binary.
var shared struct {
	once sync.Once
	m    *Manager
	err  error
}

// SharedSystemd returns a private `systemd --user` that every test of the test binary shares,
// started at the first call and stopped by RunMain: for tests that only start and stop their own
// units, which saves each a manager and a journald of its own. Unit names are unique across
// tests (they carry run ids), so the tests do not meet; a test stops its units itself when it
// ends (StopUnits). Exit, Kill, Start, Freeze and systemctl verbs that act on the manager are
// refused on it: a test that needs them uses PrivateSystemd.
func SharedSystemd(t testing.TB) *Manager {
	t.Helper()
	requireRunMain(t, "the shared systemd manager")
	shared.once.Do(func() {
		var dir string
		if dir, shared.err = processDir(); shared.err != nil {
			return
		}
		if shared.m, shared.err = StartManager(filepath.Join(dir, "systemd")); shared.err != nil {
			return
		}
		shared.m.Shared = true
		managers.Lock()
		managers.set[shared.m] = struct{}{} // stopped at shutdown with the leaked ones
		managers.Unlock()
	})
	if shared.err != nil {
		var u *unavailableError
		if errors.As(shared.err, &u) {
			unavailable(t, "%s", u.msg)
		}
		t.Fatalf("testenv: shared systemd manager: %v", shared.err)
	}
	return shared.m
}

// StopUnits kills and stops the named units and forgets their failures, for a test that ends
// on a shared manager; units that are not loaded are skipped.
func (m *Manager) StopUnits(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	conn, err := m.Dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var errs []error
	for _, name := range names {
		conn.KillUnitWithTarget(ctx, name, sdbus.All, int32(syscall.SIGKILL))
		done := make(chan string, 1)
		if _, err := conn.StopUnitContext(ctx, name, "replace", done); err != nil {
			var dbusErr dbus.Error
			if errors.As(err, &dbusErr) && dbusErr.Name == "org.freedesktop.systemd1.NoSuchUnit" {
				continue
			}
			errs = append(errs, fmt.Errorf("stop %s: %w", name, err))
			continue
		}
		select {
		case <-done:
		case <-ctx.Done():
			return errors.Join(append(errs, ctx.Err())...)
		}
		_ = conn.ResetFailedUnitContext(ctx, name) // not failed, or already collected
	}
	return errors.Join(errs...)
}

// StartManager starts a private `systemd --user` with its own journald, in
// its own mount namespace and cgroup subtree, and waits until it is ready.
// The manager runs as root, so its units may set User=. It keeps its runtime
// directory (RuntimeDir), journal (JournalDir) and output in dir, which is
// created if needed; the path must leave room for the unix sockets below it.
// It needs root.
//
// Stop the manager with Close. If the calling process dies first, the
// manager gets SIGTERM, which stops its units and then the manager.
func StartManager(dir string) (*Manager, error) {
	if err := checkPrivateManager(); err != nil {
		return nil, err
	}
	datagramQueue.Do(raiseDatagramQueue)
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		RuntimeDir: filepath.Join(dir, "rt"),
		JournalDir: filepath.Join(dir, "log", "journal"),
		Private:    true,
		dir:        dir,
		logPath:    filepath.Join(dir, "manager.log"),
	}
	m.Address = "unix:path=" + escapeAddress(filepath.Join(m.RuntimeDir, "systemd", "private"))
	if n := len(filepath.Join(m.RuntimeDir, "systemd", "private")); n > 100 {
		return nil, fmt.Errorf("runtime dir %s too long for unix sockets; use a shorter directory (TMPDIR, in tests)", m.RuntimeDir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := mkdirMode(m.RuntimeDir, 0o700); err != nil {
		return nil, err
	}
	if err := mkdirMode(filepath.Dir(m.JournalDir), 0o755); err != nil {
		return nil, err
	}
	if m.cgroup, err = newCgroupSubtree(); err != nil {
		return nil, &unavailableError{fmt.Sprintf("a private systemd manager needs cgroups: %v", err)}
	}
	if err := m.start(); err != nil {
		err = fmt.Errorf("start systemd --user: %w%s", err, m.outputTail())
		return nil, errors.Join(err, m.cgroup.remove(5*time.Second))
	}
	return m, nil
}

// systemdDatagramQueue is net.unix.max_dgram_qlen as systemd's own sysctl.d/50-default.conf sets
// it on every host it boots. A manager logs through a datagram socket to its journald and waits
// up to 10 s when that socket's queue is full: with the kernel's default of 10, kept on a machine
// whose PID 1 is not systemd, a journald that falls ten lines behind holds its manager's jobs
// (a stop, an exit) for seconds, where a systemd host queues 512.
const systemdDatagramQueue = 512

var datagramQueue sync.Once

// raiseDatagramQueue raises the machine's net.unix.max_dgram_qlen to systemdDatagramQueue if
// it is lower. Not raised (not root), managers only log more slowly under load.
func raiseDatagramQueue() {
	const knob = "/proc/sys/net/unix/max_dgram_qlen"
	b, err := os.ReadFile(knob)
	if err != nil {
		return
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n < systemdDatagramQueue {
		_ = os.WriteFile(knob, []byte(strconv.Itoa(systemdDatagramQueue)), 0o644)
	}
}

// checkPrivateManager returns an *unavailableError if this machine cannot
// run a private manager.
func checkPrivateManager() error {
	if os.Geteuid() != 0 {
		return &unavailableError{"a private systemd manager needs root (it mounts in a private mount namespace)"}
	}
	for _, p := range []struct{ path, pkg string }{
		{systemdPath, "systemd"},
		{journaldPath, "systemd"},
	} {
		if _, err := os.Stat(p.path); err != nil {
			return &unavailableError{fmt.Sprintf("%s not found: apt-get install %s", p.path, p.pkg)}
		}
	}
	for _, p := range []struct{ name, pkg string }{
		{"unshare", "util-linux"},
		{"setpriv", "util-linux"},
		{"mount", "mount"},
		{"systemctl", "systemd"},
	} {
		if _, err := exec.LookPath(p.name); err != nil {
			return &unavailableError{fmt.Sprintf("%s not found in PATH: apt-get install %s", p.name, p.pkg)}
		}
	}
	return nil
}

// mkdirMode creates dir with mode perm, or gives an existing dir that mode.
func mkdirMode(dir string, perm os.FileMode) error {
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Chmod(dir, perm)
}

// Env returns the environment entries a child process needs to reach the
// manager with systemctl --user or the user bus.
func (m *Manager) Env() []string {
	if !m.Private {
		return nil
	}
	env := []string{"XDG_RUNTIME_DIR=" + m.RuntimeDir}
	if bus := filepath.Join(m.RuntimeDir, "bus"); exists(bus) {
		env = append(env, "DBUS_SESSION_BUS_ADDRESS=unix:path="+escapeAddress(bus))
	}
	return env
}

// Dial connects go-systemd to the manager's private socket. As with
// go-systemd's *Context constructors, ctx bounds the connection's life.
// The caller closes the connection.
func (m *Manager) Dial(ctx context.Context) (*sdbus.Conn, error) {
	return sdbus.NewConnection(func() (*dbus.Conn, error) {
		return dialPrivate(ctx, m.Address)
	})
}

// Conn is Dial for a test: it fails the test on error and closes the
// connection at t.Cleanup.
func (m *Manager) Conn(t testing.TB) *sdbus.Conn {
	t.Helper()
	conn, err := m.Dial(context.Background())
	if err != nil {
		t.Fatalf("testenv: connect to systemd at %s: %v", m.Address, err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// Systemctl runs `systemctl --user args...` against the manager (plain
// systemctl for the host's manager) and returns its combined output. It
// fails the test if systemctl fails.
func (m *Manager) Systemctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := m.SystemctlErr(args...)
	if err != nil {
		t.Fatalf("testenv: %v\n%s", err, out)
	}
	return out
}

// SystemctlErr is Systemctl returning the error, e.g. for a non-zero exit
// of `is-active`.
func (m *Manager) SystemctlErr(args ...string) (string, error) {
	if m.Shared {
		for _, a := range args {
			switch a {
			case "daemon-reexec", "daemon-reload", "exit", "halt", "poweroff", "reboot", "kexec", "isolate", "switch-root":
				return "", fmt.Errorf("testenv: systemctl %s would act on the manager other tests share (SharedSystemd); use PrivateSystemd", a)
			}
		}
	}
	argv := args
	if m.Private {
		argv = append([]string{"--user"}, args...)
	}
	cmd := exec.Command("systemctl", argv...)
	cmd.Env = append(os.Environ(), m.Env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("systemctl %s: %w", strings.Join(argv, " "), err)
	}
	return string(out), nil
}

// Exit stops the manager gracefully, as `systemctl --user exit` does: its
// units are stopped (ExecStopPost runs) and Exit waits until the manager
// and its journald are gone.
func (m *Manager) Exit(t testing.TB) {
	t.Helper()
	m.requirePrivate(t, "Exit")
	if err := m.exit(exitTimeout); err != nil {
		t.Fatalf("testenv: exit systemd manager: %v%s", err, m.outputTail())
	}
}

// Kill simulates a power loss: the manager, its journald and every process
// of its units get SIGKILL at once; nothing of the units' stop logic runs.
func (m *Manager) Kill(t testing.TB) {
	t.Helper()
	m.requirePrivate(t, "Kill")
	if err := m.kill(); err != nil {
		t.Fatalf("testenv: kill systemd manager: %v", err)
	}
}

// Start starts a new manager on the same RuntimeDir after Exit or Kill,
// like a boot: the runtime directory starts out empty, so transient units
// of the previous manager are gone. JournalDir keeps the old entries.
func (m *Manager) Start(t testing.TB) {
	t.Helper()
	m.requirePrivate(t, "Start")
	if err := m.start(); err != nil {
		t.Fatalf("testenv: start systemd --user: %v%s", err, m.outputTail())
	}
}

func (m *Manager) requirePrivate(t testing.TB, op string) {
	t.Helper()
	if !m.Private {
		t.Fatalf("testenv: %s needs a private manager (PrivateSystemd), not the host's", op)
	}
	if m.Shared {
		t.Fatalf("testenv: %s would act on the manager other tests share (SharedSystemd); use PrivateSystemd", op)
	}
}

func (m *Manager) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inst != nil {
		return errors.New("manager is already running")
	}
	// /run and the cgroup tree are empty after a boot; stale sockets and
	// transient unit files of a killed manager would otherwise come back.
	if err := clearDir(m.RuntimeDir); err != nil {
		return err
	}
	if err := m.cgroup.remove(5 * time.Second); err != nil {
		return err
	}
	if err := m.cgroup.create(); err != nil {
		return err
	}

	logf, err := os.OpenFile(m.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()

	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	args := []string{"--mount", "--propagation", "private",
		"sh", "-c", managerScript, "sh", filepath.Dir(m.JournalDir)}
	cmd := exec.Command("unshare", append(args, m.cgroup.dirs...)...)
	// A user manager hands its own environment to every unit, so keep it
	// small and independent of the test's environment.
	noGenerators := filepath.Join(m.dir, "no-generators") // absent: systemd finds none there
	cmd.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home,
		"USER=root",
		"LOGNAME=root",
		"LANG=C.UTF-8",
		"XDG_RUNTIME_DIR=" + m.RuntimeDir,
		// No generators: the host's (xdg-autostart, environment.d, gpg-agent) are no concern of
		// the tests, and run at every start and reload.
		"SYSTEMD_GENERATOR_PATH=" + noGenerators,
		"SYSTEMD_ENVIRONMENT_GENERATOR_PATH=" + noGenerators,
	}
	cmd.Dir = "/"
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{pw}
	// SIGTERM makes a user manager start exit.target: units are stopped
	// even when the test binary dies without cleanup.
	proc, err := startChild(cmd, syscall.SIGTERM)
	pw.Close()
	if err != nil {
		return err
	}
	inst := &instance{proc: proc, cgroup: m.cgroup}

	line, _ := bufio.NewReader(pr).ReadString('\n') // EOF once the script closed fd 3 (or died)
	inst.journald, err = strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		inst.stop()
		return fmt.Errorf("manager script did not report journald's pid (%q)", line)
	}

	if err := waitReady(inst, m.Address, readyTimeout); err != nil {
		inst.stop()
		return err
	}
	m.inst = inst
	return nil
}

// waitReady waits until the manager answers on its private socket and has
// finished starting up.
func waitReady(inst *instance, address string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var state string
	var err error
	for {
		select {
		case <-inst.proc.done:
			return fmt.Errorf("manager exited during startup: %v", inst.proc.err)
		default:
		}
		state, err = systemState(address)
		if err == nil && (state == "running" || state == "degraded") {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("manager not ready after %v: %w", timeout, err)
			}
			return fmt.Errorf("manager not ready after %v: state %q", timeout, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func systemState(address string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := dialPrivate(ctx, address)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	v, err := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		GetProperty("org.freedesktop.systemd1.Manager.SystemState")
	if err != nil {
		return "", err
	}
	s, _ := v.Value().(string)
	return s, nil
}

// dialPrivate connects to a systemd private socket. It is peer to peer:
// EXTERNAL auth with the uid, no Hello.
func dialPrivate(ctx context.Context, address string) (*dbus.Conn, error) {
	conn, err := dbus.Dial(address, dbus.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

func (m *Manager) exit(timeout time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	inst := m.inst
	if inst == nil {
		return errors.New("manager is not running")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dialPrivate(ctx, m.Address)
	if err != nil {
		return err
	}
	// What `systemctl --user exit` does. The Manager.Exit method is not
	// that: it leaves without stopping any unit, and often without replying.
	err = conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		CallWithContext(ctx, "org.freedesktop.systemd1.Manager.StartUnit", 0, "exit.target", "replace-irreversibly").Err
	conn.Close()
	if err != nil {
		return fmt.Errorf("start exit.target: %w", err)
	}
	if !inst.proc.wait(timeout) {
		return fmt.Errorf("manager (pid %d) still running %v after Exit", inst.proc.pid(), timeout)
	}
	// journald got SIGTERM when the manager died.
	if !waitGone(inst.journald, 5*time.Second) {
		syscall.Kill(inst.journald, syscall.SIGKILL)
		if !waitGone(inst.journald, 5*time.Second) {
			return fmt.Errorf("journald (pid %d) survives SIGKILL", inst.journald)
		}
	}
	m.inst = nil
	// As at the end of a shutdown, whatever a unit left behind
	// (KillMode=none, say) is killed, and reaped (see reapOrphans).
	list, killed := recording(inst.cgroup.pids, 0)
	err = killAll(list, inst.cgroup.kill)
	reapOrphans(killed, 5*time.Second)
	return err
}

func (m *Manager) kill() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inst == nil {
		return errors.New("manager is not running")
	}
	if err := m.inst.stop(); err != nil {
		return err
	}
	m.inst = nil
	return nil
}

// stop SIGKILLs the manager, journald and every process of the manager's
// units: everything in the manager's cgroup subtree and, in case a process
// left it, everything below the manager in the process tree (the user
// manager is a child subreaper, so daemonized processes of its units are
// its descendants too).
func (inst *instance) stop() error {
	pid := inst.proc.pid()
	// Frozen, the manager can neither start, restart nor reap anything
	// while its tree is killed, and orphans stay below it.
	syscall.Kill(pid, syscall.SIGSTOP)
	list, killed := recording(func() []int {
		below, _ := descendants(pid)
		return append(below, inst.cgroup.pids()...)
	}, pid)
	err := killAll(list, inst.cgroup.kill)
	inst.proc.cmd.Process.Kill()
	if !inst.proc.wait(10 * time.Second) {
		return fmt.Errorf("manager %d survives SIGKILL", pid)
	}
	reapOrphans(killed, 5*time.Second)
	if inst.journald > 0 && !waitGone(inst.journald, 5*time.Second) {
		return fmt.Errorf("journald %d survives SIGKILL", inst.journald)
	}
	return err
}

// killAll SIGKILLs the processes that list returns until it returns none;
// first is a quicker way to kill them all, if any.
func killAll(list func() []int, first func() bool) error {
	first()
	for i := 0; ; i++ {
		pids := list()
		if len(pids) == 0 {
			return nil
		}
		if i == 1000 {
			return fmt.Errorf("processes survive SIGKILL: %v", pids)
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
}

// Close stops a private manager: gracefully, as Exit does (its units are
// stopped, ExecStopPost runs), and as Kill does if that fails within 15s.
// Then it removes the manager's cgroup subtree. The manager's directory stays,
// with its journal. Closing a stopped manager only removes the subtree;
// closing the host's manager does nothing.
func (m *Manager) Close() error {
	if !m.Private {
		return nil
	}
	var errs []error
	m.mu.Lock()
	running := m.inst != nil
	m.mu.Unlock()
	if running {
		if err := m.exit(cleanupTimeout); err != nil {
			if kerr := m.kill(); kerr != nil {
				errs = append(errs, fmt.Errorf("graceful exit: %v; kill: %w", err, kerr))
			}
		}
	}
	if err := m.cgroup.remove(5 * time.Second); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// teardown closes a manager of PrivateSystemd and removes its files.
func (m *Manager) teardown() error {
	managers.Lock()
	delete(managers.set, m)
	managers.Unlock()
	return errors.Join(m.Close(), os.RemoveAll(m.dir))
}

func stopLeakedManagers() error {
	managers.Lock()
	leaked := make([]*Manager, 0, len(managers.set))
	for m := range managers.set {
		leaked = append(leaked, m)
	}
	managers.Unlock()
	var errs []error
	for _, m := range leaked {
		errs = append(errs, m.teardown())
	}
	return errors.Join(errs...)
}

// outputTail returns the end of the manager's stdout and stderr for error
// messages.
func (m *Manager) outputTail() string {
	b, err := os.ReadFile(m.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	const max = 4096
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return "\nmanager output:\n" + string(b)
}

func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// escapeAddress escapes a value for a D-Bus address.
func escapeAddress(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_/.\\*", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02x", c)
		}
	}
	return b.String()
}
