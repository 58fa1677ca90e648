// Package fssnap takes the read-only Btrfs snapshots that a backup of a job with
// --fs-snapshot btrfs reads instead of its live paths, and removes them.
//
// Before an attempt's unit starts, Take snapshots each Btrfs subvolume that holds one of the
// job's paths into <subvolume>/.holdfast-snapshots/<run>.a<attempt> (root's, mode 0700) and
// returns the bind mounts that put each path's copy in the snapshot read-only over the path in
// the unit's own mount namespace: restic records the original paths, and a restore needs nothing
// special. Take first records where it snapshots (<state>/fs-snapshots/<key>, root's), and the
// daemon's Sweeper releases the snapshots of every record whose attempt is no longer live on the
// host (Release), however it ended. The daemon runs both in short units of their own (Helper): its
// service is read-only outside its state directory and lacks CAP_SYS_ADMIN. The exit marker
// cannot release them, as systemd applies a unit's bind mounts to its privileged commands too,
// where they hide a subvolume's snapshots below its own root. The snapshots of several subvolumes
// are taken one after the other: each is of one instant.
//
// systemd follows links when it sets up the bind mounts, and the unit's commands run below
// them, root's exit marker among them: neither side may be one that a user other than root could
// redirect. The subvolume, where the snapshots are made, must be root's alone (safepath.Writable
// for root); each path must be reached through directories that only root controls (safepath
// for root), so that no user can turn it into a link between the check and the mount; and its
// copy in the snapshot, which nothing can change, is walked without following a link. A
// snapshot holds one subvolume: a path that holds a mount point or another subvolume (which
// would be an empty directory in it) is refused unless that is a path of the job too, with its
// own snapshot; so is a path over one that the unit writes (its state, cache or repository).
package fssnap

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/systemd"
)

// Btrfs is the one file system snapshot a job can ask for (model.BackupSettings.FSSnapshot).
const Btrfs = "btrfs"

// DirName is the directory, in a subvolume's root, that holds holdfast's snapshots of it. A
// backup of a path that is a subvolume's root leaves it out.
const DirName = ".holdfast-snapshots"

// An attempt's snapshots, in each subvolume it snapshots, and its record are named by its key,
// credentials.AttemptKey, as its staged credentials and exit marker are.

// parseKey is credentials.AttemptKey's inverse; ok is false for a name it does not make.
func parseKey(name string) (run uuid.UUID, attempt int, ok bool) {
	id, n, found := strings.Cut(name, ".a")
	run, err := uuid.Parse(id)
	if !found || err != nil || run.String() != id {
		return uuid.UUID{}, 0, false
	}
	attempt, err = strconv.Atoi(n)
	if err != nil || attempt < 1 || strconv.Itoa(attempt) != n {
		return uuid.UUID{}, 0, false
	}
	return run, attempt, true
}

// RecordDir is where Take records the snapshots of each attempt, in the daemon's state directory.
func RecordDir(stateDir string) string { return filepath.Join(stateDir, "fs-snapshots") }

// place is where one path of a job is: resolved, in which subvolume, and where below its root.
type place struct {
	path   string // the job's path as given
	node   safepath.Node
	subvol string
	rel    string // the path below subvol, "." for its root
}

// locateAll finds the subvolume of each of paths and holds them to the package's rule (see
// the package comment); writes are the paths the unit writes, which none may hold. A refusal is
// a *safepath.Error.
func locateAll(paths, writes []string) ([]place, error) {
	if len(paths) == 0 {
		return nil, errors.New("a file system snapshot is of a job's paths: the job has none")
	}
	places := make([]place, 0, len(paths))
	for _, p := range paths {
		pl, err := locate(p)
		if err != nil {
			return nil, err
		}
		for _, w := range writes {
			if within(w, pl.node.Path) {
				return nil, &safepath.Error{Path: p, Why: "holds " + w + ", which the backup's unit writes: a read-only snapshot over it would stop that (back up the directories beside it instead)"}
			}
		}
		places = append(places, pl)
	}
	mounts, err := mountPoints()
	if err != nil {
		return nil, err
	}
	for _, pl := range places {
		for _, m := range mounts {
			// A mount point on the way from the subvolume's root to the path (a bind mount of
			// some directory): the walk up to the root crossed it, and the snapshot of that
			// subvolume would hold an empty directory there.
			if m != pl.subvol && within(pl.node.Path, m) && within(m, pl.subvol) {
				return nil, &safepath.Error{Path: pl.path, Why: "is below the mount point " + m + ", inside the Btrfs subvolume " + pl.subvol + ": a snapshot of that subvolume would not hold what is mounted there (give a path on the mounted file system's own subvolume)"}
			}
			if m != pl.node.Path && within(m, pl.node.Path) && !slices.ContainsFunc(places, func(o place) bool { return o.node.Path == m }) {
				return nil, &safepath.Error{Path: pl.path, Why: "holds the mount point " + m + ", which a snapshot of it would hold as an empty directory: give " + m + " as a path of the job too (on Btrfs), or back up without --fs-snapshot"}
			}
		}
	}
	return places, checkNested(places)
}

// within reports whether path is dir or lies below it (both resolved).
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// locate finds the subvolume of path and holds both to the package's rule.
func locate(path string) (place, error) {
	// For root, whoever the job's user is: only root may be able to turn the path into a link
	// between this check and systemd's mount, which follows it.
	n, err := safepath.Resolve(path, 0)
	if err != nil {
		var se *safepath.Error
		if errors.As(err, &se) {
			return place{}, &safepath.Error{Path: path, Why: "must be reached through directories only root controls, as a snapshot is mounted over it: " + se.Path + " " + se.Why}
		}
		return place{}, err
	}
	if !n.IsDir() && !n.IsRegular() {
		return place{}, &safepath.Error{Path: path, Why: "is " + safepath.Kind(n.Mode) + ": a snapshot is read at a directory or a regular file"}
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(n.Path, &sfs); err != nil {
		return place{}, &os.PathError{Op: "statfs", Path: n.Path, Err: err}
	}
	if sfs.Type != unix.BTRFS_SUPER_MAGIC {
		return place{}, &safepath.Error{Path: path, Why: "is on " + fsName(sfs.Type) + ", not Btrfs: only a path on Btrfs can be read from a snapshot (back it up without --fs-snapshot, or move it to a Btrfs subvolume)"}
	}
	subvol, err := subvolumeRoot(n.Path)
	if err != nil {
		return place{}, err
	}
	if _, err := safepath.Writable(subvol, 0); err != nil {
		why := err.Error()
		var se *safepath.Error
		if errors.As(err, &se) {
			why = se.Path + " " + se.Why
		}
		return place{}, &safepath.Error{Path: path, Why: "is in the Btrfs subvolume " + subvol + ", where its snapshots would be made, which must be root's alone: " + why}
	}
	// Held to its rule again, without a race, as Take opens it (openSnapshotDir).
	dir := filepath.Join(subvol, DirName)
	var st unix.Stat_t
	switch err := unix.Lstat(dir, &st); {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return place{}, &os.PathError{Op: "lstat", Path: dir, Err: err}
	default:
		if err := snapshotDirRule(dir, &st); err != nil {
			return place{}, err
		}
	}
	rel, err := filepath.Rel(subvol, n.Path)
	if err != nil {
		return place{}, err
	}
	return place{path: path, node: n, subvol: subvol, rel: rel}, nil
}

// subvolumeRoot is the root directory of the Btrfs subvolume that holds path (resolved, on
// Btrfs): the nearest directory up from it whose inode is a subvolume root's. A walk that a
// change meanwhile misleads ends in a subvolume that safepath.Writable or the snapshot refuses.
func subvolumeRoot(path string) (string, error) {
	for p := path; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return "", &os.PathError{Op: "lstat", Path: p, Err: err}
		}
		var sfs unix.Statfs_t
		if err := unix.Statfs(p, &sfs); err != nil {
			return "", &os.PathError{Op: "statfs", Path: p, Err: err}
		}
		if sfs.Type != unix.BTRFS_SUPER_MAGIC {
			return "", &safepath.Error{Path: path, Why: "is on Btrfs, but no subvolume root was found above it"}
		}
		if st.Ino == firstFreeObjectID && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return p, nil
		}
		if p == "/" {
			return "", &safepath.Error{Path: path, Why: "is on Btrfs, but no subvolume root was found above it"}
		}
	}
}

// checkNested refuses a path that holds a subvolume other than its own (which its snapshot
// holds as an empty directory), unless that subvolume is a path of the job too.
func checkNested(places []place) error {
	opened := map[string]int{}
	defer func() {
		for _, fd := range opened {
			unix.Close(fd)
		}
	}()
	open := func(dir string) (int, error) {
		if fd, ok := opened[dir]; ok {
			return fd, nil
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: dir, Err: err}
		}
		opened[dir] = fd
		return fd, nil
	}
	own := map[uint64]bool{} // the subvolumes that are paths of the job
	for _, pl := range places {
		if pl.rel != "." {
			continue
		}
		fd, err := open(pl.subvol)
		if err != nil {
			return err
		}
		id, err := subvolID(fd)
		if err != nil {
			return fmt.Errorf("the Btrfs subvolume of %s: %w", pl.subvol, err)
		}
		own[id] = true
	}
	for _, pl := range places {
		fd, err := open(pl.subvol)
		if err != nil {
			return err
		}
		kids, err := children(fd)
		if err != nil {
			return fmt.Errorf("the Btrfs subvolumes in %s: %w", pl.subvol, err)
		}
		for _, k := range kids {
			if own[k.id] {
				continue
			}
			dir, err := dirPath(fd, k.dirid)
			if err != nil {
				return fmt.Errorf("the Btrfs subvolumes in %s: %w", pl.subvol, err)
			}
			if dir == DirName { // holdfast's own snapshots, which no backup reads
				continue
			}
			if pl.rel == "." || dir == pl.rel || strings.HasPrefix(dir, pl.rel+"/") {
				return &safepath.Error{Path: pl.path, Why: "holds a Btrfs subvolume of its own, " + subvolumeIn(filepath.Join(pl.subvol, dir)) + ", which a snapshot of it would hold as an empty directory: give that subvolume as a path of the job too, or back up without --fs-snapshot"}
			}
		}
	}
	return nil
}

// subvolumeIn names the subvolume in dir, for a message: the entry whose inode is a subvolume
// root's (never followed), or "one in dir" if that is not one entry.
func subvolumeIn(dir string) string {
	entries, _ := os.ReadDir(dir)
	var found []string
	for _, e := range entries {
		var st unix.Stat_t
		p := filepath.Join(dir, e.Name())
		if e.IsDir() && unix.Lstat(p, &st) == nil && st.Ino == firstFreeObjectID {
			found = append(found, p)
		}
	}
	if len(found) == 1 {
		return found[0]
	}
	return "one in " + dir
}

// mountPoints are the mount points of this process's mount namespace.
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, unescapeMount(fields[4]))
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// fsName names a file system by its statfs magic, for a message.
func fsName(magic int64) string {
	switch magic {
	case unix.EXT4_SUPER_MAGIC:
		return "ext2/3/4"
	case unix.XFS_SUPER_MAGIC:
		return "XFS"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	case unix.NFS_SUPER_MAGIC:
		return "NFS"
	case 0x2fc12fc1:
		return "ZFS"
	}
	return fmt.Sprintf("a file system of type %#x", magic)
}

// RecordedDirs are the snapshot directories, of every record in recordDir, that lie within one
// of paths: where the snapshots of attempts not yet released are, which no backup of those paths
// should read. Best effort: a record that cannot be read is left out.
func RecordedDirs(recordDir string, paths []string) []string {
	entries, _ := os.ReadDir(recordDir)
	var dirs []string
	for _, e := range entries {
		if _, _, ok := parseKey(e.Name()); !ok {
			continue
		}
		r, err := readRecord(filepath.Join(recordDir, e.Name()))
		if err != nil {
			continue
		}
		for _, d := range r.Dirs {
			if !slices.Contains(dirs, d) && slices.ContainsFunc(paths, func(p string) bool { return within(d, p) }) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// Check holds paths to what Take will need (job add and edit); writes are what the unit will
// write that is known then (a local repository).
func Check(paths, writes []string) error {
	_, err := locateAll(paths, writes)
	return err
}

// Taken is what Take made for one attempt: the bind mounts of its unit, and whether every
// snapshot was taken now (not kept from an earlier spawn of the attempt, whose unit may read it).
type Taken struct {
	Binds []systemd.Bind
	Fresh bool
}

// Take snapshots the subvolumes of paths under key, recorded in recordDir first, and returns
// the unit's bind mounts; writes are the paths the unit writes (resolved), which no path may
// hold. On an error nothing it took is left. A refusal is a *safepath.Error; other errors (no
// space) may pass.
func Take(recordDir, key string, paths, writes []string) (Taken, error) {
	if _, _, ok := parseKey(key); !ok {
		return Taken{}, fmt.Errorf("snapshot key %q: not an attempt's key", key)
	}
	places, err := locateAll(paths, writes)
	if err != nil {
		return Taken{}, err
	}
	var subvols []string
	for _, pl := range places {
		if !slices.Contains(subvols, pl.subvol) {
			subvols = append(subvols, pl.subvol)
		}
	}
	dirs := make([]string, len(subvols))
	for i, sv := range subvols {
		dirs[i] = filepath.Join(sv, DirName)
	}
	if err := writeRecord(recordDir, key, dirs); err != nil {
		return Taken{}, err
	}
	t := Taken{Fresh: true}
	for _, sv := range subvols {
		dir, fresh, err := takeOne(sv, key)
		t.Fresh = t.Fresh && fresh
		if err == nil {
			for _, pl := range places {
				if pl.subvol != sv {
					continue
				}
				src := filepath.Join(dir, key, pl.rel)
				if err = sameKind(src, pl); err != nil {
					if !fresh { // the snapshot an earlier start kept: taking it again would not help
						err = &safepath.Error{Path: pl.path, Why: "changed since an earlier start of this attempt snapshotted it: " + err.Error()}
					}
					break
				}
				t.Binds = append(t.Binds, systemd.Bind{Source: src, Dest: pl.node.Path})
			}
		}
		if err != nil {
			if !t.Fresh { // the earlier spawn's unit may read them: the sweep releases them
				return Taken{}, err
			}
			return Taken{}, errors.Join(err, Release(recordDir, key))
		}
	}
	return t, nil
}

// takeOne snapshots subvolume sv as key in its snapshots' directory, made if missing, and
// returns that directory; fresh is false when one was there already, which is kept: an earlier
// spawn of the same attempt took it, and a unit that spawn may have started could be reading it.
func takeOne(sv, key string) (dir string, fresh bool, err error) {
	fd, _, err := safepath.Open(sv, 0)
	if err != nil {
		return "", false, err
	}
	defer unix.Close(fd)
	root, err := safepath.Reopen(fd, sv)
	if err != nil {
		return "", false, err
	}
	defer root.Close()
	dir = filepath.Join(sv, DirName)
	if err := unix.Mkdirat(int(root.Fd()), DirName, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return "", false, &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	dfd, err := openSnapshotDir(int(root.Fd()), dir)
	if err != nil {
		return "", false, err
	}
	defer unix.Close(dfd)
	switch err := snapshot(int(root.Fd()), dfd, key); {
	case errors.Is(err, unix.EEXIST):
		return dir, false, nil
	case err != nil:
		return "", false, fmt.Errorf("snapshot Btrfs subvolume %s into %s: %w", sv, dir, err)
	}
	return dir, true, nil
}

// openSnapshotDir opens the snapshots' directory DirName in the directory parent is open on,
// without following a link, and holds it to being root's with mode 0700.
func openSnapshotDir(parent int, path string) (int, error) {
	fd, err := unix.Openat(parent, DirName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, &safepath.Error{Path: path, Why: "is not a directory: holdfast keeps its Btrfs snapshots there (remove it)"}
		}
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := snapshotDirRule(path, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// snapshotDirRule holds the snapshots' directory at path, as stat describes it, to being a
// directory of root's with mode 0700.
func snapshotDirRule(path string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return &safepath.Error{Path: path, Why: "is not a directory: holdfast keeps its Btrfs snapshots there (remove it)"}
	}
	if st.Uid != 0 || st.Mode&0o077 != 0 {
		return &safepath.Error{Path: path, Why: fmt.Sprintf("must be root's with mode 0700 (it is uid %d's, mode %04o): holdfast keeps its Btrfs snapshots there", st.Uid, st.Mode&0o7777)}
	}
	return nil
}

// sameKind walks src, a path's copy in a snapshot, without following a link (nothing can
// change a read-only snapshot, so the walk holds), and holds it to being what the path is.
func sameKind(src string, pl place) error {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: "/", Err: err}
	}
	for _, name := range strings.Split(strings.TrimPrefix(src, "/"), "/") {
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return &os.PathError{Op: "open", Path: src, Err: err}
		}
		fd = next
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: src, Err: err}
	}
	if st.Mode&unix.S_IFMT != pl.node.Mode&unix.S_IFMT {
		// Changed while the snapshot was taken: not a refusal, the next spawn takes another.
		return fmt.Errorf("%s is %s in the snapshot, but %s now: it changed while the snapshot was taken", pl.path, safepath.Kind(st.Mode), safepath.Kind(pl.node.Mode))
	}
	return nil
}

// record is what Take records of an attempt's snapshots before it takes them.
type record struct {
	Dirs []string `json:"dirs"` // the snapshots' directories, <subvolume>/.holdfast-snapshots
}

// readRecord reads the record at path.
func readRecord(path string) (record, error) {
	var r record
	b, err := os.ReadFile(path)
	if err == nil {
		if err = json.Unmarshal(b, &r); err != nil {
			err = fmt.Errorf("record %s: %w", path, err)
		}
	}
	return r, err
}

// writeRecord records dirs as where key's snapshots are, in recordDir (made root's, 0700).
func writeRecord(recordDir, key string, dirs []string) error {
	if err := credentials.PrivateDir(recordDir); err != nil {
		return fmt.Errorf("record Btrfs snapshots: %w", err)
	}
	// An earlier spawn of the attempt may have recorded other subvolumes (the job changed
	// since): they stay in the record until released.
	if r, err := readRecord(filepath.Join(recordDir, key)); err == nil {
		for _, d := range r.Dirs {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	b, err := json.Marshal(record{Dirs: dirs})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(recordDir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("record Btrfs snapshots: %w", err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(recordDir, key))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("record Btrfs snapshots: %w", err)
	}
	return nil
}

// Release removes the snapshots recorded under key in recordDir, then the record; none is no
// error. A snapshot that cannot be removed keeps the record, for the next try.
func Release(recordDir, key string) error {
	if _, _, ok := parseKey(key); !ok {
		return fmt.Errorf("release Btrfs snapshots %q: not a key", key)
	}
	path := filepath.Join(recordDir, key)
	r, err := readRecord(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release Btrfs snapshots: %w", err)
	}
	var errs []error
	for _, d := range r.Dirs {
		errs = append(errs, remove(d, key))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("release Btrfs snapshots: %w", err)
	}
	return nil
}

// remove removes the snapshot key from the snapshots' directory dir as root, in the host's
// mount namespace; one already gone is no error.
func remove(dir, key string) error {
	if filepath.Base(dir) != DirName {
		return fmt.Errorf("remove Btrfs snapshot %q in %s: not holdfast's", key, dir)
	}
	fd, _, err := safepath.Open(filepath.Dir(dir), 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove Btrfs snapshot %s: %w", key, err)
	}
	defer unix.Close(fd)
	dfd, err := openSnapshotDir(fd, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove Btrfs snapshot %s: %w", key, err)
	}
	defer unix.Close(dfd)
	if err := destroy(dfd, key); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove Btrfs snapshot %s: %w", filepath.Join(dir, key), err)
	}
	return nil
}
