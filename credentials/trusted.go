package credentials

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReadTrusted reads a file whose content root acts on but that need not be secret (a
// configuration holdfast apply carries out): it must be root's word, so no one but root and this
// process's user can have written it or put it in its place. Every directory on its way, links in
// the path resolved as the kernel resolves them, is root's or this user's and writable by no one
// else unless it is sticky (as /tmp is); the file is opened as ReadBounded opens it, a link as its
// last component refused, and must be a regular file of root's or this user's that its group and
// others cannot write, of at most max bytes (else ErrTooLarge). An error names the path, what is
// wrong and the fix (chmod, chown), never the content.
func ReadTrusted(path string, max int64) ([]byte, error) {
	if err := checkDirs(path); err != nil {
		return nil, err
	}
	return ReadBounded(path, true, max, func(path string, st *unix.Stat_t) error {
		switch {
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			return fmt.Errorf("%s is not a regular file: give a file", path)
		case !trustedOwner(st.Uid):
			return fmt.Errorf("%s is owned by uid %d, who could change it: chown %s %s, or give a copy of your own", path, st.Uid, chownTo(), path)
		case st.Mode&0o022 != 0:
			return fmt.Errorf("%s has mode %04o: its group or others could change it (chmod go-w %s)", path, st.Mode&0o7777, path)
		case st.Size > max:
			return fmt.Errorf("%s: %w", path, ErrTooLarge)
		}
		return nil
	})
}

// checkDirs checks every directory the kernel passes through to reach file's directory, from /
// down, following links as the kernel does (so a link's own directory is on the way, and so is
// every directory it leads through): whoever may write one of them could put another file in
// file's place.
func checkDirs(file string) error {
	// Not filepath.Abs: it cleans "link/.." away, which the kernel resolves in link's target.
	path := file
	if !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		path = wd + "/" + path
	}
	todo := strings.Split(path, "/")
	todo = todo[:len(todo)-1] // the file's own name: opened without following a link
	dir := "/"
	if err := checkDir(file, dir); err != nil {
		return err
	}
	for links := 0; len(todo) > 0; {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			dir = filepath.Dir(dir) // dir holds no link: its parent was checked on the way down
			continue
		}
		next := filepath.Join(dir, name)
		if target, err := os.Readlink(next); err == nil {
			if links++; links > 40 { // the kernel's own bound (ELOOP)
				return fmt.Errorf("%s: too many symbolic links on its way: give the file's own path", file)
			}
			if filepath.IsAbs(target) {
				dir = "/"
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		if err := checkDir(file, next); err != nil {
			return err
		}
		dir = next
	}
	return nil
}

// checkDir checks one directory on the way to file: root's or this user's, and writable by no
// one else unless sticky.
func checkDir(file, dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%s: %s: %w", file, dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", file, dir)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; !trustedOwner(uid) {
		return fmt.Errorf("%s is in %s, whose owner (uid %d) could replace it: chown %s %s, or move the file", file, dir, uid, chownTo(), dir)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("%s is in %s, of mode %04o: its group or others could replace the file (chmod go-w %s, or move the file)",
			file, dir, fi.Mode().Perm(), dir)
	}
	return nil
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
