package jobdef

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/fssnap"
	"github.com/holdfast-backup/holdfast/hook"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/setting"
)

// Probe checks, as the given identity, that each path can be read: a regular file opened, a
// directory listed, a symbolic link seen. It returns one entry per path: "" if it can be read,
// else why not ("permission denied"). It must do so as that identity (a process with its
// credentials), never by opening the user's paths as root.
type Probe func(id Identity, paths []Access) ([]string, error)

// Access is one path a probe checks.
type Access struct {
	Path    string
	Regular bool   // it must be a regular file (not a directory, FIFO or device)
	Exec    bool   // it must be a program the identity may execute
	What    string // what it is, in a refusal: "" a path, else words, a placeholder of package setting among them
}

// AccessChanged reports whether an edit from before to after changes what CheckAccess checks:
// the identity, the engine, the password file or the paths. Other edits are not probed again,
// so a path the user lost since does not block, say, a change of schedule.
func AccessChanged(before, after model.Job) bool {
	return before.User != after.User || before.Group != after.Group || before.Engine != after.Engine ||
		before.PasswordFile != after.PasswordFile || !slices.Equal(before.Paths, after.Paths) || before.Backup.StdinFrom != after.Backup.StdinFrom ||
		before.Copy.PasswordFile != after.Copy.PasswordFile || before.Backup.FSSnapshot != after.Backup.FSSnapshot || before.EnvFile != after.EnvFile || before.Copy.EnvFile != after.Copy.EnvFile
}

// CheckAccess checks that the job's user can read what its backup reads: the password file and
// every path, or the program of Backup.StdinFrom. With viaCredentials (the daemon's system manager hands the password file to the
// unit as a credential, read by systemd as root), the password file need not be readable by the
// job's user, only a regular file. Run it after Validate.
func CheckAccess(j model.Job, probe Probe, viaCredentials bool) error {
	if j.Engine != engine.NameRestic {
		return nil
	}
	id, err := ResolveIdentity(j.User, j.Group)
	if err != nil {
		return err
	}
	// What root reads for the unit (systemd's credentials, a user manager's environment file)
	// is held to the rule each spawn holds it to (credentials.ReadSource), so a job that would be
	// refused there is refused here first.
	uid := int(id.UID)
	var want []Access
	switch {
	case passwordFileReadByJobUser(j, viaCredentials):
		want = append(want, Access{Path: j.PasswordFile, Regular: true, What: "password file"})
	case j.PasswordFile != "":
		if err := credentials.CheckSource("{Job.PasswordFile}", j.PasswordFile, uid); err != nil {
			return err
		}
	}
	switch {
	case j.Copy.PasswordFile != "" && !viaCredentials:
		want = append(want, Access{Path: j.Copy.PasswordFile, Regular: true, What: "copy password file"})
	case j.Copy.PasswordFile != "":
		if err := credentials.CheckSource("{Job.Copy.PasswordFile}", j.Copy.PasswordFile, uid); err != nil {
			return err
		}
	}
	for _, f := range []struct{ name, path string }{{"{Job.EnvFile}", j.EnvFile}, {"{Job.Copy.EnvFile}", j.Copy.EnvFile}} {
		if f.path == "" {
			continue
		}
		if err := credentials.CheckSource(f.name, f.path, uid); err != nil {
			return err
		}
	}
	for _, p := range j.Paths {
		want = append(want, Access{Path: p})
	}
	if j.Backup.FSSnapshot != "" {
		// As each spawn will take it (fssnap.Take): a path refused there is refused here first.
		var writes []string
		if repo, err := filepath.EvalSymlinks(j.Repository); err == nil && filepath.IsAbs(j.Repository) {
			writes = append(writes, repo) // a local repository (Validate made it a path)
		}
		if err := fssnap.Check(j.Paths, writes); err != nil {
			return setting.Errorf("{Job.Backup.FSSnapshot} %s: %w", j.Backup.FSSnapshot, err)
		}
	}
	if argv, err := hook.Split(j.Backup.StdinFrom); j.Backup.StdinFrom != "" && err == nil {
		want = append(want, Access{Path: argv[0], Regular: true, Exec: true, What: "{Job.Backup.StdinFrom} program"})
	}
	if len(want) == 0 {
		return nil
	}
	why, err := probe(id, want)
	if err != nil {
		return fmt.Errorf("check the job's files as user %s: %w", id, err)
	}
	for i, w := range want {
		if i >= len(why) || why[i] == "" {
			continue
		}
		what := cmp.Or(w.What, "path")
		return fmt.Errorf("%s %s cannot be read by user %s: %s; make it readable by that user (or give another %s)", setting.Render(what), w.Path, id, why[i], setting.Name("Job.User"))
	}
	return nil
}

// passwordFileReadByJobUser reports whether the job's unit reads the password file with the
// job's own identity, so that identity must be able to read it: unless it reaches the unit as a
// credential, which systemd reads as root.
func passwordFileReadByJobUser(j model.Job, viaCredentials bool) bool {
	return j.PasswordFile != "" && !viaCredentials
}
