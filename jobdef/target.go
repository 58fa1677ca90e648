package jobdef

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/setting"
	"golang.org/x/sys/unix"
)

// TargetOp is what a target probe does with a restore's target directory.
type TargetOp string

// The target probe's operations.
const (
	TargetCheck  TargetOp = "check"  // say whether a restore may write there
	TargetCreate TargetOp = "create" // check, and make it (0700) if it does not exist
	TargetRemove TargetOp = "remove" // remove it if it is an empty directory (one TargetCreate made)
)

// TargetProbe asks, as the job's user, about a restore's target.
type TargetProbe struct {
	Op        TargetOp `json:"op"`
	Path      string   `json:"path"`
	Overwrite bool     `json:"overwrite"` // a target that is not empty is allowed
}

// TargetAnswer is a target probe's answer: why a restore may not write there ("" it may), and
// whether the probe made the directory.
type TargetAnswer struct {
	Why     string `json:"why"`
	Created bool   `json:"created"`
}

// ValidateTarget checks a restore's target as given, before anything looks at it: an absolute,
// clean path other than /.
func ValidateTarget(path string) error {
	switch {
	case path == "":
		return setting.Errorf("no target: give {Restore.Target} DIR, a directory to restore into")
	case !filepath.IsAbs(path):
		return fmt.Errorf("target %q is a relative path: give an absolute path", path)
	case filepath.Clean(path) != path:
		return fmt.Errorf("target %q is not a clean path: give %s", path, filepath.Clean(path))
	case path == "/":
		return errors.New("target / would restore over the whole system: give a directory to restore into")
	}
	return nil
}

// ProbeTargetAs carries out p as id, with holdfast's own `probe-target` (argv), so that the
// kernel decides with the user's permissions and root never touches the user's paths.
func ProbeTargetAs(argv []string, id Identity, p TargetProbe) (TargetAnswer, error) {
	if uint32(os.Geteuid()) == id.UID {
		return ProbeTarget(p), nil
	}
	var a TargetAnswer
	err := runAs(argv, id, p, &a)
	return a, err
}

// ProbeTarget carries out p with this process's own credentials. A target that exists must be a
// directory (not a link to one) this process may write, and empty unless p.Overwrite; one that
// does not must have a parent directory this process may write.
func ProbeTarget(p TargetProbe) TargetAnswer {
	if err := ValidateTarget(p.Path); err != nil {
		return TargetAnswer{Why: err.Error()}
	}
	if p.Op == TargetRemove {
		if err := unix.Rmdir(p.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return TargetAnswer{Why: "not removed: " + safepath.Cause(err)}
		}
		return TargetAnswer{}
	}
	info, err := os.Lstat(p.Path)
	if errors.Is(err, fs.ErrNotExist) {
		parent := filepath.Dir(p.Path)
		if why := writableDir(parent); why != "" {
			return TargetAnswer{Why: fmt.Sprintf("target %s does not exist and cannot be made in %s: %s", p.Path, parent, why)}
		}
		if p.Op != TargetCreate {
			return TargetAnswer{}
		}
		if err := unix.Mkdir(p.Path, 0o700); err != nil {
			return TargetAnswer{Why: fmt.Sprintf("target %s cannot be made: %s", p.Path, safepath.Cause(err))}
		}
		return TargetAnswer{Created: true}
	}
	if err != nil {
		return TargetAnswer{Why: fmt.Sprintf("target %s: %s", p.Path, safepath.Cause(err))}
	}
	if !info.IsDir() {
		return TargetAnswer{Why: fmt.Sprintf("target %s is not a directory (%s)", p.Path, kindOf(info.Mode()))}
	}
	if why := writableDir(p.Path); why != "" {
		return TargetAnswer{Why: fmt.Sprintf("target %s cannot be written by the job's user: %s", p.Path, why)}
	}
	if !p.Overwrite {
		f, err := os.Open(p.Path)
		if err != nil {
			return TargetAnswer{Why: fmt.Sprintf("target %s: %s", p.Path, safepath.Cause(err))}
		}
		defer f.Close()
		if _, err := f.Readdirnames(1); !errors.Is(err, io.EOF) {
			if err != nil {
				return TargetAnswer{Why: fmt.Sprintf("target %s: %s", p.Path, safepath.Cause(err))}
			}
			return TargetAnswer{Why: setting.Sprintf("target %s is not empty: restore into an empty directory, or give {Restore.Overwrite} to restore over what is there", p.Path)}
		}
	}
	return TargetAnswer{}
}

// writableDir says why this process cannot make entries in dir, or "".
func writableDir(dir string) string {
	info, err := os.Lstat(dir)
	if err != nil {
		return safepath.Cause(err)
	}
	if !info.IsDir() {
		return "it is not a directory (" + kindOf(info.Mode()) + ")"
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return safepath.Cause(err)
	}
	return ""
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsRegular():
		return "a regular file"
	}
	return m.Type().String()
}
