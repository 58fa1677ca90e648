package credentials

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// MaxSecretFile bounds a secret file that root reads itself (a webhook's HMAC key, the web auth
// file): a key or a few tokens, never data.
const MaxSecretFile = 4 << 10

// ReadSecret reads a secret file the way root must read a path it was given: the last component
// is not followed if it is a link, the open does not block (a FIFO or a device there cannot hold
// the reader) and acquires no terminal, and the file must be a regular file owned by root (or by
// this process's user) that its group and others can neither read nor write, of at most
// MaxSecretFile bytes. An error names the path and the problem, never the content.
func ReadSecret(path string) ([]byte, error) {
	b, err := ReadBounded(path, true, MaxSecretFile, checkSecret)
	if errors.Is(err, ErrTooLarge) {
		return nil, fmt.Errorf("%s is larger than %d KiB: it holds a key or tokens, not data", path, MaxSecretFile>>10)
	}
	return b, err
}

// ErrTooLarge is ReadBounded's error for a file longer than its bound.
var ErrTooLarge = errors.New("larger than its bound")

// ReadBounded reads a file root was given: the open does not block (a FIFO or a device there
// cannot hold the reader) and acquires no terminal, and with noFollow a link as the last
// component is refused; check judges the opened file's stat before a byte is read; more than max
// bytes is ErrTooLarge. An error names the path and the problem, never the content.
func ReadBounded(path string, noFollow bool, max int64, check func(path string, st *unix.Stat_t) error) ([]byte, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	if noFollow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(path, flags, 0)
	if noFollow && errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: give the file itself", path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := check(path, &st); err != nil {
		return nil, err
	}
	return readAtMost(f, path, max)
}

// readAtMost reads f to its end, at most max bytes: more is ErrTooLarge.
func readAtMost(f *os.File, path string, max int64) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(buf.Len()) > max {
		return nil, fmt.Errorf("%s: %w", path, ErrTooLarge)
	}
	return buf.Bytes(), nil
}

// CheckSecret checks a secret file as ReadSecret would, without reading it: for a command that
// records the path for a daemon to read later (notify add --secret-file).
func CheckSecret(path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fmt.Errorf("%s is a symbolic link: give the file itself", path)
	}
	return checkSecret(path, &st)
}

func checkSecret(path string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d: a secret file must be root's (chown root %s)", path, st.Uid, path)
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o: its group and others must have no access (chmod 0600 %s)", path, perm, path)
	}
	if st.Size > MaxSecretFile {
		return fmt.Errorf("%s is larger than %d KiB: it holds a key or tokens, not data", path, MaxSecretFile>>10)
	}
	return nil
}
