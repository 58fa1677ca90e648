package reconcile

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"github.com/fsnotify/fsnotify"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/store"
)

// RunawayWatch is the runaway watch service: it follows the pack files running backups write
// into local repositories, so that the runaway guard trips as a backup passes its hold, not
// only at the next pass: a fast backup can add far more than its hold between two passes. The
// sweep tells it which attempts are live; it owns the watches' lifetime. Stop ends every watch
// and waits for them: the next daemon's first pass arms them again for the attempts still
// live. Not started, its watches live until their attempt ends (a Reconciler used alone).
type RunawayWatch struct {
	rec    *Reconciler
	life   sync.Mutex // serializes Start and Stop
	mu     sync.Mutex
	base   context.Context // the watches' parent; nil when not started
	cancel context.CancelFunc
	active map[attemptKey]context.CancelFunc
	// stopping refuses new watches while Stop waits for the others.
	stopping bool
	wg       sync.WaitGroup
}

// Name is the service's name.
func (w *RunawayWatch) Name() string { return "runaway watch" }

// Start lets the sweep's watches live until Stop, or until ctx ends.
func (w *RunawayWatch) Start(ctx context.Context) error {
	w.life.Lock()
	defer w.life.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.base != nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w.base, w.cancel = context.WithCancel(ctx)
	return nil
}

// Stop ends every watch and waits until each has let go of its repository.
func (w *RunawayWatch) Stop() {
	w.life.Lock()
	defer w.life.Unlock()
	w.mu.Lock()
	cancel := w.cancel
	w.base, w.cancel, w.stopping = nil, nil, true
	for key, stop := range w.active {
		stop()
		delete(w.active, key)
	}
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	w.wg.Wait()
	w.mu.Lock()
	w.stopping = false
	w.mu.Unlock()
}

// watch starts following the attempt's repository, unless it is followed already or is not a
// local restic repository. It is safe to call on every pass.
func (w *RunawayWatch) watch(l store.LiveRun) {
	r := w.rec
	a := l.Attempt
	dir, local := ledger.Local(l.JobRepository)
	if l.Run.Kind != store.KindBackup || a.HoldBytes == nil || !local {
		return
	}
	key := attemptKey{l.Run.ID, a.No}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.active[key]; ok || w.stopping {
		return
	}
	fw, data, subdirs, err := watchData(dir)
	if err != nil {
		r.cfg.Logger.Warn("runaway guard: cannot watch the repository; it measures once per pass", "run", l.Run.ID, "err", err)
		return
	}
	base := w.base
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithCancel(base)
	if w.active == nil {
		w.active = map[attemptKey]context.CancelFunc{}
	}
	w.active[key] = cancel
	w.wg.Go(func() {
		defer unix.Close(data)
		r.follow(ctx, fw, data, subdirs, l, *a.HoldBytes)
		w.unwatch(key.run, key.attempt) // a watch that gave up can be armed again by the next pass
	})
}

// watchData starts a watcher on the repository's data directory and its subdirectories, none of
// them reached through a symbolic link: the repository belongs to the job's user, and inotify
// follows links, which fsnotify cannot turn off. So each directory is opened without following
// links, relative to its parent, and watched through its descriptor in /proc/self/fd. It returns
// the data directory's descriptor, which the caller closes, and the subdirectory each watch name
// stands for.
func watchData(repo string) (w *fsnotify.Watcher, data int, subdirs map[string]string, err error) {
	root, err := ledger.OpenDir(-1, repo)
	if err != nil {
		return nil, -1, nil, err
	}
	defer unix.Close(root)
	if data, err = ledger.OpenDir(root, "data"); err != nil {
		return nil, -1, nil, err
	}
	names, err := dirNames(data)
	if err != nil {
		unix.Close(data)
		return nil, -1, nil, err
	}
	if w, err = fsnotify.NewWatcher(); err != nil {
		unix.Close(data)
		return nil, -1, nil, err
	}
	subdirs = map[string]string{}
	var opened []int
	defer func() {
		for _, fd := range opened {
			unix.Close(fd) // a watch outlives the descriptor it was added through
		}
	}()
	add := func(fd int, sub string) error {
		name := "/proc/self/fd/" + strconv.Itoa(fd)
		subdirs[name] = sub
		return w.Add(name)
	}
	if err := add(data, ""); err != nil {
		w.Close()
		unix.Close(data)
		return nil, -1, nil, err
	}
	for _, name := range names {
		fd, err := ledger.OpenDir(data, name)
		if err != nil {
			continue // not a directory, or a link: restic writes no pack there
		}
		opened = append(opened, fd)
		if err := add(fd, name); err != nil {
			w.Close()
			unix.Close(data)
			return nil, -1, nil, err
		}
	}
	return w, data, subdirs, nil
}

// unwatch stops following an attempt that ended.
func (w *RunawayWatch) unwatch(run uuid.UUID, attempt int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cancel, ok := w.active[attemptKey{run, attempt}]; ok {
		cancel()
		delete(w.active, attemptKey{run, attempt})
	}
}

// follow sums the sizes of the pack files that appear since it started; past the hold it pauses
// the run (run_ceiling) and stops its unit, as the per-pass guard does. restic writes a pack
// under a temporary name and renames it when it is complete, so only the final names (64 hex
// digits) count, once each. If another backup writes to the same repository it steps aside:
// the growth is not this run's alone.
func (r *Reconciler) follow(ctx context.Context, w *fsnotify.Watcher, data int, subdirs map[string]string, l store.LiveRun, hold int64) {
	defer w.Close()
	counted := map[string]bool{}
	var total int64
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			r.cfg.Logger.Warn("runaway guard: watching the repository failed; it measures once per pass", "run", l.Run.ID, "err", err)
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if !ev.Has(fsnotify.Create) || counted[ev.Name] || !packName.MatchString(filepath.Base(ev.Name)) {
				continue
			}
			sub, ok := subdirs[filepath.Dir(ev.Name)]
			if !ok {
				continue
			}
			size, ok := packSize(data, sub, filepath.Base(ev.Name))
			if !ok {
				continue
			}
			counted[ev.Name] = true
			total += size
			if total <= hold {
				continue
			}
			if other, err := r.cfg.Store.OtherWriter(ctx, l.Run.ID, l.Attempt.No); err != nil || other != nil {
				return
			}
			paused, err := r.cfg.Store.RequestPause(ctx, l.Run.ID, store.PausedRunCeiling)
			if err != nil {
				r.cfg.Logger.Warn("runaway guard: the pause could not be recorded; the next pass measures again", "run", l.Run.ID, "err", err)
			}
			if !paused {
				return
			}
			r.cfg.Logger.Warn("runaway guard: the backup wrote more than its hold; stopping it", "run", l.Run.ID,
				"hold", ledger.FormatSize(hold), "written", ledger.FormatSize(total), "unit", l.Attempt.Unit)
			if err := r.cfg.Runner.Stop(ctx, l.Attempt.Unit); err != nil {
				r.cfg.Logger.Warn("runaway guard: stop failed; the next pass asks again", "run", l.Run.ID, "err", err)
			}
			return
		}
	}
}

// dirNames lists the open directory fd, leaving fd open.
func dirNames(fd int) ([]string, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "data")
	defer f.Close()
	return f.Readdirnames(-1)
}

// packSize is the size of the pack file name in the data directory's subdirectory sub, if it is a
// regular file reached without following a link.
func packSize(data int, sub, name string) (int64, bool) {
	dir := data
	if sub != "" {
		fd, err := ledger.OpenDir(data, sub)
		if err != nil {
			return 0, false
		}
		defer unix.Close(fd)
		dir = fd
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, false
	}
	return st.Size, true
}

// packName is the name of a complete pack file in a restic repository.
var packName = regexp.MustCompile(`^[0-9a-f]{64}$`)

// prune stops following attempts that are no longer live (ended by another daemon, or by a
// pass that failed before it could unwatch them).
func (w *RunawayWatch) prune(live []store.LiveRun) {
	keep := make(map[attemptKey]bool, len(live))
	for _, l := range live {
		keep[attemptKey{l.Run.ID, l.Attempt.No}] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, cancel := range w.active {
		if !keep[key] {
			cancel()
			delete(w.active, key)
		}
	}
}
