// Package inventory fills the snapshot inventory: the snapshots of a job's repository, whoever
// made them, as PostgreSQL records them beside their protections (legal holds, immutability).
// Refresh lists the repository with `restic snapshots` run as the job's user, in a short unit of
// its own with the job's sandbox, cache and credentials (jobunit.Restic), never as root on files
// the job's user controls. That listing is taken for what the repository holds: listed snapshots
// are added or marked seen, those missing from it marked forgotten, and protections are never
// changed (store.SnapshotSync). A backup's own summary puts its snapshot in before any listing
// (FromSummary): only the id is restic's, and the store checks its shape and only ever adds the
// row; the next listing completes it with restic's own facts.
package inventory

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// Store is what a listing reads and writes: the repository's snapshots as recorded, and the
// listing recorded over them. The daemon and the CLI give their store.Store.
type Store interface {
	SnapshotSync(ctx context.Context, p store.SnapshotSyncParams) (added, forgotten int, err error)
	SnapshotList(ctx context.Context, repository string) ([]model.Snapshot, error)
}

// Config is what a listing needs: the store it is recorded in, and what runs restic as the job's
// user in a unit of its own.
type Config struct {
	Store  Store
	Runner jobunit.Runner
	// StateDir holds the jobs' restic caches; it must be the same path inside the units.
	StateDir string
	// Binary is the holdfast executable the units run (`holdfast credexec`).
	Binary string
	// ResticBinary is the restic executable the units run. Default jobunit.DefaultResticBinary.
	ResticBinary string
}

// Validate checks that cfg names the store and the units' pieces, and fills in its defaults.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("inventory: no store")
	case c.Runner == nil:
		return errors.New("inventory: no runner")
	case c.StateDir == "":
		return errors.New("inventory: no state directory")
	case c.Binary == "":
		return errors.New("inventory: no holdfast binary")
	}
	if c.ResticBinary == "" {
		c.ResticBinary = jobunit.DefaultResticBinary
	}
	return nil
}

// Refresh reads all snapshots of the job's repository, whoever made them, into the inventory,
// and returns the repository's snapshots as recorded (with their protections). restic runs as
// the job's user (jobunit.Restic).
func Refresh(ctx context.Context, cfg Config, job model.Job) ([]model.Snapshot, error) {
	if _, _, err := List(ctx, cfg, job); err != nil {
		return nil, err
	}
	return cfg.Store.SnapshotList(ctx, job.Repository)
}

// List is Refresh returning restic's listing itself, with what restic recorded of each backup
// (engine.Snapshot.Summary), and how many snapshots the listing added to the inventory.
func List(ctx context.Context, cfg Config, job model.Job) (listed []engine.Snapshot, added int, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, 0, err
	}
	listedAt := time.Now()
	restic, ej := jobunit.Restic(jobunit.Config{Runner: cfg.Runner, StateDir: cfg.StateDir, Binary: cfg.Binary,
		ResticBinary: cfg.ResticBinary}, job, false)
	if listed, err = restic.ListSnapshots(ctx, ej); err != nil {
		return nil, 0, err
	}
	snaps := make([]model.Snapshot, len(listed))
	for i, l := range listed {
		snaps[i] = Listed(job.Repository, l)
	}
	if added, _, err = cfg.Store.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: job.Repository, ListedAt: listedAt, Listed: snaps}); err != nil {
		return nil, 0, err
	}
	return listed, added, nil
}

// Listed is a snapshot of repository as restic listed it, with the job and run of its holdfast
// tags.
func Listed(repository string, l engine.Snapshot) model.Snapshot {
	s := model.Snapshot{Repository: repository, ID: l.ID, Time: l.Time, Host: l.Hostname, Tags: l.Tags, Paths: l.Paths,
		Source: model.SourceListing}
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

// FromSummary is the snapshot a backup of job for run reported in its summary as id, as
// holdfast ran restic: the tags it passed (engine.BackupTags), the job's paths as restic records
// them (absolute, cleaned, sorted), host as restic names this machine (os.Hostname: holdfast
// passes no --host, and the unit ran here), and the attempt's start for the time restic stamps
// at the start of its backup. Only the id is restic's, and the journal it came from is the
// job's user's: the store checks its shape and only ever adds the row (store.AttemptFinish). The next
// listing puts restic's own facts in (store.SnapshotSync).
func FromSummary(job model.Job, run uuid.UUID, a model.Attempt, id, host string, now time.Time) *model.Snapshot {
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
	return &model.Snapshot{Repository: job.Repository, ID: id, Time: at, Host: host,
		Tags: engine.BackupTags(engine.Job{Name: job.Name}, run), Paths: paths, JobName: job.Name, RunID: &run,
		Source: model.SourceSummary}
}
