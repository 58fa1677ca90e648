// Package attemptqueue is a bounded queue of tasks, at most one per attempt, carried out by
// worker goroutines and run as a service (Start, Stop). Not started, a queue carries each task
// out at once in its caller, so that code using one alone (a test, a one-shot pass) needs no
// workers. Stop waits for the tasks begun and drops those not begun: whoever queued them must
// queue them again (the reconciler's next pass does).
package attemptqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-backup/holdfast/model"
)

// Config is a queue's shape.
type Config struct {
	Name    string        // the service's name, in its log lines and errors
	Workers int           // tasks carried out at once; at least 1
	Size    int           // tasks waiting for a worker at most; at least 1
	Budget  time.Duration // each task's time, counted from when a worker takes it
	Logger  *slog.Logger  // where failed tasks are logged; nil discards
	// Ordered makes workers take tasks and do their first step one at a time, in queue order
	// (a spawn's claim: with limits on places, runs claim in the order they were queued).
	Ordered bool
}

// Do is one task. first is called once its first step is done (see Config.Ordered).
type Do func(ctx context.Context, first func()) error

// Queue is a queue of tasks keyed by attempt.
type Queue struct {
	cfg   Config
	order sync.Mutex

	life    sync.Mutex // serializes Start and Stop
	mu      sync.Mutex
	tasks   chan task
	pending map[model.AttemptRef]bool // queued or being carried out; nil when not started
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type task struct {
	ref model.AttemptRef
	do  Do
}

// New returns a queue, not started.
func New(cfg Config) (*Queue, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("attempt queue: no name")
	case cfg.Workers < 1:
		return nil, fmt.Errorf("%s: %d workers: give at least 1", cfg.Name, cfg.Workers)
	case cfg.Size < 1:
		return nil, fmt.Errorf("%s: room for %d tasks: give at least 1", cfg.Name, cfg.Size)
	case cfg.Budget <= 0:
		return nil, fmt.Errorf("%s: task budget %v: give a positive duration", cfg.Name, cfg.Budget)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Queue{cfg: cfg}, nil
}

// Name is the service's name.
func (q *Queue) Name() string { return q.cfg.Name }

// Start starts the workers; it does nothing if they run already.
func (q *Queue) Start(ctx context.Context) error {
	q.life.Lock()
	defer q.life.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending != nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, q.cancel = context.WithCancel(ctx)
	q.tasks = make(chan task, q.cfg.Size)
	q.pending = map[model.AttemptRef]bool{}
	for range q.cfg.Workers {
		q.wg.Go(func() { q.work(ctx, q.tasks) })
	}
	return nil
}

// Stop takes no more tasks, drops those not begun and waits for those begun.
func (q *Queue) Stop() {
	q.life.Lock()
	defer q.life.Unlock()
	q.mu.Lock()
	cancel := q.cancel
	q.pending, q.cancel = nil, nil
	q.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	q.wg.Wait()
}

// Submit hands a task to the workers, or carries it out at once if the queue was not started
// (then its error is Submit's). A task for an attempt already queued or being carried out is
// dropped; a full queue refuses the task.
func (q *Queue) Submit(ctx context.Context, ref model.AttemptRef, do Do) error {
	q.mu.Lock()
	if q.pending == nil {
		q.mu.Unlock()
		return do(ctx, func() {})
	}
	defer q.mu.Unlock()
	if q.pending[ref] {
		return nil
	}
	select {
	case q.tasks <- task{ref: ref, do: do}:
		q.pending[ref] = true
		return nil
	default:
		return fmt.Errorf("%s: %d runs wait for a worker already; the next pass hands this one over again", q.cfg.Name, q.cfg.Size)
	}
}

// Waiting is how many tasks wait for a worker.
func (q *Queue) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.tasks)
}

func (q *Queue) work(ctx context.Context, tasks <-chan task) {
	for {
		ordered := q.cfg.Ordered
		if ordered {
			q.order.Lock()
		}
		var t task
		select {
		case <-ctx.Done():
		case t = <-tasks:
		}
		if ctx.Err() != nil { // stopping: a task not begun is left to whoever queued it
			if ordered {
				q.order.Unlock()
			}
			return
		}
		first := func() {}
		if ordered {
			first = sync.OnceFunc(q.order.Unlock)
		}
		q.carryOut(ctx, t, first)
		first()
	}
}

// carryOut runs t within the budget. A task begun is finished even when the queue stops: a
// spawn half done (claimed, not started) would wait out the spawn grace.
func (q *Queue) carryOut(ctx context.Context, t task, first func()) {
	taskCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.cfg.Budget)
	err := t.do(taskCtx, first)
	cancel()
	q.mu.Lock()
	if q.pending != nil {
		delete(q.pending, t.ref)
	}
	q.mu.Unlock()
	if err != nil {
		q.cfg.Logger.Error(q.cfg.Name+" failed; the next pass tries again", "run", t.ref.Run, "attempt", t.ref.No, "err", err)
	}
}
