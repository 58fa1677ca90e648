package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/holdfast-backup/holdfast/model"
)

// The services' sizes, each stated once.
const (
	// DefaultSpawnWorkers is how many spawns (claim, directories, StartTransientUnit or arm) run
	// at once when spawning runs as a service.
	DefaultSpawnWorkers = 8
	// repairWorkers is how many repairs (one `restic snapshots` each) run at once.
	repairWorkers = 2
	// spawnQueue and repairQueue bound the work waiting for a worker; past them the sweep's
	// decision is not handed over and the next pass decides it again.
	spawnQueue  = 4096
	repairQueue = 256
)

// Spawner is the spawning service: the sweep decides that a run is spawned (or armed) and
// hands it over; a worker claims the attempt, prepares it and has systemd start or arm its
// unit, as spawn says. The sweep never waits for a spawn. The claim in the store keeps a spawn
// exactly-once across daemons; within one, a run already queued or being spawned is not queued
// again. Stop waits for the spawns begun and drops those not begun: their runs are still
// queued without a unit, and the next sweep (this daemon's or another's) hands them over again.
type Spawner struct{ queue }

// RepairChannel is the repair service: a run whose unit ended without the journal's summary
// is closed by a worker once it asked the repository for the run's snapshot (repair). Until
// then the run stays live with its marker, which is the evidence the next sweep finishes it
// on, so a repair dropped by Stop or a crash is queued again by the next pass, never lost.
type RepairChannel struct{ queue }

// queue is a bounded queue of tasks, one per attempt at most, with worker goroutines, run as a
// service. Not started, it runs each task at once in its caller: a Reconciler used alone (its
// tests, a one-shot pass) spawns and repairs within Sweep as it always did.
type queue struct {
	name    string
	workers int
	size    int
	budget  time.Duration // each task's time, counted from when a worker takes it
	logger  *slog.Logger
	// ordered makes workers take tasks and do their first step (a spawn's claim) one at a time,
	// in queue order: with limits on places, runs claim in the sweep's order, priority order.
	ordered bool
	order   sync.Mutex

	life    sync.Mutex // serializes Start and Stop
	mu      sync.Mutex
	tasks   chan task
	pending map[attemptKey]bool // queued or being carried out; nil when not started
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type attemptKey struct {
	run     uuid.UUID
	attempt int
}

// task is one unit of a service's work. first is called after its first step (see ordered).
type task struct {
	key attemptKey
	do  func(ctx context.Context, first func()) error
}

// Name is the service's name.
func (q *queue) Name() string { return q.name }

// Start starts the workers; it does nothing if they run already.
func (q *queue) Start(ctx context.Context) error {
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
	q.tasks = make(chan task, q.size)
	q.pending = map[attemptKey]bool{}
	for range q.workers {
		q.wg.Go(func() { q.work(ctx, q.tasks) })
	}
	return nil
}

// Stop takes no more tasks, drops those not begun and waits for those begun.
func (q *queue) Stop() {
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

// submit hands a task to the workers, or carries it out at once if the service was not
// started. A task for an attempt already queued or being carried out is dropped.
func (q *queue) submit(ctx context.Context, key attemptKey, do func(ctx context.Context, first func()) error) error {
	q.mu.Lock()
	if q.pending == nil {
		q.mu.Unlock()
		return do(ctx, func() {})
	}
	defer q.mu.Unlock()
	if q.pending[key] {
		return nil
	}
	select {
	case q.tasks <- task{key: key, do: do}:
		q.pending[key] = true
		return nil
	default:
		return fmt.Errorf("%s: %d runs wait for a worker already; the next pass hands this one over again", q.name, q.size)
	}
}

func (q *queue) work(ctx context.Context, tasks <-chan task) {
	for {
		ordered := q.ordered
		if ordered {
			q.order.Lock()
		}
		var t task
		select {
		case <-ctx.Done():
		case t = <-tasks:
		}
		if ctx.Err() != nil { // stopping: a task not begun is left to the next pass
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

// carryOut runs t within the budget. A task begun is finished even when the service stops:
// a spawn half done (claimed, not started) would wait out the spawn grace.
func (q *queue) carryOut(ctx context.Context, t task, first func()) {
	taskCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.budget)
	err := t.do(taskCtx, first)
	cancel()
	q.mu.Lock()
	if q.pending != nil {
		delete(q.pending, t.key)
	}
	q.mu.Unlock()
	if err != nil {
		q.logger.Error(q.name+" failed; the next pass tries again", "run", t.key.run, "attempt", t.key.attempt, "err", err)
	}
}

// newServices builds r's spawner, repair channel and runaway watch.
func (r *Reconciler) newServices() {
	limited := r.cfg.Limits.MaxRunning > 0 || r.cfg.Limits.MaxRunningHost > 0
	r.spawner = &Spawner{queue{name: "spawning", workers: r.cfg.SpawnWorkers, size: spawnQueue, budget: r.cfg.RunBudget,
		logger: r.cfg.Logger, ordered: limited}}
	r.repairs = &RepairChannel{queue{name: "repairs", workers: repairWorkers, size: repairQueue, budget: r.cfg.RunBudget,
		logger: r.cfg.Logger}}
	r.runaway = &RunawayWatch{rec: r}
}

// Spawner is r's spawning service; Sweep spawns inline while it is not started.
func (r *Reconciler) Spawner() *Spawner { return r.spawner }

// RepairChannel is r's repair service; Sweep repairs inline while it is not started.
func (r *Reconciler) RepairChannel() *RepairChannel { return r.repairs }

// RunawayWatch is r's runaway watch service.
func (r *Reconciler) RunawayWatch() *RunawayWatch { return r.runaway }

// handSpawn hands a run the table decided to spawn (at nil) or arm to the spawner.
func (r *Reconciler) handSpawn(ctx context.Context, l model.LiveRun, job model.Job, at *time.Time) error {
	return r.spawner.submit(ctx, attemptKey{l.Run.ID, l.Attempt.No}, func(ctx context.Context, claimed func()) error {
		if r.cfg.SpawnHook != nil {
			r.cfg.SpawnHook(ctx, l.Run.ID)
		}
		return r.spawn(ctx, l, job, at, claimed)
	})
}
