package model

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/journal"
)

// Run statuses (see docs/ARCHITECTURE.md, Data model).
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusPartial   = "partial"
	StatusFailed    = "failed"
	StatusStopped   = "stopped"
	StatusPaused    = "paused"
	StatusSkipped   = "skipped" // a before hook asked that the backup not run (exit 75): no snapshot
)

// Run triggers: what admitted a run.
const (
	TriggerManual   = "manual"       // an operator: run start, retention apply
	TriggerSchedule = "schedule"     // its job's schedule (or prune schedule), on time
	TriggerCatchUp  = "catch-up"     // its job's schedule, once for the slots missed while down
	TriggerRetry    = "retry"        // a retry of a run that failed for a transient reason
	TriggerBackup   = "after-backup" // a backup that made a snapshot: its copy
	// TriggerRecovered is a backup holdfast recover recorded from its snapshot, in a database
	// rebuilt after a loss: the run is known from its repository, not from its unit.
	TriggerRecovered = "recovered"
)

// Live reports whether a run in this status still has (or will get) a process.
func Live(status string) bool { return status == StatusQueued || status == StatusRunning }

// Run is one logical backup of a job.
type Run struct {
	ID              uuid.UUID
	JobName         string
	Trigger         string
	Status          string
	PausedReason    string
	StopRequestedAt *time.Time
	StopReason      string // why a stop was asked for other than by the operator ("" the operator)
	CreatedAt       time.Time
	StartedAt       *time.Time
	FinishedAt      *time.Time
	Reason          string
	FailureClass    string
	SnapshotID      string
	BytesAdded      *int64
	BytesProcessed  *int64
	FilesProcessed  *int64
	FilesSkipped    int64
	PlannedAt       *time.Time // the schedule slot the run was admitted for
	NotBefore       *time.Time // the run is not spawned before this (a retry's delay, a window)
	WaitingReason   string     // why a queued run is not spawned yet
	RetryOf         *uuid.UUID
	RetryNumber     int
	RetriedBy       *uuid.UUID
	Kind            Kind       // what the run does: one of Kinds() (KindBackup, KindPrune, KindForget, KindRestore, KindVerify, KindCopy)
	Host            string     // the host the run must run on, whatever its job says ("" none): a restore's target is there
	Restore         Restore    // what a restore run gives back; zero for other kinds
	Verify          Verify     // what a verify run checks; zero for other kinds
	CopySnapshot    string     // the snapshot a copy run copies
	OnCopy          bool       // the run works on its job's copy repository (see Job.AsCopy)
	ForgetIDs       []string   // the snapshots a forget run deletes
	PlanID          *uuid.UUID // the retention plan a forget run applies
	BudgetBytes     *int64     // what the run may add over all its attempts
	HeldBytes       int64      // its open holds
	SettledBytes    int64      // what its attempts were charged
}

// FileID is which file a path named when it was checked: its device and inode. It is stored as
// the text "DEV:INO" (both unsigned 64-bit, which PostgreSQL's bigint is not).
type FileID struct {
	Dev, Ino uint64
}

// String is the stored form.
func (f FileID) String() string {
	return strconv.FormatUint(f.Dev, 10) + ":" + strconv.FormatUint(f.Ino, 10)
}

// Value stores f as its text.
func (f FileID) Value() (driver.Value, error) { return f.String(), nil }

// Scan reads the stored text.
func (f *FileID) Scan(src any) error {
	s, ok := src.(string)
	if !ok {
		return fmt.Errorf("file id: want text, got %T", src)
	}
	dev, ino, found := strings.Cut(s, ":")
	d, err1 := strconv.ParseUint(dev, 10, 64)
	i, err2 := strconv.ParseUint(ino, 10, 64)
	if !found || err1 != nil || err2 != nil {
		return fmt.Errorf("file id %q: want DEV:INO", s)
	}
	f.Dev, f.Ino = d, i
	return nil
}

// Progress is the newest progress report an attempt's journal made.
type Progress struct {
	PercentDone float64
	FilesDone   int64
	TotalFiles  int64
	BytesDone   int64
	TotalBytes  int64
}

// Attempt is one process of a run.
type Attempt struct {
	RunID            uuid.UUID
	No               int
	Unit             string // "" until a spawn was claimed
	Host             string
	BootID           string // the boot of Host when the spawn was claimed; "" if unknown
	CreatedAt        time.Time
	SpawnClaimedAt   *time.Time
	ArmedFor         *time.Time // a transient timer starts its unit at this time; nil: started at the claim
	StartedAt        *time.Time
	EndedAt          *time.Time
	ServiceResult    string
	ExitCode         string
	ExitStatus       string
	Cursor           journal.Cursor
	QuarantinedAt    *time.Time
	QuarantineReason string
	LastEventAt      *time.Time
	Progress         *Progress
	ItemErrors       int64
	FirstItemError   string
	Fatal            string
	Summary          json.RawMessage // the engine's own summary, as it reported it; nil if none yet
	RepoBytesBefore  *int64          // size of its local repository when it was spawned
	SettleDeferred   string          // why its hold is still open after it ended
	StalledAt        *time.Time      // when its progress was found standing still past the job's stall_after
	HoldBytes        *int64          // its hold, open or closed; nil if it has none
	HoldNote         string          // how its hold was sized; "" for none, and as the sweep reads it
	ResticVersion    string          // the release of the restic its unit ran; "" for another engine
	Settlement       string          // where the figure that closed its hold came from; "" while open
	SupersededAt     *time.Time      // when another host took the run over from this attempt
	SupersededBy     string          // the host that took it over
	HookError        string          // the first failure of an after hook, as the unit reported it
}

// UnitNames are the units of the attempts that have one.
func UnitNames(attempts []Attempt) []string {
	var names []string
	for _, a := range attempts {
		if a.Unit != "" {
			names = append(names, a.Unit)
		}
	}
	return names
}

// LiveRun is a live run with its live attempt and its job's engine ("" if the job was removed).
// The rest of the job is read only where it is needed (spawning), to keep the sweep's one
// query small; for the same reason Run.HeldBytes and Run.SettledBytes are not read (they are
// zero), nor the host's note of Run.WaitingReason: a run read by id has them.
type LiveRun struct {
	Run           Run
	Attempt       Attempt
	JobEngine     string
	JobRepository string
	JobUser       string // the user the job's units run as; "" for root
	// ReadAt is the database's clock when the run was read. Times the database stamped (the
	// spawn claim) are measured against it, never against the daemon's clock.
	ReadAt time.Time
	// ReadHere is this host's clock (its monotonic reading) as the run was asked for; the
	// store sets it beside ReadAt.
	ReadHere time.Time
}

// Now is the database's clock now, as far as the daemon tells without asking: ReadAt, plus the
// time passed here since the run was read, counted on this host's monotonic clock whatever its
// wall clock says. What is compared with times the database stamped (a retry's not-before, the
// time a run was queued) is compared with Now, not with the host's clock.
func (l LiveRun) Now() time.Time {
	if l.ReadHere.IsZero() {
		return l.ReadAt
	}
	return l.ReadAt.Add(time.Since(l.ReadHere))
}

// AttemptRef names one attempt: its run and its number there (1 for the first).
type AttemptRef struct {
	Run uuid.UUID
	No  int
}

// String is the attempt as logs and messages name it: run/no.
func (a AttemptRef) String() string { return a.Run.String() + "/" + strconv.Itoa(a.No) }

// Ref is the attempt's reference.
func (a Attempt) Ref() AttemptRef { return AttemptRef{Run: a.RunID, No: a.No} }

// Ref is the reference of the live run's attempt.
func (l LiveRun) Ref() AttemptRef { return AttemptRef{Run: l.Run.ID, No: l.Attempt.No} }
