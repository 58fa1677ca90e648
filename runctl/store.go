package runctl

import (
	"context"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
)

// Store is what runctl reads and writes: WaitRun reads the run and its attempts and listens for
// the announcements of run ends, StopRun records the stop intent and reads the attempts. The
// CLI gives its store.Store.
type Store interface {
	RunByID(ctx context.Context, id uuid.UUID) (model.Run, error)
	Attempts(ctx context.Context, runID uuid.UUID) ([]model.Attempt, error)
	ListenRunEnds(ctx context.Context, ended func(run uuid.UUID)) error
	RequestStop(ctx context.Context, runID uuid.UUID) (model.Run, error)
}

// Units is what StopRun asks of the systemd manager it opens: to stop a unit, and then to let
// the connection go. The CLI opens a *runner.Runner.
type Units interface {
	Stop(ctx context.Context, name string) error
	Close()
}
