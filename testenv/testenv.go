// Package testenv gives holdfast's tests their real dependencies: a
// PostgreSQL server, a systemd manager that runs transient units, the built
// holdfast binary and directories that units running as another user can
// reach.
//
// The contract: tests use the real thing, never a fake. When a dependency
// cannot be had (a binary is missing, the test does not run as root), the
// test is skipped with the reason, unless the environment variable CI is
// true, in which case it fails. Whatever testenv starts is stopped again: per
// test at t.Cleanup (databases, systemd managers, directories), per test
// binary in RunMain (the shared PostgreSQL server, the shared systemd manager,
// the built binary), so a package that uses Postgres, SharedSystemd or
// HoldfastBinary must call RunMain from its TestMain:
//
//	func TestMain(m *testing.M) { testenv.RunMain(m) }
//
// Environment:
//
//	CI=true                 missing dependencies fail the test instead of skipping it
//	HOLDFAST_TEST_DSN       use this PostgreSQL server instead of starting one
//	HOLDFAST_TEST_SYSTEMD   "host": Systemd returns the host's system manager when usable
//	HOLDFAST_TEST_DEBIAN    12 (default) or 13: the Debian release booted hosts run
//	HOLDFAST_TEST_RESTIC    the restic binary (a file named restic) every test runs: its
//	                        directory goes first in PATH for this process and all it starts,
//	                        and Restic fails a test that would find another
//
// Everything is private to one test binary (temporary directories, unix
// sockets, random names), so several test binaries can run at once. Each
// private systemd manager has its own mount namespace, journald and cgroup
// subtree, so unit names need only be unique per manager. Servers and
// managers also get a signal when the test binary dies without cleaning up
// (a panic, -timeout), so they do not outlive it.
//
// Programs other than tests (the demo, cmd/holdfast-demo) use the same
// servers and managers through StartPostgresServer and StartManager, which
// return errors instead of taking a testing.TB; the caller stops what they
// start (PostgresServer.Stop, Manager.Close).
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// runMainActive records that RunMain owns the process, so resources that
// live as long as the test binary will be released.
var runMainActive atomic.Bool

// RunMain runs the tests, stops everything testenv started for the whole
// test binary (the private PostgreSQL server, managers a test leaked) and
// exits with the tests' exit code. Call it from TestMain.
func RunMain(m *testing.M) {
	runMainActive.Store(true)
	// The processes of a killed manager's units become this process's, which reaps them (see
	// instance.stop): a zombie's pid still answers kill(pid, 0), so restic would take the lock
	// of a killed restic for a live one, as it never would on a host whose PID 1 reaps.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: shutdown: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func shutdown() error {
	var errs []error
	errs = append(errs, stopLeakedManagers())
	errs = append(errs, dropTemplates())
	closeAdminPools()
	stopPgBouncers()
	errs = append(errs, stopPostgres())
	if procDir.path != "" {
		errs = append(errs, os.RemoveAll(procDir.path))
	}
	return errors.Join(errs...)
}

func requireRunMain(t testing.TB, what string) {
	t.Helper()
	if !runMainActive.Load() {
		t.Fatalf("testenv: %s lives as long as the test binary; call testenv.RunMain(m) from TestMain so it is stopped", what)
	}
}

// inCI reports whether missing dependencies must fail tests.
func inCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// unavailableError says that a dependency cannot be had on this machine at
// all (a binary or user is missing, no root), as opposed to failing to start:
// the testing.TB entry points skip on it rather than fail.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }

// unavailable ends a test whose real dependency cannot be had: a skip
// locally, a failure under CI.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := "testenv: " + fmt.Sprintf(format, args...)
	if inCI() {
		t.Fatal(msg + " (CI=true, so this fails instead of skipping)")
	}
	t.Skip(msg)
}

// procDir is a world-traversable directory that lives as long as the test
// binary (under RunMain); it holds the shared systemd manager, the PostgreSQL
// server's socket and log, the holdfast binary built for units, and what a
// package's tests make once (ProcessDir).
var procDir struct {
	once sync.Once
	path string
	err  error
}

func processDir() (string, error) {
	procDir.once.Do(func() {
		procDir.path, procDir.err = mkdirShared("", "holdfast-testenv-*")
	})
	return procDir.path, procDir.err
}

// mkdirShared creates a directory with mode 0755 and checks that every user
// can reach it, so units running as User=nobody can use it.
func mkdirShared(parent, pattern string) (string, error) {
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	if err := checkTraversable(filepath.Dir(dir)); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("%w; set TMPDIR to a directory that is", err)
	}
	return dir, nil
}

// checkTraversable reports an error if other users cannot search dir or one
// of its parents.
func checkTraversable(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (mode %v) is not traversable by other users", dir, fi.Mode().Perm())
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// ProcessDir returns a directory every user can reach that lives as long as the test binary
// (RunMain removes it), for what a package's tests make once and share.
func ProcessDir(t testing.TB) string {
	t.Helper()
	requireRunMain(t, "ProcessDir")
	dir, err := processDir()
	if err != nil {
		t.Fatalf("testenv: process dir: %v", err)
	}
	return dir
}

// SharedDir returns a new empty directory with mode 0755 that every user can
// reach (unlike t.TempDir, whose parent is 0700). It is removed at t.Cleanup.
// Use it for state directories, restic repositories and sample data that
// units running as User=nobody must reach.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir, err := mkdirShared("", "holdfast-shared-*")
	if err != nil {
		t.Fatalf("testenv: shared dir: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("testenv: remove shared dir: %v", err)
		}
	})
	return dir
}

var holdfastBin struct {
	once sync.Once
	path string
	err  error
}

// BinaryEnv names a holdfast binary already built from this tree, which HoldfastBinary returns
// instead of building one: `make test` builds it once for every test binary.
const BinaryEnv = "HOLDFAST_TEST_BINARY"

// HoldfastBinary builds ./cmd/holdfast once per test binary (a plain build,
// without -race) into a directory every user can read and traverse, and
// returns the binary's absolute path. The module root is found by walking up
// from the working directory to go.mod. With BinaryEnv set it returns that
// binary instead.
func HoldfastBinary(t testing.TB) string {
	t.Helper()
	requireRunMain(t, "HoldfastBinary's build directory")
	holdfastBin.once.Do(func() {
		if bin := os.Getenv(BinaryEnv); bin != "" {
			holdfastBin.path, holdfastBin.err = bin, prebuilt(bin)
			return
		}
		holdfastBin.path, holdfastBin.err = buildHoldfast()
	})
	if holdfastBin.err != nil {
		t.Fatalf("testenv: %v", holdfastBin.err)
	}
	return holdfastBin.path
}

// prebuilt checks that bin, given in BinaryEnv, is an absolute path to an executable file.
func prebuilt(bin string) error {
	if !filepath.IsAbs(bin) {
		return fmt.Errorf("%s=%q: give an absolute path", BinaryEnv, bin)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("%s: %w", BinaryEnv, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o005 != 0o005 {
		return fmt.Errorf("%s=%s: not a file every user may run (mode %s)", BinaryEnv, bin, fi.Mode())
	}
	return nil
}

func buildHoldfast() (string, error) {
	pdir, err := processDir()
	if err != nil {
		return "", fmt.Errorf("build holdfast: %w", err)
	}
	binDir := filepath.Join(pdir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		return "", fmt.Errorf("build holdfast: %w", err)
	}
	if err := os.Chmod(binDir, 0o755); err != nil { // umask
		return "", fmt.Errorf("build holdfast: %w", err)
	}
	bin := filepath.Join(binDir, "holdfast")
	if err := BuildCommand("./cmd/holdfast", bin); err != nil {
		return "", err
	}
	// Beside it, as installed: the daemon's units run it (unitcmd.Binary).
	if err := buildCommand("./cmd/holdfast-unit", filepath.Join(binDir, "holdfast-unit"), unitBuildEnv); err != nil {
		return "", err
	}
	return bin, nil
}

// BuildCommand builds the main package pkg ("./cmd/holdfast": relative to the module root) with
// the go build flags given ("-tags", "x") and copies the executable to dst, which every user may
// run. It asks go run for the executable: go run keeps what it linked in the build cache, where
// go build links again every time (about 2.4 s of CPU here).
func BuildCommand(pkg, dst string, buildFlags ...string) error {
	return buildCommand(pkg, dst, nil, buildFlags...)
}

// unitBuildEnv is how holdfast-unit is built, as the Makefile and the packages build it: without
// cgo (the Makefile says why).
var unitBuildEnv = []string{"CGO_ENABLED=0"}

// buildCommand is BuildCommand with env added to the go command's environment.
func buildCommand(pkg, dst string, env []string, buildFlags ...string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	goBin, err := goTool()
	if err != nil {
		return err
	}
	args := append([]string{"run"}, buildFlags...)
	// go run hands -exec's program the executable's path before its own arguments: cp copies it.
	cmd := exec.Command(goBin, append(args, "-exec", "cp", pkg, dst)...)
	cmd.Dir = root
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s in %s: %v\n%s", pkg, root, err, out)
	}
	return os.Chmod(dst, 0o755) // umask
}

func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find module root: no go.mod above %s", wd)
		}
		dir = parent
	}
}

// goTool finds the go command; go test puts its GOROOT/bin first in PATH.
func goTool() (string, error) {
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build holdfast: %w", err)
	}
	return p, nil
}

// resticVar names the restic binary the tests run (the restic CI matrix, make test-restic).
const resticVar = "HOLDFAST_TEST_RESTIC"

// resticPath is set as the package is initialized, before any test looks restic up in PATH or
// starts a daemon, a manager or restic: the named restic's directory goes first in PATH.
var resticPath = func() string {
	p := os.Getenv(resticVar)
	if p != "" && filepath.IsAbs(p) && filepath.Base(p) == "restic" {
		os.Setenv("PATH", filepath.Dir(p)+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	return p
}()

// Restic returns the path of the restic binary: HOLDFAST_TEST_RESTIC if set, else restic in
// PATH. Without one the test is skipped, or fails under CI=true (scripts/install-deps installs
// it); a HOLDFAST_TEST_RESTIC that is not what PATH finds fails it.
func Restic(t testing.TB) string {
	t.Helper()
	if resticPath == "" {
		return installed(t, "restic")
	}
	if !filepath.IsAbs(resticPath) || filepath.Base(resticPath) != "restic" {
		t.Fatalf("testenv: %s=%q: give the absolute path of a file named restic", resticVar, resticPath)
	}
	if found, err := exec.LookPath("restic"); err != nil || found != resticPath {
		t.Fatalf("testenv: %s=%s, but PATH finds %q (%v)", resticVar, resticPath, found, err)
	}
	// Units run it as other users (nobody): a directory closed to them fails every run 127.
	for dir := filepath.Dir(resticPath); ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Fatalf("testenv: %s=%s: %s is not open to other users, who run it in units (scripts/install-restic puts it under /var/cache)", resticVar, resticPath, dir)
		}
		if dir == "/" {
			break
		}
	}
	return resticPath
}

// Lintian returns the path of lintian, which checks the .deb; as Restic.
func Lintian(t testing.TB) string {
	t.Helper()
	return installed(t, "lintian")
}

// Chromium returns the path of Debian's chromium, for the dashboard's browser test; as Restic.
func Chromium(t testing.TB) string {
	t.Helper()
	return installed(t, "chromium")
}

// Prometheus returns the path of Debian's prometheus, which scrapes the daemon in the metrics'
// test and evaluates an alert rule of the README's; as Restic.
func Prometheus(t testing.TB) string {
	t.Helper()
	return installed(t, "prometheus")
}

// Rpmlint returns the path of rpmlint, which checks the .rpm; as Restic.
func Rpmlint(t testing.TB) string {
	t.Helper()
	return installed(t, "rpmlint")
}

// installed returns the path of the program name, which the Debian package of the same name
// provides.
func installed(t testing.TB, name string) string {
	t.Helper()
	return installedFrom(t, name, name)
}

// installedFrom returns the path of the program name, which the Debian package pkg provides: in
// PATH, or in the sbin directories a user's PATH may lack (mkfs.btrfs, losetup).
func installedFrom(t testing.TB, name, pkg string) string {
	t.Helper()
	if path, err := exec.LookPath(name); err == nil {
		return path
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if path := filepath.Join(dir, name); exists(path) {
			return path
		}
	}
	unavailable(t, "%s is not installed (apt-get install %s, or scripts/install-deps)", name, pkg)
	return ""
}
