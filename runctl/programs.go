package runctl

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/holdfast-backup/holdfast/job"
)

// CheckExecutable refuses a program setting that is not an absolute path to an executable
// regular file; flag names the setting in the error.
func CheckExecutable(flag, path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s %q is a relative path: give an absolute path such as /usr/bin/restic", flag, path)
	}
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s %s: %s: give the path of an installed executable", flag, path, job.Cause(err))
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s %s is not an executable file: give the path of an installed executable", flag, path)
	}
	return nil
}

// ResticBinary is the restic a command runs: the one given (checked by CheckExecutable as
// --restic), else restic in PATH.
func ResticBinary(given string) (string, error) {
	if given != "" {
		return given, CheckExecutable("--restic", given)
	}
	path, err := exec.LookPath("restic")
	if err != nil {
		return "", errors.New("restic not found in PATH: install it (apt-get install restic) or give --restic")
	}
	return path, nil
}
