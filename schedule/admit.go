package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// Decide is the scheduler's answer for one due job, in the store's terms. A slot still ahead of
// now (admitted ahead) is decided as at its own time: it is run, nothing is missed.
func Decide(j model.Job, now time.Time, grace time.Duration) model.SlotDecision {
	s, err := Parse(j.Schedule, j.TimeZone)
	if err != nil || s.Manual() || j.NextRunAt == nil {
		why := "the job has no schedule"
		if err != nil {
			why = err.Error()
		}
		return model.SlotDecision{Why: why}
	}
	at := now
	if j.NextRunAt.After(now) {
		at = *j.NextRunAt
	}
	d, err := s.Due(*j.NextRunAt, at, grace, j.CatchUp)
	if err != nil {
		return model.SlotDecision{Why: err.Error()}
	}
	return model.SlotDecision{Run: d.Run, Trigger: d.Trigger, Planned: d.Planned, Missed: d.Missed, Next: &d.Next}
}

// FirstSlot is the first slot of a new or changed schedule: the first one after now.
func FirstSlot(spec, tz string, now time.Time) (*time.Time, error) {
	s, err := Parse(spec, tz)
	if err != nil {
		return nil, err
	}
	next, ok := s.Next(now)
	if !ok {
		return nil, nil
	}
	return &next, nil
}

// Store is what an Admitter writes: the due slots of jobs, and of their maintenance schedules,
// admitted as runs. The daemon gives its store.Store.
type Store interface {
	JobAdmitDue(ctx context.Context, p store.JobAdmitDueParams) ([]model.Admitted, error)
	JobAdmitDueMaintenance(ctx context.Context, p store.JobAdmitDueMaintenanceParams) ([]model.MaintenanceAdmitted, error)
}

// Admitter turns due jobs into runs.
type Admitter struct {
	Store Store
	// Host is the host of the daemon that admits, which wakes its own sweep after a pass that
	// admitted: the daemons are notified only of runs pinned to another host. "" notifies of
	// every run.
	Host string
	// Grace is how late a slot may still run; older slots are missed (counted, not replayed).
	Grace  time.Duration
	Logger *slog.Logger
	// Timeout bounds one admission pass, so a database that stops answering cannot hold the
	// daemon's loop. Default DefaultAdmitTimeout.
	Timeout time.Duration
	// SetAside is how long a job that could not be admitted is left alone before admission
	// tries it again. Default DefaultSetAside.
	SetAside time.Duration
	// Lead is how long before its slot a scheduled run is admitted, so that it can be prepared
	// and start at the slot itself; 0 admits a slot at its time.
	Lead time.Duration
}

// Admitter defaults.
const (
	DefaultAdmitTimeout = time.Minute
	DefaultSetAside     = time.Minute
)

// Validate fills in defaults and checks the admitter.
func (a *Admitter) Validate() error {
	switch {
	case a.Store == nil:
		return errors.New("admitter: no store")
	case a.Timeout < 0:
		return fmt.Errorf("admitter: timeout %s: want a positive duration", a.Timeout)
	case a.SetAside < 0:
		return fmt.Errorf("admitter: set-aside time %s: want a positive duration", a.SetAside)
	case a.Lead < 0:
		return fmt.Errorf("admitter: lead %s: want 0 or a positive duration", a.Lead)
	}
	if a.Timeout == 0 {
		a.Timeout = DefaultAdmitTimeout
	}
	if a.SetAside == 0 {
		a.SetAside = DefaultSetAside
	}
	if a.Logger == nil {
		a.Logger = slog.Default()
	}
	return nil
}

// batchSize is how many due jobs one transaction claims.
const batchSize = 100

// AdmitDue admits every due job's slot and reports how many runs it admitted. A job that
// cannot be admitted is logged and set aside (see store.JobAdmitDue); the others go on.
func (a *Admitter) AdmitDue(ctx context.Context, now time.Time) (int, error) {
	if err := a.Validate(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	admitted := 0
	for {
		batch, err := a.Store.JobAdmitDue(ctx, store.JobAdmitDueParams{
			By: a.Host, Now: now, Horizon: now.Add(a.Lead), Limit: batchSize, SetAside: a.SetAside,
			Decide: func(j model.Job) model.SlotDecision { return Decide(j, now, a.Grace) },
		})
		if err != nil {
			return admitted, err
		}
		for _, s := range batch {
			switch {
			case s.Failed != "":
				a.Logger.Error("job set aside: its slot could not be admitted", "job", s.Job, "why", s.Failed)
			case s.Run != nil:
				crashpoint.At("admit-slot-after")
				admitted++
				a.Logger.Info("run admitted", "job", s.Job, "run", *s.Run, "trigger", s.Trigger, "planned", s.Planned, "missed", s.Missed)
			case s.SkipWhy != "":
				a.Logger.Warn("slot not run", "job", s.Job, "why", s.SkipWhy)
			}
			if s.Run != nil && s.Missed > 0 {
				a.Logger.Warn("slots missed", "job", s.Job, "missed", s.Missed, "why", s.SkipWhy)
			}
		}
		if len(batch) < batchSize {
			break
		}
	}
	for _, sched := range model.RepositorySchedules {
		due, err := a.Store.JobAdmitDueMaintenance(ctx, store.JobAdmitDueMaintenanceParams{
			By: a.Host, Schedule: sched, Now: now, Limit: batchSize, SetAside: a.SetAside,
			Next: func(j model.Job) *time.Time { return nextMaintenance(j, sched, now) },
		})
		for _, p := range due {
			switch {
			case p.Failed != "":
				a.Logger.Error("job set aside: its "+sched.Name+" run could not be admitted", "job", p.Job, "why", p.Failed)
			case p.Run != nil:
				crashpoint.At("admit-prune-after") // a verification's and a drill's too
				admitted++
				a.Logger.Info(sched.Name+" admitted", "job", p.Job, "run", *p.Run, "planned", p.Planned, "next", p.NextSlot)
			}
		}
		if err != nil {
			return admitted, err
		}
	}
	return admitted, nil
}

// nextMaintenance is the job's next slot of the repository schedule after now: slots missed
// while holdfast was down are not replayed, one run covers them.
func nextMaintenance(j model.Job, sched model.RepositorySchedule, now time.Time) *time.Time {
	next, err := FirstSlot(sched.Expr(j), j.TimeZone, now)
	if err != nil {
		return nil
	}
	return next
}
