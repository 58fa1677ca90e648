package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/store"
)

// gate decides whether a queued attempt may be spawned now. It returns a reason to wait (and,
// for a time-bound wait, when to look again), or a verdict that ends the run instead; neither
// means go. Concurrency limits are checked where the spawn is claimed, in the same transaction.
func (r *Reconciler) gate(ctx context.Context, l store.LiveRun, job store.Job) (wait string, notBefore *time.Time, end *verdict, err error) {
	if refusal := r.policyRefusal(job); refusal != "" {
		return "", nil, &verdict{status: store.StatusFailed, class: "permanent", reason: refusal}, nil
	}
	now := r.cfg.now()
	if nb := l.Run.NotBefore; nb != nil && now.Before(*nb) {
		return l.Run.WaitingReason, nil, nil, nil // already recorded when the time was set
	}
	// Maintenance windows: the job's own in its zone, then the global ones.
	zone, err := schedule.LoadZone(job.TimeZone)
	if err != nil {
		zone = time.UTC
	}
	var windows []schedule.Window
	for _, text := range job.Windows {
		if w, err := schedule.ParseWindow(text); err == nil {
			windows = append(windows, w)
		}
	}
	if until, held := schedule.Allowed(now, windows, zone); held != "" {
		return fmt.Sprintf("waiting: maintenance window %q of job %s until %s", held, job.Name, until.UTC().Format(time.RFC3339)), &until, nil, nil
	}
	if until, held := schedule.Allowed(now, r.cfg.Windows, r.cfg.WindowZone); held != "" {
		return fmt.Sprintf("waiting: global maintenance window %q until %s", held, until.UTC().Format(time.RFC3339)), &until, nil, nil
	}
	// A snapshot put under protection after its plan was recorded is still never deleted.
	if l.Run.Kind == store.KindForget {
		protected, err := r.cfg.Store.ProtectedAmong(ctx, job.Repository, l.Run.ForgetIDs, now)
		if err != nil {
			return "", nil, nil, err
		}
		if len(protected) > 0 {
			return "", nil, &verdict{status: store.StatusFailed, class: "permanent",
				reason: fmt.Sprintf("%d snapshot(s) of the plan became protected after it was made (first: %.12s): nothing deleted; plan again",
					len(protected), protected[0])}, nil
		}
	}
	// A prerequisite must have succeeded (partial is not enough), checked just before spawning.
	if job.DependsOn != "" && l.Run.Kind == store.KindBackup {
		return r.dependency(ctx, l, job, now)
	}
	return "", nil, nil, nil
}

// dependency decides about a run whose job depends on another. It goes if the prerequisite's
// last run succeeded. While the prerequisite has a live run, or until it has an outcome newer
// than this run (at most DependsWait after this run was queued), the run waits; a newer outcome
// that is not success, or no outcome in time, fails it, naming the prerequisite and its outcome.
func (r *Reconciler) dependency(ctx context.Context, l store.LiveRun, job store.Job, now time.Time) (wait string, notBefore *time.Time, end *verdict, err error) {
	dep, err := r.cfg.Store.JobByName(ctx, job.DependsOn)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, &verdict{status: store.StatusFailed, class: "permanent",
			reason: fmt.Sprintf("prerequisite job %s does not exist", job.DependsOn)}, nil
	}
	if err != nil {
		return "", nil, nil, err
	}
	var depRun *store.Run
	if dep.LastRunID != nil {
		run, err := r.cfg.Store.RunByID(ctx, *dep.LastRunID)
		if err != nil {
			return "", nil, nil, err
		}
		depRun = &run
	}
	if depRun != nil && store.Live(depRun.Status) {
		return fmt.Sprintf("waiting: prerequisite job %s is %s (run %s)", dep.Name, depRun.Status, depRun.ID), nil, nil, nil
	}
	if dep.LastOutcome == store.StatusSucceeded {
		return "", nil, nil, nil
	}
	outcome := dep.LastOutcome
	if outcome == "" {
		outcome = "never run"
	}
	if depRun != nil && depRun.FinishedAt != nil && depRun.FinishedAt.After(l.Run.CreatedAt) {
		return "", nil, &verdict{status: store.StatusFailed, class: "permanent",
			reason: fmt.Sprintf("prerequisite job %s has not succeeded (its last run: %s, run %s)", dep.Name, outcome, depRun.ID)}, nil
	}
	deadline := l.Run.CreatedAt.Add(r.cfg.DependsWait)
	if !now.Before(deadline) {
		return "", nil, &verdict{status: store.StatusFailed, class: "permanent",
			reason: fmt.Sprintf("prerequisite job %s has not succeeded (its last run: %s) and had no new outcome within %s of this run being queued",
				dep.Name, outcome, r.cfg.DependsWait)}, nil
	}
	return fmt.Sprintf("waiting: prerequisite job %s has not succeeded (its last run: %s); waiting for its next outcome until %s",
		dep.Name, outcome, deadline.UTC().Format(time.RFC3339)), nil, nil, nil
}

// retryPlan returns the retry of a backup that failed for a transient reason, or nil if its job
// allows no more. A prune or forget is not retried: the next one is planned anew.
func (r *Reconciler) retryPlan(ctx context.Context, l store.LiveRun) (*store.Retry, error) {
	if l.JobEngine == "" || l.Run.Kind != store.KindBackup {
		return nil, nil
	}
	job, err := r.cfg.Store.JobByName(ctx, l.Run.JobName)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n := l.Run.RetryNumber + 1
	if n > job.RetryMax {
		return nil, nil
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, err
	}
	at := r.cfg.now().Add(schedule.Backoff(job.RetryBackoff, schedule.MaxBackoff, n))
	return &store.Retry{ID: id, Number: n, NotBefore: at,
		Why: fmt.Sprintf("waiting: retry %d of %d after run %s failed for a transient reason, due at %s",
			n, job.RetryMax, l.Run.ID, at.UTC().Format(time.RFC3339))}, nil
}
