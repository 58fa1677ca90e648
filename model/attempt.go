package model

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/ledger"
)

// Stall is a live attempt whose progress has stood still past its job's StallAfter.
type Stall struct {
	Run         uuid.UUID
	Attempt     int
	Job         string
	StallAfter  time.Duration
	StallAction string
	Since       time.Time // when its figures last moved (or it started)
}

// AttemptEnd is how an attempt ended, as its exit marker said: its fields are "" when it left
// none (its unit vanished, or it was never started).
type AttemptEnd struct {
	RunID         uuid.UUID
	Attempt       int
	EndedAt       time.Time
	ServiceResult string
	ExitCode      string
	ExitStatus    string
}

// RunningLimits bound how many attempts hold a unit at once (0: no bound).
type RunningLimits struct {
	MaxRunning     int // across every host sharing the database
	MaxRunningHost int // on the claiming host
}

// Set reports whether a limit is set: claims then decide on the places left, one at a time.
func (l RunningLimits) Set() bool { return l.MaxRunning > 0 || l.MaxRunningHost > 0 }

// SpawnClaim is the claim on a live attempt taken before systemd is asked to start its unit.
type SpawnClaim struct {
	Attempt AttemptRef
	Unit    string
	Boot    string // the host's current boot id, recorded with the claim ("" if unknown)
	Limits  RunningLimits
	// ArmedFor is when a timer starts the unit (systemd.Client.Arm); nil for a unit started now. It is
	// recorded with the claim, so that until then a service not there yet is not gone.
	ArmedFor *time.Time
	// ResticVersion is the release of the restic the unit runs ("" for another engine).
	ResticVersion string
}

// JournalDelta is what one drain of an attempt's journal adds to its projection.
type JournalDelta struct {
	LastEventAt    *time.Time
	Progress       *Progress       // newest progress in the batch, if any
	ItemErrors     int64           // item errors in the batch
	FirstItemError string          // first item error of the batch
	Fatal          string          // first fatal message of the batch
	Summary        json.RawMessage // the engine's summary, if the batch had one
	HookError      string          // the first after hook's failure of the batch
}

// Ending is how an attempt, and with it its run, ended.
type Ending struct {
	RunID   uuid.UUID
	Attempt int
	// At is when the attempt and its run ended; zero, what a daemon gives, stamps the
	// database's clock, on which every other time of the run is compared (a host's clock may
	// be off).
	At             time.Time
	Status         string // a final status: succeeded, partial, failed, stopped, paused
	Reason         string
	FailureClass   string
	PausedReason   string
	ServiceResult  string
	ExitCode       string
	ExitStatus     string
	SnapshotID     string
	BytesAdded     *int64
	BytesProcessed *int64
	FilesProcessed *int64
	FilesSkipped   int64
	// Retry, if set, admits a retry of the failed run in the same transaction.
	Retry *Retry
	// Settlement closes or defers the attempt's hold in the same transaction; nil leaves it.
	Settlement *ledger.Settlement
	// Snapshot, if set, is the snapshot the run made, added to the inventory in the same
	// transaction if the ending applies (the store's AttemptFinish): from the backup's summary
	// (SourceSummary) or from the repair channel's listing (SourceListing).
	Snapshot *Snapshot
}

// Retry is a new run that repeats a run which failed for a transient reason.
type Retry struct {
	ID     uuid.UUID
	Number int           // 1 for the first retry
	Delay  time.Duration // after the failed run's end, on the database's clock
	// Why is shown while it waits; AttemptFinish adds ", due at" its time.
	Why string
	// NotBefore is when it may start: the failed run's end plus Delay. AttemptFinish sets it.
	NotBefore time.Time
}

// Restarting is an attempt that ended without ending its run, as AttemptRestart records it.
type Restarting struct {
	RunID   uuid.UUID
	Attempt int
	At      time.Time // when the attempt ended; zero stamps the database's clock (see Ending.At)
	// The marker fields the attempt's unit left, "" if none.
	ServiceResult string
	ExitCode      string
	ExitStatus    string
	// Settlement closes or defers the attempt's hold; nil leaves it.
	Settlement *ledger.Settlement
}
