package supervisor

import (
	"context"

	"github.com/google/uuid"
)

// SetSpawnHook has every spawn of a supervisor made from c call hook before its claim.
func SetSpawnHook(c *Config, hook func(context.Context, uuid.UUID)) { c.spawnHook = hook }
