package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/runner"
	"github.com/holdfast-backup/holdfast/testenv"
)

// mainStart is when systemd started the unit's main process; zero while it has not.
func mainStart(t *testing.T, m *testenv.Manager, unit string) time.Time {
	t.Helper()
	p, err := m.Conn(t).GetServicePropertyContext(context.Background(), unit, "ExecMainStartTimestamp")
	if err != nil {
		t.Fatal(err)
	}
	us, _ := p.Value.Value().(uint64)
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(int64(us))
}

// An armed service is loaded but not started until its timer's instant, then starts at it; a
// stop of the timer and the service before that instant leaves neither, and nothing started.
func TestArm(t *testing.T) {
	m := testenv.Systemd(t)
	r := connect(t, m)
	ctx := context.Background()
	spec := func(job string) runner.Spec {
		return runner.Spec{Name: runner.UnitName(job, uuid.New(), 1), ExecStart: []string{"/bin/sleep", "30"}}
	}
	at := time.Now().Add(2 * time.Second)
	started, stopped := spec("armed"), spec("disarmed")
	for _, s := range []runner.Spec{started, stopped} {
		if existed, err := r.Arm(ctx, s, at); err != nil || existed {
			t.Fatalf("arm %s: existed=%v err=%v", s.Name, existed, err)
		}
	}
	if existed, err := r.Arm(ctx, started, at); err != nil || !existed {
		t.Fatalf("arm again: existed=%v err=%v; want existed", existed, err)
	}
	for _, s := range []runner.Spec{started, stopped} {
		if alive, st, err := r.Alive(ctx, s.Name); err != nil || alive {
			t.Fatalf("%s before its time: alive=%v %+v %v; want loaded, not started", s.Name, alive, st, err)
		}
		// The call returns once the timer's start job is queued, not done.
		waitFor(t, "the timer to wait", func() bool {
			alive, st, err := r.Alive(ctx, runner.TimerName(s.Name))
			if err != nil || !alive {
				t.Logf("timer of %s: %+v %v", s.Name, st, err)
			}
			return err == nil && alive && st.SubState == "waiting"
		})
	}
	for _, name := range []string{runner.TimerName(stopped.Name), stopped.Name} {
		if err := r.Stop(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the armed service", func() bool { alive, _, _ := r.Alive(ctx, started.Name); return alive })
	got := mainStart(t, m, started.Name)
	if late := got.Sub(at); late < 0 || late > time.Second {
		t.Fatalf("started %s after its instant; want within [0, 1s]", late)
	}
	t.Logf("started %s after its instant", got.Sub(at))
	time.Sleep(500 * time.Millisecond)
	for _, name := range []string{runner.TimerName(stopped.Name), stopped.Name} {
		if alive, st, err := r.Alive(ctx, name); err != nil || alive {
			t.Fatalf("%s after the instant: alive=%v %+v %v; want gone", name, alive, st, err)
		}
	}
	// The timer stays while its service runs, and goes with it.
	if err := r.Stop(ctx, started.Name); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the elapsed timer to go", func() bool {
		alive, _, err := r.Alive(ctx, runner.TimerName(started.Name))
		return err == nil && !alive
	})
}
