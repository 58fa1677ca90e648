package supervisor

import (
	"context"

	"github.com/google/uuid"
)

// SetSpawnHook has every spawn of a supervisor made from c call hook before its claim.
func SetSpawnHook(c *Config, hook func(context.Context, uuid.UUID)) { c.Reconcile.SpawnHook = hook }

// SetLeaseHolder has a supervisor made from c hold its host's lease as holder, and take it from
// a current holder when gone says that one is gone: two supervisors of one process then act as
// two daemons of one --host on two machines.
func SetLeaseHolder(c *Config, holder string, gone func(string) bool) {
	c.leaseHolder, c.holderGone = holder, gone
}

// SweepPasses is how many passes the supervisor's sweep has ended.
func SweepPasses(s *Supervisor) uint64 {
	s.progress.mu.Lock()
	defer s.progress.mu.Unlock()
	return s.progress.sweeps
}
