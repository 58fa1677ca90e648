package supervisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/systemd"
)

// waitArmed polls the record until the job's run has an attempt claimed and armed for slot.
// ok is false if that was not so before the slot came (on a loaded machine, admission or the
// spawn came too late to arm it): such a run is started at its time, not by a timer.
func (e env) waitArmed(t *testing.T, job string, slot time.Time) (run model.Run, a model.Attempt, ok bool) {
	t.Helper()
	ctx := context.Background()
	for {
		runs, err := e.st.RunList(ctx, job, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) > 1 {
			t.Fatalf("job %s: runs %+v, want one for the slot %s", job, runs, slot)
		}
		if len(runs) == 1 {
			attempts, err := e.st.AttemptList(ctx, runs[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if a := attempts[0]; a.Unit != "" && a.ArmedFor != nil {
				if !a.ArmedFor.Equal(slot) || runs[0].PlannedAt == nil || !runs[0].PlannedAt.Equal(slot) || runs[0].Status != model.StatusQueued {
					t.Fatalf("run %+v armed for %s, want queued, planned and armed for the slot %s", runs[0], a.ArmedFor, slot)
				}
				// Claimed and armed before the slot, on the record's clock.
				return runs[0], a, a.SpawnClaimedAt != nil && a.SpawnClaimedAt.Before(slot)
			} else if a.Unit != "" {
				return runs[0], a, false // spawned at its time: too near the slot to arm
			}
		}
		if !time.Now().Before(slot) {
			t.Logf("job %s: no run armed before its slot (runs: %+v)", job, runs)
			if len(runs) == 1 {
				return runs[0], model.Attempt{}, false
			}
			return model.Run{}, model.Attempt{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// timerWaiting reads, before slot, that the armed attempt's timer waits to elapse at slot (no
// sooner, and no later than the time since the claim, which came before the arming) and that
// its service is loaded and not started. ok is false if that could be read only once the slot
// had come (a loaded machine).
func (e env) timerWaiting(t *testing.T, a model.Attempt, slot time.Time) (ok bool) {
	t.Helper()
	ctx := context.Background()
	timer := systemd.TimerName(a.Unit)
	var timerState systemd.State
	for {
		alive, st, err := e.cfg.Runner.Alive(ctx, timer)
		if err != nil {
			t.Fatal(err)
		}
		// The unit is recorded at the claim, before systemd is asked to arm it.
		if timerState = st; alive && st.SubState == "waiting" || !time.Now().Before(slot) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	next := e.mgr.TimerElapsesAt(t, timer)
	read := time.Now()
	serviceAlive := e.alive(t, a.Unit)
	if !time.Now().Before(slot) {
		return false
	}
	if timerState.SubState != "waiting" || serviceAlive {
		t.Fatalf("before the slot: timer %+v, service alive %v; want the timer waiting and the service not started", timerState, serviceAlive)
	}
	if a.SpawnClaimedAt == nil {
		t.Fatalf("attempt armed without a claim: %+v", a)
	}
	// Two readings of the clocks a few microseconds apart.
	const skew = time.Millisecond
	if next.Before(slot.Add(-skew)) || next.After(slot.Add(read.Sub(*a.SpawnClaimedAt)+skew)) {
		t.Fatalf("timer %s elapses at %s, want at the slot %s, or later by no more than the %s since the claim", timer, next.UTC(),
			slot.UTC(), read.Sub(*a.SpawnClaimedAt))
	}
	return true
}

func (e env) alive(t *testing.T, unit string) bool {
	t.Helper()
	alive, _, err := e.cfg.Runner.Alive(context.Background(), unit)
	if err != nil {
		t.Fatal(err)
	}
	return alive
}

// A scheduled run is admitted and armed ahead of its slot, and its timer starts its unit at the
// slot (never before it); the run ends succeeded. A run stopped before its slot leaves neither its
// timer nor a started service. How late after the slot the unit starts is bench's
// (BenchmarkLateness).
func TestScheduledStartsOnTime(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	// Both slots are admitted and armed at once: the called-off one is an hour ahead, so that
	// its stop never races its slot.
	e.cfg.Reconcile.StartLead = 2 * time.Hour
	// Once the slot has come, a unit its timer has not started yet is not taken for gone.
	e.cfg.Reconcile.SpawnGrace = time.Minute
	release := filepath.Join(filepath.Dir(e.cfg.Reconcile.StateDir), "release")
	// It runs until the test has read how it was started: its timer goes when it ends.
	wait := []string{"/bin/sh", "-c", `until [ -e "$0" ]; do sleep 0.05; done`, release}
	offSlot := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	e.scheduled(t, "called-off", "@every 24h", offSlot, "/bin/sleep", "30")
	e.start(t)
	stop := func(id uuid.UUID, host string) {
		t.Helper()
		_, unreached, err := runctl.StopRun(ctx, e.st, func(ctx context.Context) (runctl.Units, error) {
			return systemd.New(ctx, e.cfg.Systemd)
		}, id, host)
		if err != nil || unreached != nil {
			t.Fatalf("stop: %v %v", unreached, err)
		}
	}

	// Twenty seconds ahead; further, should a loaded machine's setup let the slot come first.
	var run model.Run
	var a model.Attempt
	var slot time.Time
	for i, margin := 0, 20*time.Second; ; i, margin = i+1, 2*margin {
		job := fmt.Sprintf("ontime%d", i)
		slot = time.Now().Add(margin).Truncate(time.Millisecond)
		e.scheduled(t, job, "@every 24h", slot, wait...)
		var ok bool
		if run, a, ok = e.waitArmed(t, job, slot); ok && e.timerWaiting(t, a, slot) {
			break
		}
		if run.ID != uuid.Nil {
			stop(run.ID, a.Host) // out of the way
		}
		if margin > 2*time.Minute {
			t.Fatalf("no run armed %s ahead of its slot", margin)
		}
		t.Logf("the slot %s ahead came before its run was armed: again, further ahead", margin)
	}
	t.Logf("armed %s before the slot", time.Until(slot).Round(time.Millisecond))

	off, offAttempt, ok := e.waitArmed(t, "called-off", offSlot)
	if !ok {
		t.Fatal("a slot an hour ahead came before its run was armed")
	}
	stop(off.ID, offAttempt.Host)

	// The main process's start, read while the unit is there (it goes once it has ended).
	var started time.Time
	conn := e.mgr.Conn(t)
	for deadline := slot.Add(time.Minute); started.IsZero(); time.Sleep(20 * time.Millisecond) {
		p, err := conn.GetServicePropertyContext(ctx, a.Unit, "ExecMainStartTimestamp")
		if err != nil {
			t.Fatal(err)
		}
		if us, _ := p.Value.Value().(uint64); us > 0 {
			started = time.UnixMicro(int64(us))
		}
		if time.Now().After(deadline) {
			t.Fatalf("unit %s not started a minute after its slot", a.Unit)
		}
	}
	// Its timer started it: the timer elapsed at the slot or after, and the service started after.
	timer := systemd.TimerName(a.Unit)
	p, err := conn.GetUnitPropertyContext(ctx, a.Unit, "TriggeredBy")
	if err != nil {
		t.Fatal(err)
	}
	if by, _ := p.Value.Value().([]string); !slices.Contains(by, timer) {
		t.Fatalf("%s is triggered by %v, want its timer %s", a.Unit, by, timer)
	}
	if p, err = conn.GetUnitTypePropertyContext(ctx, timer, "Timer", "LastTriggerUSec"); err != nil {
		t.Fatal(err)
	}
	us, _ := p.Value.Value().(uint64)
	if trigger := time.UnixMicro(int64(us)); trigger.Before(slot) || started.Before(trigger) {
		t.Fatalf("timer elapsed at %s, unit started at %s; want both at or after the slot %s, the start after the elapse",
			trigger.UTC(), started.UTC(), slot.UTC())
	}
	t.Logf("unit started %s after its slot", started.Sub(slot).Round(time.Millisecond))
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e.waitEnded(t, run.ID.String(), time.Minute); r.Status != model.StatusSucceeded || r.StartedAt == nil {
		t.Fatalf("run %s (%s), started %v; want succeeded", r.Status, r.Reason, r.StartedAt)
	}

	// The stopped run's service never started, and its timer is gone.
	r := e.waitEnded(t, off.ID.String(), time.Minute)
	if r.Status != model.StatusStopped || !strings.Contains(r.Reason, "stopped by the operator before it was started") {
		t.Fatalf("stopped run: %s (%s), want stopped by the operator before it was started", r.Status, r.Reason)
	}
	t.Logf("stopped run: %s", r.Reason)
	for _, unit := range []string{offAttempt.Unit, systemd.TimerName(offAttempt.Unit)} {
		if e.alive(t, unit) {
			t.Fatalf("%s of the stopped run is alive after its end", unit)
		}
	}
	if _, err := systemd.ReadMarker(e.cfg.Reconcile.StateDir, off.ID, 1); err == nil {
		t.Fatal("the stopped run's service ran: it left an exit marker")
	}
}
