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
	RunGet(ctx context.Context, id uuid.UUID) (model.Run, error)
	AttemptList(ctx context.Context, runID uuid.UUID) ([]model.Attempt, error)
	RunListenEnds(ctx context.Context, ended func(run uuid.UUID)) error
	RunRequestStop(ctx context.Context, runID uuid.UUID) (model.Run, error)
}

// Units is what StopRun asks of the systemd manager it opens: to stop a unit, and then to let
// the connection go. The CLI opens a *systemd.Client.
type Units interface {
	Stop(ctx context.Context, name string) error
	Close()
}
