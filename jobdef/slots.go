package jobdef

import (
	"fmt"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/setting"
)

// DefaultRetryBackoff is the delay before a job's first retry when it gives none.
const DefaultRetryBackoff = time.Minute

// DefaultAlertFailures is how many runs in a row that did not succeed make a job overdue.
const DefaultAlertFailures = 2

// New is a job named name with the defaults of the settings an operator may leave out.
func New(name string) model.Job {
	return model.Job{Name: name, RetryBackoff: DefaultRetryBackoff, AlertFailures: DefaultAlertFailures,
		StallAfter: model.DefaultStallAfter, StallAction: model.StallAlert,
		Retention: model.RetentionSettings{MaxDelete: retention.DefaultMaxDeleteShare, MinKeep: retention.DefaultMinKeep}}
}

// Slots sets the first slots of the job's schedules as of now: its next run and its next prune.
// For an edit, before is the job as it was, and only a slot whose schedule (or time zone)
// changed is set again; for a new job, before is nil. Run it after Validate.
func Slots(j *model.Job, before *model.Job, now time.Time) error {
	zoneChanged := before != nil && j.TimeZone != before.TimeZone
	if before == nil || zoneChanged || j.Schedule != before.Schedule {
		next, err := schedule.FirstSlot(j.Schedule, j.TimeZone, now)
		if err != nil {
			return err
		}
		j.NextRunAt = next
	}
	if before == nil || zoneChanged || j.Prune.Schedule != before.Prune.Schedule {
		next, err := firstPrune(*j, now)
		if err != nil {
			return err
		}
		j.Prune.NextAt = next
	}
	if before == nil || zoneChanged || j.Verify.Schedule != before.Verify.Schedule {
		next, err := firstMaintenance(*j, "{Job.Verify.Schedule}", j.Verify.Schedule, "verified", now)
		if err != nil {
			return err
		}
		j.Verify.NextAt = next
		if j.Verify.Schedule != "" && (before == nil || before.Verify.Schedule == "") {
			j.Verify.Since = &now
		}
	}
	if before == nil || zoneChanged || j.Drill.Schedule != before.Drill.Schedule {
		next, err := firstMaintenance(*j, "{Job.Drill.Schedule}", j.Drill.Schedule, "drilled", now)
		if err != nil {
			return err
		}
		j.Drill.NextAt = next
	}
	return nil
}

// firstPrune is the first slot of the job's prune schedule, nil for none.
func firstPrune(j model.Job, now time.Time) (*time.Time, error) {
	return firstMaintenance(j, "{Job.Prune.Schedule}", j.Prune.Schedule, "pruned", now)
}

// firstMaintenance is the first slot of one of the schedules of a job's repository (name names
// it, a placeholder of package setting; done says what is done to it), nil for none.
func firstMaintenance(j model.Job, name, expr, done string, now time.Time) (*time.Time, error) {
	if expr == "" {
		return nil, nil
	}
	if !j.HasRepository() {
		return nil, fmt.Errorf("%s: job %s uses the %s engine; only restic repositories are %s", setting.Render(name), j.Name, j.Engine, done)
	}
	next, err := schedule.FirstSlot(expr, j.TimeZone, now)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting.Render(name), err)
	}
	return next, nil
}
