package fssnap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/model"
)

// DefaultEvery is how often a Sweeper looks for snapshots to release.
const DefaultEvery = 5 * time.Second

// SweeperStore is what a Sweeper reads: the host's live runs.
type SweeperStore interface {
	RunListLive(ctx context.Context, host string) ([]model.LiveRun, error)
}

// SweeperConfig is a host's sweep of the snapshots of attempts that have ended.
type SweeperConfig struct {
	Dir    string // the records, RecordDir(<state>)
	Helper Helper // releases them
	Store  SweeperStore
	Host   string        // the daemon's host
	Every  time.Duration // between passes; DefaultEvery if 0
	Logger *slog.Logger
}

// Sweeper releases the snapshots recorded for attempts that are no longer live on the host:
// every attempt's, once it ended, whether its unit ended by itself, was stopped, or was killed
// with its manager (its run restarted or closed). It reads the database only while some record
// is there.
type Sweeper struct{ cfg SweeperConfig }

// NewSweeper checks cfg and returns its Sweeper.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if cfg.Dir == "" || cfg.Store == nil || cfg.Host == "" || cfg.Helper.Runner == nil || cfg.Helper.Binary == "" {
		return nil, errors.New("snapshot sweeper: Dir, Helper, Store and Host are required")
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
		passCtx, cancel := context.WithTimeout(ctx, time.Minute)
		released, err := s.Pass(passCtx)
		cancel()
		for _, key := range released {
			s.cfg.Logger.Info("Btrfs snapshots of an ended attempt removed", "attempt", key)
		}
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("Btrfs snapshots not removed; tried again", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass releases the snapshots of the recorded attempts that are not live and returns their keys.
func (s *Sweeper) Pass(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(s.cfg.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("records of Btrfs snapshots: %w", err)
	}
	var keys []string
	for _, e := range entries {
		if _, _, ok := parseKey(e.Name()); ok {
			keys = append(keys, e.Name())
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	// Read after the listing: a spawn claims its attempt before it records and takes the
	// snapshots, so every record listed of a live attempt is of one this read finds live.
	live, err := s.cfg.Store.RunListLive(ctx, s.cfg.Host)
	if err != nil {
		return nil, err
	}
	current := map[string]bool{}
	for _, l := range live {
		current[credentials.AttemptKey(l.Run.ID, l.Attempt.No)] = true
	}
	var released []string
	var errs []error
	for _, key := range keys {
		if current[key] {
			continue
		}
		if err := s.cfg.Helper.Release(ctx, s.cfg.Dir, key); err != nil {
			errs = append(errs, err)
			continue
		}
		released = append(released, key)
	}
	return released, errors.Join(errs...)
}
