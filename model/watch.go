package model

import (
	"time"
)

// WatchJob is what the watch reads of a job's own row.
type WatchJob struct {
	Name               string
	CreatedAt          time.Time
	Schedule, TimeZone string
	AlertAfter         time.Duration
	AlertFailures      int
	ExpectEvery        time.Duration
	OverdueSince       *time.Time
	OverdueReason      string
	LastOutcome        string
	NextRunAt          *time.Time
	// The verifications: their schedule ("" none), how old the last successful one may be (0:
	// two periods of the schedule), and since when one is expected.
	VerifySchedule   string
	VerifyAlertAfter time.Duration
	VerifySince      *time.Time
}

// WatchFacts is what deciding whether a job is overdue reads of it.
type WatchFacts struct {
	Job         WatchJob
	LastSuccess *time.Time // when its last succeeded backup ended
	// LastVerified is when its last succeeded verification ended; LastVerify the status its last
	// ended verification has ("" none).
	LastVerified *time.Time
	LastVerify   string
	// LastDrilled and LastDrill are the same of its drills alone.
	LastDrilled *time.Time
	LastDrill   string
	// Recent are the statuses of its last ended backups, newest first, as many as AlertFailures.
	Recent    []string
	RecentEnd *time.Time // when the newest of them ended
	ReadAt    time.Time  // the database's now() when they were read
}

// WatchScope says whose jobs JobWatchFacts reads.
type WatchScope struct {
	// Host reads the jobs pinned to it and the any-host jobs: what its daemon watches each pass.
	// "" reads every job (holdfast status).
	Host string
	// Unattended reads instead the jobs pinned to a host that is down or never ran a daemon,
	// which no daemon watches as its own: one daemon of the fleet reads them per interval
	// (DutyClaim), so their cost is the fleet's once, not once per daemon.
	Unattended bool
}
