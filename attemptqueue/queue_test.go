package attemptqueue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/attemptqueue"
	"github.com/holdfast-backup/holdfast/model"
)

// A queue not started carries a task out in its caller. Started, it drops a task for an attempt
// already queued or being carried out, and its Stop waits for the task begun and drops those
// not begun. In a bubble (testing/synctest), so that the test sees Stop waiting for the task
// begun, with nothing else left to do, before it lets the task end.
func TestQueue(t *testing.T) { synctest.Test(t, testQueue) }

func testQueue(t *testing.T) {
	q, err := attemptqueue.New(attemptqueue.Config{Name: "test", Workers: 1, Size: 4, Budget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ran atomic.Int32
	count := func(context.Context, func()) error { ran.Add(1); return nil }
	a, b := model.AttemptRef{Run: uuid.New(), No: 1}, model.AttemptRef{Run: uuid.New(), No: 1}
	if err := q.Submit(ctx, a, count); err != nil || ran.Load() != 1 {
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
	if err := q.Submit(ctx, a, hold); err != nil {
		t.Fatal(err)
	}
	<-begun
	for _, key := range []model.AttemptRef{a, b, b} { // a runs, b is queued once
		if err := q.Submit(ctx, key, count); err != nil {
			t.Fatal(err)
		}
	}
	if got := q.Waiting(); got != 1 {
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
	if err := q.Submit(ctx, b, count); err != nil || ran.Load() != 3 {
		t.Fatalf("stopped: %v, %d tasks ran, want the task carried out in the caller", err, ran.Load())
	}
}

// A queue is refused a shape it cannot work with, with what to give instead.
func TestNewRefuses(t *testing.T) {
	for _, c := range []struct {
		cfg  attemptqueue.Config
		want string
	}{
		{attemptqueue.Config{Workers: 1, Size: 1, Budget: time.Second}, "attempt queue: no name"},
		{attemptqueue.Config{Name: "q", Size: 1, Budget: time.Second}, "q: 0 workers: give at least 1"},
		{attemptqueue.Config{Name: "q", Workers: 1, Budget: time.Second}, "q: room for 0 tasks: give at least 1"},
		{attemptqueue.Config{Name: "q", Workers: 1, Size: 1}, "q: task budget 0s: give a positive duration"},
	} {
		if _, err := attemptqueue.New(c.cfg); err == nil || err.Error() != c.want {
			t.Errorf("New(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
}
