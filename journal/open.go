package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Source says where a reader that is more privileged than the writer finds a
// journal, and whom it must belong to. The daemon runs as root and the journal
// is written by the job's user, who can replace it, or anything in a
// directory it owns, with a link, a named pipe or a hard link to a file it
// cannot read.
type Source struct {
	// Dir is a directory the reader trusts, e.g. the state directory; it is
	// opened as given.
	Dir string
	// Name is the journal's path relative to Dir. None of its components is
	// followed if it is a symbolic link.
	Name string
	// UID is who must own the journal: the uid the job runs as (0 for root).
	UID int
	// Root, if not nil, is Dir opened once for many reads; nil opens Dir at each read.
	Root *Root
}

// A Root is a trusted directory opened once, so that reading many journals below it does not
// resolve its path again for each one.
type Root struct {
	fd  int
	dir string
}

// OpenRoot opens dir, following its path as given (it is trusted).
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &Root{fd: fd, dir: dir}, nil
}

// Close closes the directory; the sources that name it must not be read after.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Path is the journal's path, for messages.
func (s Source) Path() string { return filepath.Join(s.Dir, s.Name) }

// openChecked opens the journal of src for reading without following links,
// without opening anything but a regular file owned by src.UID, and without
// acquiring a terminal, and returns its size; the file is nil if the journal is
// offset bytes long. The error wraps ErrNotYet if the journal (or its directory)
// does not exist, and *CorruptError (at offset) if something that is not such
// a file stands in its place; its reason names only the kind of thing found,
// never its content.
func openChecked(src Source, offset int64) (*os.File, int64, error) {
	pfd, err := openPath(src, offset)
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, 0, &os.PathError{Op: "stat", Path: src.Path(), Err: err}
	}
	if err := check(st, src.UID, offset); err != nil {
		return nil, 0, err
	}
	if st.Size == offset {
		// Nothing past the cursor, so nothing is opened for reading; a journal replaced meanwhile
		// is caught when it grows, by the byte before the cursor and the chain's next hash.
		return nil, st.Size, nil
	}
	// Reopening through /proc opens the very inode that was checked, so a
	// file swapped in meanwhile is never opened.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		// No /proc: open by name once more, still without following a
		// link; O_NONBLOCK keeps a pipe swapped in from blocking the open.
		dir, base, werr := walk(src, offset)
		if werr != nil {
			return nil, 0, werr
		}
		fd, err = unix.Openat(dir, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		unix.Close(dir)
	}
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: src.Path(), Err: err}
	}
	f := os.NewFile(uintptr(fd), src.Path())
	var again unix.Stat_t
	if err := unix.Fstat(fd, &again); err != nil {
		f.Close()
		return nil, 0, &os.PathError{Op: "stat", Path: src.Path(), Err: err}
	}
	if again.Dev != st.Dev || again.Ino != st.Ino {
		f.Close()
		return nil, 0, corrupt(offset, "journal was replaced while it was opened")
	}
	return f, again.Size, nil
}

// statChecked returns the journal's size under the same rules as openChecked,
// without opening it for reading.
func statChecked(src Source) (int64, error) {
	pfd, err := openPath(src, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: src.Path(), Err: err}
	}
	if err := check(st, src.UID, 0); err != nil {
		return 0, err
	}
	return st.Size, nil
}

// openPath opens the journal's name itself with O_PATH, which opens even a link,
// a pipe or a device without opening what it refers to: nothing is read, no
// driver is called. No link on the way is followed.
func openPath(src Source, offset int64) (int, error) {
	if !filepath.IsLocal(src.Name) {
		return -1, fmt.Errorf("journal name %q is not a path inside %s", src.Name, src.Dir)
	}
	root := src.Root
	if root == nil || root.dir != src.Dir {
		var err error
		if root, err = OpenRoot(src.Dir); err != nil {
			return -1, err
		}
		defer root.Close()
	}
	// One call resolves the whole name where the kernel has openat2 (5.6); with O_PATH and
	// O_NOFOLLOW a link in the last place is opened itself, and refused by its kind.
	fd, err := unix.Openat2(root.fd, filepath.Clean(src.Name), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.ENOENT):
		return -1, ErrNotYet
	}
	// A link on the way, or no openat2: the walk says what stands where.
	dir, base, err := walk(src, offset)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dir)
	fd, err = unix.Openat(dir, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, ErrNotYet
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: src.Path(), Err: err}
	}
	return fd, nil
}

// walk opens the directory that holds the journal, component by component
// from src.Dir, following no link, and returns it with the journal's name.
func walk(src Source, offset int64) (dir int, base string, err error) {
	dir, err = unix.Open(src.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", &os.PathError{Op: "open", Path: src.Dir, Err: err}
	}
	parts := strings.Split(filepath.Clean(src.Name), string(filepath.Separator))
	for _, p := range parts[:len(parts)-1] {
		next, err := unix.Openat(dir, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			var st unix.Stat_t
			serr := unix.Fstatat(dir, p, &st, unix.AT_SYMLINK_NOFOLLOW)
			unix.Close(dir)
			switch {
			case errors.Is(err, unix.ENOENT):
				return -1, "", ErrNotYet
			case errors.Is(err, unix.ENOTDIR) && serr == nil:
				return -1, "", corrupt(offset, "the journal's directory %s is %s, not a directory", p, kindOf(st.Mode))
			}
			return -1, "", &os.PathError{Op: "open", Path: src.Path(), Err: err}
		}
		unix.Close(dir)
		dir = next
	}
	return dir, parts[len(parts)-1], nil
}

// check refuses anything but a regular file owned by uid.
func check(st unix.Stat_t, uid int, offset int64) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return corrupt(offset, "journal is %s, not a regular file", kindOf(st.Mode))
	}
	if int64(st.Uid) != int64(uid) {
		return corrupt(offset, "journal is owned by uid %d, not the job's user (uid %d)", st.Uid, uid)
	}
	return nil
}

func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFREG:
		return "a regular file"
	}
	return "of an unknown kind"
}
