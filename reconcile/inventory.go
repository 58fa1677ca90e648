package reconcile

import (
	"context"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/store"
)

// RefreshSnapshots reads all snapshots of the job's repository, whoever made them, into the
// inventory, and returns the repository's snapshots as recorded (with their protections).
// restic runs as the job's user (JobRestic); cfg needs Store, Runner, StateDir, Binary and
// ResticBinary.
func RefreshSnapshots(ctx context.Context, cfg Config, job store.Job) ([]store.Snapshot, error) {
	listedAt := time.Now()
	restic, ej := JobRestic(cfg, job)
	listed, err := restic.ListSnapshots(ctx, ej)
	if err != nil {
		return nil, err
	}
	snaps := make([]store.Snapshot, len(listed))
	for i, l := range listed {
		snaps[i] = store.Snapshot{ID: l.ID, Time: l.Time, Host: l.Hostname, Tags: l.Tags, Paths: l.Paths}
		for _, tag := range l.Tags {
			if name, ok := strings.CutPrefix(tag, engine.JobTagPrefix); ok {
				snaps[i].JobName = name
			}
			if id, ok := strings.CutPrefix(tag, engine.RunTagPrefix); ok {
				if run, err := uuid.Parse(id); err == nil {
					snaps[i].RunID = &run
				}
			}
		}
	}
	if _, _, err := cfg.Store.SyncSnapshots(ctx, job.Repository, listedAt, snaps); err != nil {
		return nil, err
	}
	return cfg.Store.Snapshots(ctx, job.Repository)
}
