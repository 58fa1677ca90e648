// Package putback puts a restore's entries back at their own paths. restic restores them into a
// stage, a directory in Base (which root, or the job's user, alone controls, on the file system
// of the paths), and Run moves each into place by rename: the walk down from Base goes by file
// descriptors and never follows a link, so whoever controls the directories on the way (the user
// whose files they are) cannot send the writes anywhere else. An entry that is missing is put
// back whole; one that is there and equal to the restored copy is left; one that has changed
// since the snapshot is kept unless Overwrite; a directory on both sides is merged entry by
// entry. What is left in the stage is the caller's to remove.
package putback

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/safepath"
)

// Config is a putting back: the restored copy of each of Paths is Stage joined with it.
type Config struct {
	// Base is the directory the stage is in, an ancestor of every path, as root resolved it
	// (safepath: no link in it).
	Base string
	// Stage is where restic restored, below Base.
	Stage string
	// Paths are the paths to put back: absolute, clean, below Base.
	Paths []string
	// Overwrite replaces what has changed since the snapshot; without it, that is kept.
	Overwrite bool
	// StageDev and StageIno are the stage as its maker found it: a stage that is another
	// directory now (swapped by whoever could rename it) is refused whole.
	StageDev, StageIno uint64
}

func (c Config) validate() error {
	if !filepath.IsAbs(c.Base) || !filepath.IsAbs(c.Stage) || !below(c.Stage, c.Base) {
		return fmt.Errorf("put back: the stage %s must be an absolute path below the base %s", c.Stage, c.Base)
	}
	for _, p := range c.Paths {
		if filepath.Clean(p) != p || !below(p, c.Base) {
			return fmt.Errorf("put back: %q is not a clean path below %s", p, c.Base)
		}
	}
	return nil
}

// below reports whether p is strictly below dir.
func below(p, dir string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") && len(p) > len(strings.TrimSuffix(dir, "/"))+1
}

// Action is what Run did with an entry.
type Action string

const (
	Placed   Action = "placed"   // it was missing, and is back
	Replaced Action = "replaced" // it had changed, and the snapshot's replaced it (Overwrite)
	Same     Action = "same"     // it is as the snapshot has it: left
	Kept     Action = "kept"     // it had changed: left as it is (no Overwrite)
	Failed   Action = "failed"   // it could not be put back (Why)
)

// Entry is what Run did at one path: an entry of the snapshot, the first of a subtree it put
// back whole (its content goes with it), or one it merged into is not reported.
type Entry struct {
	Path   string
	Action Action
	Why    string // for Kept and Failed
}

// Run puts cfg.Paths back, telling each what it did. The error is one that stopped it before
// any entry (the base or the stage could not be opened); an entry's own failure is an Entry.
func Run(cfg Config, each func(Entry)) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	base, err := unix.Open(cfg.Base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: cfg.Base, Err: err}
	}
	defer unix.Close(base)
	stage, err := walk(base, rel(cfg.Stage, cfg.Base))
	if err != nil {
		return &os.PathError{Op: "open", Path: cfg.Stage, Err: err}
	}
	defer unix.Close(stage)
	var st unix.Stat_t
	if err := unix.Fstat(stage, &st); err != nil {
		return &os.PathError{Op: "stat", Path: cfg.Stage, Err: err}
	}
	if st.Dev != cfg.StageDev || st.Ino != cfg.StageIno || st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 {
		return fmt.Errorf("put back: the stage %s is not the directory made for the restore (replaced, or open to others): nothing is put back from it", cfg.Stage)
	}
	p := placer{overwrite: cfg.Overwrite, each: each}
	for _, path := range cfg.Paths {
		p.put(base, stage, cfg.Base, path)
	}
	return nil
}

// rel is p below dir, without a leading slash.
func rel(p, dir string) string { return strings.TrimPrefix(p[len(strings.TrimSuffix(dir, "/")):], "/") }

// walk opens the directory rel names below the directory fd, one component at a time, following
// no link: a component that is a link or not a directory fails (ELOOP, ENOTDIR).
func walk(fd int, rel string) (int, error) {
	cur, err := unix.Dup(fd)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" {
			continue
		}
		if c == "." || c == ".." {
			unix.Close(cur)
			return -1, unix.EINVAL
		}
		next, err := unix.Openat(cur, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

type placer struct {
	overwrite bool
	each      func(Entry)
}

// put puts path back: its copy in the stage into the directory it was in.
func (p placer) put(base, stage int, baseDir, path string) {
	dir, name := filepath.Split(path)
	dst, err := walk(base, rel(filepath.Clean(dir), baseDir))
	if err != nil {
		p.each(Entry{path, Failed, fmt.Sprintf("the directory it goes in, %s, is gone or is no directory now (%s)", filepath.Clean(dir), cause(err))})
		return
	}
	defer unix.Close(dst)
	src, err := walk(stage, strings.TrimPrefix(dir, "/"))
	if err != nil {
		p.each(Entry{path, Failed, "the restore did not give it back (" + cause(err) + ")"})
		return
	}
	defer unix.Close(src)
	p.place(src, dst, name, path)
}

// place puts the staged entry name of directory src into directory dst.
func (p placer) place(src, dst int, name, path string) {
	var s, d, dir unix.Stat_t
	if err := unix.Fstatat(src, name, &s, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		p.each(Entry{path, Failed, "the restore did not give it back (" + cause(err) + ")"})
		return
	}
	if err := unix.Fstat(dst, &dir); err != nil {
		p.each(Entry{path, Failed, cause(err)})
		return
	}
	if dir.Uid != 0 && dir.Uid != s.Uid {
		// A directory another user owns now (made again since the snapshot, say) would give
		// them what the snapshot kept from them: the entry stays out of it.
		p.each(Entry{path, Kept, fmt.Sprintf("the directory it goes in is user %d's now, the entry user %d's: it is not put into it", dir.Uid, s.Uid)})
		return
	}
	err := unix.Fstatat(dst, name, &d, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		err = unix.Renameat2(src, name, dst, name, unix.RENAME_NOREPLACE)
		if err == nil {
			p.each(Entry{path, Placed, ""})
			return
		}
		if !errors.Is(err, unix.EEXIST) {
			p.each(Entry{path, Failed, "not put back: " + cause(err)})
			return
		}
		// Made there since: it is judged as what is there.
		err = unix.Fstatat(dst, name, &d, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		p.each(Entry{path, Failed, cause(err)})
		return
	}
	sDir, dDir := isDir(s.Mode), isDir(d.Mode)
	switch {
	case sDir && dDir && (s.Uid != d.Uid || s.Gid != d.Gid || s.Mode&0o7777 != d.Mode&0o7777):
		// Its entries would be open to whoever the directory is open to now.
		p.each(Entry{path, Kept, fmt.Sprintf("the directory there has another owner or mode than the snapshot's (%s): what is in it is not put back", describeOwner(&d))})
	case sDir && dDir:
		p.merge(src, dst, name, path)
	case same(src, dst, name, &s, &d):
		p.each(Entry{path, Same, ""})
	case !p.overwrite:
		p.each(Entry{path, Kept, "it has changed since the snapshot (" + Describe(&d) + " now)"})
	case dDir:
		p.each(Entry{path, Kept, "it is a directory now, which is not replaced by what the snapshot has there, " + safepath.Kind(s.Mode)})
	default:
		if sDir {
			// A directory's rename replaces only a directory: what is there goes first.
			if err := unix.Unlinkat(dst, name, 0); err != nil {
				p.each(Entry{path, Failed, "not replaced: " + cause(err)})
				return
			}
			err = unix.Renameat2(src, name, dst, name, unix.RENAME_NOREPLACE)
		} else {
			err = unix.Renameat(src, name, dst, name)
		}
		if err != nil {
			p.each(Entry{path, Failed, "not replaced: " + cause(err)})
			return
		}
		p.each(Entry{path, Replaced, ""})
	}
}

// merge puts back the entries of the staged directory name into the directory there.
func (p placer) merge(src, dst int, name, path string) {
	s, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		p.each(Entry{path, Failed, "the restored directory cannot be read: " + cause(err)})
		return
	}
	defer unix.Close(s)
	d, err := unix.Openat(dst, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		p.each(Entry{path, Failed, "the directory there cannot be opened: " + cause(err)})
		return
	}
	defer unix.Close(d)
	names, err := readNames(s)
	if err != nil {
		p.each(Entry{path, Failed, "the restored directory cannot be read: " + cause(err)})
		return
	}
	for _, n := range names {
		p.place(s, d, n, filepath.Join(path, n))
	}
}

// readNames is every name in the directory fd, read before any is moved out of it.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	var names []string
	for {
		batch, err := f.Readdirnames(1024)
		names = append(names, batch...)
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return names, err
		}
	}
}

// same reports whether the entry there is the staged one as far as a restore tells: of one
// kind, owner and permissions, and a file of one size and modification time, a link to the
// same target.
func same(src, dst int, name string, s, d *unix.Stat_t) bool {
	if s.Mode&unix.S_IFMT != d.Mode&unix.S_IFMT || s.Mode&0o777 != d.Mode&0o777 || s.Uid != d.Uid || s.Gid != d.Gid {
		return false
	}
	switch s.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return s.Size == d.Size && s.Mtim == d.Mtim
	case unix.S_IFLNK:
		a, errA := readlinkat(src, name)
		b, errB := readlinkat(dst, name)
		return errA == nil && errB == nil && a == b
	case unix.S_IFCHR, unix.S_IFBLK:
		return s.Rdev == d.Rdev
	}
	return true
}

func readlinkat(dir int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// Look is what is at path now, reached from base as Run reaches it, without following a link:
// fs.ErrNotExist if nothing, unix.ENOTDIR or unix.ELOOP if something other than a directory is on
// the way (a restore would put back what is below it only over it).
func Look(base, path string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if path == base {
		return st, unix.Stat(base, &st)
	}
	if !below(path, base) {
		return st, fmt.Errorf("put back: %s is not below %s", path, base)
	}
	fd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return st, &os.PathError{Op: "open", Path: base, Err: err}
	}
	defer unix.Close(fd)
	dir, name := filepath.Split(path)
	d, err := walk(fd, rel(filepath.Clean(dir), base))
	if err != nil {
		return st, &os.PathError{Op: "open", Path: filepath.Clean(dir), Err: err}
	}
	defer unix.Close(d)
	if err := unix.Fstatat(d, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return st, nil
}

// Describe says what a stat is, for a message: "a regular file of 26 bytes".
func Describe(st *unix.Stat_t) string {
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		return fmt.Sprintf("a regular file of %d bytes", st.Size)
	}
	return safepath.Kind(st.Mode)
}

func isDir(mode uint32) bool { return mode&unix.S_IFMT == unix.S_IFDIR }

// describeOwner says a directory's owner and mode: "user 1000, group 1000, mode 0755".
func describeOwner(st *unix.Stat_t) string {
	return fmt.Sprintf("user %d, group %d, mode %04o now", st.Uid, st.Gid, st.Mode&0o7777)
}

// cause is an error's short word ("no such file or directory").
func cause(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.ELOOP:
			return "a symbolic link is on the way"
		case unix.ENOTDIR:
			return "something other than a directory is on the way"
		}
		return errno.Error()
	}
	return err.Error()
}
