package schedule

import (
	"context"
	"log/slog"
	"time"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/store"
)

// Decide is the scheduler's answer for one due job, in the store's terms.
func Decide(j store.Job, now time.Time, grace time.Duration) store.SlotDecision {
	s, err := Parse(j.Schedule, j.TimeZone)
	if err != nil || s.Manual() || j.NextRunAt == nil {
		why := "the job has no schedule"
		if err != nil {
			why = err.Error()
		}
		return store.SlotDecision{Why: why}
	}
	d, err := s.Due(*j.NextRunAt, now, grace, j.CatchUp)
	if err != nil {
		return store.SlotDecision{Why: err.Error()}
	}
	return store.SlotDecision{Run: d.Run, Trigger: d.Trigger, Planned: d.Planned, Missed: d.Missed, Next: &d.Next}
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

// Admitter turns due jobs into runs.
type Admitter struct {
	Store *store.Store
	// Grace is how late a slot may still run; older slots are missed (counted, not replayed).
	Grace  time.Duration
	Logger *slog.Logger
}

// AdmitDue admits every due job's slot and reports how many runs it admitted.
func (a *Admitter) AdmitDue(ctx context.Context, now time.Time) (int, error) {
	admitted := 0
	for {
		batch, err := a.Store.AdmitDue(ctx, now, 100, func(j store.Job) store.SlotDecision { return Decide(j, now, a.Grace) })
		if err != nil {
			return admitted, err
		}
		for _, s := range batch {
			switch {
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
		if len(batch) < 100 {
			break
		}
	}
	prunes, err := a.Store.AdmitDuePrunes(ctx, now, 100, func(j store.Job) *time.Time { return nextPrune(j, now) })
	for _, p := range prunes {
		if p.Run != nil {
			crashpoint.At("admit-prune-after")
			admitted++
			a.Logger.Info("prune admitted", "job", p.Job, "run", *p.Run, "planned", p.Planned, "next", p.NextSlot)
		}
	}
	return admitted, err
}

// nextPrune is the job's next prune slot after now: prune slots missed while holdfast was down
// are not replayed, one prune covers them.
func nextPrune(j store.Job, now time.Time) *time.Time {
	next, err := FirstSlot(j.PruneSchedule, j.TimeZone, now)
	if err != nil {
		return nil
	}
	return next
}
