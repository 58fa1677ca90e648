package jobunit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/systemd"
)

// Pin is a writable path that must still be the very directory recorded when its run was
// admitted (a restore's target): one replaced since is refused, whoever replaced it.
type Pin struct {
	Path string
	ID   model.FileID
}

// Guard holds a unit to the path rule (see safepath) just before systemd is given it, whoever
// wrote the job and whenever its run was admitted: every path the unit makes writable is
// resolved for the job's user, checked (safepath.Writable) and replaced by its resolved form, so
// systemd has no link to follow; each credential source is read by root under
// credentials.ReadSource and staged (credentials.Stage, under key), and LoadCredential= names
// the staged copy, or LoadCredentialEncrypted= for a credential systemd encrypted. Under a user
// manager, which reads the environment file itself and hands no credentials, the sources are
// checked all the same, and an encrypted one is refused. A refusal is a *safepath.Error naming the
// path; the caller removes the staged credentials (credentials.RemoveStaged) if the unit is
// never started.
func Guard(cfg Config, job model.Job, spec *systemd.Spec, key string, pins ...Pin) error {
	uid, _, err := Identity(job)
	if err != nil {
		return err
	}
	if sb := spec.Sandbox; sb != nil {
		resolved := sb.ReadWritePaths[:0:0]
		for _, p := range sb.ReadWritePaths {
			pinned := slices.IndexFunc(pins, func(pin Pin) bool { return pin.Path == p })
			n, err := safepath.Writable(p, uid)
			if errors.Is(err, fs.ErrNotExist) && pinned < 0 {
				// Not there (a repository not made yet): systemd is not told of it at all, so
				// that nothing made there meanwhile is made writable, and the engine fails on it.
				continue
			}
			if err != nil {
				return refusal(err)
			}
			if pinned >= 0 && (n.Dev != pins[pinned].ID.Dev || n.Ino != pins[pinned].ID.Ino) {
				return &safepath.Error{Path: p, Why: "is no longer the directory checked when the run was admitted (device and inode differ): it was replaced since; ask for the run again"}
			}
			resolved = append(resolved, n.Path)
		}
		sb.ReadWritePaths = resolved
		if sb.PrivateTmp && anyUnderTmp(sb.ReadWritePaths) {
			// A link led a writable path into /tmp: a private /tmp would hide it.
			sb.PrivateTmp = false
			spec.Environment = append(spec.Environment, "TMPDIR="+CacheDir(cfg.StateDir, uid, job.Name))
		}
	}
	for _, f := range spec.EnvironmentFiles {
		if err := credentials.CheckSource("environment file", f, uid); err != nil {
			return refusal(err)
		}
	}
	if cfg.Runner != nil && !cfg.Runner.SystemManager() && job.HasRepository() {
		// A user manager would hand the unit the encrypted bytes themselves, as its password
		// or environment. Only whether the file is one is read here (no link followed): restic
		// reads it as the job's user.
		for _, f := range append([]string{job.PasswordFile, job.Copy.PasswordFile}, spec.EnvironmentFiles...) {
			if f == "" {
				continue
			}
			if credentials.EncryptedFile(f) {
				return &safepath.Error{Path: f, Why: "is a credential encrypted by systemd-creds, which only the system manager decrypts for a unit: run holdfast's units under the system manager, or give the file in plain (root's, 0600)"}
			}
		}
	}
	if len(spec.LoadCredentials) == 0 {
		return nil
	}
	sources := make(map[string]string, len(spec.LoadCredentials))
	for _, c := range spec.LoadCredentials {
		sources[c.Name] = c.Path
	}
	staged, err := credentials.Stage(cfg.StateDir, key, sources, uid)
	if err != nil {
		return refusal(err)
	}
	for i, c := range spec.LoadCredentials {
		spec.LoadCredentials[i].Path, spec.LoadCredentials[i].Encrypted = staged[c.Name].Path, staged[c.Name].Encrypted
	}
	return nil
}

// refusal makes a path that cannot be reached (missing, not a directory, not permitted) a
// refusal of the unit, naming it: waiting would not bring it back. Other errors stay what they
// are, and the spawn is tried again.
func refusal(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && (errors.Is(pe.Err, fs.ErrNotExist) || errors.Is(pe.Err, fs.ErrPermission) || errors.Is(pe.Err, syscall.ENOTDIR)) {
		return &safepath.Error{Path: pe.Path, Why: "cannot be reached: " + pe.Err.Error()}
	}
	return err
}

// stageKey is the key of a query unit's staged credentials.
func stageKey(unit string) string { return fmt.Sprintf("q-%s", unit) }
