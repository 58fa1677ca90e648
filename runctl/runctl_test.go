package runctl_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

// WaitRun returns as soon as the run's end is recorded, well before its next poll, reporting
// each reading; a context that ends first ends the wait, not the run.
func TestWaitRun(t *testing.T) {
	ctx := context.Background()
	st, _ := storetest.Open(t)
	run := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: "w", Engine: "command"}})

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, _, err := runctl.WaitRun(short, st, run.ID, func(model.Run, *model.Progress) {})
	cancel()
	if err == nil || !strings.Contains(err.Error(), "it goes on; see holdfast run show "+run.ID.String()) {
		t.Fatalf("wait cut short: %v", err)
	}
	// Ended before the first read: the same, not a failed read.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := runctl.WaitRun(gone, st, run.ID, func(model.Run, *model.Progress) {}); err == nil ||
		!strings.Contains(err.Error(), "it goes on; see holdfast run show "+run.ID.String()) {
		t.Fatalf("wait ended before it began: %v", err)
	}

	type result struct {
		run      model.Run
		err      error
		readings int
		at       time.Time
	}
	done := make(chan result, 1)
	read := make(chan struct{}, 8)
	go func() {
		n := 0
		// A poll an hour apart: only the announcement of the run's end can end the wait.
		r, _, err := runctl.WaitRunPolling(ctx, st, run.ID, func(model.Run, *model.Progress) { n++; read <- struct{}{} }, time.Hour)
		done <- result{r, err, n, time.Now()}
	}()
	// Past the first reading, made once it listens (never before: the run would be read twice as
	// it starts).
	select {
	case <-read:
	case <-time.After(time.Minute):
		t.Fatal("WaitRun made no reading in a minute, want the one once listening")
	}
	ended := time.Now()
	if ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, model.Ending{RunID: run.ID, Attempt: 1, At: ended, Status: model.StatusFailed,
		Reason: "ended by the test"}); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.run.Status != model.StatusFailed {
			t.Fatalf("WaitRun: %+v, %v; want the failed run", r.run, r.err)
		}
		t.Logf("WaitRun returned %s after the end", r.at.Sub(ended))
		if r.readings != 2 {
			t.Fatalf("%d readings, want the one once listening and the final one", r.readings)
		}
	case <-time.After(time.Minute):
		t.Fatal("WaitRun did not return")
	}
}
