package watch

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

// The Watcher keeps each job's expectation between passes; a changed schedule is judged anew
// at the next pass, both ways.
func TestWatcherJudgesAChangedScheduleAnew(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.Migrated(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.JobCreate(ctx, model.Job{Name: "tick", Engine: "command", Command: []string{"/bin/true"},
		Schedule: "@every 1s"}); err != nil {
		t.Fatal(err)
	}
	w := &Watcher{Store: st, Host: "h", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	pass := func(schedule string, overdue bool) {
		t.Helper()
		if _, err := st.JobUpdate(ctx, "tick", func(j *model.Job) error { j.Schedule = schedule; return nil }); err != nil {
			t.Fatal(err)
		}
		if err := w.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		j, err := st.JobGet(ctx, "tick")
		if err != nil {
			t.Fatal(err)
		}
		if (j.OverdueSince != nil) != overdue {
			t.Fatalf("schedule %s: overdue since %v (%s), want overdue %v", schedule, j.OverdueSince, j.OverdueReason, overdue)
		}
	}
	time.Sleep(2100 * time.Millisecond) // past the first slot and its grace of one interval
	pass("@every 1s", true)
	pass("@every 1000h", false)
	pass("@every 1s", true)
}
