package systemd_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/systemd"
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

// timerUSec reads a timestamp of a timer (µs since the epoch; 0 for never).
func timerUSec(t *testing.T, m *testenv.Manager, timer, prop string) uint64 {
	t.Helper()
	p, err := m.Conn(t).GetUnitTypePropertyContext(context.Background(), timer, "Timer", prop)
	if err != nil {
		t.Fatal(err)
	}
	us, _ := p.Value.Value().(uint64)
	return us
}

// triggeredBy is what systemd says triggers the unit (its TriggeredBy dependencies).
func triggeredBy(t *testing.T, m *testenv.Manager, unit string) []string {
	t.Helper()
	p, err := m.Conn(t).GetUnitPropertyContext(context.Background(), unit, "TriggeredBy")
	if err != nil {
		t.Fatal(err)
	}
	names, _ := p.Value.Value().([]string)
	return names
}

// armAhead arms s for margin from now and, before that instant, reads what an armed unit must
// show: the service loaded and not started, its timer waiting to elapse at the instant (no
// sooner, and no later than the manager took to start the timer), with an accuracy of 1µs. It
// returns the instant, and false if any of that was read only once the instant had come (a
// loaded machine): the unit is then stopped again.
func armAhead(t *testing.T, m *testenv.Manager, r *systemd.Client, s systemd.Spec, margin time.Duration) (time.Time, bool) {
	t.Helper()
	ctx := context.Background()
	asked := time.Now()
	at := asked.Add(margin).Truncate(time.Microsecond)
	timer := systemd.TimerName(s.Name)
	if existed, err := r.Arm(ctx, s, at); err != nil || existed {
		t.Fatalf("arm %s: existed=%v err=%v", s.Name, existed, err)
	}
	if existed, err := r.Arm(ctx, s, at); err != nil || !existed {
		t.Fatalf("arm again: existed=%v err=%v; want existed", existed, err)
	}
	// The call returns once the timer's start job is queued, not done.
	var timerState systemd.State
	for {
		alive, st, err := r.Alive(ctx, timer)
		if err != nil {
			t.Fatal(err)
		}
		if timerState = st; alive && st.SubState == "waiting" {
			break
		}
		if !time.Now().Before(at) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	serviceAlive, serviceState, err := r.Alive(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	next, accuracy := m.TimerElapsesAt(t, timer), timerUSec(t, m, timer, "AccuracyUSec")
	read := time.Now()
	if !time.Now().Before(at) {
		t.Logf("armed %s ahead, but read its state only after its instant: again, further ahead", margin)
		for _, name := range []string{timer, s.Name} {
			if err := r.Stop(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		return at, false
	}
	// All read before the instant.
	if timerState.SubState != "waiting" {
		t.Fatalf("timer of %s before its instant: %+v; want waiting", s.Name, timerState)
	}
	if serviceAlive || mainStart(t, m, s.Name) != (time.Time{}) {
		t.Fatalf("%s before its time: alive=%v %+v; want loaded, not started", s.Name, serviceAlive, serviceState)
	}
	// Two readings of the clocks a few microseconds apart.
	const skew = time.Millisecond
	if next.Before(at.Add(-skew)) || next.After(at.Add(read.Sub(asked)+skew)) || accuracy != 1 {
		t.Fatalf("timer of %s elapses at %s with an accuracy of %dµs; want %s, or later by no more than the %s since it was asked for, 1µs",
			s.Name, next.UTC(), accuracy, at.UTC(), read.Sub(asked))
	}
	return at, true
}

// An armed service is loaded but not started until its timer's instant; then its timer starts
// it, never before the instant. A stop of the timer and the service before that instant leaves
// neither, and nothing started. How late after the instant is bench's (BenchmarkLateness).
func TestArm(t *testing.T) {
	m := testenv.Systemd(t)
	r := connect(t, m)
	ctx := context.Background()
	spec := func(job string) systemd.Spec {
		return systemd.Spec{Name: systemd.UnitName(job, uuid.New(), 1), ExecStart: []string{"/bin/sleep", "1000"}}
	}

	// An hour ahead: its stop is always before its instant.
	stopped := spec("disarmed")
	if _, ok := armAhead(t, m, r, stopped, time.Hour); !ok {
		t.Fatal("an instant an hour ahead came before its timer was read")
	}
	for _, name := range []string{systemd.TimerName(stopped.Name), stopped.Name} {
		if err := r.Stop(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{systemd.TimerName(stopped.Name), stopped.Name} {
		testenv.WaitFor(t, name+" to go", func() bool {
			alive, _, err := r.Alive(ctx, name)
			return err == nil && !alive
		})
	}
	if got := mainStart(t, m, stopped.Name); !got.IsZero() {
		t.Fatalf("the disarmed service started at %s", got)
	}

	// A few seconds ahead, and further should a loaded machine let the instant come before the
	// timer was seen waiting for it.
	var started systemd.Spec
	var at time.Time
	for margin := 3 * time.Second; ; margin *= 2 {
		started = spec("armed")
		var ok bool
		if at, ok = armAhead(t, m, r, started, margin); ok {
			break
		}
		if margin > time.Minute {
			t.Fatalf("not armed %s ahead of its instant", margin)
		}
	}
	timer := systemd.TimerName(started.Name)
	testenv.WaitFor(t, "the armed service", func() bool { alive, _, _ := r.Alive(ctx, started.Name); return alive })
	var got time.Time
	testenv.WaitFor(t, "its main process", func() bool { got = mainStart(t, m, started.Name); return !got.IsZero() })
	// Its timer started it: the timer elapsed at the instant or after, and the service started
	// after that.
	trigger := time.UnixMicro(int64(timerUSec(t, m, timer, "LastTriggerUSec")))
	if by := triggeredBy(t, m, started.Name); !slices.Contains(by, timer) {
		t.Fatalf("%s is triggered by %v, want its timer %s", started.Name, by, timer)
	}
	if trigger.Before(at) || got.Before(trigger) {
		t.Fatalf("timer elapsed at %s, service started at %s; want both at or after the instant %s, the start after the elapse",
			trigger.UTC(), got.UTC(), at.UTC())
	}
	t.Logf("started %s after its instant", got.Sub(at))
	// The timer stays while its service runs, and goes with it.
	if alive, _, err := r.Alive(ctx, timer); err != nil || !alive {
		t.Fatalf("the elapsed timer is gone while its service runs: %v", err)
	}
	if err := r.Stop(ctx, started.Name); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the elapsed timer to go", func() bool {
		alive, _, err := r.Alive(ctx, timer)
		return err == nil && !alive
	})
}

// A manager far behind (frozen here) that starts the timer only after its instant still starts
// the service: as long after that as the instant was ahead when asked, never not at all. A
// calendar instant already past when the timer started would never elapse.
func TestArmStartedLate(t *testing.T) {
	m := testenv.PrivateSystemd(t)
	r := connect(t, m)
	ctx := context.Background()
	s := systemd.Spec{Name: systemd.UnitName("late", uuid.New(), 1), ExecStart: []string{"/bin/sleep", "1000"}}
	const lead = 300 * time.Millisecond
	m.Freeze(t)
	at := time.Now().Add(lead)
	armed := make(chan error, 1)
	go func() {
		_, err := r.Arm(ctx, s, at)
		armed <- err
	}()
	time.Sleep(lead + time.Second)
	m.Thaw(t)
	thawed := time.Now()
	if err := <-armed; err != nil {
		t.Fatal(err)
	}
	var got time.Time
	testenv.WaitFor(t, "the service armed while the manager was frozen", func() bool { got = mainStart(t, m, s.Name); return !got.IsZero() })
	if got.Before(thawed) {
		t.Fatalf("started at %s, before the manager that was to start its timer went on at %s", got.UTC(), thawed.UTC())
	}
	t.Logf("started %s after its instant, %s after the manager went on", got.Sub(at), got.Sub(thawed))
}
