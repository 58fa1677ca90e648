// Package safepath resolves the paths that root hands to a job's unit (made writable in its
// sandbox, read as its credentials) so that what a path names is decided by root and the job's
// user alone, never by a third user who can write one of its directories or plant a link in it.
//
// Resolve walks a path from / one component at a time, opening each with O_PATH|O_NOFOLLOW, so
// that the kernel never follows a link on its own. Every directory on the way must be one that
// only root or the job's user can change: owned by one of them and writable by no one else, or
// sticky (as /tmp), whose entries only their owners can replace, and then the entry taken must be
// root's or the user's. A symbolic link is followed only when it is root's or the user's and lies
// in such a directory, and the result names no link at all (Node.Path), so systemd, which follows
// links when it sets up a sandbox, is given nothing to follow. What the last component must be
// (a directory closed to others, a root-only file) is the caller's rule: Writable and the
// credentials package's sources state theirs.
//
// The check is free of races where it matters: a chain that only root and the job's user
// control cannot change under the daemon unless one of them changes it, and a unit of the job's
// user gains nothing from a path only it could have redirected.
package safepath

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the links one resolution follows, as the kernel's own 40.
const maxLinks = 40

// Node is what a path resolved to.
type Node struct {
	Path  string // the path with every link resolved and no "." or ".."
	Dev   uint64
	Ino   uint64
	UID   uint32
	Mode  uint32 // st_mode: type and permission bits
	Nlink uint64
	Size  int64
	// UserControlled is set when the job's user (not root) could have decided what the path
	// names: a directory on the way or a link followed is the user's, or the last directory is
	// sticky and others may add entries to it. A root-owned file reached that way may be a hard
	// link the user made to a file of root's.
	UserControlled bool
}

// IsDir reports whether the node is a directory.
func (n Node) IsDir() bool { return n.Mode&unix.S_IFMT == unix.S_IFDIR }

// IsRegular reports whether the node is a regular file.
func (n Node) IsRegular() bool { return n.Mode&unix.S_IFMT == unix.S_IFREG }

// Error is a path refused by the rule: Path names the component that broke it (a directory on
// the way, a link, the path itself), Why says how.
type Error struct {
	Path string
	Why  string
}

func (e *Error) Error() string { return e.Path + " " + e.Why }

// Refused reports whether err is a path the rule refused (not an I/O failure).
func Refused(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Resolve resolves path for a unit of user uid (0 for root), as the package comment says, and
// returns what it names. The last component may be anything; it is not opened for reading.
func Resolve(path string, uid int) (Node, error) {
	fd, n, err := open(path, uid)
	if err != nil {
		return Node{}, err
	}
	unix.Close(fd)
	return n, nil
}

// Open is Resolve that also returns the last component opened with O_PATH (never for reading,
// so a FIFO or a device there is not touched); the caller closes it. Reopen turns it into a file
// to read once its kind was checked.
func Open(path string, uid int) (fd int, n Node, err error) { return open(path, uid) }

// Reopen opens for reading the very inode an O_PATH fd names, without blocking or acquiring a
// terminal.
func Reopen(fd int, name string) (*os.File, error) {
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(rfd), name), nil
}

// Writable resolves a path a unit of uid is to write (a restore's target, a local repository, a
// job's path where hooks write, the unit's own directories): besides the way to it, the path
// itself must be a directory or a regular file, root's or the user's. For root (uid 0) no one
// else may write it either: a root unit writes there with root's rights (a restore's with
// CAP_DAC_OVERRIDE), so a link another user planted inside would redirect root's writes, into
// the unit's other writable paths (the repository's config, say). A unit of a user has that
// user's rights only, so a directory the user shares with a group (a group's restic
// repository) is the user's to share. It returns the resolved path to hand to systemd.
func Writable(path string, uid int) (Node, error) {
	n, err := Resolve(path, uid)
	if err != nil {
		return Node{}, err
	}
	if !n.IsDir() && !n.IsRegular() {
		return Node{}, &Error{path, "is " + Kind(n.Mode) + ": only a directory or a regular file is made writable"}
	}
	if why := owner(n.UID, uid); why != "" {
		return Node{}, &Error{path, why}
	}
	if uid == 0 && n.Mode&0o022 != 0 {
		return Node{}, &Error{path, fmt.Sprintf("has mode %04o: its group and others must not be able to write it (chmod go-w %s)", n.Mode&0o7777, path)}
	}
	return n, nil
}

// Parent resolves the directory a path is to be made in (a restore's target that does not exist
// yet) and holds it to the rule of a directory on the way: root's or the user's, and writable by
// no one else unless sticky.
func Parent(path string, uid int) (Node, error) {
	parent := filepath.Dir(path)
	n, err := Resolve(parent, uid)
	if err != nil {
		return Node{}, err
	}
	if !n.IsDir() {
		return Node{}, &Error{parent, "is " + Kind(n.Mode) + ", not a directory"}
	}
	st := unix.Stat_t{Uid: n.UID, Mode: n.Mode}
	if _, err := onTheWay(parent, &st, uid); err != nil {
		return Node{}, err
	}
	return n, nil
}

type dir struct {
	fd     int
	name   string // the resolved path, for messages
	sticky bool   // writable by others, but sticky: its entries must be root's or the user's
	user   bool   // the user's, not root's
}

func open(path string, uid int) (int, Node, error) {
	if !filepath.IsAbs(path) {
		return -1, Node{}, &Error{path, "is a relative path: give an absolute path"}
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, Node{}, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		unix.Close(root)
		return -1, Node{}, &os.PathError{Op: "stat", Path: "/", Err: err}
	}
	top, err := onTheWay("/", &st, uid)
	if err != nil {
		unix.Close(root)
		return -1, Node{}, err
	}
	top.fd = root
	stack := []dir{top}
	userWay := top.user
	closeAll := func() {
		for _, d := range stack {
			unix.Close(d.fd)
		}
	}
	todo := components(path)
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case ".":
			continue
		case "..":
			if len(stack) > 1 {
				unix.Close(stack[len(stack)-1].fd)
				stack = stack[:len(stack)-1]
			}
			continue
		}
		parent := stack[len(stack)-1]
		here := filepath.Join(parent.name, name)
		fd, err := unix.Openat(parent.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll()
			return -1, Node{}, &os.PathError{Op: "open", Path: here, Err: err}
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			closeAll()
			return -1, Node{}, &os.PathError{Op: "stat", Path: here, Err: err}
		}
		if parent.sticky {
			if why := owner(st.Uid, uid); why != "" {
				unix.Close(fd)
				closeAll()
				return -1, Node{}, &Error{here, why + ", in " + parent.name + ", which others may write"}
			}
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			target, err := readlink(fd)
			unix.Close(fd)
			if err != nil {
				closeAll()
				return -1, Node{}, &os.PathError{Op: "readlink", Path: here, Err: err}
			}
			if why := owner(st.Uid, uid); why != "" {
				closeAll()
				return -1, Node{}, &Error{here, "is a symbolic link " + strings.TrimPrefix(why, "is ")}
			}
			userWay = userWay || st.Uid != 0
			if links++; links > maxLinks {
				closeAll()
				return -1, Node{}, &Error{path, fmt.Sprintf("goes through more than %d symbolic links", maxLinks)}
			}
			if filepath.IsAbs(target) {
				for _, d := range stack[1:] {
					unix.Close(d.fd)
				}
				stack = stack[:1]
			}
			todo = append(components(target), todo...)
		case len(todo) == 0 || allDots(todo):
			// The last component: what it must be is the caller's rule. What follows it may
			// only be "." and "..", which a clean path has none of.
			if allDots(todo) && len(todo) > 0 {
				unix.Close(fd)
				closeAll()
				return -1, Node{}, &Error{path, "ends in . or ..: give a clean path"}
			}
			closeAll()
			return fd, Node{Path: here, Dev: st.Dev, Ino: st.Ino, UID: st.Uid, Mode: st.Mode, Nlink: uint64(st.Nlink), Size: st.Size,
				UserControlled: userWay || parent.sticky}, nil
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			unix.Close(fd)
			closeAll()
			return -1, Node{}, &Error{here, "is " + Kind(st.Mode) + ", not a directory"}
		default:
			d, err := onTheWay(here, &st, uid)
			if err != nil {
				unix.Close(fd)
				closeAll()
				return -1, Node{}, err
			}
			d.fd = fd
			stack = append(stack, d)
			userWay = userWay || d.user
		}
	}
	// The path named / itself.
	fd, err := unix.Dup(stack[0].fd)
	if err != nil {
		closeAll()
		return -1, Node{}, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		closeAll()
		return -1, Node{}, err
	}
	closeAll()
	return fd, Node{Path: "/", Dev: st.Dev, Ino: st.Ino, UID: st.Uid, Mode: st.Mode, Nlink: uint64(st.Nlink), Size: st.Size}, nil
}

// onTheWay checks a directory the walk passes through: root's or the user's, and writable by
// no one else unless sticky.
func onTheWay(name string, st *unix.Stat_t, uid int) (dir, error) {
	if why := owner(st.Uid, uid); why != "" {
		return dir{}, &Error{name, why + ": whoever owns a directory on the way can replace what is below it"}
	}
	writable := st.Mode&0o022 != 0
	sticky := st.Mode&unix.S_ISVTX != 0
	if writable && !sticky {
		return dir{}, &Error{name, fmt.Sprintf("has mode %04o: a directory on the way must not be writable by its group or others (chmod go-w %s)", st.Mode&0o7777, name)}
	}
	return dir{name: name, sticky: writable, user: st.Uid != 0}, nil
}

// owner says why a file of owner does not belong to root or the unit's user uid, or "".
func owner(owner uint32, uid int) string {
	if owner == 0 || int(owner) == uid {
		return ""
	}
	who := "root"
	if uid != 0 {
		who = "root or " + userName(uint32(uid))
	}
	return fmt.Sprintf("is owned by %s, not %s", userName(owner), who)
}

// userName is "uid N (name)", or "uid N" for a uid without a name.
func userName(uid uint32) string {
	s := "uid " + strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		s += " (" + u.Username + ")"
	}
	return s
}

// Kind says what a file of mode is, for a message: "a directory", "a symbolic link".
func Kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return "of an unknown kind"
}

// readlink reads the target of the link an O_PATH|O_NOFOLLOW fd names.
func readlink(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if n == len(buf) {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

func components(path string) []string {
	var out []string
	for _, c := range strings.Split(path, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

func allDots(cs []string) bool {
	for _, c := range cs {
		if c != "." && c != ".." {
			return false
		}
	}
	return true
}

// Cause is an error's cause without the path it names, the system's short word for it ("no such
// file or directory"): the caller's message names the path.
func Cause(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}
