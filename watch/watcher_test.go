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

// NextDeadline is when time alone makes a job overdue: a pass after it finds the job overdue,
// and then the next deadline is another job's; a manual job without an expected interval has
// none.
func TestWatcherNextDeadline(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.Migrated(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	w := &Watcher{Store: st, Host: "h", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	pass := func() (time.Duration, bool) {
		t.Helper()
		if err := w.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		return w.NextDeadline()
	}
	create := func(name, schedule string) {
		t.Helper()
		if _, err := st.JobCreate(ctx, model.Job{Name: name, Engine: "command", Command: []string{"/bin/true"}, Schedule: schedule}); err != nil {
			t.Fatal(err)
		}
	}
	create("manual", "")
	if in, ok := pass(); ok {
		t.Fatalf("only a manual job: next deadline in %s, want none", in)
	}
	create("slow", "@every 1000h")
	create("tick", "@every 1s") // its first slot a second after its creation, and a grace of one interval
	in, ok := pass()
	if !ok || in <= 0 || in > 2*time.Second {
		t.Fatalf("next deadline in %s (%v), want tick's, within 2s", in, ok)
	}
	time.Sleep(in)
	next, ok := pass()
	j, err := st.JobGet(ctx, "tick")
	if err != nil {
		t.Fatal(err)
	}
	if j.OverdueSince == nil {
		t.Fatalf("tick not overdue once its deadline (%s) passed", in)
	}
	if !ok || next < 1999*time.Hour {
		t.Fatalf("next deadline in %s (%v) once tick is overdue, want slow's, 2000h away", next, ok)
	}
}
