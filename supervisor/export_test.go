package supervisor

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/store"
)

// SetSpawnHook has every spawn of a supervisor made from c call hook before its claim.
func SetSpawnHook(c *Config, hook func(context.Context, uuid.UUID)) { c.spawnHook = hook }

// WaitRunPolling is WaitRun reading the run every poll instead of every WaitPoll.
func WaitRunPolling(ctx context.Context, st *store.Store, id uuid.UUID, report func(store.Run, *store.Progress), poll time.Duration) (store.Run, []store.Attempt, error) {
	return waitRun(ctx, st, id, report, poll)
}
