package ledger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Source is what a backup's paths hold, as root measured them as its attempt was about to start:
// the evidence the budget of a job's first backup rests on when the job sets no ceiling and has
// no history. Bound, when set, says why the walk did not finish and Bytes is instead the space
// used on the paths' filesystems, an upper bound of what they hold; Unmeasured, why neither could
// be read (the budget is then DefaultEstimate).
type Source struct {
	Bytes      int64 // the sizes of the regular files under the paths
	Entries    int64 // the files, directories and links, each of which restic records
	Bound      string
	Unmeasured string
}

// A first backup's budget is twice what its paths hold, as a budget from history is twice the
// most a run added: an attempt cut short leaves packs whose index restic never wrote, and the
// next attempt uploads them again. Each entry adds room for its tree entry. A small source gets
// at least minSourceBudget: the charge of an attempt cut short may be an upper bound shared with
// other runs of the repository, and must not leave the next attempt nothing.
const (
	perEntryOverhead = 1 << 10
	minSourceBudget  = 64 << 20
)

// sourceBudget is the budget a measured source allows, with why.
func sourceBudget(s Source) (int64, string) {
	if s.Unmeasured != "" {
		return DefaultEstimate, "no ceiling and no history, and the job's paths could not be measured (" + s.Unmeasured + "): the default estimate"
	}
	bytes := max(2*s.Bytes+s.Entries*perEntryOverhead, minSourceBudget)
	if s.Bound != "" {
		return bytes, fmt.Sprintf("no ceiling and no history: twice the space used on the filesystems of the job's paths (%s), since %s",
			FormatSize(s.Bytes), s.Bound)
	}
	return bytes, fmt.Sprintf("no ceiling and no history: twice what the job's paths hold, %s in %d entries (measured by holdfast as the attempt started)",
		FormatSize(s.Bytes), s.Entries)
}

// maxSourceDepth bounds how deep MeasureSource descends: each level holds a descriptor open.
const maxSourceDepth = 256

// MeasureSource measures what a backup's paths hold, as root, before the job's unit starts. The
// paths may be the job's user's: no symbolic link is followed, a path reached through one
// included (it counts as the link restic would record), and directories are opened relative to
// their parent. Files restic would leave out (excludes, unreadable files) are counted too: the
// figure errs high. When the walk cannot finish before ctx ends, or a path cannot be opened, the
// space used on the paths' filesystems stands in for it (Source.Bound), and when that cannot be
// read either, Source.Unmeasured says why.
func MeasureSource(ctx context.Context, paths []string) Source {
	w := newWalker(ctx)
	for _, p := range paths {
		if err := measurePath(w, p); err != nil {
			w.fail(err)
		}
		if w.failed() {
			break
		}
	}
	bytes, entries, walkErr := w.wait()
	if walkErr == nil {
		return Source{Bytes: bytes, Entries: entries}
	}
	used, err := filesystemsUsed(paths)
	if err != nil {
		return Source{Unmeasured: fmt.Sprintf("%v; %v", walkErr, err)}
	}
	why := "a walk of the paths did not finish: " + walkErr.Error()
	if errors.Is(walkErr, context.DeadlineExceeded) {
		why = "a walk of the paths did not finish in time"
	}
	return Source{Bytes: used, Bound: why}
}

// measurePath adds what path holds to w's totals; the directories under it may still be walked
// when it returns (w.wait).
func measurePath(w *walker, path string) error {
	fd, err := openNoLinks(path)
	if errors.Is(err, unix.ENOENT) {
		return nil // restic reports a missing path itself
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	w.entries.Add(1)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		w.bytes.Add(st.Size)
	case unix.S_IFDIR:
		dir, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		w.walk(dir, path, maxSourceDepth)
	}
	return nil
}

// errThroughLink refuses a path reached through a symbolic link.
var errThroughLink = errors.New("reached through a symbolic link, which holdfast does not follow")

// openNoLinks opens path (absolute) with O_PATH one component at a time from the root, so that
// no symbolic link on the way is followed; a link as its last component is opened itself. (One
// openat2 with RESOLVE_NO_SYMLINKS would do, but container runtimes' seccomp filters refuse it.)
func openNoLinks(path string) (int, error) {
	if !filepath.IsAbs(path) {
		return -1, errors.New("not an absolute path")
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	parts := strings.Split(strings.Trim(filepath.Clean(path), "/"), "/")
	for i, name := range parts {
		if name == "" {
			continue // the root itself
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
		if i == len(parts)-1 {
			break
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd)
			return -1, errThroughLink
		}
	}
	return fd, nil
}

// filesystemsUsed is the space used on the filesystems that hold paths, each counted once.
func filesystemsUsed(paths []string) (int64, error) {
	seen := map[unix.Fsid]bool{}
	var used int64
	for _, p := range paths {
		var fs unix.Statfs_t
		if err := unix.Statfs(p, &fs); err != nil {
			return 0, &os.PathError{Op: "statfs", Path: p, Err: err}
		}
		if seen[fs.Fsid] {
			continue
		}
		seen[fs.Fsid] = true
		used += int64(fs.Blocks-fs.Bfree) * fs.Bsize
	}
	return used, nil
}
