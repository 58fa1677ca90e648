package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/wake"
)

const (
	// rewatchAfter is how long the unit-end watch waits before it tries again after a failure;
	// the sweep interval is the backstop meanwhile.
	rewatchAfter = 30 * time.Second
	// goneFirst is how soon systemd is first asked whether a unit that wrote its marker is gone:
	// its ExecStopPost exits and systemd lets the unit go 3 to 5 ms after the marker appeared
	// (the marker's directory synced, the staged credentials removed; BenchmarkBackupSmall's
	// unit alone). The next ask comes goneNext later, and each after that twice as long after
	// the one before, up to goneEvery: the usual end is seen within a millisecond, and a slow
	// one is not asked about every millisecond.
	goneFirst = 3 * time.Millisecond
	goneNext  = time.Millisecond
	goneEvery = 20 * time.Millisecond
	// goneWithin bounds that wait: past it the sweep is woken anyway, as its interval would.
	goneWithin = 3 * time.Second
	// maxPending bounds the ends waiting to be settled; past it an end wakes the sweep at once.
	maxPending = 4096
)

// markerWatch is the unit-end service: a run whose unit wrote its exit marker is closed at once,
// not at the sweep's next interval (see systemd.MarkerWatch for why markers). Once systemd says
// the unit is gone, end (reconcile.EndNamed) closes the run where its marker says how. The sweep
// is woken for whatever else an end brings (endWakesSweep): a run end left to it (a restart), or
// a run that may be waiting for what the end frees (its repository, a place, a prerequisite);
// else only admission, whose next due time an end may move.
//
// The marker is written inside the unit's ExecStopPost, a moment before systemd lets the unit
// go. A run is closed, and the sweep woken, once systemd says the unit is gone: a run closed
// earlier would free its place under --max-running while its unit still counts as deactivating.
type markerWatch struct {
	stateDir string
	runner   *systemd.Client
	end      func(ctx context.Context, runs []uuid.UUID, states map[string]systemd.State) (left int, err error)
	// ending is told of each marker read, before systemd lets its unit go (runaway.Guard.Ending).
	ending  func(model.AttemptRef)
	mayWait func() bool // reconcile.MayWait
	wake    wake.Signal // the sweep's
	due     wake.Signal // admission's due time
	logger  *slog.Logger
	loop    loop
}

// unitEnd is a unit whose exit marker appeared, and its run.
type unitEnd struct {
	unit string
	run  uuid.UUID
}

func (m *markerWatch) Name() string { return "unit ends" }

// Start puts the watch in place before it returns, so a unit that ends afterwards is seen. A
// watch that cannot be set up is not fatal: the sweep's interval notices ends meanwhile.
func (m *markerWatch) Start(ctx context.Context) error {
	if m.loop.running() {
		return nil
	}
	first, err := systemd.WatchMarkers(m.stateDir)
	if err != nil {
		m.logger.Warn("unit ends are noticed at the sweep interval until the exit markers can be watched", "err", err)
	}
	m.loop.name = m.Name()
	m.loop.run = func(ctx context.Context) { m.run(ctx, first) }
	if err := m.loop.Start(ctx); err != nil {
		if first != nil {
			first.Close()
		}
		return err
	}
	return nil
}

func (m *markerWatch) Stop() { m.loop.Stop() }

func (m *markerWatch) run(ctx context.Context, w *systemd.MarkerWatch) {
	ended := make(chan unitEnd, maxPending)
	var wg sync.WaitGroup
	wg.Go(func() { m.settle(ctx, ended) })
	defer wg.Wait()
	for ctx.Err() == nil {
		if w == nil {
			if !wake.Sleep(ctx, rewatchAfter, nil) {
				return
			}
			var err error
			if w, err = systemd.WatchMarkers(m.stateDir); err != nil {
				m.logger.Warn("exit markers still cannot be watched", "err", err)
				continue
			}
			m.logger.Info("watching exit markers again")
			m.wake.Wake() // markers written while nothing watched
		}
		err := w.Run(ctx, func(run uuid.UUID, attempt int) {
			mk, err := systemd.ReadMarker(m.stateDir, run, attempt)
			if err != nil || mk.Unit == "" {
				m.wake.Wake() // the sweep judges a marker it cannot read
				return
			}
			if m.ending != nil {
				m.ending(model.AttemptRef{Run: run, No: attempt})
			}
			select {
			case ended <- unitEnd{mk.Unit, run}:
			default:
				m.wake.Wake()
			}
		})
		w = nil
		if ctx.Err() != nil {
			return
		}
		m.logger.Warn("watching exit markers failed; unit ends are noticed at the sweep interval meanwhile", "err", err)
	}
}

// settle closes the runs of units whose markers appeared as soon as systemd says they are gone,
// and wakes the sweep then, or once goneWithin passed for a unit.
func (m *markerWatch) settle(ctx context.Context, ended <-chan unitEnd) {
	type waiting struct {
		run   uuid.UUID
		until time.Time // when to stop waiting for the unit
	}
	pending := map[string]waiting{} // by unit
	// The timer runs only while something is pending: an idle daemon is not woken for nothing.
	timer := time.NewTimer(goneEvery)
	timer.Stop()
	defer timer.Stop()
	var due <-chan time.Time
	// next is how long after the coming ask the one after it comes.
	next := goneNext
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-ended:
			if _, ok := pending[e.unit]; !ok {
				pending[e.unit] = waiting{e.run, time.Now().Add(goneWithin)}
			}
			if due == nil {
				timer.Reset(goneFirst)
				next = goneNext
				due = timer.C
			}
			continue
		case <-due:
			due = nil
		}
		names := make([]string, 0, len(pending))
		for name := range pending {
			names = append(names, name)
		}
		askCtx, cancel := context.WithTimeout(ctx, goneWithin)
		states, err := m.runner.States(askCtx, names)
		cancel()
		expired := false // a unit not gone within goneWithin: the sweep judges it
		var gone []uuid.UUID
		for _, name := range names {
			// "Could not ask" waits, up to the deadline: it never reads as gone.
			w, isGone := pending[name], err == nil && !states[name].Alive()
			switch {
			case isGone:
				gone = append(gone, w.run)
				delete(pending, name)
			case !time.Now().Before(w.until):
				delete(pending, name)
				expired = true
			}
		}
		sweep := expired || len(gone) > 0 && m.end == nil
		if len(gone) > 0 && m.end != nil {
			left, err := m.end(ctx, gone, states)
			if err != nil && !errors.Is(err, reconcile.ErrNoLease) && ctx.Err() == nil {
				m.logger.Warn("runs whose units ended not closed at once; the sweep closes them", "runs", len(gone), "err", err)
			}
			if endWakesSweep(left, err, m.mayWait != nil && m.mayWait()) {
				sweep = true
			} else {
				m.due.Wake() // the ends moved the next due time of their jobs
			}
		}
		if sweep {
			m.wake.Wake()
		}
		if len(pending) > 0 {
			timer.Reset(next)
			next = min(2*next, goneEvery)
			due = timer.C
		}
	}
}

// endWakesSweep says whether ends that EndNamed was given want a pass: one it did not close
// (left: a restart, a marker it could not read), a failure, or a run of the host that may be
// waiting for what an end frees (mayWait). Else the pass would find nothing to do.
func endWakesSweep(left int, err error, mayWait bool) bool {
	return left > 0 || err != nil || mayWait
}
