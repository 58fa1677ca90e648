package reconcile

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// RefreshSnapshots reads all snapshots of the job's repository, whoever made them, into the
// inventory, and returns the repository's snapshots as recorded (with their protections).
// restic runs as the job's user (JobRestic); cfg needs Store, Runner, StateDir, Binary and
// ResticBinary.
func RefreshSnapshots(ctx context.Context, cfg Config, job model.Job) ([]store.Snapshot, error) {
	listedAt := time.Now()
	restic, ej := JobRestic(cfg, job)
	listed, err := restic.ListSnapshots(ctx, ej)
	if err != nil {
		return nil, err
	}
	snaps := make([]store.Snapshot, len(listed))
	for i, l := range listed {
		snaps[i] = listedSnapshot(job.Repository, l)
	}
	if _, _, err := cfg.Store.SyncSnapshots(ctx, job.Repository, listedAt, snaps); err != nil {
		return nil, err
	}
	return cfg.Store.Snapshots(ctx, job.Repository)
}

// listedSnapshot is a snapshot of repository as restic listed it, with the job and run of its
// holdfast tags.
func listedSnapshot(repository string, l engine.Snapshot) store.Snapshot {
	s := store.Snapshot{Repository: repository, ID: l.ID, Time: l.Time, Host: l.Hostname, Tags: l.Tags, Paths: l.Paths,
		Source: store.SourceListing}
	for _, tag := range l.Tags {
		if name, ok := strings.CutPrefix(tag, engine.JobTagPrefix); ok {
			s.JobName = name
		}
		if id, ok := strings.CutPrefix(tag, engine.RunTagPrefix); ok {
			if run, err := uuid.Parse(id); err == nil {
				s.RunID = &run
			}
		}
	}
	return s
}

// summarySnapshot is the snapshot a backup of job for run reported in its summary as id, as
// holdfast ran restic: the tags it passed (engine.BackupTags), the job's paths as restic records
// them (absolute, cleaned, sorted), host as restic names this machine (os.Hostname: holdfast
// passes no --host, and the unit ran here), and the attempt's start for the time restic stamps
// at the start of its backup. Only the id is restic's, and the journal it came from is the
// job's user's: the store checks its shape and only ever adds the row (store.Finish). The next
// listing puts restic's own facts in (store.SyncSnapshots).
func summarySnapshot(job model.Job, run uuid.UUID, a model.Attempt, id, host string, now time.Time) *store.Snapshot {
	paths := make([]string, len(job.Paths))
	for i, p := range job.Paths {
		paths[i] = filepath.Clean(p)
	}
	slices.Sort(paths)
	at := now
	if a.StartedAt != nil {
		at = *a.StartedAt
	} else if a.SpawnClaimedAt != nil {
		at = *a.SpawnClaimedAt
	}
	return &store.Snapshot{Repository: job.Repository, ID: id, Time: at, Host: host,
		Tags: engine.BackupTags(engine.Job{Name: job.Name}, run), Paths: paths, JobName: job.Name, RunID: &run,
		Source: store.SourceSummary}
}
