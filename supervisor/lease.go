package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-backup/holdfast/store"
)

// hostLease is the service that holds the daemon's host lease (docs/ARCHITECTURE.md, Several
// hosts). It takes the lease at Start, before the other services, so that the first sweep
// reconciles the host's attempts under it; renews it every third of its length; takes it again
// if it lapsed (a daemon that did not run for a while: its writes were fenced meanwhile); and
// releases it at Stop.
type hostLease struct {
	store    *store.Store
	req      store.LeaseRequest
	logger   *slog.Logger
	regained func() // called when the lease was taken again after it lapsed

	mu    sync.Mutex
	lease store.Lease // guarded by mu
	loop  loop        // runs renew
}

func newHostLease(st *store.Store, req store.LeaseRequest, logger *slog.Logger, regained func()) *hostLease {
	h := &hostLease{store: st, req: req, logger: logger, regained: regained}
	h.loop = loop{name: h.Name(), run: h.renew}
	return h
}

func (h *hostLease) Name() string { return "host lease" }

// Start takes the lease. Another daemon's current lease is waited out for up to two lease
// lengths, since a daemon of the same name elsewhere may be stopping; then Start fails.
func (h *hostLease) Start(ctx context.Context) error {
	if h.loop.running() {
		return nil
	}
	deadline := time.Now().Add(2 * h.req.Duration)
	for {
		lease, err := h.store.AcquireLease(ctx, h.req)
		var held *store.LeaseHeldError
		if errors.As(err, &held) && time.Now().Before(deadline) {
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
		h.mu.Lock()
		h.lease = lease
		h.mu.Unlock()
		h.logger.Info("host lease taken", "host", lease.Host, "generation", lease.Generation)
		break
	}
	return h.loop.Start(ctx)
}

func (h *hostLease) renew(ctx context.Context) {
	tick := time.NewTicker(h.req.Duration / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		h.mu.Lock()
		lease := h.lease
		h.mu.Unlock()
		callCtx, cancel := context.WithTimeout(ctx, h.req.Duration/3)
		next, err := h.store.RenewLease(callCtx, lease, h.req.Duration)
		regained := false
		if errors.Is(err, store.ErrLeaseLost) {
			h.logger.Warn("host lease lapsed: this daemon's writes about its attempts were refused meanwhile; taking it again",
				"host", lease.Host, "generation", lease.Generation)
			next, err = h.store.AcquireLease(callCtx, h.req)
			if err == nil {
				h.logger.Info("host lease taken again", "host", next.Host, "generation", next.Generation)
				regained = true
			}
		}
		cancel()
		if err != nil {
			h.logger.Error("host lease not renewed; trying again", "host", lease.Host, "err", err)
			continue
		}
		h.mu.Lock()
		h.lease = next
		h.mu.Unlock()
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
	h.lease = store.Lease{}
	h.mu.Unlock()
	if lease.Host == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.store.ReleaseLease(ctx, lease); err != nil {
		h.logger.Warn("host lease not released; it expires by itself", "host", lease.Host, "err", err)
	}
}
