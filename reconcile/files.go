package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/credentials"
)

// RemoveRunFiles removes the journals, exit markers and staged credentials of the runs that ended more than keep
// ago, and returns how many runs it cleared. What the database recorded about those runs stays:
// only the evidence files go. A run's directory holds directories and files of the job's user;
// they are removed without following a link (os.RemoveAll works below a directory handle), and
// the run's own directory, which only root can create, is checked not to be a link itself.
func (r *Reconciler) RemoveRunFiles(ctx context.Context, keep time.Duration) (int, error) {
	if keep <= 0 {
		return 0, fmt.Errorf("remove run files: keep period %s is not positive", keep)
	}
	runsDir := filepath.Join(r.cfg.StateDir, "runs")
	entries, err := os.ReadDir(runsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("remove run files: %w", err)
	}
	var ids []uuid.UUID
	seen := map[uuid.UUID]bool{}
	for _, e := range entries {
		if id, err := uuid.Parse(e.Name()); err == nil && id.String() == e.Name() {
			ids, seen[id] = append(ids, id), true
		}
	}
	markers := map[uuid.UUID][]string{}
	mentries, err := os.ReadDir(filepath.Join(r.cfg.StateDir, "markers"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("remove run files: %w", err)
	}
	for _, e := range mentries {
		name := e.Name()
		if len(name) <= 36 || !strings.HasPrefix(name[36:], ".a") {
			continue
		}
		if id, err := uuid.Parse(name[:36]); err == nil {
			if !seen[id] {
				ids, seen[id] = append(ids, id), true // a marker whose journal directory is gone already
			}
			markers[id] = append(markers[id], name)
		}
	}
	// Credentials staged for attempts whose exit marker never ran (a power loss, a unit that
	// never started), and for query units of a process that died meanwhile.
	staged := map[uuid.UUID][]string{}
	sentries, err := os.ReadDir(filepath.Join(r.cfg.StateDir, "credentials"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("remove run files: %w", err)
	}
	var errs []error
	for _, e := range sentries {
		name := e.Name()
		if strings.HasPrefix(name, "q-") {
			if info, err := e.Info(); err == nil && info.ModTime().Before(r.cfg.now().Add(-keep)) {
				if err := credentials.RemoveStaged(r.cfg.StateDir, name); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		if len(name) <= 36 || !strings.HasPrefix(name[36:], ".a") {
			continue
		}
		if id, err := uuid.Parse(name[:36]); err == nil {
			if !seen[id] {
				ids, seen[id] = append(ids, id), true
			}
			staged[id] = append(staged[id], name)
		}
	}
	if len(ids) == 0 {
		return 0, errors.Join(errs...)
	}
	ended, err := r.cfg.Store.RunListEndedBefore(ctx, ids, r.cfg.now().Add(-keep))
	if err != nil {
		return 0, fmt.Errorf("remove run files: %w", err)
	}
	for _, id := range ended {
		for _, key := range staged[id] {
			if err := credentials.RemoveStaged(r.cfg.StateDir, key); err != nil {
				errs = append(errs, fmt.Errorf("remove staged credentials of %s: %w", id, err))
			}
		}
		dir := filepath.Join(runsDir, id.String())
		if fi, err := os.Lstat(dir); err == nil && !fi.IsDir() {
			errs = append(errs, fmt.Errorf("remove run files of %s: %s is not a directory; left as it is", id, dir))
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove run files of %s: %w", id, err))
			continue
		}
		for _, name := range markers[id] {
			if err := os.Remove(filepath.Join(r.cfg.StateDir, "markers", name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove exit marker of %s: %w", id, err))
			}
		}
	}
	return len(ended), errors.Join(errs...)
}
