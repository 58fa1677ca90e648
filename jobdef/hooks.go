package jobdef

import (
	"fmt"
	"regexp"
	"sync"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/fssnap"
	"github.com/holdfast-backup/holdfast/hook"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/setting"
)

// MaxHooks bounds a job's hooks of one kind.
const MaxHooks = 16

// validateHooks checks a job's hooks of one kind (name names them: a placeholder of package
// setting).
func validateHooks(name string, hooks []string) error {
	if len(hooks) > MaxHooks {
		return fmt.Errorf("%s: %d hooks, at most %d", setting.Render(name), len(hooks), MaxHooks)
	}
	for _, h := range hooks {
		if _, err := hook.Split(h); err != nil {
			return fmt.Errorf("%s: %w", setting.Render(name), err)
		}
	}
	return nil
}

// stdinFilename is a file name restic --stdin-filename takes and a restore gives back as is, of
// at most maxStdinFilename bytes (checked apart, as the names' lengths in job.go).
var stdinFilename = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*$`) })

const maxStdinFilename = 255

// validateFSSnapshot checks a job's file system snapshot against what it backs up; whether its
// paths are on Btrfs is CheckAccess's (fssnap.Check), where they are.
func validateFSSnapshot(j *model.Job) error {
	switch {
	case j.Backup.FSSnapshot == "":
		return nil
	case j.Backup.FSSnapshot != fssnap.Btrfs:
		return setting.Errorf("{Job.Backup.FSSnapshot} %q: give btrfs, or \"\" to read the live paths (LVM and ZFS snapshots are not supported)", j.Backup.FSSnapshot)
	case j.Engine != engine.NameRestic:
		return setting.Errorf("{Job.Backup.FSSnapshot} is for restic jobs: a command job's command reads what it backs up itself")
	case j.Backup.StdinFrom != "":
		return setting.Errorf("{Job.Backup.FSSnapshot} snapshots {Job.Paths}, and a job with {Job.Backup.StdinFrom} backs up a command's output instead: give one of them")
	case len(j.Backup.BeforeHooks) > 0:
		return setting.Errorf("{Job.Backup.FSSnapshot} is taken before the backup's unit starts, so what a before hook ({Job.Backup.BeforeHooks}) writes would not be in the backup: drop the before hooks or the snapshot")
	}
	return nil
}

// validateStdin checks a job that backs up a command's output (Backup.StdinFrom) instead of paths.
func validateStdin(j *model.Job) error {
	switch {
	case j.Engine != engine.NameRestic:
		return setting.Errorf("{Job.Backup.StdinFrom} is for restic jobs: a command job's command does its own backup")
	case j.Backup.StdinFrom == "":
		return setting.Errorf("{Job.Backup.StdinFilename} names the output of {Job.Backup.StdinFrom}: give {Job.Backup.StdinFrom} CMD too, or drop it")
	case len(j.Paths) > 0 || len(j.Excludes) > 0:
		return setting.Errorf("{Job.Backup.StdinFrom} backs up a command's output, not {Job.Paths}: give one of them ({Job.Backup.StdinFrom} \"\" goes back to the paths)")
	case len(j.Backup.StdinFilename) > maxStdinFilename || !stdinFilename().MatchString(j.Backup.StdinFilename):
		return setting.Errorf("{Job.Backup.StdinFilename} %q: give a plain file name such as shop.dump (letters, digits and ._+@-, not starting with a dot): the name the output has in the snapshot", j.Backup.StdinFilename)
	}
	if _, err := hook.Split(j.Backup.StdinFrom); err != nil {
		return setting.Errorf("{Job.Backup.StdinFrom}: %w", err)
	}
	return nil
}
