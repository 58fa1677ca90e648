package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
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
	defer unix.Close(fd)
	if err := w.ctx.Err(); err != nil {
		w.fail(err)
		return
	}
	if w.failed() {
		return
	}
	entries, err := readDir(fd)
	if err != nil {
		w.fail(&fs.PathError{Op: "read", Path: rel, Err: err})
		return
	}
	var bytes, count int64
	defer func() {
		w.bytes.Add(bytes)
		w.entries.Add(count)
	}()
	for _, e := range entries {
		// A file's size needs its inode; a directory or anything else is told by its entry,
		// unless the filesystem does not say (DT_UNKNOWN).
		typ := e.typ
		if typ == unix.DT_REG || typ == unix.DT_UNKNOWN {
			var st unix.Stat_t
			err := unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW)
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil {
				w.fail(&fs.PathError{Op: "stat", Path: filepath.Join(rel, e.name), Err: err})
				return
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				typ = unix.DT_REG
				bytes += st.Size
			case unix.S_IFDIR:
				typ = unix.DT_DIR
			default:
				typ = unix.DT_UNKNOWN
			}
		}
		count++
		if typ != unix.DT_DIR || depthLeft == 0 {
			continue
		}
		child, err := unix.Openat(fd, e.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			continue // gone, or replaced by a link or a file since it was seen
		}
		if err != nil {
			w.fail(&fs.PathError{Op: "open", Path: filepath.Join(rel, e.name), Err: err})
			return
		}
		w.descend(child, filepath.Join(rel, e.name), depthLeft-1)
		if w.failed() {
			return
		}
	}
}

// dirEntry is a name in a directory and its type as the directory says (unix.DT_*).
type dirEntry struct {
	name string
	typ  uint8
}

// direntBuffers are getdents64's buffers, one per directory read at a time.
var direntBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// readDir reads the entries of the open directory fd, "." and ".." left out. Not os.File's
// ReadDir: wrapping fd in an *os.File registers it with the poller (two more system calls per
// directory), and for an entry whose type the filesystem does not give, ReadDir stats it by a
// path made from the file's name, which a descriptor opened relative to its parent does not
// have; walk stats those by fd and name itself.
func readDir(fd int) ([]dirEntry, error) {
	bp := direntBuffers.Get().(*[]byte)
	defer direntBuffers.Put(bp)
	buf := *bp
	var entries []dirEntry
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return entries, nil
		}
		// struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
		for off := 0; off < n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen == 0 || off+reclen > n {
				return nil, errors.New("malformed directory entry")
			}
			rec := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(rec, 0); i >= 0 {
				rec = rec[:i]
			}
			if name := string(rec); name != "." && name != ".." {
				entries = append(entries, dirEntry{name: name, typ: buf[off+18]})
			}
			off += reclen
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
