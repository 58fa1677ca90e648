package reconcile

import (
	"context"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/systemd"
)

// A backup keeps restic's reason, records its summary's figures, and puts its snapshot in the
// inventory with its ending; one that made a snapshot but left no summary is closed by the repair
// channel, which asks the repository.
func init() {
	registerEnding(model.KindBackup, kindEnding{close: closeBackup, figures: true})
}

func closeBackup(r *Reconciler, ctx context.Context, l model.LiveRun, a model.Attempt, m systemd.Marker, v verdict) error {
	if summary(a) == nil && (v.status == model.StatusSucceeded || v.status == model.StatusPartial) && l.JobEngine == engine.NameRestic {
		// The run stays live, its marker in place, until the repair closed it: a repair not
		// carried out (a stop, a crash) is queued again by the next pass.
		return r.repairs.Submit(ctx, model.AttemptRef{Run: l.Run.ID, No: l.Attempt.No}, func(ctx context.Context, _ func()) error {
			if !r.acting() {
				return nil // the next pass under the lease queues it again
			}
			return r.repairAndFinish(ctx, l, a, m, v)
		})
	}
	return r.finishBackup(ctx, l, a, m, v)
}
