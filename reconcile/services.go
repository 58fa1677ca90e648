package reconcile

import (
	"context"

	"github.com/holdfast-backup/holdfast/attemptqueue"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runaway"
	"github.com/holdfast-backup/holdfast/spawn"
	"github.com/holdfast-backup/holdfast/systemd"
)

const (
	// repairWorkers is how many repairs (one `restic snapshots` each) run at once.
	repairWorkers = 2
	// repairQueue bounds the repairs waiting for a worker; past it the sweep's decision is not
	// handed over and the next pass decides it again.
	repairQueue = 256
)

// newServices builds r's spawner, repair channel and runaway guard. The repair channel: a run
// whose unit ended without the journal's summary is closed by a worker once it asked the
// repository for the run's snapshot (repair). Until then the run stays live with its marker,
// which is the evidence the next sweep finishes it on, so a repair dropped by Stop or a crash
// is queued again by the next pass, never lost.
func (r *Reconciler) newServices() error {
	r.runaway = runaway.New(runaway.Config{Store: r.cfg.Store, Units: r.cfg.Runner, Logger: r.cfg.Logger, Acting: r.acting})
	var err error
	r.spawner, err = spawn.New(spawn.Config{
		Store: r.cfg.Store, Units: r.cfg.Runner, Jobs: r.cfg.units(),
		BootID: r.cfg.BootID, Limits: r.cfg.Limits, Workers: r.cfg.SpawnWorkers, Budget: r.cfg.RunBudget, Logger: r.cfg.Logger,
		Lease:    func() (model.Lease, bool) { return r.fence(), r.acting() },
		Starting: r.runaway.WatchFromBaseline,
		Refused: func(ctx context.Context, l model.LiveRun, reason string) error {
			return r.finish(ctx, l, systemd.Marker{}, verdict{status: model.StatusFailed, class: "permanent",
				reason: reason, neverRan: true})
		},
		Hook:      r.cfg.SpawnHook,
		Unstarted: r.left,
	})
	if err != nil {
		return err
	}
	r.repairs, err = attemptqueue.New(attemptqueue.Config{Name: "repairs", Workers: repairWorkers, Size: repairQueue,
		Budget: r.cfg.RunBudget, Logger: r.cfg.Logger})
	return err
}

// Spawner is r's spawning service; Sweep spawns inline while it is not started.
func (r *Reconciler) Spawner() *spawn.Spawner { return r.spawner }

// RepairChannel is r's repair service; Sweep repairs inline while it is not started.
func (r *Reconciler) RepairChannel() *attemptqueue.Queue { return r.repairs }

// RunawayWatch is r's runaway guard, whose watches run as a service.
func (r *Reconciler) RunawayWatch() *runaway.Guard { return r.runaway }
