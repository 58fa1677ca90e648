package reconcile

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/systemd"
)

// The spawn grace is measured on one clock, the database's, which stamped the spawn claim: a
// daemon whose clock is hours off neither restarts a run the moment it was claimed nor waits
// for ever on one whose unit vanished.
func TestSpawnGraceOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	run := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: "skew", Engine: "command"}})
	unit := systemd.UnitName("skew", run.ID, 1)
	if ok, _, err := st.AttemptClaimSpawn(ctx, model.Lease{Host: "h"}, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit}); !ok || err != nil {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	ls, err := st.RunListLive(ctx, "")
	if err != nil || len(ls) != 1 {
		t.Fatalf("live runs: %+v, %v", ls, err)
	}
	gone := map[string]systemd.State{unit: {LoadState: "not-found", ActiveState: "inactive", SubState: "dead"}}

	for _, tc := range []struct {
		name  string
		skew  time.Duration // of the daemon's clock against the database's
		grace time.Duration
		row   string
	}{
		{"daemon two hours ahead, claim just made", 2 * time.Hour, time.Minute, "gone, within spawn grace"},
		{"daemon two hours behind, grace long over", -2 * time.Hour, time.Nanosecond, "gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{cfg: Config{Store: st, StateDir: t.TempDir(), SpawnGrace: tc.grace, MaxAttempts: 5,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				now:    func() time.Time { return time.Now().Add(tc.skew) }}}
			l := ls[0]
			f, _, err := r.gather(ctx, &l, &passReads{states: gone})
			if err != nil {
				t.Fatal(err)
			}
			if d := decide(f, r.rules()); d.row != tc.row {
				t.Fatalf("since the spawn claim %s with a grace of %s: row %q, want %q", f.sinceSpawn, tc.grace, d.row, tc.row)
			}
		})
	}
}
