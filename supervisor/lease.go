package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// ErrLeaseTaken is why a daemon stops whose host lease another live daemon took: two daemons
// run under one --host (a cloned machine, a default host name), or this one was cut off or
// frozen past its lease while another of the same name started. The daemon exits rather than
// standing by, so that the service manager shows it failed and restarts it: a restarted daemon
// waits for the lease as at any start (two lease lengths), takes it if the other daemon is gone
// by then, and otherwise fails to start again, naming the other holder.
var ErrLeaseTaken = errors.New("another daemon took this host's lease: this daemon stops acting and exits")

// hostLease is the service that holds the daemon's host lease (docs/ARCHITECTURE.md, Several
// hosts). It takes the lease at Start, before the other services, so that the first sweep
// reconciles the host's attempts under it; renews it every third of its length; takes it again
// if it lapsed (a daemon that did not run for a while: its writes were fenced meanwhile); and
// releases it at Stop.
//
// current tells the other services whether they may act: the lease is held while the last
// take or renewal that succeeded was asked for less than a lease length ago, on this host's
// monotonic clock (the lease ran a lease length from when the database answered, later than
// that). Past it, or once a renewal found the lease lost, every acting service stands by
// until the lease is taken again; if another live daemon took it, taken is called and the
// renewals end: the daemon must exit (ErrLeaseTaken).
type hostLease struct {
	store    *store.Store
	req      store.LeaseAcquireParams
	logger   *slog.Logger
	regained func()      // called when the lease was taken again after it lapsed
	taken    func(error) // called once when another live daemon took the lease

	mu        sync.Mutex
	lease     model.Lease // guarded by mu
	heldUntil time.Time   // guarded by mu; on the monotonic clock; zero: not held
	loop      loop        // runs renew
}

func newHostLease(st *store.Store, req store.LeaseAcquireParams, logger *slog.Logger, regained func(), taken func(error)) *hostLease {
	h := &hostLease{store: st, req: req, logger: logger, regained: regained, taken: taken}
	h.loop = loop{name: h.Name(), run: h.renew}
	return h
}

func (h *hostLease) Name() string { return "host lease" }

// current returns the lease and whether the daemon holds it now (see hostLease).
func (h *hostLease) current() (model.Lease, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease, h.lease.Holder != "" && time.Now().Before(h.heldUntil)
}

// set records a lease taken or renewed by a call asked for at asked.
func (h *hostLease) set(l model.Lease, asked time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lease, h.heldUntil = l, asked.Add(h.req.Duration)
}

// drop records that the lease is not held, at once.
func (h *hostLease) drop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.heldUntil = time.Time{}
}

// Start takes the lease. Another daemon's current lease, or a recovery of the database
// (store.ErrRecovering), is waited out for up to two lease lengths, since a daemon of the same
// name elsewhere may be stopping; then Start fails.
func (h *hostLease) Start(ctx context.Context) error {
	if h.loop.running() {
		return nil
	}
	deadline := time.Now().Add(2 * h.req.Duration)
	for {
		asked := time.Now()
		lease, err := h.store.LeaseAcquire(ctx, h.req)
		// A recovery of the database is waited out as another daemon's lease is.
		var held *store.LeaseHeldError
		if (errors.As(err, &held) || errors.Is(err, store.ErrRecovering)) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(h.req.Duration / 3):
				continue
			}
		}
		if err != nil {
			return err
		}
		h.set(lease, asked)
		h.logger.Info("host lease taken", "host", lease.Host, "generation", lease.Generation)
		break
	}
	return h.loop.Start(ctx)
}

func (h *hostLease) renew(ctx context.Context) {
	tick := time.NewTicker(h.req.Duration / 3)
	defer tick.Stop()
	standingBy := false // logged once per episode
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lease, held := h.current()
		if !held && !standingBy {
			standingBy = true
			h.logger.Warn("host lease not renewed within its length: this daemon stands by (no spawn, sweep, admission, takeover, watch or delivery) until it holds it again",
				"host", lease.Host, "generation", lease.Generation)
		}
		callCtx, cancel := context.WithTimeout(ctx, h.req.Duration/3)
		asked := time.Now()
		next, err := h.store.LeaseRenew(callCtx, lease, h.req.Duration)
		regained := false
		if errors.Is(err, store.ErrLeaseLost) {
			h.drop()
			if !standingBy {
				standingBy = true
				h.logger.Warn("host lease lapsed: this daemon stands by, its writes about its attempts refused, and takes it again",
					"host", lease.Host, "generation", lease.Generation)
			}
			asked = time.Now()
			next, err = h.store.LeaseAcquire(callCtx, h.req)
			var other *store.LeaseHeldError
			if errors.As(err, &other) {
				cancel()
				err = fmt.Errorf("%w: %w", ErrLeaseTaken, other)
				h.logger.Error("host lease taken by another daemon: this daemon stops", "host", lease.Host,
					"generation", lease.Generation, "holder", other.Holder, "err", err)
				h.taken(err)
				return
			}
			regained = err == nil
		}
		cancel()
		if err != nil {
			h.logger.Error("host lease not renewed; trying again", "host", lease.Host, "err", err)
			continue
		}
		h.set(next, asked)
		if standingBy {
			standingBy = false
			h.logger.Info("host lease held again: this daemon acts again", "host", next.Host, "generation", next.Generation,
				"taken_again", regained)
		}
		if regained {
			h.regained()
		}
	}
}

// Stop ends the renewals and releases the lease, so the host shows down at once.
func (h *hostLease) Stop() {
	h.loop.Stop()
	h.mu.Lock()
	lease := h.lease
	h.lease, h.heldUntil = model.Lease{}, time.Time{}
	h.mu.Unlock()
	if lease.Host == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Guarded by holder and generation: a lease another daemon took is not released.
	if err := h.store.LeaseRelease(ctx, lease); err != nil {
		h.logger.Warn("host lease not released; it expires by itself", "host", lease.Host, "err", err)
	}
}
