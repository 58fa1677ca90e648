package reconcile

import (
	"context"
	"fmt"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/systemd"
)

// A forget's success counts what its plan removed; every forget, whatever its outcome, has the
// snapshot inventory of the repository it worked on refreshed.
func init() {
	registerEnding(model.KindForget, kindEnding{
		succeeded: func(l model.LiveRun, _ model.Attempt) string {
			return fmt.Sprintf("forget complete: %d snapshot(s) of the retention plan removed; their data goes with the next prune", len(l.Run.ForgetIDs))
		},
		close: func(r *Reconciler, ctx context.Context, l model.LiveRun, a model.Attempt, m systemd.Marker, v verdict) error {
			if err := r.finishAttempt(ctx, l, a, m, v); err != nil {
				return err
			}
			r.refreshAfter(ctx, l)
			return nil
		},
	})
}
