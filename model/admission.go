package model

import (
	"time"

	"github.com/google/uuid"
)

// Admitted reports what admission did with one due job.
type Admitted struct {
	Job       string
	Run       *uuid.UUID // the run admitted, if any
	Trigger   string
	Planned   time.Time
	Missed    int
	Overlap   *uuid.UUID // the live run that made this slot be skipped
	SkipWhy   string
	NextRunAt *time.Time
	Paused    string // the admitted run was paused at once: its account could not hold it
	// Failed says why the job could not be admitted; it is set aside until RetryAt.
	Failed  string
	RetryAt *time.Time
}

// MaintenanceAdmitted reports a run of a repository's own schedules (a prune, a verification, a
// drill) admitted on its slot, or a slot put off.
type MaintenanceAdmitted struct {
	Job      string
	Schedule string     // the name of the RepositorySchedule that admitted it
	Run      *uuid.UUID // nil: put off, see Waiting
	Planned  time.Time
	Waiting  *uuid.UUID // the job's live run it waits for; the slot stays due
	NextSlot *time.Time
	Failed   string // why the job could not be admitted; it is set aside until RetryAt
	RetryAt  *time.Time
}
