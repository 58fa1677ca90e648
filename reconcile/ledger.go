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
	"github.com/holdfast-backup/holdfast/runner"
	"github.com/holdfast-backup/holdfast/store"
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
		ev.Growth, shared, ev.NoGrowth = r.growth(ctx, l, a)
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
func ran(a model.Attempt, m runner.Marker) bool {
	if a.Unit == "" {
		return false
	}
	return m.ServiceResult != "" || a.StartedAt != nil || a.RepoBytesBefore != nil || a.LastEventAt != nil
}

// growth is what the attempt's local repository grew by since it was spawned, with the run that
// also wrote to it meanwhile, if one did; else why it is not known.
func (r *Reconciler) growth(ctx context.Context, l model.LiveRun, a model.Attempt) (grown *int64, sharedWith *uuid.UUID, why string) {
	if _, local := ledger.Local(l.JobRepository); !local {
		return nil, nil, "the repository is not local, so its growth cannot be measured"
	}
	if a.RepoBytesBefore == nil {
		return nil, nil, "the repository was not measured when the attempt started"
	}
	other, err := r.cfg.Store.OtherWriter(ctx, a.Ref())
	if err != nil {
		return nil, nil, "who else wrote to the repository could not be read: " + err.Error()
	}
	size, err := ledger.RepoSize(l.JobRepository)
	if err != nil {
		return nil, nil, "the repository could not be measured: " + err.Error()
	}
	if other != nil {
		why = fmt.Sprintf("run %s wrote to the same repository meanwhile, so its growth is not this attempt's alone", other)
	}
	n := size - *a.RepoBytesBefore
	return &n, other, why
}

// measureRunaway measures a live backup's local repository against the attempt's hold: the
// growth past the hold, or nil if it is within it or cannot be told (not local, not measured
// when spawned, or another run wrote to it meanwhile).
func (r *Reconciler) measureRunaway(ctx context.Context, l model.LiveRun) *runaway {
	a := l.Attempt
	if l.Run.Kind != model.KindBackup || a.HoldBytes == nil || a.RepoBytesBefore == nil {
		return nil
	}
	grown, shared, why := r.growth(ctx, l, a)
	if grown == nil || shared != nil || *grown <= *a.HoldBytes {
		if why != "" {
			r.cfg.Logger.Debug("runaway guard cannot measure this run", "run", l.Run.ID, "why", why)
		}
		return nil
	}
	return &runaway{hold: *a.HoldBytes, grown: *grown}
}

// pauseRunaway stops a running backup that added more than its hold: the run is paused
// (run_ceiling) first, then its unit gets SIGINT, so restic removes its lock.
func (r *Reconciler) pauseRunaway(ctx context.Context, l model.LiveRun, g runaway) error {
	paused, err := r.cfg.Store.RequestPause(ctx, l.Run.ID, store.PausedRunCeiling)
	if err != nil || !paused {
		return err
	}
	r.cfg.Logger.Warn("runaway guard: the backup added more than its hold; stopping it", "run", l.Run.ID,
		"hold", ledger.FormatSize(g.hold), "added", ledger.FormatSize(g.grown), "unit", l.Attempt.Unit)
	return r.cfg.Runner.Stop(ctx, l.Attempt.Unit)
}

// settleDeferred tries again the settlements that found no figure when their attempt ended,
// through the repair channel, restic stats, for a run that made a snapshot. restic is asked
// about one attempt at most every repairInterval, within the run budget. The others stay open
// and visible until an operator settles them (holdfast ledger settle).
func (r *Reconciler) settleDeferred(ctx context.Context) error {
	deferred, err := r.cfg.Store.DeferredSettlements(ctx, r.cfg.Host)
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
		if err := r.cfg.Store.SettleDeferred(ctx, model.AttemptRef{Run: d.RunID, No: d.Attempt}, st); err != nil {
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
	key := attemptKey{run, attempt}
	if last, ok := r.repairAsked[key]; ok && time.Since(last) < repairInterval {
		return false
	}
	if r.repairAsked == nil {
		r.repairAsked = map[attemptKey]time.Time{}
	}
	r.repairAsked[key] = time.Now()
	return true
}

// forgetRepairs drops the repair times of attempts no longer deferred.
func (r *Reconciler) forgetRepairs(deferred []store.DeferredSettlement) {
	still := make(map[attemptKey]bool, len(deferred))
	for _, d := range deferred {
		still[attemptKey{d.RunID, d.Attempt}] = true
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
func (r *Reconciler) snapshotAdded(ctx context.Context, d store.DeferredSettlement) (int64, error) {
	job, err := r.cfg.Store.JobByName(ctx, d.JobName)
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
