package reconcile

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// One pass applies at most its drain limit's bytes of a run's journal and reports the rest as lag; the
// next pass goes on from there.
func TestDrainIsBoundedPerPass(t *testing.T) {
	t.Parallel()
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	run := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: "big", Engine: "command"}})
	if ok, _, err := st.AttemptClaimSpawn(ctx, model.Lease{Host: "h"}, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: "holdfast-big-" + run.ID.String() + "-a1.service"}); !ok || err != nil {
		t.Fatalf("claim: %v, %v", ok, err)
	}

	state := t.TempDir()
	path := filepath.Join(state, jobunit.JournalSource(state, run.ID, 1, 0).Name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := journal.Create(path, run.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 8 << 20
	const events = 20 // of about 1 MB each: more than limit in all
	pad := strings.Repeat("x", 1_000_000)
	for range events {
		if err := w.Append("progress", map[string]string{"pad": pad}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}

	r := &Reconciler{cfg: Config{Store: st, StateDir: state, Host: "h", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, drainLimit: limit}
	live := func() model.LiveRun {
		t.Helper()
		ls, err := st.RunListLive(ctx, "")
		if err != nil || len(ls) != 1 {
			t.Fatalf("live runs: %+v, %v", ls, err)
		}
		return ls[0]
	}
	lag, _, err := r.drain(ctx, live(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := live().Attempt.Cursor
	if c.Offset < limit || c.Offset > limit+defaultBatch || lag != fi.Size()-c.Offset || lag <= 0 {
		t.Fatalf("first pass: cursor %d, lag %d of %d bytes; want about %d applied and the rest as lag", c.Offset, lag, fi.Size(), limit)
	}
	if lag, _, err = r.drain(ctx, live(), nil); err != nil || lag != 0 {
		t.Fatalf("second pass: lag %d, %v; want the rest applied", lag, err)
	}
	if a := live().Attempt; a.Cursor.LastSeq != events || a.QuarantinedAt != nil {
		t.Fatalf("after two passes: %+v; want all %d events applied", a, events)
	}
}

// defaultBatch is journal.Read's batch when given no size: one pass may overshoot maxDrain by it.
const defaultBatch = 4 << 20
