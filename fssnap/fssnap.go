// Package fssnap takes the read-only Btrfs snapshots that a backup of a job with
// --fs-snapshot btrfs reads instead of its live paths, and removes them.
//
// Before an attempt's unit starts, Take snapshots each Btrfs subvolume that holds one of the
// job's paths into <subvolume>/.holdfast-snapshots/<run>.a<attempt> (root's, mode 0700) and
// returns the bind mounts that put each path's copy in the snapshot read-only over the path in
// the unit's own mount namespace: restic records the original paths, and a restore needs nothing
// special. The daemon's Sweeper removes the snapshots of attempts that are no longer live on the
// host, however they ended; the exit marker cannot, as systemd applies a unit's bind mounts to
// its privileged commands too, where they hide a subvolume's snapshots below its own root. The
// snapshots of several subvolumes are taken one after the other: each is of one instant.
//
// systemd follows links when it sets up the bind mounts, so neither side may be one that a user
// other than root could redirect: the subvolume, where the snapshots are made, must be root's
// alone (safepath.Writable for root), each path is resolved for the job's user (safepath), and
// its copy in the snapshot, which nothing can change, is walked without following a link.
package fssnap

import (
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

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/systemd"
)

// Btrfs is the one file system snapshot a job can ask for (model.BackupSettings.FSSnapshot).
const Btrfs = "btrfs"

// DirName is the directory, in a subvolume's root, that holds holdfast's snapshots of it.
const DirName = ".holdfast-snapshots"

// Key names the snapshots of one attempt, in each subvolume it snapshots.
func Key(run uuid.UUID, attempt int) string { return run.String() + ".a" + strconv.Itoa(attempt) }

// parseKey is Key's inverse; ok is false for a name Key does not make.
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

// Excludes are restic --exclude patterns for the snapshots' directory where a path is a
// subvolume's root: in the snapshot it is an empty directory of root's, which a user's backup
// could not read.
func Excludes(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = engine.GlobEscape(filepath.Join(p, DirName))
	}
	return out
}

// place is where one path of a job is: resolved, in which subvolume, and where below its root.
type place struct {
	path   string // the job's path as given
	node   safepath.Node
	subvol string
	rel    string // the path below subvol, "." for its root
}

// locate finds the subvolume of path, for a unit of user uid, and holds both to the package's
// rule; a refusal is a *safepath.Error.
func locate(path string, uid int) (place, error) {
	n, err := safepath.Resolve(path, uid)
	if err != nil {
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
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return place{}, &safepath.Error{Path: dir, Why: "is not a directory: holdfast keeps its Btrfs snapshots there (remove it)"}
	case st.Uid != 0 || st.Mode&0o077 != 0:
		return place{}, &safepath.Error{Path: dir, Why: fmt.Sprintf("must be root's with mode 0700 (it is uid %d's, mode %04o): holdfast keeps its Btrfs snapshots there", st.Uid, st.Mode&0o7777)}
	}
	rel, err := filepath.Rel(subvol, n.Path)
	if err != nil {
		return place{}, err
	}
	return place{path: path, node: n, subvol: subvol, rel: rel}, nil
}

// subvolumeRoot is the root directory of the Btrfs subvolume that holds path (resolved, on
// Btrfs): the nearest directory up from it whose inode is a subvolume root's.
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

// Check holds paths to what Take will need when a unit of user uid starts (job add and edit):
// each on Btrfs, in a subvolume only root controls, and reached only through directories root
// and the user control.
func Check(paths []string, uid int) error {
	if len(paths) == 0 {
		return errors.New("a file system snapshot is of a job's paths: the job has none")
	}
	for _, p := range paths {
		if _, err := locate(p, uid); err != nil {
			return err
		}
	}
	return nil
}

// Taken is what Take made for one attempt: the snapshots' directories (one per subvolume, for
// Remove) and the bind mounts of the unit.
type Taken struct {
	Dirs  []string
	Binds []systemd.Bind
}

// Take snapshots the subvolumes of paths for a unit of user uid under key, and returns the
// unit's bind mounts. On an error nothing it took is left. A refusal is a *safepath.Error.
func Take(key string, paths []string, uid int) (Taken, error) {
	if len(paths) == 0 {
		return Taken{}, errors.New("a file system snapshot is of a job's paths: the job has none")
	}
	places := make([]place, 0, len(paths))
	var subvols []string
	for _, p := range paths {
		pl, err := locate(p, uid)
		if err != nil {
			return Taken{}, err
		}
		places = append(places, pl)
		if !slices.Contains(subvols, pl.subvol) {
			subvols = append(subvols, pl.subvol)
		}
	}
	var t Taken
	fail := func(err error) (Taken, error) {
		for _, d := range t.Dirs {
			err = errors.Join(err, Remove(d, key))
		}
		return Taken{}, err
	}
	for _, sv := range subvols {
		dir, err := takeOne(sv, key)
		if dir != "" {
			t.Dirs = append(t.Dirs, dir)
		}
		if err != nil {
			return fail(err)
		}
		for _, pl := range places {
			if pl.subvol != sv {
				continue
			}
			src := filepath.Join(dir, key, pl.rel)
			if err := sameKind(src, pl); err != nil {
				return fail(err)
			}
			t.Binds = append(t.Binds, systemd.Bind{Source: src, Dest: pl.node.Path})
		}
	}
	return t, nil
}

// takeOne snapshots subvolume sv as key in its snapshots' directory, made if missing, and
// returns that directory.
func takeOne(sv, key string) (string, error) {
	fd, _, err := safepath.Open(sv, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	root, err := safepath.Reopen(fd, sv)
	if err != nil {
		return "", err
	}
	defer root.Close()
	dir := filepath.Join(sv, DirName)
	if err := unix.Mkdirat(int(root.Fd()), DirName, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return "", &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	dfd, err := openSnapshotDir(int(root.Fd()), dir)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	err = snapshot(int(root.Fd()), dfd, key)
	if errors.Is(err, unix.EEXIST) {
		// An earlier spawn of the same attempt, given back before its unit started.
		if err = destroy(dfd, key); err == nil {
			err = snapshot(int(root.Fd()), dfd, key)
		}
	}
	if err != nil {
		return "", fmt.Errorf("snapshot Btrfs subvolume %s into %s: %w", sv, dir, err)
	}
	return dir, nil
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
	if st.Uid != 0 || st.Mode&0o077 != 0 {
		unix.Close(fd)
		return -1, &safepath.Error{Path: path, Why: fmt.Sprintf("must be root's with mode 0700 (it is uid %d's, mode %04o): holdfast keeps its Btrfs snapshots there", st.Uid, st.Mode&0o7777)}
	}
	return fd, nil
}

// sameKind walks src, a path's copy in a snapshot, without following a link (nothing can
// change a read-only snapshot, so the walk holds), and holds it to being what the path is.
func sameKind(src string, pl place) error {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
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
		return &safepath.Error{Path: pl.path, Why: "is " + safepath.Kind(st.Mode) + " in the snapshot, but " + safepath.Kind(pl.node.Mode) + " now: it changed while the snapshot was taken; ask for the run again"}
	}
	return nil
}

// Remove removes the snapshot key from the snapshots' directory dir (Taken.Dirs) as root in the
// host's mount namespace; one already gone is no error.
func Remove(dir, key string) error {
	if _, _, ok := parseKey(key); !ok || filepath.Base(dir) != DirName {
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
