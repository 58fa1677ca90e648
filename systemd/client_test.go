package systemd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

func connect(t *testing.T, m *testenv.Manager) *systemd.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := systemd.New(ctx, systemd.Config{Address: m.Address})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func markerCmd(bin, stateDir string, run uuid.UUID, attempt int, unit string) []string {
	return []string{bin, "marker", "--state-dir", stateDir, "--run", run.String(), "--attempt", "1", "--unit", unit}
}

// A unit runs the argv it was given literally ($ is not expanded), its ExecStopPost writes the
// marker with systemd's verdict, and a second start of the same name creates nothing.
func TestStartWritesMarker(t *testing.T) {
	m := testenv.Systemd(t)
	r := connect(t, m)
	bin := testenv.HoldfastBinary(t)
	state := testenv.SharedDir(t)
	out := filepath.Join(state, "argv.txt")
	run := uuid.New()
	name := systemd.UnitName("argv-test", run, 1)
	spec := systemd.Spec{
		Name:         name,
		ExecStart:    []string{"/bin/sh", "-c", `printf '%s' "$1" > "$2"; exit 3`, "sh", "lit$HOME${X}", out},
		ExecStopPost: markerCmd(bin, state, run, 1, name),
	}
	ctx := context.Background()
	existed, err := r.Start(ctx, spec)
	if err != nil || existed {
		t.Fatalf("start: existed=%v err=%v", existed, err)
	}
	var marker systemd.Marker
	testenv.WaitFor(t, "the marker", func() bool {
		marker, err = systemd.ReadMarker(state, run, 1)
		return err == nil
	})
	if marker.ServiceResult != "exit-code" || marker.ExitCode != "exited" || marker.ExitStatus != "3" || marker.Unit != name {
		t.Fatalf("marker = %+v, want exit-code exited 3 for %s", marker, name)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "lit$HOME${X}" {
		t.Fatalf("argv reached the command as %q, want it literal", got)
	}
	// The failed unit is collected: nothing of it is left, and its name reads as not alive.
	testenv.WaitFor(t, "the unit to be collected", func() bool {
		alive, st, err := r.Alive(ctx, name)
		return err == nil && !alive && st.LoadState == "not-found"
	})
}

func TestStartTwiceIsOneUnit(t *testing.T) {
	m := testenv.Systemd(t)
	r := connect(t, m)
	name := systemd.UnitName("twice", uuid.New(), 1)
	spec := systemd.Spec{Name: name, ExecStart: []string{"/bin/sleep", "30"}, KillSignal: syscall.SIGINT}
	ctx := context.Background()
	if existed, err := r.Start(ctx, spec); err != nil || existed {
		t.Fatalf("first start: existed=%v err=%v", existed, err)
	}
	existed, err := r.Start(ctx, spec)
	if err != nil || !existed {
		t.Fatalf("second start: existed=%v err=%v, want existed", existed, err)
	}
	if err := r.Stop(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// Alive tells a running unit, a stopped one and an unknown one apart, and a manager that cannot
// be reached is an error, never "gone". After the manager is back, the client redials.
func TestAliveStopAndUnreachable(t *testing.T) {
	m := testenv.PrivateSystemd(t)
	r := connect(t, m)
	bin := testenv.HoldfastBinary(t)
	state := testenv.SharedDir(t)
	ctx := context.Background()
	run := uuid.New()
	name := systemd.UnitName("alive", run, 1)
	spec := systemd.Spec{Name: name, ExecStart: []string{"/bin/sleep", "60"}, KillSignal: syscall.SIGINT,
		ExecStopPost: markerCmd(bin, state, run, 1, name), TimeoutStop: 5 * time.Second}
	if _, err := r.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the unit to be active", func() bool {
		alive, st, err := r.Alive(ctx, name)
		return err == nil && alive && st.ActiveState == "active"
	})
	alive, _, err := r.Alive(ctx, systemd.UnitName("never", uuid.New(), 1))
	if err != nil || alive {
		t.Fatalf("unknown unit: alive=%v err=%v, want false, nil", alive, err)
	}
	if err := r.Stop(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctx, name); err != nil { // idempotent
		t.Fatalf("second stop: %v", err)
	}
	var marker systemd.Marker
	testenv.WaitFor(t, "the marker after stop", func() bool {
		marker, err = systemd.ReadMarker(state, run, 1)
		return err == nil
	})
	if marker.ExitCode != "killed" || marker.ExitStatus != "INT" {
		t.Fatalf("marker after stop = %+v, want killed by INT (KillSignal)", marker)
	}

	m.Kill(t)
	if _, _, err := r.Alive(ctx, name); err == nil {
		t.Fatal("Alive with the manager down returned no error: 'could not ask' must never read as an answer")
	}
	m.Start(t)
	alive, _, err = r.Alive(ctx, name)
	if err != nil || alive {
		t.Fatalf("after the manager came back: alive=%v err=%v, want false, nil (redialed)", alive, err)
	}
}

// A job's unit runs as its user; the marker is still written where only root can write.
func TestUserUnitPrivilegedMarker(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run units as nobody")
	}
	m := testenv.Systemd(t)
	r := connect(t, m)
	bin := testenv.HoldfastBinary(t)
	state := testenv.SharedDir(t)
	if err := os.MkdirAll(filepath.Join(state, "markers"), 0o755); err != nil {
		t.Fatal(err)
	}
	whoami := filepath.Join(state, "who")
	if err := os.Mkdir(whoami, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(whoami, 0o777); err != nil {
		t.Fatal(err)
	}
	run := uuid.New()
	name := systemd.UnitName("as-nobody", run, 1)
	nice := 5
	spec := systemd.Spec{Name: name, User: "nobody", Nice: &nice, IOSchedulingClass: "idle",
		ExecStart:    []string{"/bin/sh", "-c", `id -un > "$1"/user; touch "$2" 2>/dev/null && echo wrote > "$1"/escalated; exit 0`, "sh", whoami, filepath.Join(state, "markers", "forged")},
		ExecStopPost: markerCmd(bin, state, run, 1, name),
		RuntimeMax:   time.Minute, SyslogIdentifier: "holdfast-as-nobody",
		LogExtraFields: map[string]string{"HOLDFAST_RUN": run.String()}}
	if _, err := r.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	var marker systemd.Marker
	var err error
	testenv.WaitFor(t, "the marker", func() bool {
		marker, err = systemd.ReadMarker(state, run, 1)
		return err == nil
	})
	if marker.ServiceResult != "success" {
		t.Fatalf("marker = %+v, want success", marker)
	}
	user, err := os.ReadFile(filepath.Join(whoami, "user"))
	if err != nil || strings.TrimSpace(string(user)) != "nobody" {
		t.Fatalf("unit ran as %q (%v), want nobody", user, err)
	}
	if _, err := os.Stat(filepath.Join(whoami, "escalated")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the unit's user could write into the markers directory")
	}
}

func TestUnitName(t *testing.T) {
	run := uuid.MustParse("3f2a9c1e-4b5d-4e7f-8a9b-0c1d2e3f4a5b")
	if got, want := systemd.UnitName("nightly", run, 2), "holdfast-nightly-3f2a9c1e-4b5d-4e7f-8a9b-0c1d2e3f4a5b-a2.service"; got != want {
		t.Fatalf("UnitName = %q, want %q", got, want)
	}
	long := strings.Repeat("x", 300)
	if got := systemd.UnitName(long, run, 1); len(got) > systemd.MaxUnitName {
		t.Fatalf("unit name of %d chars, over the limit", len(got))
	}
}
