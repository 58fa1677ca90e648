package runaway

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
)

// packWatch is an inotify watch on a repository's data directory and its subdirectories, for the
// names pack files take when complete: restic renames each pack into place (IN_MOVED_TO), and
// IN_CREATE covers one written under its final name. Only those: fsnotify would also ask for
// IN_MODIFY, an event for each write restic makes, which costs a gigabyte's backup seconds.
type packWatch struct {
	file    *os.File         // the inotify descriptor, read through the runtime's poller
	subdirs map[int32]string // watch descriptor: its subdirectory of data ("" for data itself)
}

// watchData starts a packWatch on the repository's data directory and its subdirectories, none
// of them reached through a symbolic link: the repository belongs to the job's user, and inotify
// follows links. So each directory is opened without following links, relative to its parent,
// and watched through its descriptor in /proc/self/fd. It returns the data directory's
// descriptor, which the caller closes.
func watchData(repo string) (w *packWatch, data int, err error) {
	root, err := ledger.OpenDir(-1, repo)
	if err != nil {
		return nil, -1, err
	}
	defer unix.Close(root)
	if data, err = ledger.OpenDir(root, "data"); err != nil {
		return nil, -1, err
	}
	names, err := dirNames(data)
	if err != nil {
		unix.Close(data)
		return nil, -1, err
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		unix.Close(data)
		return nil, -1, fmt.Errorf("inotify: %w", err)
	}
	w = &packWatch{file: os.NewFile(uintptr(fd), "inotify"), subdirs: map[int32]string{}}
	add := func(dir int, sub string) error {
		wd, err := unix.InotifyAddWatch(fd, "/proc/self/fd/"+strconv.Itoa(dir), unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR)
		if err != nil {
			return fmt.Errorf("watch %s: %w", filepath.Join("data", sub), err)
		}
		w.subdirs[int32(wd)] = sub
		return nil
	}
	if err := add(data, ""); err != nil {
		w.file.Close()
		unix.Close(data)
		return nil, -1, err
	}
	for _, name := range names {
		sub, err := ledger.OpenDir(data, name)
		if err != nil {
			continue // not a directory, or a link: restic writes no pack there
		}
		err = add(sub, name)
		unix.Close(sub) // a watch outlives the descriptor it was added through
		if err != nil {
			w.file.Close()
			unix.Close(data)
			return nil, -1, err
		}
	}
	return w, data, nil
}

// run calls found with the subdirectory and name of each entry that appears, until ctx ends
// (nil) or the watch fails.
func (w *packWatch) run(ctx context.Context, found func(sub, name string) (more bool)) error {
	defer w.file.Close()
	stop := context.AfterFunc(ctx, func() { _ = w.file.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.file.Read(buf)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read inotify events: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := buf[off+unix.SizeofInotifyEvent : min(n, off+unix.SizeofInotifyEvent+size)]
			off += unix.SizeofInotifyEvent + size
			if mask&unix.IN_Q_OVERFLOW != 0 {
				return errors.New("inotify event queue overflowed")
			}
			sub, ok := w.subdirs[wd]
			if !ok {
				continue
			}
			if !found(sub, string(bytes.TrimRight(name, "\x00"))) {
				return nil
			}
		}
	}
}

// follow sums the sizes of the pack files that appear since it started, on top of seed (what the
// attempt had added when it started); past the hold it measures the repository to confirm, then
// pauses the run (run_ceiling) and stops its unit, as the per-pass guard does. restic writes a
// pack under a temporary name and renames it when it is complete, so only the final names (64 hex
// digits) count, once each. It lets go, for the pass to measure, when it can no longer tell: a
// new subdirectory of data (its packs would go unseen), or a measure that failed. If another
// backup writes to the same repository it steps aside: the growth is not this run's alone.
func (g *Guard) follow(ctx context.Context, w *packWatch, data int, l model.LiveRun, hold, seed int64) {
	counted := map[string]bool{}
	// since is what appeared under the watch, never counted twice; total may count a pack twice
	// (renamed as the seed was measured) until a measure puts it right.
	var since int64
	total := seed
	// past acts on a count past the hold; false ends the watch.
	past := func() bool {
		if total <= hold || !g.cfg.Acting() { // without the lease it counts on, and acts once it holds it again
			return true
		}
		grown := since
		if since <= hold {
			measured, other, why := Growth(ctx, g.cfg.Store, l.JobRepository, l.Attempt)
			switch {
			case other != nil:
				g.stepAside(l.Ref())
				return false
			case measured == nil:
				g.cfg.Logger.Warn("runaway guard: the repository could not be measured; the next pass measures it", "run", l.Run.ID, "why", why)
				return false
			case *measured <= hold:
				total = *measured // a pack counted twice, or the seed's own files
				return true
			}
			grown = *measured
		} else if other, err := g.cfg.Store.AttemptOtherWriter(ctx, l.Ref()); err != nil || other != nil {
			if other != nil {
				g.stepAside(l.Ref())
			}
			return false
		}
		// The bytes written are what the backup added: paused and stopped as on a pass.
		if err := g.Pause(ctx, l, Excess{Hold: hold, Grown: grown}); err != nil {
			g.cfg.Logger.Warn("runaway guard: the pause or the stop failed; the next pass measures again", "run", l.Run.ID, "err", err)
		}
		return false
	}
	if !past() { // a seed already past the hold
		return
	}
	err := w.run(ctx, func(sub, name string) bool {
		if sub == "" {
			// restic makes a subdirectory of data when it first needs it: this watch does not
			// see into it, and the next pass measures and watches again.
			g.cfg.Logger.Debug("runaway guard: a new subdirectory of the repository's data; watching again", "run", l.Run.ID)
			return false
		}
		key := filepath.Join(sub, name)
		if counted[key] || !packName().MatchString(name) {
			return true
		}
		size, ok := packSize(data, sub, name)
		if !ok {
			return true
		}
		counted[key] = true
		since += size
		total += size
		return past()
	})
	if err != nil {
		g.cfg.Logger.Warn("runaway guard: watching the repository failed; it measures once per pass", "run", l.Run.ID, "err", err)
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
var packName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })
