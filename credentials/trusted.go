package credentials

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/safepath"
)

// ReadTrusted reads a file whose content root acts on but that need not be secret (a
// configuration holdfast apply carries out): it must be root's word, so no one but root and this
// process's user can have written it or put it in its place. The way to it is resolved by
// safepath for this process's user (every directory on the way root's or this user's and
// writable by no one else unless sticky, as /tmp is; a link followed only if it is theirs); a
// link as its last component is refused (give the file itself); the file, read from the very
// inode checked, without blocking, must be a regular file of root's or this user's that its group
// and others cannot write, of at most max bytes (else ErrTooLarge). An error names the path, what
// is wrong and the fix (chmod, chown), never the content.
func ReadTrusted(path string, max int64) ([]byte, error) {
	f, err := OpenTrusted(path, max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAtMost(f, path, max)
}

// OpenTrusted opens the file ReadTrusted reads, checked as it checks it, for a caller that
// hands it on (holdfast recover gives a database dump to pg_restore as its standard input).
func OpenTrusted(path string, max int64) (*os.File, error) {
	// Not filepath.Abs: it cleans "link/.." away, which the kernel resolves in link's target.
	abs := path
	if !filepath.IsAbs(abs) {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		abs = wd + "/" + path
	}
	var lst unix.Stat_t
	if err := unix.Lstat(abs, &lst); err == nil && lst.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil, fmt.Errorf("%s is a symbolic link: give the file itself", path)
	}
	fd, n, err := safepath.Open(abs, os.Geteuid())
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %s: %w", path, pe.Path, pe.Err)
		}
		return nil, fmt.Errorf("%s: %w (or move the file)", path, err)
	}
	defer unix.Close(fd)
	switch {
	case !n.IsRegular():
		return nil, fmt.Errorf("%s is not a regular file: give a file", path)
	case !trustedOwner(n.UID):
		return nil, fmt.Errorf("%s is owned by uid %d, who could change it: chown %s %s, or give a copy of your own", path, n.UID, chownTo(), path)
	case n.Mode&0o022 != 0:
		return nil, fmt.Errorf("%s has mode %04o: its group or others could change it (chmod go-w %s)", path, n.Mode&0o7777, path)
	case n.Size > max:
		return nil, fmt.Errorf("%s: %w", path, ErrTooLarge)
	}
	return safepath.Reopen(fd, path)
}

// trustedOwner: root, or this process's user.
func trustedOwner(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

// chownTo is whom a fix gives a file to: root, or this process's user.
func chownTo() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	return strconv.Itoa(os.Geteuid())
}
