// Package watch decides when a backup is not happening: a job is overdue when no run of it
// succeeded since its deadline (its slot plus a grace, or a manual job's expected interval), or
// when its last runs did not succeed. Judge is the decision, pure; Watcher is the daemons'
// service that records each episode once, whichever daemon notices first, with its event in the
// outbox (docs/ARCHITECTURE.md, Watching).
package watch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/store"
)

// Verdict is whether a job is overdue, since when and why.
type Verdict struct {
	Overdue bool
	Since   time.Time
	Reason  string
}

// Judge decides about one job as of now (the database's clock, f.ReadAt).
func Judge(f model.WatchFacts, now time.Time) (Verdict, error) {
	from := since(f)
	e, err := expect(f.Job, from, verifiedSince(f))
	if err != nil {
		return Verdict{}, err
	}
	return judge(f, now, from, e), nil
}

// verifiedSince is the instant a job with a verify schedule must have been verified again
// after: its last successful verification, or when the schedule was set (zero: no schedule).
func verifiedSince(f model.WatchFacts) time.Time {
	j := f.Job
	switch {
	case j.VerifySchedule == "":
		return time.Time{}
	case f.LastVerified != nil && (j.VerifySince == nil || f.LastVerified.After(*j.VerifySince)):
		return *f.LastVerified
	case j.VerifySince != nil:
		return *j.VerifySince
	}
	return j.CreatedAt
}

// since is the instant a job must have succeeded again after: its last success, or its creation.
func since(f model.WatchFacts) time.Time {
	if f.LastSuccess != nil && f.LastSuccess.After(f.Job.CreatedAt) {
		return *f.LastSuccess
	}
	return f.Job.CreatedAt
}

// expectation is what a job's schedule and settings say about when it must succeed after
// from: by its first slot after from plus a grace, or, for a manual job, within every.
type expectation struct {
	slot  time.Time // zero for a manual job
	grace time.Duration
	every time.Duration // a manual job's --expect-every; 0 expects nothing
	// verifyBy is when a job with a verify schedule is overdue without a successful
	// verification since verifyFrom; zero for none.
	verifyBy, verifyFrom time.Time
}

// expect reads the job's expectation. It depends only on the job's schedule, zone and alert
// settings and on from, so a Watcher keeps it while they stay the same (cron's next slot in a
// zone costs microseconds, and every job is judged every pass).
func expect(j model.WatchJob, from, verifyFrom time.Time) (expectation, error) {
	var e expectation
	if j.VerifySchedule != "" {
		vs, err := schedule.Parse(j.VerifySchedule, j.TimeZone)
		if err != nil {
			return expectation{}, fmt.Errorf("job %s: verify schedule: %w", j.Name, err)
		}
		grace := j.VerifyAlertAfter
		if first, ok := vs.Next(verifyFrom); ok && grace <= 0 {
			if second, ok := vs.Next(first); ok {
				if third, ok := vs.Next(second); ok {
					grace = third.Sub(first) // two periods
				}
			}
		}
		if grace > 0 {
			e.verifyBy, e.verifyFrom = verifyFrom.Add(grace), verifyFrom
		}
	}
	sched, err := schedule.Parse(j.Schedule, j.TimeZone)
	if err != nil {
		return expectation{}, fmt.Errorf("job %s: %w", j.Name, err)
	}
	slot, ok := sched.Next(from)
	if !ok {
		e.every = j.ExpectEvery
		return e, nil
	}
	grace := j.AlertAfter
	if grace <= 0 {
		if after, ok := sched.Next(slot); ok {
			grace = after.Sub(slot)
		}
	}
	e.slot, e.grace = slot, grace
	return e, nil
}

func judge(f model.WatchFacts, now, from time.Time, e expectation) Verdict {
	j := f.Job
	after := "its creation"
	if f.LastSuccess != nil {
		after = "the last success at " + f.LastSuccess.UTC().Format(time.RFC3339)
	}
	switch {
	case !e.slot.IsZero():
		if deadline := e.slot.Add(e.grace); !now.Before(deadline) {
			return Verdict{true, deadline, fmt.Sprintf("no successful run for the slot of %s or later, %s after it (since %s)",
				e.slot.UTC().Format(time.RFC3339), e.grace, after)}
		}
	case e.every > 0:
		if deadline := from.Add(e.every); !now.Before(deadline) {
			return Verdict{true, deadline, fmt.Sprintf("no successful run for %s (expected every %s, since %s)",
				now.Sub(from).Round(time.Second), e.every, after)}
		}
	}
	if n := j.AlertFailures; n > 0 && len(f.Recent) >= n && f.RecentEnd != nil && !slices.Contains(f.Recent[:n], model.StatusSucceeded) {
		return Verdict{true, *f.RecentEnd, fmt.Sprintf("the last %d runs did not succeed (%s)", n, strings.Join(f.Recent[:n], ", "))}
	}
	if !e.verifyBy.IsZero() && !now.Before(e.verifyBy) {
		what := "since its verify schedule was set at " + e.verifyFrom.UTC().Format(time.RFC3339)
		if f.LastVerified != nil && !f.LastVerified.Before(e.verifyFrom) {
			what = "since the last one at " + f.LastVerified.UTC().Format(time.RFC3339)
		}
		return Verdict{true, e.verifyBy, fmt.Sprintf("verification overdue: no successful verification of its repository for %s (%s)",
			e.verifyBy.Sub(e.verifyFrom), what)}
	}
	return Verdict{}
}

// expected is a job's expectation as a Watcher keeps it, with what it was read from.
type expected struct {
	schedule, zone    string
	from              time.Time
	alertAfter, every time.Duration
	verifySchedule    string
	verifyFrom        time.Time
	verifyAlertAfter  time.Duration
	e                 expectation
}

// Store is what a Watcher reads and writes: the jobs' facts, the stalled runs, the duty of
// watching unattended jobs, and the episodes it records. The daemon gives its store.Store.
type Store interface {
	JobWatchFacts(ctx context.Context, scope model.WatchScope) ([]model.WatchFacts, error)
	AttemptListStalled(ctx context.Context, host string) ([]model.Stall, error)
	AttemptMarkStalled(ctx context.Context, p store.AttemptMarkStalledParams) (marked, stopped bool, err error)
	DutyClaim(ctx context.Context, p store.DutyClaimParams) (bool, error)
	JobMarkOverdue(ctx context.Context, p store.JobMarkOverdueParams) (bool, error)
	JobClearOverdue(ctx context.Context, p store.JobClearOverdueParams) (bool, error)
}

// Watcher records overdue episodes: at most one "overdue" event per episode, then one
// "recovered", however many daemons watch.
type Watcher struct {
	Store  Store
	Host   string
	Logger *slog.Logger
	// Interval is how often Pass runs (default DefaultInterval): the jobs no daemon watches as
	// its own are read once per Interval by one daemon of the fleet.
	Interval time.Duration

	expected map[string]expected // by job name, from the last pass; only its passes use it
	// nextDeadline is, from the last pass's read, how long until the earliest deadline of a job
	// it judged not overdue; 0 for none (NextDeadline).
	nextDeadline time.Duration
}

// NextDeadline is how long after the last Pass read its facts the earliest deadline of a job it
// judged not overdue falls: until then, time alone makes no job overdue (new facts may: a run
// that fails, a job changed). ok is false when no job has one, or no pass judged the jobs.
// It is read between passes, by their caller.
func (w *Watcher) NextDeadline() (in time.Duration, ok bool) {
	return w.nextDeadline, w.nextDeadline > 0
}

// deadline is when a job with expectation e, to succeed again after from, is overdue by time
// alone (judge); ok is false for a job whose verdict only new facts change.
func (e expectation) deadline(from time.Time) (t time.Time, ok bool) {
	switch {
	case !e.slot.IsZero():
		t, ok = e.slot.Add(e.grace), true
	case e.every > 0:
		t, ok = from.Add(e.every), true
	}
	if !e.verifyBy.IsZero() && (!ok || e.verifyBy.Before(t)) {
		t, ok = e.verifyBy, true
	}
	return t, ok
}

// DefaultInterval is a Watcher's default Interval.
const DefaultInterval = 15 * time.Second

// unattendedDuty is the duty (store.DutyClaim) of watching the jobs pinned to hosts that are
// down or never ran a daemon.
const unattendedDuty = "watch-unattended"

func (w *Watcher) interval() time.Duration { return cmp.Or(w.Interval, DefaultInterval) }

// Pass judges every job once and records what changed, then marks the stalled runs. It goes
// on past a job or a run it cannot handle.
func (w *Watcher) Pass(ctx context.Context) error {
	return errors.Join(w.overdue(ctx), w.stalls(ctx))
}

// stalls marks each run whose progress stood still past its job's stall_after, once, and asks
// it to stop where the job says so: the decision table then stops it as any stop.
func (w *Watcher) stalls(ctx context.Context) error {
	stalls, err := w.Store.AttemptListStalled(ctx, w.Host)
	if err != nil {
		return err
	}
	var errs []error
	for _, st := range stalls {
		reason := fmt.Sprintf("stalled: no progress for %s, since %s", st.StallAfter, st.Since.UTC().Format(time.RFC3339))
		marked, stopped, err := w.Store.AttemptMarkStalled(ctx, store.AttemptMarkStalledParams{Stall: st, Reason: reason, Host: w.Host})
		switch {
		case err != nil:
			errs = append(errs, err)
		case stopped:
			w.Logger.Warn("run stalled; stopping it", "run", st.Run, "job", st.Job, "attempt", st.Attempt, "why", reason)
		case marked:
			w.Logger.Warn("run stalled", "run", st.Run, "job", st.Job, "attempt", st.Attempt, "why", reason)
		}
	}
	return errors.Join(errs...)
}

// overdue judges every job and records each change of its overdue episode.
func (w *Watcher) overdue(ctx context.Context) error {
	w.nextDeadline = 0
	facts, err := w.Store.JobWatchFacts(ctx, model.WatchScope{Host: w.Host})
	if err != nil {
		return err
	}
	// The jobs pinned to a host that is down or never ran a daemon are watched too, by one
	// daemon of the fleet per interval.
	if claimed, err := w.Store.DutyClaim(ctx, store.DutyClaimParams{Name: unattendedDuty, Host: w.Host, Every: w.interval()}); err != nil {
		return err
	} else if claimed {
		unattended, err := w.Store.JobWatchFacts(ctx, model.WatchScope{Unattended: true})
		if err != nil {
			return err
		}
		facts = append(facts, unattended...)
	}
	var errs []error
	var next time.Duration
	kept := make(map[string]expected, len(facts))
	for _, f := range facts {
		j, from, verifyFrom := f.Job, since(f), verifiedSince(f)
		x, ok := w.expected[j.Name]
		if !ok || x.schedule != j.Schedule || x.zone != j.TimeZone || !x.from.Equal(from) ||
			x.alertAfter != j.AlertAfter || x.every != j.ExpectEvery || x.verifySchedule != j.VerifySchedule ||
			!x.verifyFrom.Equal(verifyFrom) || x.verifyAlertAfter != j.VerifyAlertAfter {
			e, err := expect(j, from, verifyFrom)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			x = expected{schedule: j.Schedule, zone: j.TimeZone, from: from, alertAfter: j.AlertAfter, every: j.ExpectEvery,
				verifySchedule: j.VerifySchedule, verifyFrom: verifyFrom, verifyAlertAfter: j.VerifyAlertAfter, e: e}
		}
		kept[j.Name] = x
		v := judge(f, f.ReadAt, from, x.e)
		if at, ok := x.e.deadline(from); ok && !v.Overdue {
			if in := at.Sub(f.ReadAt); in > 0 && (next == 0 || in < next) {
				next = in
			}
		}
		switch {
		case v.Overdue && f.Job.OverdueSince == nil:
			marked, err := w.Store.JobMarkOverdue(ctx, store.JobMarkOverdueParams{Job: f.Job.Name, Since: v.Since, Reason: v.Reason, Host: w.Host})
			if err != nil {
				errs = append(errs, err)
			} else if marked {
				w.Logger.Warn("job overdue", "job", f.Job.Name, "since", v.Since, "why", v.Reason)
			}
		case !v.Overdue && f.Job.OverdueSince != nil:
			why := "no longer overdue under the job's settings"
			if f.LastSuccess != nil && f.LastSuccess.After(*f.Job.OverdueSince) {
				why = "a run succeeded at " + f.LastSuccess.UTC().Format(time.RFC3339)
			}
			if f.LastVerified != nil && f.LastVerified.After(*f.Job.OverdueSince) && strings.HasPrefix(f.Job.OverdueReason, "verification overdue") {
				why = "a verification succeeded at " + f.LastVerified.UTC().Format(time.RFC3339)
			}
			cleared, err := w.Store.JobClearOverdue(ctx, store.JobClearOverdueParams{Job: f.Job.Name, Reason: why, Host: w.Host})
			if err != nil {
				errs = append(errs, err)
			} else if cleared {
				w.Logger.Info("job recovered", "job", f.Job.Name, "overdue_since", *f.Job.OverdueSince)
			}
		}
	}
	w.expected, w.nextDeadline = kept, next
	return errors.Join(errs...)
}
