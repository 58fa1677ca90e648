// Package wake provides a wake-up that cuts a sleep short: asks that come while one is pending
// are one ask, so a burst of notifications wakes a loop once, and an ask is never lost.
package wake

import (
	"context"
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
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-s:
		return true, true
	case <-timer.C:
		return true, false
	}
}
