package reconcile

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
)

// A queue not started carries a task out in its caller. Started, it drops a task for an attempt
// already queued or being carried out, and its Stop waits for the task begun and drops those
// not begun. In a bubble (testing/synctest), so that the test sees Stop waiting for the task
// begun, with nothing else left to do, before it lets the task end.
func TestQueue(t *testing.T) { synctest.Test(t, testQueue) }

func testQueue(t *testing.T) {
	q := &queue{name: "test", workers: 1, size: 4, budget: time.Minute, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	var ran atomic.Int32
	count := func(context.Context, func()) error { ran.Add(1); return nil }
	a, b := attemptKey{uuid.New(), 1}, attemptKey{uuid.New(), 1}
	if err := q.submit(ctx, a, count); err != nil || ran.Load() != 1 {
		t.Fatalf("not started: %v, %d tasks ran, want 1 in the caller", err, ran.Load())
	}

	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	begun, release := make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context, _ func()) error {
		close(begun)
		<-release
		ran.Add(1)
		return nil
	}
	if err := q.submit(ctx, a, hold); err != nil {
		t.Fatal(err)
	}
	<-begun
	for _, key := range []attemptKey{a, b, b} { // a runs, b is queued once
		if err := q.submit(ctx, key, count); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(q.tasks); got != 1 {
		t.Fatalf("%d tasks queued, want 1 (b)", got)
	}
	stopped := make(chan struct{})
	go func() { q.Stop(); close(stopped) }()
	// Every goroutine is blocked for good: the worker in the task begun, Stop waiting for it
	// (its cancel is done, so the worker takes no other task once this one ends).
	synctest.Wait()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a task was being carried out")
	default:
	}
	close(release)
	<-stopped
	if got := ran.Load(); got != 2 {
		t.Fatalf("%d tasks ran, want 2 (the first in the caller, the one begun)", got)
	}
	if err := q.submit(ctx, b, count); err != nil || ran.Load() != 3 {
		t.Fatalf("stopped: %v, %d tasks ran, want the task carried out in the caller", err, ran.Load())
	}
}
