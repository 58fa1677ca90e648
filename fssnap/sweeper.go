package fssnap

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/holdfast-backup/holdfast/model"
)

// DefaultEvery is how often a Sweeper looks for snapshots left behind.
const DefaultEvery = 5 * time.Second

// SweeperStore is what a Sweeper reads: the jobs the host may run and its live runs.
type SweeperStore interface {
	JobListForHost(ctx context.Context, host string) ([]model.Job, error)
	RunListLive(ctx context.Context, host string) ([]model.LiveRun, error)
}

// SweeperConfig is a host's sweep of snapshots left behind.
type SweeperConfig struct {
	Store  SweeperStore
	Host   string        // the daemon's host
	Every  time.Duration // between passes; DefaultEvery if 0
	Logger *slog.Logger
}

// Sweeper removes the snapshots of attempts that are no longer live on the host: every attempt's,
// once it ended, whether its unit ended by itself, was stopped or killed with its manager. It looks in
// the subvolumes of the paths of the host's jobs with a file system snapshot; one daemon per
// machine is assumed, as the snapshots are the machine's.
type Sweeper struct{ cfg SweeperConfig }

// NewSweeper checks cfg and returns its Sweeper.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if cfg.Store == nil || cfg.Host == "" {
		return nil, errors.New("snapshot sweeper: Store and Host are required")
	}
	if cfg.Every < 0 {
		return nil, errors.New("snapshot sweeper: Every must not be negative")
	}
	if cfg.Every == 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sweeper{cfg: cfg}, nil
}

// Run sweeps every cfg.Every until ctx ends, the first time at once (a daemon's start after a
// crash finds what the crash left).
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		removed, err := s.Pass(ctx)
		for _, r := range removed {
			s.cfg.Logger.Info("Btrfs snapshot of an attempt no longer live removed", "snapshot", r)
		}
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("Btrfs snapshots", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass removes the snapshots of attempts that are not live and returns their paths.
func (s *Sweeper) Pass(ctx context.Context) ([]string, error) {
	jobs, err := s.cfg.Store.JobListForHost(ctx, s.cfg.Host)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, j := range jobs {
		if j.Backup.FSSnapshot == "" {
			continue
		}
		for _, p := range j.Paths {
			// Found by the paths as they are now; nothing is removed but by name from a
			// directory Remove holds to being root's alone.
			resolved, err := filepath.EvalSymlinks(p)
			if err != nil {
				continue
			}
			sv, err := subvolumeRoot(resolved)
			if err != nil {
				continue
			}
			if d := filepath.Join(sv, DirName); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	type found struct{ dir, name string }
	var snaps []found
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if _, _, ok := parseKey(e.Name()); ok {
				snaps = append(snaps, found{d, e.Name()})
			}
		}
	}
	if len(snaps) == 0 {
		return nil, nil
	}
	// Read after the listing: an attempt's spawn is claimed before its snapshot is taken, so
	// every snapshot listed of a live attempt is of one this read finds live.
	live, err := s.cfg.Store.RunListLive(ctx, s.cfg.Host)
	if err != nil {
		return nil, err
	}
	current := map[string]bool{}
	for _, l := range live {
		current[Key(l.Run.ID, l.Attempt.No)] = true
	}
	var removed []string
	var errs []error
	for _, f := range snaps {
		if current[f.name] {
			continue
		}
		if err := Remove(f.dir, f.name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, filepath.Join(f.dir, f.name))
	}
	return removed, errors.Join(errs...)
}
