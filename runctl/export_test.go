package runctl

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// WaitRunPolling is WaitRun reading the run every poll instead of every WaitPoll.
func WaitRunPolling(ctx context.Context, st *store.Store, id uuid.UUID, report func(model.Run, *model.Progress), poll time.Duration) (model.Run, []model.Attempt, error) {
	return waitRun(ctx, st, id, report, poll)
}
