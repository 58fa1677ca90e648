package supervisor

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// SetSpawnHook has every spawn of a supervisor made from c call hook before its claim.
func SetSpawnHook(c *Config, hook func(context.Context, uuid.UUID)) { c.spawnHook = hook }

// SetLeaseHolder has a supervisor made from c hold its host's lease as holder, and take it from
// a current holder when gone says that one is gone: two supervisors of one process then act as
// two daemons of one --host on two machines.
func SetLeaseHolder(c *Config, holder string, gone func(string) bool) {
	c.leaseHolder, c.holderGone = holder, gone
}

// WaitRunPolling is WaitRun reading the run every poll instead of every WaitPoll.
func WaitRunPolling(ctx context.Context, st *store.Store, id uuid.UUID, report func(model.Run, *model.Progress), poll time.Duration) (model.Run, []model.Attempt, error) {
	return waitRun(ctx, st, id, report, poll)
}
