package setup

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// envKey is what systemd accepts as a variable name in an EnvironmentFile=.
var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseEnv reads the assignments of an environment file as systemd's EnvironmentFile= does for
// the simple forms holdfast writes: KEY=VALUE lines, # and ; comments, blank lines, a value in
// single or double quotes. A line systemd would ignore (no "=", a bad name) is ignored here too,
// so the CLI sees the settings the daemon runs with.
func ParseEnv(data []byte) map[string]string {
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || !envKey.MatchString(key) {
			continue
		}
		value = strings.TrimSpace(value)
		if n := len(value); n >= 2 && (value[0] == '"' || value[0] == '\'') && value[n-1] == value[0] {
			value = value[1 : n-1]
		}
		env[key] = value
	}
	return env
}

// ReadEnv reads the environment file at path (see ParseEnv).
func ReadEnv(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseEnv(data), nil
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
		if k, _, ok := strings.Cut(t, "="); ok && strings.TrimSpace(k) == key {
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
	tmp, err := os.CreateTemp(filepath.Dir(path), ".holdfast-env-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(strings.Join(lines, "\n") + "\n"); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
