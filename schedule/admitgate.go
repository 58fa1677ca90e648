package schedule

import "time"

// GateBackstop is the longest a Gate keeps admission's claiming passes shut while nothing
// says anything is due.
const GateBackstop = time.Minute

// Gate says when an admission pass need claim: an idle daemon's pass is then the one read of
// the next due time (store.JobNextDue) instead of a transaction per schedule. Its zero value
// opens at the first pass.
type Gate struct {
	quietUntil time.Time // nothing is due before it, as far as the last read knew
	claimedAt  time.Time
	claimed    bool
}

// Open reports whether the pass at now claims: when woken (a run or a job changed), at or after
// the time the last read gave, after a failed read, and at least every GateBackstop. It records
// the claim.
func (g *Gate) Open(now time.Time, woken bool) bool {
	if woken || !g.claimed || !now.Before(g.quietUntil) || now.Sub(g.claimedAt) >= GateBackstop {
		g.claimed, g.claimedAt = true, now
		return true
	}
	return false
}

// Learn records a pass's read of the next due time at now: next (nil: nothing due) or the
// error that the pass, or the read, failed with; after an error the next pass claims.
func (g *Gate) Learn(now time.Time, next *time.Time, err error) {
	switch {
	case err != nil:
		g.quietUntil = time.Time{}
	case next == nil:
		g.quietUntil = now.Add(GateBackstop)
	default:
		g.quietUntil = *next
	}
}
