package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/systemd"
)

// settlement decides what the ended attempt a is charged against its hold, from the engine's
// summary and the measured growth of its local repository; nil if it holds nothing. The summary
// comes through the journal, which the job's user can write, so the growth is measured even when
// there is one: it is the floor of the charge. Growth while another run wrote to the repository
// is not this attempt's alone: at the end of a run the hold then stays open until a better
// figure comes (unless the run reported one), but a restart cannot wait for one, so there it is
// charged as an upper bound, which leaves the new attempt at least what is left.
func (r *Reconciler) settlement(ctx context.Context, l model.LiveRun, a model.Attempt, spawned, restart bool) *ledger.Settlement {
	if a.HoldBytes == nil {
		return nil
	}
	ev := ledger.Evidence{Spawned: spawned}
	if s := summary(a); s != nil {
		ev.DataAdded = &s.DataAdded
	}
	if spawned {
		var shared *uuid.UUID
		ev.Growth, shared, ev.NoGrowth = r.runaway.EndGrowth(ctx, l.JobRepository, a)
		if shared != nil {
			if restart {
				ev.UpperBound = fmt.Sprintf("run %s wrote to it meanwhile", shared)
			} else {
				ev.Growth = nil
			}
		}
	}
	st := ledger.Settle(*a.HoldBytes, ev)
	return &st
}

// ran reports whether the attempt's unit may have run: its ExecStopPost left a marker, or
// holdfast saw it started or read its journal, or measured its repository just before starting
// it. An attempt with none of these never reached systemd (a crash between the claim and the
// start), and its hold comes back whole.
func ran(a model.Attempt, m systemd.Marker) bool {
	if a.Unit == "" {
		return false
	}
	return m.ServiceResult != "" || a.StartedAt != nil || a.RepoBytesBefore != nil || a.LastEventAt != nil
}

// settleDeferred tries again the settlements that found no figure when their attempt ended,
// through the repair channel, restic stats, for a run that made a snapshot. restic is asked
// about one attempt at most every repairInterval, within the run budget. The others stay open
// and visible until an operator settles them (holdfast ledger settle).
func (r *Reconciler) settleDeferred(ctx context.Context) error {
	deferred, err := r.cfg.Store.AttemptListDeferred(ctx, r.cfg.Host)
	if err != nil {
		return err
	}
	r.forgetRepairs(deferred)
	var errs []error
	for _, d := range deferred {
		// A run's snapshot id is restic's form of one (validSnapshotID) or none: an older row's
		// id that is not (one character matches any snapshot) asks nothing.
		if !validSnapshotID(d.SnapshotID) || d.Engine != engine.NameRestic || !r.repairDue(d.RunID, d.Attempt) {
			continue
		}
		repairCtx, cancel := context.WithTimeout(ctx, r.cfg.RunBudget)
		added, err := r.snapshotAdded(repairCtx, d)
		cancel()
		if err != nil {
			r.cfg.Logger.Warn("repair channel: restic stats failed; the settlement stays deferred", "run", d.RunID, "err", err)
			continue
		}
		st := ledger.Settle(d.Hold, ledger.Evidence{Spawned: true, SnapshotAdded: &added})
		if err := r.cfg.Store.AttemptSettleDeferred(ctx, model.AttemptRef{Run: d.RunID, No: d.Attempt}, st); err != nil {
			errs = append(errs, err)
			continue
		}
		r.cfg.Logger.Info("deferred settlement settled", "run", d.RunID, "attempt", d.Attempt,
			"bytes", ledger.FormatSize(st.Bytes), "source", st.Source)
	}
	return errors.Join(errs...)
}

// repairInterval is how often restic is asked about one deferred settlement.
const repairInterval = 10 * time.Minute

func (r *Reconciler) repairDue(run uuid.UUID, attempt int) bool {
	r.repairMu.Lock()
	defer r.repairMu.Unlock()
	key := model.AttemptRef{Run: run, No: attempt}
	if last, ok := r.repairAsked[key]; ok && time.Since(last) < repairInterval {
		return false
	}
	if r.repairAsked == nil {
		r.repairAsked = map[model.AttemptRef]time.Time{}
	}
	r.repairAsked[key] = time.Now()
	return true
}

// forgetRepairs drops the repair times of attempts no longer deferred.
func (r *Reconciler) forgetRepairs(deferred []model.DeferredSettlement) {
	still := make(map[model.AttemptRef]bool, len(deferred))
	for _, d := range deferred {
		still[model.AttemptRef{Run: d.RunID, No: d.Attempt}] = true
	}
	r.repairMu.Lock()
	defer r.repairMu.Unlock()
	for key := range r.repairAsked {
		if !still[key] {
			delete(r.repairAsked, key)
		}
	}
}

// snapshotAdded is what the run's snapshot added to the repository's earlier snapshots, as restic
// counts data: the raw data of the snapshot with all earlier ones, less that of the earlier ones.
func (r *Reconciler) snapshotAdded(ctx context.Context, d model.DeferredSettlement) (int64, error) {
	job, err := r.cfg.Store.JobGet(ctx, d.JobName)
	if err != nil {
		return 0, fmt.Errorf("job of run %s: %w", d.RunID, err)
	}
	// The repository the run wrote to, asked as the job's user.
	job.Repository, job.PasswordFile = d.Repository, d.Password
	restic, j := JobRestic(r.cfg, job)
	snaps, err := restic.ListSnapshots(ctx, j)
	if err != nil {
		return 0, err
	}
	made, err := findSnapshot(snaps, d.SnapshotID)
	if err != nil {
		return 0, err
	}
	var earlier []string
	for _, s := range snaps {
		if s.Time.Before(made.Time) {
			earlier = append(earlier, s.ID)
		}
	}
	before, err := restic.RawDataSize(ctx, j, earlier)
	if err != nil {
		return 0, err
	}
	with, err := restic.RawDataSize(ctx, j, append(earlier, made.ID))
	if err != nil {
		return 0, err
	}
	return with - before, nil
}
