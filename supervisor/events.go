package supervisor

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/runner"
)

// rewatchAfter is how long the unit-end watch waits before it tries again after a failure; the
// sweep interval is the backstop meanwhile.
const rewatchAfter = 30 * time.Second

// markerWatch is the unit-end service: each exit marker written wakes the sweep, which closes
// the run at once instead of at its next interval (see runner.MarkerWatch for why markers).
type markerWatch struct {
	stateDir string
	wake     wakeup
	logger   *slog.Logger
	loop     loop
}

func (m *markerWatch) Name() string { return "unit ends" }

// Start puts the watch in place before it returns, so a unit that ends afterwards is seen. A
// watch that cannot be set up is not fatal: the sweep's interval notices ends meanwhile.
func (m *markerWatch) Start(ctx context.Context) error {
	if m.loop.running() {
		return nil
	}
	first, err := runner.WatchMarkers(m.stateDir)
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

func (m *markerWatch) run(ctx context.Context, w *runner.MarkerWatch) {
	for ctx.Err() == nil {
		if w == nil {
			if !sleep(ctx, rewatchAfter, nil) {
				return
			}
			var err error
			if w, err = runner.WatchMarkers(m.stateDir); err != nil {
				m.logger.Warn("exit markers still cannot be watched", "err", err)
				continue
			}
			m.logger.Info("watching exit markers again")
			m.wake.wake() // markers written while nothing watched
		}
		err := w.Run(ctx, func(uuid.UUID, int) { m.wake.wake() })
		w = nil
		if ctx.Err() != nil {
			return
		}
		m.logger.Warn("watching exit markers failed; unit ends are noticed at the sweep interval meanwhile", "err", err)
	}
}
