// Package credentials hands a job's secrets to the processes of its unit without putting them in
// argv, unit properties, the database, logs or output.
//
// The daemon names the operator's files in the unit's LoadCredential= (Load); systemd copies them
// into the unit's private $CREDENTIALS_DIRECTORY, readable by the unit's user only, so a root-only
// 0600 file serves a job that runs as an unprivileged user. Inside the unit, Environ turns them
// into the engine's environment: RESTIC_PASSWORD_FILE names the password credential, and every
// KEY=VALUE line of the environment credential (AWS_*, B2_*, ...) becomes a variable.
//
// A user manager hands no credentials (measured on systemd 252). There the daemon passes the
// password file by its path, which the job's user must be able to read, and the environment file
// through EnvironmentFile=, read by the manager.
package credentials

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/holdfast-backup/holdfast/setting"
)

// The names of the credentials in a unit.
const (
	Password     = "restic-password"
	Env          = "job-env"
	FromPassword = "restic-from-password" // a copy's source repository's (restic copy --from-repo)
)

// DirVariable is the variable systemd sets to the unit's credentials directory.
const DirVariable = "CREDENTIALS_DIRECTORY"

// MaxEnvFile bounds an environment file: it holds a few variables, never data.
const MaxEnvFile = 64 << 10

// Environ returns env extended with what the unit's credentials provide: RESTIC_PASSWORD_FILE
// when password is set, and the variables of the environment credential when envFile is set.
// An error names the credential and the line, never a value.
func Environ(env []string, password, envFile bool) ([]string, error) {
	if !password && !envFile {
		return env, nil
	}
	dir, err := credentialsDir()
	if err != nil {
		return nil, err
	}
	if envFile {
		data, err := readBounded(filepath.Join(dir, Env))
		if err != nil {
			return nil, fmt.Errorf("environment credential: %w", err)
		}
		vars, err := ParseEnv(data)
		if err != nil {
			return nil, fmt.Errorf("environment credential: %w", err)
		}
		env = append(env, vars...)
	}
	if password {
		// Last, so an environment file cannot point restic at another password.
		env = append(env, "RESTIC_PASSWORD_FILE="+filepath.Join(dir, Password))
	}
	return env, nil
}

// WithFromPassword returns env with RESTIC_FROM_PASSWORD_FILE naming the unit's credential of a
// copy's source repository password.
func WithFromPassword(env []string) ([]string, error) {
	dir, err := credentialsDir()
	if err != nil {
		return nil, err
	}
	return append(env, "RESTIC_FROM_PASSWORD_FILE="+filepath.Join(dir, FromPassword)), nil
}

// credentialsDir is the unit's credentials directory, as systemd named it.
func credentialsDir() (string, error) {
	dir := os.Getenv(DirVariable)
	if dir == "" {
		return "", fmt.Errorf("$%s is not set: the unit was started without its credentials", DirVariable)
	}
	return dir, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxEnvFile+1)); err != nil {
		return nil, err
	}
	if buf.Len() > MaxEnvFile {
		return nil, fmt.Errorf("larger than %d KiB", MaxEnvFile>>10)
	}
	return buf.Bytes(), nil
}

var envKey = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// ParseEnv reads an environment file: KEY=VALUE lines, blank lines and lines starting with '#'.
// A value may be wrapped in one pair of single or double quotes, taken literally otherwise. An
// error names the line, never its content: the file holds secrets.
func ParseEnv(data []byte) ([]string, error) {
	var vars []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxEnvFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(strings.TrimPrefix(key, "export "))
		if !ok || !envKey().MatchString(key) {
			return nil, fmt.Errorf("line %d is not KEY=VALUE with a name of letters, digits and '_'", n)
		}
		if strings.ContainsRune(value, 0) {
			return nil, fmt.Errorf("line %d holds a NUL byte", n)
		}
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		vars = append(vars, key+"="+value)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("unreadable: %w", err)
	}
	return vars, nil
}

// CheckFile checks, as the operator's command runs (root), that a secret file can be handed to a
// unit: an absolute path to a regular file. Its content is never read here. name names the file
// in a refusal: words, or a placeholder of package setting.
func CheckFile(name, path string) error {
	_, err := checkFile(name, path)
	return err
}

// CheckEnvFile is CheckFile for an environment file, which must not be larger than MaxEnvFile.
func CheckEnvFile(name, path string) error {
	info, err := checkFile(name, path)
	if err == nil && info.Size() > MaxEnvFile {
		return fmt.Errorf("%s %s is larger than %d KiB: it holds variables, not data", setting.Render(name), path, MaxEnvFile>>10)
	}
	return err
}

// checkFile is CheckFile, with the file's information when it passes.
func checkFile(name, path string) (os.FileInfo, error) {
	name = setting.Render(name)
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%s %q is a relative path: give an absolute path", name, path)
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", name, path, errors.Unwrap(err))
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s is not a regular file", name, path)
	}
	return info, nil
}

// CheckRepository refuses a repository location with a password in it (rest:https://user:pass@host/):
// it would be in argv, unit properties, the database and every listing. The message says where
// the secret goes instead.
func CheckRepository(repo string) error {
	_, rest, ok := strings.Cut(repo, "://")
	if !ok {
		return nil
	}
	authority, _, _ := strings.Cut(rest, "/")
	if at := strings.LastIndex(authority, "@"); at >= 0 && strings.Contains(authority[:at], ":") {
		return setting.Errorf("the repository location carries a password (user:password@): remove it and put the " +
			"credentials in a root-only {Job.EnvFile} instead (e.g. RESTIC_REST_USERNAME/RESTIC_REST_PASSWORD, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
	}
	return nil
}
