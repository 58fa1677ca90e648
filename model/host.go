package model

import (
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/ledger"
)

// Host is a host's row: the daemon that holds its lease, and what runs there.
type Host struct {
	Name          string
	Version       string
	ResticVersion string // the release of the restic its daemon runs; "" if not recorded
	Generation    int64  // goes up each time a daemon takes the lease anew
	Holder        string
	LeaseUntil    time.Time
	HeartbeatAt   time.Time
	StartedAt     time.Time
	TakeoverGrace time.Duration
	DrainingSince *time.Time
	Alive         bool // its lease has not expired
	LiveRuns      int  // live attempts that hold a unit there
	PinnedJobs    int
	ReadAt        time.Time // the database's clock when the row was read
}

// State is the host's state in a word or a few, as every listing words it: "alive",
// "draining", or "down since" when its lease expired.
func (h Host) State() string {
	switch {
	case !h.Alive:
		return "down since " + h.LeaseUntil.UTC().Format(time.RFC3339)
	case h.DrainingSince != nil:
		return "draining"
	}
	return "alive"
}

// Lease is a daemon's hold on its host's row, and who writes: every write about an attempt and
// every spawn claim takes the writer's Lease, and applies only while it is its host's current
// one (docs/ARCHITECTURE.md, Several hosts): the same Holder, in the same Generation, not
// expired on the database's clock, and the attempt is unclaimed or was claimed (or adopted) by
// that host in that generation. A writer that lost the lease, to another holder or by letting
// it lapse, changes nothing, whatever generation the attempt carries. A Lease with only a Host
// (no Holder) is none, as a reconciler used alone writes: it applies only for a host no
// daemon ever held a lease for, and only to attempts claimed without one.
type Lease struct {
	Host       string
	Holder     string
	Generation int64
	Until      time.Time
}

// Runnable says whether a live host may run a job now.
type Runnable struct {
	Pinned string // the job's host; "" for an any-host job
	// Host is a host that is live, not draining, and may run the job; "" none.
	Host string
	// Why says why no host may run it, and what to do, when Host is "".
	Why string
}

// TakeOver is a run that another host takes over from a host whose lease expired.
type TakeOver struct {
	RunID   uuid.UUID
	Attempt int
	From    string        // the host whose lease expired
	Grace   time.Duration // From's lease must have expired at least this long ago
	// GiveUp, if set, ends the run failed (transient) with this reason instead of opening the
	// next attempt (the run reached --max-attempts).
	GiveUp string
	// Settlement closes or defers the superseded attempt's hold; nil leaves it.
	Settlement *ledger.Settlement
}

// SupersededAttempt is an attempt of this host that another host took over, with its job.
type SupersededAttempt struct {
	Attempt
	JobName string
}
