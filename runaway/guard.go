// Package runaway is the runaway guard: a running backup that adds more to its local repository
// than its ledger hold is paused (run_ceiling) and its unit stopped with SIGINT, so that restic
// removes its lock. It follows the pack files restic writes (Watch), from one measure of the
// repository as the watch starts, so that a fast backup is stopped as it passes its hold; a pass
// measures the whole repository (Measure, Pause: the reconciler's decision table says when) only
// for a backup no watch follows, since a walk of a large repository at every pass costs the
// backup it watches. Growth while another run writes to the same repository is not one run's
// alone: then the guard steps aside.
// The repository belongs to the job's user: nothing in it is reached through a link.
// See docs/ARCHITECTURE.md §4 and §9.
package runaway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// Store is what the guard reads and writes.
type Store interface {
	AttemptOtherWriter(ctx context.Context, ref model.AttemptRef) (*uuid.UUID, error)
	RunRequestPause(ctx context.Context, runID uuid.UUID, reason string) (bool, error)
}

// Units is what the guard asks of systemd.
type Units interface {
	Stop(ctx context.Context, name string) error
}

// Config is what a Guard works with. Store and Units are needed by what measures, pauses or
// stops (a guard that only lets go of watches needs neither).
type Config struct {
	Store  Store
	Units  Units
	Logger *slog.Logger
	// Acting reports whether the host's lease is held: without it a watch counts on, and acts
	// once it holds the lease again. Nil: always.
	Acting func() bool
}

// Excess is a live backup's measured growth past its hold.
type Excess struct{ Hold, Grown int64 }

// Guard is the runaway guard. Its watches run as a service: the sweep tells it which attempts
// are live; Stop ends every watch and waits for them, and the next daemon's first pass arms them
// again for the attempts still live. Not started, its watches live until their attempt ends (a
// reconciler used alone).
type Guard struct {
	cfg    Config
	life   sync.Mutex // serializes Start and Stop
	mu     sync.Mutex
	base   context.Context // the watches' parent; nil when not started
	cancel context.CancelFunc
	active map[model.AttemptRef]*watch
	// unwatchable are the attempts whose repository could not be watched, told once each.
	unwatchable map[model.AttemptRef]bool
	// shared are the attempts whose repository another run wrote to meanwhile: their growth is
	// not theirs alone, so the guard neither watches nor measures them again.
	shared map[model.AttemptRef]bool
	// ending are the measures Ending began, by attempt, until EndGrowth takes them.
	ending map[model.AttemptRef]*endMeasure
	// stopping refuses new watches while Stop waits for the others.
	stopping bool
	wg       sync.WaitGroup
}

// watch is one attempt's watch; cancel is nil while it is being armed. l is the attempt as the
// watch was given it: its repository and its baseline.
type watch struct {
	cancel context.CancelFunc
	l      model.LiveRun
}

// endMeasure is Growth of an attempt whose unit ended, measured from before (its baseline);
// done is closed once the other fields are set.
type endMeasure struct {
	done   chan struct{}
	before int64
	grown  *int64
	shared *uuid.UUID
	why    string
}

func (w *watch) stop() {
	if w.cancel != nil {
		w.cancel()
	}
}

// New returns a Guard, its service not started.
func New(cfg Config) *Guard {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Acting == nil {
		cfg.Acting = func() bool { return true }
	}
	return &Guard{cfg: cfg}
}

// Name is the service's name.
func (g *Guard) Name() string { return "runaway watch" }

// Start lets the watches live until Stop, or until ctx ends.
func (g *Guard) Start(ctx context.Context) error {
	g.life.Lock()
	defer g.life.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.base != nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g.base, g.cancel = context.WithCancel(ctx)
	return nil
}

// Stop ends every watch and waits until each has let go of its repository.
func (g *Guard) Stop() {
	g.life.Lock()
	defer g.life.Unlock()
	g.mu.Lock()
	cancel := g.cancel
	g.base, g.cancel, g.stopping = nil, nil, true
	for ref, w := range g.active {
		w.stop()
		delete(g.active, ref)
	}
	clear(g.ending)
	g.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	g.wg.Wait()
	g.mu.Lock()
	g.stopping = false
	g.mu.Unlock()
}

// Watch starts following the attempt's repository, unless it is followed already or is not a
// local repository a backup with a hold writes to. It is safe to call on every pass. The
// repository is measured (the watch's seed) outside the guard's lock: a large one takes a while.
func (g *Guard) Watch(l model.LiveRun) { g.watch(l, true) }

// WatchFromBaseline is Watch for an attempt whose unit systemd has not been asked for since its
// repository's baseline (RepoBytesBefore) was measured: the attempt has added nothing yet, so
// the watch counts from nothing without measuring the repository a second time, which costs a
// walk of every file of it as the unit starts.
func (g *Guard) WatchFromBaseline(l model.LiveRun) { g.watch(l, false) }

// watch is Watch, which measures what the attempt added before the watch began if seed is set.
func (g *Guard) watch(l model.LiveRun, seed bool) {
	a := l.Attempt
	dir, local := ledger.Local(l.JobRepository)
	if !l.Run.Kind.Spec().Adds || a.HoldBytes == nil || !local {
		return
	}
	ref := l.Ref()
	g.mu.Lock()
	if _, ok := g.active[ref]; ok || g.stopping || g.shared[ref] {
		g.mu.Unlock()
		return
	}
	if g.active == nil {
		g.active = map[model.AttemptRef]*watch{}
	}
	w := &watch{l: l}
	g.active[ref] = w
	g.mu.Unlock()

	fw, data, err := watchData(dir)
	var added int64
	if err == nil && seed && a.RepoBytesBefore != nil {
		// What the attempt added before the watch began, measured after its inotify watches
		// are in place: a pack renamed meanwhile is counted twice, never missed, and a count
		// past the hold is measured again before it stops anything (follow).
		var size int64
		if size, err = ledger.RepoSize(l.JobRepository); err == nil {
			added = size - *a.RepoBytesBefore
		} else {
			fw.file.Close()
			unix.Close(data)
		}
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	if g.active[ref] != w || g.stopping {
		// Let go of, or stopped, while it was armed.
		if err == nil {
			fw.file.Close()
			unix.Close(data)
		}
		if g.active[ref] == w {
			delete(g.active, ref)
		}
		return
	}
	if err != nil {
		delete(g.active, ref)
		// Tried again at every pass, told once: each pass measures the repository meanwhile.
		if !g.unwatchable[ref] {
			g.cfg.Logger.Warn("runaway guard: cannot watch the repository; it measures once per pass", "run", l.Run.ID, "err", err)
			if g.unwatchable == nil {
				g.unwatchable = map[model.AttemptRef]bool{}
			}
			g.unwatchable[ref] = true
		}
		return
	}
	delete(g.unwatchable, ref)
	base := g.base
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithCancel(base)
	w.cancel = cancel
	// The goroutine's own copies, made here: l and a themselves are not moved to the heap at
	// each call, most of which watch nothing.
	watched, hold := l, *a.HoldBytes
	g.wg.Go(func() {
		defer unix.Close(data)
		g.follow(ctx, fw, data, watched, hold, added)
		g.unwatch(ref, w) // a watch that let go can be armed again by the next pass
	})
}

// Unwatch stops following an attempt that ended.
func (g *Guard) Unwatch(ref model.AttemptRef) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w, ok := g.active[ref]; ok {
		w.stop()
		delete(g.active, ref)
	}
	delete(g.ending, ref)
}

// unwatch forgets watch w of ref as it ends, unless a newer watch took its place.
func (g *Guard) unwatch(ref model.AttemptRef, w *watch) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.active[ref] == w {
		w.stop()
		delete(g.active, ref)
	}
}

// stepAside records that another run wrote to ref's repository meanwhile.
func (g *Guard) stepAside(ref model.AttemptRef) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shared == nil {
		g.shared = map[model.AttemptRef]bool{}
	}
	g.shared[ref] = true
}

// Watching reports whether a watch follows the attempt (or is being armed): then it, not a
// pass, measures the attempt's growth. A watch that fails or cannot tell lets go, and the next
// pass measures again.
func (g *Guard) Watching(ref model.AttemptRef) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.active[ref]
	return ok
}

// stepsAside reports whether another run wrote to the attempt's repository meanwhile.
func (g *Guard) stepsAside(ref model.AttemptRef) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shared[ref]
}

// Prune stops following attempts that are no longer live (ended by another daemon, or by a
// pass that failed before it could unwatch them).
func (g *Guard) Prune(live []model.LiveRun) {
	keep := make(map[model.AttemptRef]bool, len(live))
	for _, l := range live {
		keep[l.Ref()] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for ref, w := range g.active {
		if !keep[ref] {
			w.stop()
			delete(g.active, ref)
		}
	}
	for ref := range g.unwatchable {
		if !keep[ref] {
			delete(g.unwatchable, ref)
		}
	}
	for ref := range g.shared {
		if !keep[ref] {
			delete(g.shared, ref)
		}
	}
	for ref := range g.ending {
		if !keep[ref] {
			delete(g.ending, ref)
		}
	}
}

// Ending tells the guard that the unit of attempt ref wrote its exit marker: its ExecStopPost
// runs after its main process (holdfast exec, which waits for restic) exited, so the backup
// writes no more to the repository. (A process the job's user left behind may, until systemd
// ends it, as any process of theirs may at any time.) For an attempt it watches,
// the guard measures the attempt's growth now, beside the rest of the run's end (systemd letting
// the unit go, the run's records read), and EndGrowth takes that measure for the settlement:
// the walk of every file of the repository is then not one more step before the run is closed.
func (g *Guard) Ending(ref model.AttemptRef) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w, ok := g.active[ref]
	if !ok || g.stopping || w.l.Attempt.RepoBytesBefore == nil || g.ending[ref] != nil {
		return
	}
	if g.ending == nil {
		g.ending = map[model.AttemptRef]*endMeasure{}
	}
	m := &endMeasure{done: make(chan struct{}), before: *w.l.Attempt.RepoBytesBefore}
	g.ending[ref] = m
	ctx := g.base
	if ctx == nil {
		ctx = context.Background()
	}
	repository, a := w.l.JobRepository, w.l.Attempt
	g.wg.Go(func() {
		defer close(m.done)
		m.grown, m.shared, m.why = Growth(ctx, g.cfg.Store, repository, a)
	})
}

// EndGrowth is Growth of attempt a, which ended: the measure Ending began for it (waited for)
// if that measure answered and started from a's baseline, else one taken now.
func (g *Guard) EndGrowth(ctx context.Context, repository string, a model.Attempt) (grown *int64, sharedWith *uuid.UUID, why string) {
	g.mu.Lock()
	m := g.ending[a.Ref()]
	delete(g.ending, a.Ref())
	g.mu.Unlock()
	if m != nil && a.RepoBytesBefore != nil && m.before == *a.RepoBytesBefore {
		select {
		case <-m.done:
			if m.grown != nil || m.shared != nil {
				return m.grown, m.shared, m.why
			}
		case <-ctx.Done():
		}
	}
	return Growth(ctx, g.cfg.Store, repository, a)
}

// Measure measures a live backup's local repository against the attempt's hold: the growth past
// the hold, or nil if it is within it, cannot be told (not local, not measured when spawned,
// or another run wrote to it meanwhile) or is a watch's to tell (Watching).
func (g *Guard) Measure(ctx context.Context, l model.LiveRun) *Excess {
	a := l.Attempt
	if !l.Run.Kind.Spec().Adds || a.HoldBytes == nil || a.RepoBytesBefore == nil || g.Watching(l.Ref()) || g.stepsAside(l.Ref()) {
		return nil
	}
	grown, shared, why := Growth(ctx, g.cfg.Store, l.JobRepository, a)
	if shared != nil {
		g.stepAside(l.Ref())
	}
	if grown == nil || shared != nil || *grown <= *a.HoldBytes {
		if why != "" {
			g.cfg.Logger.Debug("runaway guard cannot measure this run", "run", l.Run.ID, "why", why)
		}
		return nil
	}
	return &Excess{Hold: *a.HoldBytes, Grown: *grown}
}

// Pause stops a running backup that added more than its hold: the run is paused (run_ceiling)
// first, then its unit gets SIGINT, so restic removes its lock.
func (g *Guard) Pause(ctx context.Context, l model.LiveRun, e Excess) error {
	paused, err := g.cfg.Store.RunRequestPause(ctx, l.Run.ID, store.PausedRunCeiling)
	if err != nil || !paused {
		return err
	}
	g.cfg.Logger.Warn("runaway guard: the backup added more than its hold; stopping it", "run", l.Run.ID,
		"hold", ledger.FormatSize(e.Hold), "added", ledger.FormatSize(e.Grown), "unit", l.Attempt.Unit)
	return g.cfg.Units.Stop(ctx, l.Attempt.Unit)
}

// Growth is what attempt a's local repository grew by since it was spawned, with the run that
// also wrote to it meanwhile, if one did; else why it is not known. The ledger's settlement
// charges it as the floor of what the attempt added.
func Growth(ctx context.Context, st Store, repository string, a model.Attempt) (grown *int64, sharedWith *uuid.UUID, why string) {
	if _, local := ledger.Local(repository); !local {
		return nil, nil, "the repository is not local, so its growth cannot be measured"
	}
	if a.RepoBytesBefore == nil {
		return nil, nil, "the repository was not measured when the attempt started"
	}
	other, err := st.AttemptOtherWriter(ctx, a.Ref())
	if err != nil {
		return nil, nil, "who else wrote to the repository could not be read: " + err.Error()
	}
	size, err := ledger.RepoSize(repository)
	if err != nil {
		return nil, nil, "the repository could not be measured: " + err.Error()
	}
	if other != nil {
		why = fmt.Sprintf("run %s wrote to the same repository meanwhile, so its growth is not this attempt's alone", other)
	}
	n := size - *a.RepoBytesBefore
	return &n, other, why
}
