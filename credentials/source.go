package credentials

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/setting"
)

// MaxSource bounds a credential source (a password file, an environment file): a few
// variables or a key, never data.
const MaxSource = MaxEnvFile

// CheckSource checks, without reading it, a credential source that root will read for a unit of
// user uid (0 for root): the rule ReadSource applies. name names it in a refusal: words, or a
// placeholder of package setting.
func CheckSource(name, path string, uid int) error {
	n, err := safepath.Resolve(path, uid)
	if err == nil {
		err = sourceRule(path, n, uid)
	}
	if err != nil {
		return fmt.Errorf("%s %w", setting.Render(name), err)
	}
	return nil
}

// ReadSource reads a credential source for a unit of user uid (0 for root), as root reads a path
// a job's user may have had a hand in. The way to it is resolved by safepath (no link but root's
// or the user's followed, no directory anyone else may change), and the file must be a regular
// file of at most MaxSource bytes that is either the user's own (a secret of the user's, served to
// the user's unit) or root's, closed to its group and others, and reached by a way only root
// controls (else it may be a hard link the user made to a secret of root's). A credential systemd
// encrypted (Encrypted) must be root's. The bytes are read from the very inode checked. An error
// names the path and the problem, never the content.
func ReadSource(path string, uid int) ([]byte, error) {
	fd, n, err := safepath.Open(path, uid)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := sourceRule(path, n, uid); err != nil {
		return nil, err
	}
	f, err := safepath.Reopen(fd, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readAtMost(f, path, MaxSource)
	if errors.Is(err, ErrTooLarge) { // it grew since it was checked
		return nil, &safepath.Error{Path: path, Why: fmt.Sprintf("is larger than %d KiB: a credential source holds a key or variables, not data", MaxSource>>10)}
	}
	if err == nil && n.UID != 0 && Encrypted(b) {
		// The system manager would decrypt it for the user's unit whoever's secret it is: a
		// copy of one of root's, which systemd-creds leaves readable to all, would be read out.
		return nil, &safepath.Error{Path: path, Why: "is the job's user's own, yet a credential systemd encrypted: only root's may be one (chown root, chmod 0600, in a directory only root writes), since systemd decrypts it for the unit whoever's secret it is"}
	}
	return b, err
}

// sourceRule is what a credential source itself must be, once the way to it was resolved.
func sourceRule(path string, n safepath.Node, uid int) error {
	refuse := func(format string, a ...any) error {
		return &safepath.Error{Path: path, Why: fmt.Sprintf(format, a...)}
	}
	switch {
	case !n.IsRegular():
		return refuse("is not a regular file: a credential source is a file")
	case n.Size > MaxSource:
		return refuse("is larger than %d KiB: a credential source holds a key or variables, not data", MaxSource>>10)
	case uid != 0 && int(n.UID) == uid:
		return nil // the user's own secret, for the user's own unit
	case n.UID != 0:
		return refuse("is owned by uid %d: a credential source must be root's or the job's user's (chown root %s)", n.UID, path)
	case n.Mode&0o077 != 0:
		return refuse("has mode %04o: a credential source of root's must be closed to its group and others (chmod 0600 %s)", n.Mode&0o7777, path)
	case n.UserControlled:
		return refuse("is root's but reached through a directory or link the job's user controls: it may be a link the user made to a secret of root's; keep root's secrets in a directory only root writes")
	}
	return nil
}
