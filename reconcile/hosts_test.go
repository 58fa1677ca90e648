package reconcile_test

import (
	"context"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

// A start that failed after it reached systemd leaves a unit the database does not name. The
// attempt stays its host's; when another host takes it over, the host back stops that unit,
// found by the name the attempt gives it.
func TestSupersededUnitOfAGivenBackClaimIsStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var h1 model.Lease // the lease h1's reconciler writes under
	e := newSweepEnv(t, reconcile.Config{Host: "h1", AllowCommandJobs: true,
		HeldLease: func() (model.Lease, bool) { return h1, true }})
	st, r, rec := e.st, e.r, e.rec
	h1 = storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "test-h1"})
	h2 := storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h2", Holder: "test-h2"})
	run := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: "any", Engine: "command"}})
	unit := systemd.UnitName("any", run.ID, 1)
	if ok, _, err := st.AttemptClaimSpawn(ctx, h1, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit}); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	props := []sddbus.Property{sddbus.PropType("exec"), sddbus.PropExecStart([]string{"/bin/sleep", "300"}, false)}
	if _, err := e.mgr.Conn(t).StartTransientUnitContext(ctx, unit, "replace", props, make(chan string, 1)); err != nil {
		t.Fatal(err)
	}
	if err := st.AttemptReleaseSpawnClaim(ctx, h1, store.AttemptReleaseSpawnClaimParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit, MayExist: true}); err != nil {
		t.Fatal(err)
	}

	// h1 goes down; h2 takes the run over.
	storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "test-h1", Duration: 200 * time.Millisecond})
	time.Sleep(400 * time.Millisecond)
	if done, err := st.RunTakeOver(ctx, h2, model.TakeOver{RunID: run.ID, Attempt: 1, From: "h1",
		Settlement: &ledger.Settlement{Release: true, Source: "test"}}); err != nil || !done {
		t.Fatalf("take over: %v %v", done, err)
	}
	h1 = storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "test-h1"})
	if alive, _, err := r.Alive(ctx, unit); err != nil || !alive {
		t.Fatalf("the unit before h1's sweep: alive %v, %v", alive, err)
	}
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(50 * time.Millisecond) {
		if stats, err := rec.Sweep(ctx); err != nil || stats.Errors > 0 {
			t.Fatalf("sweep: %+v %v", stats, err)
		}
		alive, _, err := r.Alive(ctx, unit)
		if err != nil {
			t.Fatal(err)
		}
		if !alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the superseded attempt's unit is still alive")
		}
	}
	attempts, err := st.AttemptList(ctx, run.ID)
	if err != nil || len(attempts) != 2 || attempts[0].SupersededBy != "h2" || attempts[0].Unit != "" {
		t.Fatalf("attempts: %+v %v, want the first, with no unit recorded, superseded by h2", attempts, err)
	}
}
