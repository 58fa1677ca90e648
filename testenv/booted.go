package testenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
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
	"golang.org/x/sys/unix"
)

// A booted host is a Debian 12 container (Debian 13 with HOLDFAST_TEST_DEBIAN=13) whose PID 1
// is systemd, for what
// only the system manager shows: credentials handed to User=, LogExtraFields
// in the journal, systemd-analyze security of a unit. Its root is an overlay
// of a cached image (built once per machine with debootstrap, under a lock)
// and a per-host upper directory, so hosts boot in seconds, run in parallel
// and never see each other's changes. The overlay is mounted in a private
// mount namespace that dies with systemd-nspawn; nspawn cannot put an
// overlay on the container's root itself.

const (
	// ImageCacheDir holds the booted hosts' root images, one per recipe.
	ImageCacheDir = "/var/cache/holdfast-testenv"

	bootTimeout     = 3 * time.Minute
	shutdownTimeout = 2 * time.Minute
	hostPath        = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// debianVar names the Debian release of the booted hosts: 12 (bookworm, the default) or 13
// (trixie), each with its own systemd, restic and PostgreSQL.
const debianVar = "HOLDFAST_TEST_DEBIAN"

var debianSuites = map[string]string{"": "bookworm", "12": "bookworm", "13": "trixie"}

// The image recipe. Changing it changes the image's name, so a stale image
// is never used.
var (
	imageSuite    = debianSuites[os.Getenv(debianVar)]
	imagePackages = []string{"systemd", "systemd-sysv", "dbus", "libpam-systemd", "restic", "postgresql", "acl"}
	// imageSteps names what buildImage does after debootstrap; bump it when
	// that changes.
	imageSteps = "v2: no hostname, empty machine-id, apt caches removed, root 0755 while built"
)

// bootScript runs in a private mount namespace: it moves itself into the
// host's cgroups (a container's systemd takes its cgroup as its root, so two
// containers must not share one), mounts the overlay and becomes
// systemd-nspawn. Arguments: lower upper work merged cgroup... -- nspawn argv.
const bootScript = `set -eu
lower=$1 upper=$2 work=$3 merged=$4
shift 4
while [ "$1" != -- ]; do
	echo "$$" >"$1/cgroup.procs"
	shift
done
shift
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$merged"
exec "$@"
`

// HostConfig configures a booted host.
type HostConfig struct {
	// Postgres makes the test binary's PostgreSQL server reachable inside the
	// host at the same DSNs as outside, so Postgres(t) databases can be used
	// by holdfast inside. A private server's socket directory is
	// bind-mounted at its own path: one server for every host, reached
	// without a network, nothing to install or start per boot. A TCP server named by
	// HOLDFAST_TEST_DSN is reached through the machine's network, which the host then shares.
	Postgres bool
	// Binds are directories of the machine bound into the host at the same path, read-write:
	// storage that several hosts share, as a network file system would be.
	Binds []string
}

// A host has a network of its own (loopback only), where its own PostgreSQL (the image's, as
// `apt install postgresql` leaves it) listens on the usual port. A host that reaches the test's
// server (HostConfig.Postgres) has the image's masked: nothing there uses it, it cost each boot
// a server's start, and sharing the machine's network every host's would take the same port.

// Host is a booted Debian container, see BootedHost.
type Host struct {
	Name string // machine name and host name

	image        string
	dir          string // upper, work and merged directories, the console log
	binds        []string
	shareNetwork bool // the machine's network, for a TCP server of HOLDFAST_TEST_DSN
	cgroup       *cgroupSubtree

	mu       sync.Mutex
	proc     *child // systemd-nspawn; nil while powered off
	pid1     int
	lastBoot time.Duration
}

// BootedHost boots a fresh Debian 12 (or 13, see debianVar) container with systemd as PID 1 and
// waits until it is up (see WaitRunning). Its root file system is a
// copy-on-write layer over a cached image (systemd, dbus, restic), so a
// test's changes stay its own. It is powered off and its files removed at
// t.Cleanup. It needs root, systemd-nspawn, debootstrap (for the first
// build of the image, about a minute or more) and overlayfs; without them the
// test is skipped, or fails under CI=true (scripts/install-deps installs
// them).
func BootedHost(t testing.TB) *Host {
	t.Helper()
	return BootedHostWith(t, HostConfig{})
}

// BootedHostWith is BootedHost with a configuration.
func BootedHostWith(t testing.TB, cfg HostConfig) *Host {
	t.Helper()
	if imageSuite == "" {
		t.Fatalf("testenv: %s=%q: give 12 or 13", debianVar, os.Getenv(debianVar))
	}
	if err := checkBooted(); err != nil {
		var u *unavailableError
		if errors.As(err, &u) {
			unavailable(t, "%s", u.msg)
		}
		t.Fatalf("testenv: %v", err)
	}
	var binds []string
	if cfg.Postgres {
		dir, err := postgresSocketDir(t)
		if err != nil {
			t.Fatalf("testenv: booted host: %v", err)
		}
		if dir != "" {
			binds = append(binds, dir)
		}
	}
	image, err := bootedImage()
	if err != nil {
		var u *unavailableError
		if errors.As(err, &u) {
			unavailable(t, "%s", u.msg)
		}
		t.Fatalf("testenv: booted host image: %v", err)
	}
	dir, err := os.MkdirTemp("", "holdfast-booted-*")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	binds = append(binds, cfg.Binds...)
	h := &Host{Name: "hf-" + randomHex(5), image: image, dir: dir, binds: binds,
		shareNetwork: cfg.Postgres && os.Getenv("HOLDFAST_TEST_DSN") != ""}
	for _, d := range []string{"upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	if cfg.Postgres {
		units := filepath.Join(dir, "upper", "etc", "systemd", "system")
		if err := os.MkdirAll(units, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := os.Symlink("/dev/null", filepath.Join(units, "postgresql@.service")); err != nil {
			t.Fatalf("testenv: mask the host's PostgreSQL: %v", err)
		}
	}
	if h.cgroup, err = newCgroupSubtree(); err != nil {
		os.RemoveAll(dir)
		unavailable(t, "a booted host needs cgroups: %v", err)
	}
	t.Cleanup(func() {
		if err := h.close(); err != nil {
			t.Errorf("testenv: booted host %s: %v", h.Name, err)
		}
	})
	if err := h.boot(); err != nil {
		t.Fatalf("testenv: boot %s: %v", h.Name, err)
	}
	return h
}

// checkBooted returns an *unavailableError if this machine cannot boot a
// container.
func checkBooted() error {
	if os.Geteuid() != 0 {
		return &unavailableError{"a booted host needs root (systemd-nspawn)"}
	}
	for _, p := range []struct{ name, pkg string }{
		{"systemd-nspawn", "systemd-container"},
		{"nsenter", "util-linux"},
		{"unshare", "util-linux"},
		{"mount", "mount"},
	} {
		if _, err := exec.LookPath(p.name); err != nil {
			return &unavailableError{fmt.Sprintf("%s not found in PATH: apt-get install %s (or scripts/install-deps)", p.name, p.pkg)}
		}
	}
	fs, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err
	}
	if !bytes.Contains(fs, []byte("\toverlay\n")) {
		return &unavailableError{"a booted host needs overlayfs (modprobe overlay)"}
	}
	return nil
}

// postgresSocketDir starts the test binary's PostgreSQL server if needed and
// returns the directory to bind into a host so its DSNs work there too
// ("" when the server is reached over TCP).
func postgresSocketDir(t testing.TB) (string, error) {
	admin := os.Getenv("HOLDFAST_TEST_DSN")
	if admin == "" {
		srv, err := privatePostgres(t)
		if err != nil {
			return "", err
		}
		return srv.Dir, nil
	}
	if u, err := url.Parse(admin); err == nil && strings.HasPrefix(u.Query().Get("host"), "/") {
		return u.Query().Get("host"), nil
	}
	for _, kv := range strings.Fields(admin) {
		if v, ok := strings.CutPrefix(kv, "host="); ok && strings.HasPrefix(v, "/") {
			return v, nil
		}
	}
	return "", nil
}

var imageBuild struct {
	once sync.Once
	path string
	err  error
}

// bootedImage returns the cached root image, building it first if no test
// binary on this machine has.
func bootedImage() (string, error) {
	imageBuild.once.Do(func() { imageBuild.path, imageBuild.err = ensureImage() })
	return imageBuild.path, imageBuild.err
}

// imageName is the recipe's image directory name: the suite and a hash of
// everything that goes into it (the mirror does not).
func imageName() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", imageSuite, strings.Join(imagePackages, ","), imageSteps)
	return imageSuite + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

func ensureImage() (string, error) {
	path := filepath.Join(ImageCacheDir, imageName())
	if exists(filepath.Join(path, "etc", "os-release")) {
		return path, nil
	}
	if err := os.MkdirAll(ImageCacheDir, 0o755); err != nil {
		return "", err
	}
	// Parallel test binaries build the image once: the others wait here.
	lock, err := os.OpenFile(filepath.Join(ImageCacheDir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if exists(filepath.Join(path, "etc", "os-release")) {
		return path, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", &unavailableError{"debootstrap not found in PATH: apt-get install debootstrap (or scripts/install-deps)"}
	}
	// Leftovers of a build that was interrupted.
	old, _ := filepath.Glob(filepath.Join(ImageCacheDir, imageName()+".tmp-*"))
	for _, o := range old {
		os.RemoveAll(o)
	}
	tmp, err := os.MkdirTemp(ImageCacheDir, imageName()+".tmp-*")
	if err != nil {
		return "", err
	}
	// The image's root as it will be, before debootstrap: its packages' scripts run as their
	// system users too (postgresql makes its main cluster as postgres).
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := buildImage(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return path, nil
}

// buildImage debootstraps the recipe into dir.
func buildImage(dir string) error {
	mirror := debianMirror()
	cmd := exec.Command("debootstrap", "--variant=minbase",
		"--include="+strings.Join(imagePackages, ","), imageSuite, dir, mirror)
	cmd.Env = []string{hostPath, "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("debootstrap %s from %s: %v\n%s", imageSuite, mirror, err, tail(out, 4096))
	}
	// Without /etc/hostname a container keeps the machine name nspawn gives
	// it; an empty machine-id gets each boot a fresh one instead of one
	// shared by every host.
	for _, f := range []string{"etc/hostname", "var/lib/dbus/machine-id"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "machine-id"), nil, 0o444); err != nil {
		return err
	}
	for _, d := range []string{"var/cache/apt", "var/lib/apt/lists"} {
		ents, _ := os.ReadDir(filepath.Join(dir, d))
		for _, e := range ents {
			if e.Name() != "partial" && e.Name() != "archives" {
				os.RemoveAll(filepath.Join(dir, d, e.Name()))
			}
		}
	}
	return nil
}

// debianMirror is the Debian mirror apt already uses here, so the image
// comes from wherever this machine may fetch packages.
func debianMirror() string {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append([]string{"/etc/apt/sources.list"}, files...)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		var uris []string
		suiteMatches := false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			switch {
			case len(fields) >= 3 && fields[0] == "deb" && fields[2] == imageSuite && !strings.HasPrefix(fields[1], "["):
				f.Close()
				return fields[1]
			case len(fields) >= 2 && fields[0] == "URIs:":
				uris = fields[1:]
			case len(fields) >= 2 && fields[0] == "Suites:":
				suiteMatches = false
				for _, s := range fields[1:] {
					suiteMatches = suiteMatches || s == imageSuite
				}
			case len(fields) == 0:
				if suiteMatches && len(uris) > 0 {
					f.Close()
					return uris[0]
				}
				uris, suiteMatches = nil, false
			}
		}
		f.Close()
		if suiteMatches && len(uris) > 0 {
			return uris[0]
		}
	}
	return "http://deb.debian.org/debian"
}

// boot starts systemd-nspawn on the host's tree and waits until the system
// is up.
func (h *Host) boot() error {
	start := time.Now()
	if err := h.cgroup.remove(10 * time.Second); err != nil {
		return err
	}
	if err := h.cgroup.create(); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(h.dir, "console.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	merged := filepath.Join(h.dir, "merged")
	args := []string{"--mount", "--propagation", "private", "sh", "-c", bootScript, "sh",
		h.image, filepath.Join(h.dir, "upper"), filepath.Join(h.dir, "work"), merged}
	args = append(args, h.cgroup.dirs...)
	args = append(args, "--", "systemd-nspawn", "--quiet", "-D", merged, "--boot",
		"--register=no", "--keep-unit", "-M", h.Name, "--console=read-only")
	for _, b := range h.binds {
		args = append(args, "--bind="+b)
	}
	if !h.shareNetwork {
		args = append(args, "--private-network")
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = []string{hostPath, "LC_ALL=C"}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	// SIGTERM makes nspawn power the container off, should the test binary
	// die without its cleanup.
	proc, err := startChild(cmd, syscall.SIGTERM)
	if err != nil {
		return err
	}
	pid1, err := waitPID1(proc, bootTimeout)
	if err != nil {
		proc.cmd.Process.Kill()
		proc.wait(10 * time.Second)
		return fmt.Errorf("%w%s", err, h.consoleTail())
	}
	h.mu.Lock()
	h.proc, h.pid1 = proc, pid1
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	if err := h.waitRunning(ctx); err != nil {
		return fmt.Errorf("%w%s", err, h.consoleTail())
	}
	h.lastBoot = time.Since(start)
	return nil
}

// waitPID1 returns the pid of the container's systemd, nspawn's child.
func waitPID1(proc *child, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		below, _ := descendants(proc.pid())
		for _, p := range below {
			_, ppid, err := procStat(p)
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
			if err == nil && ppid == proc.pid() && strings.TrimSpace(string(comm)) == "systemd" {
				return p, nil
			}
		}
		select {
		case <-proc.done:
			return 0, fmt.Errorf("systemd-nspawn exited: %v", proc.err)
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no systemd below systemd-nspawn after %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Dial connects go-systemd to the host's system manager over the host's
// system bus (its dbus-daemon), as a root client inside would. As with
// go-systemd's *Context constructors, ctx bounds the connection's life. The
// caller closes the connection.
func (h *Host) Dial(ctx context.Context) (*sdbus.Conn, error) {
	bus := fmt.Sprintf("/proc/%d/root/run/dbus/system_bus_socket", h.PID1())
	return sdbus.NewConnection(func() (*dbus.Conn, error) {
		conn, err := dbus.Dial("unix:path="+escapeAddress(bus), dbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			conn.Close()
			return nil, err
		}
		if err := conn.Hello(); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	})
}

// BootDuration is how long the last boot took, from starting nspawn to a
// running system.
func (h *Host) BootDuration() time.Duration { return h.lastBoot }

// PID1 is the host's PID 1 (the container's systemd) as seen from outside.
func (h *Host) PID1() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pid1
}

// Command returns a command that runs argv inside the host: in all of its
// namespaces, as root, with an environment of only PATH. argv is never
// given to a shell; prefix it with "env", "K=V" to set variables.
func (h *Host) Command(ctx context.Context, argv ...string) *exec.Cmd {
	args := append([]string{"-t", fmt.Sprint(h.PID1()), "-a", "env", "-i", hostPath}, argv...)
	return exec.CommandContext(ctx, "nsenter", args...)
}

// Output runs argv inside the host and returns its standard output. The
// error carries its standard error.
func (h *Host) Output(ctx context.Context, argv ...string) ([]byte, error) {
	cmd := h.Command(ctx, argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s on %s: %w: %s", strings.Join(argv, " "), h.Name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// Run runs argv inside the host and returns its combined output; it fails
// the test if the command fails or runs longer than 5 minutes.
func (h *Host) Run(t testing.TB, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := h.Command(ctx, argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: %s on %s: %v\n%s", strings.Join(argv, " "), h.Name, err, out)
	}
	return string(out)
}

// WriteFile writes data to path inside the host with mode perm, owned by
// root; the parent directory must exist. Links in path are resolved inside
// the host, never outside it.
func (h *Host) WriteFile(t testing.TB, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := h.writeFile(path, data, perm); err != nil {
		t.Fatalf("testenv: write %s on %s: %v", path, h.Name, err)
	}
}

func (h *Host) writeFile(path string, data []byte, perm os.FileMode) error {
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", h.PID1()), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, path, &unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC | unix.O_CLOEXEC,
		Mode:    uint64(perm.Perm()),
		Resolve: unix.RESOLVE_IN_ROOT,
	})
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), path)
	_, err = f.Write(data)
	// O_CREAT's mode is cut by the umask, and an existing file keeps its own.
	err = errors.Join(err, f.Chmod(perm), f.Chown(0, 0), f.Close())
	return err
}

// CopyIn copies the file src of the machine to dst inside the host, with
// mode perm (see WriteFile).
func (h *Host) CopyIn(t testing.TB, src, dst string, perm os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("testenv: copy into %s: %v", h.Name, err)
	}
	h.WriteFile(t, dst, data, perm)
}

// WaitRunning waits until the host has finished booting (`systemctl
// is-system-running --wait` says running or degraded).
func (h *Host) WaitRunning(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	if err := h.waitRunning(ctx); err != nil {
		t.Fatalf("testenv: %v%s", err, h.consoleTail())
	}
}

func (h *Host) waitRunning(ctx context.Context) error {
	var state string
	for {
		out, err := h.Output(ctx, "systemctl", "is-system-running", "--wait")
		// is-system-running exits non-zero for "degraded" too.
		state = strings.TrimSpace(string(out))
		if state == "running" || state == "degraded" {
			return nil
		}
		if state == "" && err != nil {
			state = err.Error() // the manager may not listen yet
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is not up: %s", h.Name, state)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Reboot reboots the host gracefully (`systemctl reboot`: units are
// stopped, ExecStopPost runs) and waits until it is up again on the same
// files.
func (h *Host) Reboot(t testing.TB) {
	t.Helper()
	if err := h.shutdown("reboot"); err != nil {
		t.Fatalf("testenv: reboot %s: %v%s", h.Name, err, h.consoleTail())
	}
	if err := h.boot(); err != nil {
		t.Fatalf("testenv: boot %s again: %v", h.Name, err)
	}
}

// PowerLoss kills the host's PID 1 (SIGKILL), which ends every process in
// it at once and runs none of its units' stop logic, then boots it again on
// the same files. The machine's page cache survives, so unlike a real power
// loss no written data is lost.
func (h *Host) PowerLoss(t testing.TB) {
	t.Helper()
	if err := h.kill(); err != nil {
		t.Fatalf("testenv: power loss of %s: %v", h.Name, err)
	}
	if err := h.boot(); err != nil {
		t.Fatalf("testenv: boot %s again: %v", h.Name, err)
	}
}

// PowerOff kills the host's PID 1, as PowerLoss does, and leaves it off until Boot.
func (h *Host) PowerOff(t testing.TB) {
	t.Helper()
	if err := h.kill(); err != nil {
		t.Fatalf("testenv: power off %s: %v", h.Name, err)
	}
}

// Boot boots a host that PowerOff left off, on the same files.
func (h *Host) Boot(t testing.TB) {
	t.Helper()
	if err := h.boot(); err != nil {
		t.Fatalf("testenv: boot %s again: %v", h.Name, err)
	}
}

// shutdown asks the host's systemd to reboot or power off and waits until
// nspawn has exited.
func (h *Host) shutdown(verb string) error {
	h.mu.Lock()
	proc := h.proc
	h.mu.Unlock()
	if proc == nil {
		return errors.New("not running")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// systemctl may lose its connection as the manager goes down; the exit
	// of nspawn is what counts.
	out, cerr := h.Output(ctx, "systemctl", "--no-block", verb)
	if !proc.wait(shutdownTimeout) {
		return fmt.Errorf("still running %v after systemctl %s (%v %s)", shutdownTimeout, verb, cerr, out)
	}
	h.mu.Lock()
	h.proc, h.pid1 = nil, 0
	h.mu.Unlock()
	return nil
}

// kill SIGKILLs PID 1 and waits until nspawn has exited.
func (h *Host) kill() error {
	h.mu.Lock()
	proc, pid1 := h.proc, h.pid1
	h.mu.Unlock()
	if proc == nil {
		return errors.New("not running")
	}
	syscall.Kill(pid1, syscall.SIGKILL)
	if !proc.wait(time.Minute) {
		proc.cmd.Process.Kill()
		if !proc.wait(10 * time.Second) {
			return fmt.Errorf("systemd-nspawn %d survives SIGKILL", proc.pid())
		}
	}
	h.mu.Lock()
	h.proc, h.pid1 = nil, 0
	h.mu.Unlock()
	return nil
}

// close powers the host off (killing it if that fails) and removes its
// files.
func (h *Host) close() error {
	var errs []error
	h.mu.Lock()
	running := h.proc != nil
	h.mu.Unlock()
	if running {
		if err := h.shutdown("poweroff"); err != nil {
			if kerr := h.kill(); kerr != nil {
				errs = append(errs, fmt.Errorf("poweroff: %v; kill: %w", err, kerr))
			}
		}
	}
	errs = append(errs, h.cgroup.remove(10*time.Second))
	errs = append(errs, os.RemoveAll(h.dir))
	return errors.Join(errs...)
}

func (h *Host) consoleTail() string {
	b, err := os.ReadFile(filepath.Join(h.dir, "console.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	return "\nconsole:\n" + string(tail(b, 4096))
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
