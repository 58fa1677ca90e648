// Package wake provides a wake-up that cuts a sleep short: asks that come while one is pending
// are one ask, so a burst of notifications wakes a loop once, and an ask is never lost.
package wake

import (
	"context"
	"math/rand/v2"
	"time"
)

// Signal asks a sleeping loop to run now. Make one with New.
type Signal chan struct{}

// New returns a Signal with room for the one pending ask.
func New() Signal { return make(Signal, 1) }

// Wake asks; it never blocks.
func (s Signal) Wake() {
	select {
	case s <- struct{}{}:
	default:
	}
}

// Sleep waits for d, an ask on s (nil: none) or the end of ctx, and reports whether ctx is still
// alive.
func Sleep(ctx context.Context, d time.Duration, s Signal) bool {
	alive, _ := Wait(ctx, d, s)
	return alive
}

// Wait is Sleep that also reports whether an ask on s cut it short.
func Wait(ctx context.Context, d time.Duration, s Signal) (alive, asked bool) {
	return WaitOr(ctx, d, s, nil) // a nil Signal never asks
}

// WaitOr is Wait that an ask on also cuts short too, reported as not asked: a loop woken by
// also runs as if its sleep had ended.
func WaitOr(ctx context.Context, d time.Duration, s, also Signal) (alive, asked bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-s:
		return true, true
	case <-also:
		return true, false
	case <-timer.C:
		return true, false
	}
}

// Backoff is how long to wait after the failures-th failure in a row (1 for the first): first,
// doubled at each failure up to most, and then spread over half to one and a half times that,
// so that the many processes a shared failure stopped together (a database restarted under a
// fleet's daemons) do not all come back at the same instant.
func Backoff(first, most time.Duration, failures int) time.Duration {
	d := first
	for i := 1; i < failures && d < most; i++ {
		d *= 2
	}
	d = min(d, most)
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d)
}
