package runctl

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/setting"
)

// CheckExecutable refuses a program setting that is not an absolute path to an executable
// regular file; name names the setting in the error (a placeholder of package setting, or
// what the operator calls it).
func CheckExecutable(name, path string) error {
	name = setting.Render(name)
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s %q is a relative path: give an absolute path such as /usr/bin/restic", name, path)
	}
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s %s: %s: give the path of an installed executable", name, path, safepath.Cause(err))
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s %s is not an executable file: give the path of an installed executable", name, path)
	}
	return nil
}

// ResticBinary is the restic a command runs: the one given (checked by CheckExecutable), else
// restic in PATH.
func ResticBinary(given string) (string, error) {
	if given != "" {
		return given, CheckExecutable("{Restic}", given)
	}
	path, err := exec.LookPath("restic")
	if err != nil {
		return "", setting.Errorf("restic not found in PATH: install it (apt-get install restic) or give {Restic}")
	}
	return path, nil
}
