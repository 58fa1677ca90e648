package runctl

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
)

// WaitRunPolling is WaitRun reading the run every poll instead of every WaitPoll.
func WaitRunPolling(ctx context.Context, st Store, id uuid.UUID, report func(model.Run, *model.Progress), poll time.Duration) (model.Run, []model.Attempt, error) {
	return waitRun(ctx, st, id, report, poll)
}
