package credentials

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

// Staged credentials. systemd reads a LoadCredential= path as root and follows links, so it is
// never given a path a job's user had a hand in: whoever starts the unit (root) reads each source
// itself (ReadSource) and writes the bytes below <state>/credentials, a directory only root may
// enter, and LoadCredential= names that copy. systemd copies it into the unit's own credentials
// directory when the unit starts; the copy is removed when the unit ends (the exit marker's
// ExecStopPost), or when the unit is never started.

// stagedRoot is the directory the staged credentials live under.
func stagedRoot(stateDir string) string { return filepath.Join(stateDir, "credentials") }

// StagedDir is the directory one unit's staged credentials live in.
func StagedDir(stateDir, key string) string { return filepath.Join(stagedRoot(stateDir), key) }

// AttemptKey names the staging directory of a run's attempt, as its exit marker is named.
func AttemptKey(run uuid.UUID, attempt int) string {
	return run.String() + ".a" + strconv.Itoa(attempt)
}

// Staged is a credential's staged copy.
type Staged struct {
	Path string
	// Encrypted says the copy is a credential systemd encrypted (Encrypted), for
	// LoadCredentialEncrypted=: it is staged as it is, and decrypted by the system manager alone,
	// as the unit starts.
	Encrypted bool
}

// Stage reads each source (ReadSource, for a unit of user uid) and writes it below
// StagedDir(stateDir, key) under its name, replacing what an earlier try of the same key left.
// It returns the staged copies by name. On an error nothing of the key stays staged.
func Stage(stateDir, key string, sources map[string]string, uid int) (map[string]Staged, error) {
	data := make(map[string][]byte, len(sources))
	for name, path := range sources {
		b, err := ReadSource(path, uid)
		if err != nil {
			_ = RemoveStaged(stateDir, key)
			return nil, err
		}
		data[name] = b
	}
	if err := PrivateDir(stagedRoot(stateDir)); err != nil {
		return nil, fmt.Errorf("stage credentials: %w", err)
	}
	dir := StagedDir(stateDir, key)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("stage credentials: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("stage credentials: %w", err)
	}
	staged := make(map[string]Staged, len(data))
	for name, b := range data {
		path := filepath.Join(dir, name)
		if err := writeNew(path, b); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("stage credential %s: %w", name, err)
		}
		staged[name] = Staged{Path: path, Encrypted: Encrypted(b)}
	}
	return staged, nil
}

// PrivateDir makes dir, if missing, a directory of this process's user with mode 0700, and holds
// it to being one: what root keeps there (staged credentials, records of snapshots) is its alone.
func PrivateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 {
		return fmt.Errorf("%s must be a directory of this process's user with mode 0700 (mode %04o, uid %d)", dir, st.Mode&0o7777, st.Uid)
	}
	return nil
}

// RemoveStaged removes a unit's staged credentials; none is no error.
func RemoveStaged(stateDir, key string) error {
	if key == "" || filepath.Base(key) != key {
		return fmt.Errorf("remove staged credentials: %q is not a key", key)
	}
	return os.RemoveAll(StagedDir(stateDir, key))
}

func writeNew(path string, b []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
