package supervisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/runner"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/supervisor"
)

// waitArmed polls the record until the job's run has an attempt armed for slot, which must
// happen before the slot.
func (e env) waitArmed(t *testing.T, job string, slot time.Time) (store.Run, store.Attempt) {
	t.Helper()
	ctx := context.Background()
	for {
		runs, err := e.st.Runs(ctx, job, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) == 1 {
			attempts, err := e.st.Attempts(ctx, runs[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if a := attempts[0]; a.Unit != "" && a.ArmedFor != nil {
				if !a.ArmedFor.Equal(slot) || runs[0].PlannedAt == nil || !runs[0].PlannedAt.Equal(slot) || runs[0].Status != store.StatusQueued {
					t.Fatalf("run %+v armed for %s, want queued, planned and armed for the slot %s", runs[0], a.ArmedFor, slot)
				}
				return runs[0], a
			}
		}
		if !time.Now().Before(slot) {
			t.Fatalf("job %s: no run armed before its slot (runs: %+v)", job, runs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e env) alive(t *testing.T, unit string) bool {
	t.Helper()
	alive, _, err := e.cfg.Runner.Alive(context.Background(), unit)
	if err != nil {
		t.Fatal(err)
	}
	return alive
}

// A scheduled run is admitted and armed ahead of its slot, and systemd starts its unit at the
// slot itself (its main process starts within a second after it, never before); the run ends
// succeeded. A run stopped before its slot leaves neither its timer nor a started service.
func TestScheduledStartsOnTime(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cfg.SpawnGrace = 5 * time.Second // should a loaded machine's pass reach the stop only after the slot
	slot := time.Now().Add(6 * time.Second).Truncate(time.Millisecond)
	e.scheduled(t, "ontime", "@every 1h", slot, "/bin/sleep", "3")
	e.scheduled(t, "called-off", "@every 1h", slot, "/bin/sleep", "30")
	e.start(t)

	run, a := e.waitArmed(t, "ontime", slot)
	off, offAttempt := e.waitArmed(t, "called-off", slot)
	if e.alive(t, a.Unit) || !e.alive(t, runner.TimerName(a.Unit)) {
		t.Fatalf("before the slot: want the timer waiting and the service not started")
	}
	t.Logf("armed %s before the slot", time.Until(slot).Round(time.Millisecond))
	_, unreached, err := supervisor.StopRun(ctx, e.st, func(ctx context.Context) (*runner.Runner, error) {
		return runner.New(ctx, e.cfg.Systemd)
	}, off.ID, offAttempt.Host)
	if err != nil || unreached != nil {
		t.Fatalf("stop: %v %v", unreached, err)
	}
	if !time.Now().Before(slot) {
		t.Fatalf("the stop came only %s after the slot", time.Since(slot))
	}

	// The main process's start, read while the unit is there (it goes once it has ended).
	var started time.Time
	conn := e.mgr.Conn(t)
	for deadline := slot.Add(5 * time.Second); started.IsZero(); time.Sleep(20 * time.Millisecond) {
		p, err := conn.GetServicePropertyContext(ctx, a.Unit, "ExecMainStartTimestamp")
		if err != nil {
			t.Fatal(err)
		}
		if us, _ := p.Value.Value().(uint64); us > 0 {
			started = time.UnixMicro(int64(us))
		}
		if time.Now().After(deadline) {
			t.Fatalf("unit %s not started 5s after its slot", a.Unit)
		}
	}
	if late := started.Sub(slot); late < 0 || late > time.Second {
		t.Fatalf("unit started %s after its slot, want within [0, 1s]", late)
	}
	t.Logf("unit started %s after its slot", started.Sub(slot).Round(time.Millisecond))
	if r := e.waitEnded(t, run.ID.String(), 20*time.Second); r.Status != store.StatusSucceeded || r.StartedAt == nil {
		t.Fatalf("run %s (%s), started %v; want succeeded", r.Status, r.Reason, r.StartedAt)
	}

	// The stopped run's service never started, and its timer is gone.
	r := e.waitEnded(t, off.ID.String(), 20*time.Second)
	if r.Status != store.StatusStopped || !strings.Contains(r.Reason, "stopped by the operator") {
		t.Fatalf("stopped run: %s (%s), want stopped by the operator", r.Status, r.Reason)
	}
	t.Logf("stopped run: %s", r.Reason)
	for _, unit := range []string{offAttempt.Unit, runner.TimerName(offAttempt.Unit)} {
		if e.alive(t, unit) {
			t.Fatalf("%s of the stopped run is alive after its slot", unit)
		}
	}
	if _, err := runner.ReadMarker(e.cfg.StateDir, off.ID, 1); err == nil {
		t.Fatal("the stopped run's service ran: it left an exit marker")
	}
}
