package setup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/holdfast-backup/holdfast/credentials"
)

// ReadEnv reads the assignments of the environment file at path (credentials.ParseEnv's syntax,
// which holdfast's own file keeps to).
func ReadEnv(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	vars, err := credentials.ParseEnv(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	env := make(map[string]string, len(vars))
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env, nil
}

// SetEnv sets key to value in the environment file at path, keeping every other line: it
// replaces the key's assignment, or else follows the commented example of it ("# KEY="), or
// else ends the file. The file is replaced whole (a rename), root's, mode 0600, since it holds
// the database's password. value must need no quoting.
func SetEnv(path, key, value string) error {
	if strings.ContainsAny(value, "\n\r\"'\\ \t#;") {
		return fmt.Errorf("value for %s holds a character an environment file would need quoted", key)
	}
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	assignment := key + "=" + value
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(data) == 0 {
		lines = nil
	}
	at, example := -1, -1
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if assigns(t, key) {
			at = i
		}
		if example < 0 && strings.HasPrefix(t, "#") && strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(t, "#")), key+"=") {
			example = i
		}
	}
	switch {
	case at >= 0:
		lines[at] = assignment
	case example >= 0:
		lines = append(lines[:example+1], append([]string{assignment}, lines[example+1:]...)...)
	default:
		lines = append(lines, assignment)
	}
	return replace(path, []byte(strings.Join(lines, "\n")+"\n"))
}

// assigns reports whether the trimmed line assigns key, as credentials.ParseEnv reads it
// ("export KEY=..." too).
func assigns(line, key string) bool {
	k, _, ok := strings.Cut(line, "=")
	return ok && strings.TrimSpace(strings.TrimPrefix(k, "export ")) == key
}

// unsetEnv removes key's assignments from the environment file at path, keeping every other
// line, as SetEnv replaces it; a file without one is left alone.
func unsetEnv(path, key string) (removed bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var kept []string
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if assigns(strings.TrimSpace(l), key) {
			removed = true
			continue
		}
		kept = append(kept, l)
	}
	if !removed {
		return false, nil
	}
	return true, replace(path, []byte(strings.Join(kept, "\n")+"\n"))
}

// replace writes data into path whole, mode 0600: written and synced aside, then renamed into
// place, and the directory synced, so that the file is the old one or the new one.
func replace(path string, data []byte) error {
	return writeAside(path, data, false, os.Rename)
}

// writeNew creates path with data, root's (when run as root), mode 0600, unless it exists
// (os.ErrExist): written and synced aside, then linked into place, so that the name appears
// complete or not at all and never replaces a file that came meanwhile; then the directory is
// synced.
func writeNew(path string, data []byte) error {
	return writeAside(path, data, true, os.Link)
}

// writeAside writes data into a new file beside path, mode 0600 (and root's, with rootOwned,
// when run as root), synced, then has place put it at path (a rename, or a link that never
// replaces) and syncs the directory, whose entry makes that durable.
func writeAside(path string, data []byte, rootOwned bool, place func(tmp, path string) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".holdfast-new-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o600)
	if err == nil && rootOwned && os.Geteuid() == 0 {
		err = tmp.Chown(0, 0)
	}
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := place(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir flushes the directory dir's entries to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
