package testenv_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

func TestPostgres(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var one int
	var db string
	if err := conn.QueryRow(ctx, "select 1, current_database()").Scan(&one, &db); err != nil {
		t.Fatal(err)
	}
	if one != 1 || !strings.HasPrefix(db, "holdfast_test_") {
		t.Fatalf("got %d, %q", one, db)
	}
	if other := testenv.Postgres(t); other == dsn {
		t.Fatalf("two calls returned the same database %s", dsn)
	}
}

// execCommand is the D-Bus form of an Exec* line: a(sasb).
type execCommand struct {
	Path             string
	Args             []string
	UncleanIsFailure bool
}

func execProp(name string, argv ...string) sdbus.Property {
	return sdbus.Property{Name: name, Value: dbus.MakeVariant([]execCommand{{Path: argv[0], Args: argv}})}
}

// markerProp makes ExecStopPost write "$SERVICE_RESULT $EXIT_CODE
// $EXIT_STATUS" to path; $$ keeps systemd from expanding the variables.
func markerProp(path string) sdbus.Property {
	return execProp("ExecStopPost", "/bin/sh", "-c", `echo "$$SERVICE_RESULT $$EXIT_CODE $$EXIT_STATUS" >"$$1"`, "sh", path)
}

func unitName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "holdfast-testenv-" + hex.EncodeToString(b) + ".service"
}

func startUnit(t *testing.T, m *testenv.Manager, conn *sdbus.Conn, name string, props ...sdbus.Property) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := make(chan string, 1) // unbuffered would stall later jobs
	if !slices.ContainsFunc(props, func(p sdbus.Property) bool { return p.Name == "Type" }) {
		props = append([]sdbus.Property{{Name: "Type", Value: dbus.MakeVariant("exec")}}, props...)
	}
	if _, err := conn.StartTransientUnitContext(ctx, name, "fail", props, ch); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	select {
	case res := <-ch:
		if res != "done" {
			st, _ := m.SystemctlErr("show", "-p", "Result", "-p", "ExecMainCode", "-p", "ExecMainStatus", name)
			var log []byte
			if m.JournalDir != "" {
				log, _ = exec.Command("journalctl", "--directory", m.JournalDir, "--no-pager",
					"USER_UNIT="+name, "+", "_SYSTEMD_UNIT="+name).CombinedOutput()
			}
			t.Fatalf("start %s: job %s\n%s%s", name, res, st, log)
		}
	case <-ctx.Done():
		t.Fatalf("start %s: no job result", name)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func TestSystemdTransientUnit(t *testing.T) {
	t.Parallel()
	m := testenv.PrivateSystemd(t)
	conn := m.Conn(t)
	marker := filepath.Join(t.TempDir(), "marker")
	name := unitName()
	// The sleep: systemd 252 may fail the start job of a Type=exec unit
	// whose process exits before the manager noticed the exec
	// (systemd#28304), which happens under load.
	startUnit(t, m, conn, name,
		sdbus.Property{Name: "SyslogIdentifier", Value: dbus.MakeVariant(name)},
		execProp("ExecStart", "/bin/sh", "-c", "echo hello-from-unit; sleep 0.2"),
		markerProp(marker))

	if !testenv.Eventually(30*time.Second, func() bool { return readFile(marker) != "" }) {
		t.Fatal("ExecStopPost wrote no marker")
	}
	if got := strings.TrimSpace(readFile(marker)); got != "success exited 0" {
		t.Fatalf("marker %q, want %q", got, "success exited 0")
	}

	// Under load journald may read a short-lived process's metadata only
	// after it is gone and then logs its lines without _SYSTEMD_UNIT;
	// SYSLOG_IDENTIFIER comes with the stream and is always there.
	var journal string
	if !testenv.Eventually(30*time.Second, func() bool {
		out, _ := exec.Command("journalctl", "--directory", m.JournalDir, "--no-pager", "-o", "cat",
			"_SYSTEMD_UNIT="+name, "+", "SYSLOG_IDENTIFIER="+name).CombinedOutput()
		journal = string(out)
		return strings.Contains(journal, "hello-from-unit")
	}) {
		t.Fatalf("journal of %s lacks hello-from-unit:\n%s", name, journal)
	}
	if out, _ := exec.Command("journalctl", "--directory", m.JournalDir, "--no-pager", "-o", "cat", "_SYSTEMD_UNIT="+name).CombinedOutput(); !strings.Contains(string(out), "hello-from-unit") {
		t.Logf("hello-from-unit without _SYSTEMD_UNIT")
	}

	if out := m.Systemctl(t, "show", "--property=Version"); !strings.HasPrefix(out, "Version=") {
		t.Fatalf("systemctl show: %q", out)
	}
	if _, err := m.SystemctlErr("is-active", name); err == nil {
		t.Fatalf("%s is still active", name)
	}
}

func TestSystemdUserNobody(t *testing.T) {
	t.Parallel()
	m := testenv.Systemd(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	state := filepath.Join(testenv.SharedDir(t), "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, uid, gid); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(state, "out")
	// oneshot: the start job is done when the process has exited 0.
	startUnit(t, m, m.Conn(t), unitName(),
		sdbus.Property{Name: "Type", Value: dbus.MakeVariant("oneshot")},
		sdbus.Property{Name: "User", Value: dbus.MakeVariant("nobody")},
		execProp("ExecStart", "/bin/sh", "-c", `id -un >"$$1"`, "sh", out))
	if got := strings.TrimSpace(readFile(out)); got != "nobody" {
		t.Fatalf("unit wrote %q, want nobody", got)
	}
}

// cgroupPids returns the pids in a unit's cgroup.
func cgroupPids(t *testing.T, conn *sdbus.Conn, unit string) []int {
	t.Helper()
	p, err := conn.GetServicePropertyContext(context.Background(), unit, "ControlGroup")
	if err != nil {
		t.Fatal(err)
	}
	cg, _ := p.Value.Value().(string)
	if cg == "" {
		return nil
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup"} {
		b, err := os.ReadFile(filepath.Join(root, cg, "cgroup.procs"))
		if err != nil {
			continue
		}
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			pids = append(pids, pid)
		}
		return pids
	}
	t.Fatalf("no cgroup.procs for %s", cg)
	return nil
}

func unitProp(t *testing.T, conn *sdbus.Conn, unit, prop string) string {
	t.Helper()
	p, err := conn.GetUnitPropertyContext(context.Background(), unit, prop)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := p.Value.Value().(string)
	return s
}

func TestSystemdKill(t *testing.T) {
	t.Parallel()
	m := testenv.PrivateSystemd(t)
	conn := m.Conn(t)
	marker := filepath.Join(t.TempDir(), "marker")
	name := unitName()
	// The subshell's sleep is daemonized: it is reparented to the manager.
	startUnit(t, m, conn, name,
		execProp("ExecStart", "/bin/sh", "-c", "(sleep 1000 &); exec sleep 1000"),
		markerProp(marker))
	var pids []int
	if !testenv.Eventually(30*time.Second, func() bool { pids = cgroupPids(t, conn, name); return len(pids) == 2 }) {
		t.Fatalf("unit has pids %v, want 2 sleeps", pids)
	}

	m.Kill(t)
	for _, pid := range pids {
		if testenv.ProcessAlive(pid) {
			t.Errorf("pid %d survived Kill", pid)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("ExecStopPost ran on Kill: %q", readFile(marker))
	}

	m.Start(t)
	conn = m.Conn(t)
	if got := unitProp(t, conn, name, "LoadState"); got != "not-found" {
		t.Fatalf("after Start, %s has LoadState %q, want not-found", name, got)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("ExecStopPost ran after Start: %q", readFile(marker))
	}
	// The new manager works.
	startUnit(t, m, conn, unitName(),
		sdbus.Property{Name: "Type", Value: dbus.MakeVariant("oneshot")},
		execProp("ExecStart", "/bin/true"))
}

func TestSystemdExit(t *testing.T) {
	t.Parallel()
	m := testenv.PrivateSystemd(t)
	conn := m.Conn(t)
	marker := filepath.Join(t.TempDir(), "marker")
	name := unitName()
	startUnit(t, m, conn, name,
		sdbus.Property{Name: "SyslogIdentifier", Value: dbus.MakeVariant(name)},
		execProp("ExecStart", "/bin/sh", "-c", "echo before-exit; exec sleep 1000"),
		markerProp(marker))
	pids := cgroupPids(t, conn, name)
	journal := func() string {
		out, _ := exec.Command("journalctl", "--directory", m.JournalDir, "--no-pager", "-o", "cat", "SYSLOG_IDENTIFIER="+name).CombinedOutput()
		return string(out)
	}
	if !testenv.Eventually(30*time.Second, func() bool { return strings.Contains(journal(), "before-exit") }) {
		t.Fatalf("journal lacks before-exit:\n%s", journal())
	}

	m.Exit(t)
	if got := strings.TrimSpace(readFile(marker)); got != "success killed TERM" {
		t.Fatalf("marker %q, want %q", got, "success killed TERM")
	}
	for _, pid := range pids {
		if testenv.ProcessAlive(pid) {
			t.Errorf("pid %d survived Exit", pid)
		}
	}

	m.Start(t)
	if got := unitProp(t, m.Conn(t), name, "LoadState"); got != "not-found" {
		t.Fatalf("after Start, %s has LoadState %q, want not-found", name, got)
	}
	if !strings.Contains(journal(), "before-exit") {
		t.Fatalf("journal lost before-exit across Exit and Start:\n%s", journal())
	}
}

func TestHoldfastBinary(t *testing.T) {
	t.Parallel()
	if ents, _ := filepath.Glob("../cmd/holdfast/*.go"); len(ents) == 0 {
		t.Skip("no ./cmd/holdfast yet")
	}
	bin := testenv.HoldfastBinary(t)
	m := testenv.Systemd(t)
	// A unit running as nobody must be able to execute it.
	startUnit(t, m, m.Conn(t), unitName(),
		sdbus.Property{Name: "Type", Value: dbus.MakeVariant("oneshot")},
		sdbus.Property{Name: "User", Value: dbus.MakeVariant("nobody")},
		execProp("ExecStart", "/usr/bin/test", "-x", bin))
}
