package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fsnotify/fsnotify"
	"github.com/google/uuid"
)

// MarkerWatch reports exit markers as they are written: a unit ended.
//
// The end of a unit is watched on the marker directory (inotify), not on systemd's D-Bus signals.
// The marker is the evidence the sweep closes a run on, and ExecStopPost writes it before
// systemd reports the unit gone, so its arrival is the earliest moment the sweep can act: a
// JobRemoved or PropertiesChanged signal can come before it (a pass woken then finds nothing) or
// for units that are not ours. The watch works the same under the system manager, a user manager
// and a private manager without a bus daemon, needs no subscription to restore after systemd
// re-executes or the connection drops, and costs nothing per unit. A unit that ends without a
// marker (a crash, a power loss) is not reported: the sweep's interval finds it, as before.
type MarkerWatch struct {
	w   *fsnotify.Watcher
	dir string
}

// WatchMarkers starts watching the marker directory under stateDir, creating it as WriteMarker
// would. Markers written from now on are reported by Run.
func WatchMarkers(stateDir string) (*MarkerWatch, error) {
	dir := filepath.Dir(MarkerPath(stateDir, uuid.Nil, 1))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("watch exit markers: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch exit markers: %w", err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, fmt.Errorf("watch exit markers in %s: %w", dir, err)
	}
	return &MarkerWatch{w: w, dir: dir}, nil
}

// Run calls ended for each marker that appears, until ctx ends (it returns nil) or the watch
// fails (it returns why; events may have been lost). It closes the watch when it returns.
func (m *MarkerWatch) Run(ctx context.Context, ended func(run uuid.UUID, attempt int)) error {
	defer m.w.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-m.w.Errors:
			if !ok {
				return errors.New("watch exit markers: the watch was closed")
			}
			return fmt.Errorf("watch exit markers: %w", err)
		case ev, ok := <-m.w.Events:
			if !ok {
				return errors.New("watch exit markers: the watch was closed")
			}
			if ev.Has(fsnotify.Remove) && ev.Name == m.dir {
				return fmt.Errorf("watch exit markers: %s was removed", m.dir)
			}
			// WriteMarker renames a complete file into place: the final name appears once.
			if !ev.Has(fsnotify.Create) {
				continue
			}
			if run, attempt, ok := ParseMarkerName(filepath.Base(ev.Name)); ok {
				ended(run, attempt)
			}
		}
	}
}

// Close ends a watch that Run never ran.
func (m *MarkerWatch) Close() error { return m.w.Close() }

// ParseMarkerName reads the run and attempt from a marker's file name, as MarkerPath makes it.
func ParseMarkerName(name string) (run uuid.UUID, attempt int, ok bool) {
	rest, found := strings.CutSuffix(name, ".json")
	if !found || len(rest) < 36 {
		return uuid.Nil, 0, false
	}
	id, err := uuid.Parse(rest[:36])
	if err != nil || id.String() != rest[:36] {
		return uuid.Nil, 0, false
	}
	no, found := strings.CutPrefix(rest[36:], ".a")
	if !found {
		return uuid.Nil, 0, false
	}
	n, err := strconv.Atoi(no)
	if err != nil || n < 1 || strconv.Itoa(n) != no {
		return uuid.Nil, 0, false
	}
	return id, n, true
}
