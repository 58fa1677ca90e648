package ledger

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// maxWalkers bounds how many directories a walk reads at once. A walk is system calls (a
// directory read, then a stat per entry), and a tree's directories are read side by side on as
// many cores as the machine has, up to this: a repository of a terabyte is 65,536 packs in 256
// directories.
const maxWalkers = 8

// walker totals what directory trees hold, reading several directories at once: a directory
// found is handed to another goroutine when one of the walk's is free, else walked where it was
// found. Each goroutine holds a descriptor per level it descends, so a walk holds at most
// maxWalkers times its depth bound, however a tree a job's user made is shaped. The first error
// ends the walk.
type walker struct {
	ctx            context.Context
	helpers        chan struct{} // a token per goroutine walking beside the caller's
	wg             sync.WaitGroup
	bytes, entries atomic.Int64
	mu             sync.Mutex
	err            error
}

func newWalker(ctx context.Context) *walker {
	return &walker{ctx: ctx, helpers: make(chan struct{}, min(runtime.GOMAXPROCS(0), maxWalkers)-1)}
}

// fail records the walk's first error.
func (w *walker) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

func (w *walker) failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err != nil
}

// wait waits for every directory handed off and returns the totals, or the first error.
func (w *walker) wait() (bytes, entries int64, err error) {
	w.wg.Wait()
	return w.bytes.Load(), w.entries.Load(), w.err
}

// walk adds what is under the open directory fd (rel names it, for errors) to the totals,
// descending at most depthLeft more levels, and closes fd. Directories it hands off may still be
// walked when it returns (wait).
func (w *walker) walk(fd int, rel string, depthLeft int) {
	d := os.NewFile(uintptr(fd), "")
	defer d.Close()
	if err := w.ctx.Err(); err != nil {
		w.fail(err)
		return
	}
	if w.failed() {
		return
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		w.fail(&fs.PathError{Op: "read", Path: rel, Err: err})
		return
	}
	var bytes, entries int64
	defer func() {
		w.bytes.Add(bytes)
		w.entries.Add(entries)
	}()
	for _, name := range names {
		var st unix.Stat_t
		err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			w.fail(&fs.PathError{Op: "stat", Path: filepath.Join(rel, name), Err: err})
			return
		}
		entries++
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			bytes += st.Size
		case unix.S_IFDIR:
			if depthLeft == 0 {
				continue
			}
			child, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				continue // gone, or replaced by a link or a file since it was seen
			}
			if err != nil {
				w.fail(&fs.PathError{Op: "open", Path: filepath.Join(rel, name), Err: err})
				return
			}
			w.descend(child, filepath.Join(rel, name), depthLeft-1)
			if w.failed() {
				return
			}
		}
	}
}

// descend walks the open directory child on another goroutine if one is free, else on this one.
func (w *walker) descend(child int, rel string, depthLeft int) {
	select {
	case w.helpers <- struct{}{}:
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer func() { <-w.helpers }()
			w.walk(child, rel, depthLeft)
		}()
	default:
		w.walk(child, rel, depthLeft)
	}
}
