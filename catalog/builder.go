package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// Defaults of BuilderConfig.
const (
	DefaultKeep  = 10              // catalogs kept per job: its newest snapshots'
	DefaultEvery = 5 * time.Second // how soon after a backup its snapshot is catalogued
)

// BuilderStore is what a Builder reads.
type BuilderStore interface {
	SnapshotCatalogList(ctx context.Context, p store.SnapshotCatalogListParams) ([]model.Snapshot, error)
	JobGet(ctx context.Context, name string) (model.Job, error)
}

// BuilderConfig is a host's catalogs: where they are, which snapshots, and how they are listed.
type BuilderConfig struct {
	Dir    string // <state>/catalogs
	Store  BuilderStore
	Restic Lister // lists a snapshot as the job's user (jobunit.Browser)
	// Host is the daemon's host (jobs pinned to it, or to none); SnapshotHost restic's name of
	// this machine, the host of the snapshots its backups make (os.Hostname by default).
	Host, SnapshotHost string
	Keep               int           // per job; DefaultKeep if 0
	Every              time.Duration // between passes; DefaultEvery if 0
	Logger             *slog.Logger
}

func (c *BuilderConfig) validate() error {
	if c.Dir == "" || c.Store == nil || c.Restic == nil || c.Host == "" {
		return errors.New("catalog builder: Dir, Store, Restic and Host are required")
	}
	if c.Keep < 0 || c.Every < 0 {
		return errors.New("catalog builder: Keep and Every must not be negative")
	}
	if c.Keep == 0 {
		c.Keep = DefaultKeep
	}
	if c.Every == 0 {
		c.Every = DefaultEvery
	}
	if c.SnapshotHost == "" {
		name, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("catalog builder: this machine's name: %w", err)
		}
		c.SnapshotHost = name
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Builder makes the catalogs of a host's newest snapshots of the jobs that ask for them, and
// removes the others: one pass every Every, each a query of the host's catalogued jobs' newest
// snapshots and, for one without a catalog, a listing of it (restic ls --recursive as the job's
// user). A listing that fails is tried again after RetryAfter (a snapshot too large for a
// catalog, never again by this daemon): a catalog only saves time, and restic answers meanwhile.
type Builder struct {
	cfg   BuilderConfig
	after map[string]time.Time // job/snapshot → not listed again before
}

// RetryAfter is how long a snapshot whose listing failed waits for the next.
const RetryAfter = 10 * time.Minute

// NewBuilder validates cfg.
func NewBuilder(cfg BuilderConfig) (*Builder, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Builder{cfg: cfg, after: map[string]time.Time{}}, nil
}

// Run makes passes until ctx ends.
func (b *Builder) Run(ctx context.Context) {
	t := time.NewTicker(b.cfg.Every)
	defer t.Stop()
	for {
		if _, err := b.Pass(ctx); err != nil && ctx.Err() == nil {
			b.cfg.Logger.Warn("snapshot catalogs", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass makes the catalogs missing and removes those no longer wanted; it returns how many it made.
func (b *Builder) Pass(ctx context.Context) (made int, err error) {
	snaps, err := b.cfg.Store.SnapshotCatalogList(ctx, store.SnapshotCatalogListParams{Host: b.cfg.Host, SnapshotHost: b.cfg.SnapshotHost, Keep: b.cfg.Keep})
	if err != nil {
		return 0, err
	}
	wanted := map[string][]string{}
	var order []string
	for _, s := range snaps {
		if _, seen := wanted[s.JobName]; !seen {
			order = append(order, s.JobName)
		}
		wanted[s.JobName] = append(wanted[s.JobName], s.ID)
	}
	var errs []error
	for _, name := range order {
		n, err := b.job(ctx, name, wanted[name])
		made += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	// The catalogs of jobs gone, or no longer catalogued here.
	entries, err := os.ReadDir(b.cfg.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		if _, keep := wanted[e.Name()]; !keep {
			errs = append(errs, Remove(b.cfg.Dir, e.Name()))
		}
	}
	return made, errors.Join(errs...)
}

// job makes the catalogs of a job's snapshots ids that lack one, and removes its others.
func (b *Builder) job(ctx context.Context, name string, ids []string) (made int, err error) {
	var job model.Job
	var errs []error
	for _, id := range ids {
		key := name + "/" + id
		if Has(b.cfg.Dir, name, id) || Path(b.cfg.Dir, name, id) == "" || time.Now().Before(b.after[key]) {
			continue
		}
		if job.Name == "" {
			if job, err = b.cfg.Store.JobGet(ctx, name); err != nil {
				errs = append(errs, err)
				break
			}
		}
		began, entries := time.Now(), 0
		err := Write(b.cfg.Dir, name, id, func(each func(engine.Node) error) error {
			return b.cfg.Restic.Ls(ctx, job, id, "/", true, func(n engine.Node) error {
				entries++
				return each(n)
			})
		})
		switch {
		case errors.Is(err, ErrTooLarge):
			b.after[key] = time.Now().Add(100 * 365 * 24 * time.Hour)
			b.cfg.Logger.Info("snapshot not catalogued", "job", name, "snapshot", id[:8], "why", err)
		case err != nil:
			b.after[key] = time.Now().Add(RetryAfter)
			errs = append(errs, err)
		default:
			delete(b.after, key)
			made++
			b.cfg.Logger.Info("snapshot catalogued", "job", name, "snapshot", id[:8], "entries", entries, "took", time.Since(began).Round(time.Millisecond))
		}
	}
	for key := range b.after {
		if job, _, _ := strings.Cut(key, "/"); job == name && !slices.ContainsFunc(ids, func(id string) bool { return key == name+"/"+id }) {
			delete(b.after, key) // a snapshot no longer wanted
		}
	}
	return made, errors.Join(append(errs, Prune(b.cfg.Dir, name, ids))...)
}
