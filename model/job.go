package model

import (
	"time"

	"github.com/google/uuid"
)

// DefaultStallAfter is how long a live run's progress may stand still before it is stalled.
const DefaultStallAfter = 15 * time.Minute

// What happens to a stalled run besides its event.
const (
	StallAlert = "alert" // nothing more
	StallStop  = "stop"  // it is asked to stop, with the stall as the reason
)

// Job is a backup job: what to back up, how, when, and what it last did.
type Job struct {
	ID         int64
	Name       string
	Engine     string
	Repository string
	// Via, if set, is where a run reaches Repository when not at that location: the pruning
	// host's (AsPruner). Repository still names the repository (its snapshots and their
	// protections, the runs that share it); restic is given ResticRepository.
	Via          string
	PasswordFile string
	// EnvFile is a file of KEY=VALUE lines for the engine's environment (remote backends'
	// credentials), handed to the units as a credential; "" none.
	EnvFile           string
	Paths             []string
	Excludes          []string
	User              string
	Group             string
	Nice              *int
	IOSchedulingClass string
	RuntimeMax        time.Duration // 0 = no limit
	LimitUploadKiB    int           // restic's --limit-upload in KiB/s; 0 = none
	CreatedAt         time.Time
	LastOutcome       string
	LastRunID         *uuid.UUID

	// Command is the argv of a "command" engine job.
	Command []string
	// Schedule is a cron expression, descriptor or @every interval; "" for manual only.
	Schedule string
	TimeZone string // IANA name; "" is UTC
	// CatchUp runs once for the slots missed while holdfast was down instead of only counting them.
	CatchUp      bool
	NextRunAt    *time.Time
	MissedSlots  int64 // slots never run (holdfast was down): counted, not replayed
	OverlapSkips int64 // slots not run because the job's previous run was still live
	LastSkipAt   *time.Time
	LastSkipWhy  string
	RetryMax     int           // automatic retries of a transient failure
	RetryBackoff time.Duration // delay before the first retry, doubled for each next one
	Windows      []string      // maintenance windows during which no run of the job starts
	Priority     int           // higher first among runs waiting for a slot
	DependsOn    string        // a job whose last run must have succeeded

	// Backup, Retention, Prune, Verify, Drill and Copy are the job's settings for each kind of
	// run (see the kind's file, model/kind_<kind>.go).
	Backup    BackupSettings
	Retention RetentionSettings
	Prune     PruneSettings
	Verify    VerifySettings
	Drill     DrillSettings
	Copy      CopySettings
	// Account is the ledger account the job's runs are charged to ("" is DefaultAccount);
	// MaxAdded, if set, is what one run may add to the repository (its budget).
	Account  string
	MaxAdded *int64
	// AlertAfter is the grace after a slot before a job without a success since is overdue (0:
	// one period of its schedule); AlertFailures how many runs in a row not succeeded make it
	// overdue (0: none do); ExpectEvery how often a manual job is expected to succeed (0: never
	// overdue for time). OverdueSince and OverdueReason are the current episode (nil: none).
	AlertAfter    time.Duration
	AlertFailures int
	// StallAfter is how long a live run's progress may stand still before it is stalled (0:
	// DefaultStallAfter); StallAction what then happens besides the event: StallAlert or StallStop.
	StallAfter  time.Duration
	StallAction string
	ExpectEvery time.Duration
	// Host pins the job to the host of that name: only its daemon runs it, since its paths and
	// repository are there. "" means any host may run it.
	Host          string
	OverdueSince  *time.Time
	OverdueReason string
	// AdmissionError says why the job's last admission failed; admission leaves the job aside
	// until AdmissionRetryAt. Both are cleared by the next admission that succeeds.
	AdmissionError   string
	AdmissionRetryAt *time.Time
}
