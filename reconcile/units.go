package reconcile

import (
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/inventory"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
)

// units is what the reconciler's units of a job are made from.
func (c Config) units() jobunit.Config {
	return jobunit.Config{Runner: c.Runner, StateDir: c.StateDir, Binary: c.Binary, ResticBinary: c.ResticBinary}
}

// inventoryConfig is what the reconciler's listings of a repository need.
func (c Config) inventoryConfig() inventory.Config {
	return inventory.Config{Store: c.Inventory, Runner: c.Runner, StateDir: c.StateDir, Binary: c.Binary, ResticBinary: c.ResticBinary}
}

// JobRestic returns restic as it runs for questions about a job's repository (its snapshots,
// their sizes): each command in a short unit of its own with the job's user, sandbox, cache and
// credentials, never as root on files the job's user controls, its output bounded (jobunit.Restic).
func JobRestic(cfg Config, job model.Job) (engine.Restic, engine.Job) {
	return jobunit.Restic(cfg.units(), job, false)
}
