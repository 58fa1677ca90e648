package spawn

import (
	"slices"

	"github.com/holdfast-backup/holdfast/fssnap"
	"github.com/holdfast-backup/holdfast/model"
)

// A backup's unit: restic backup of the job's paths (or of a producer's output), with the job's
// hooks around it, for a command job as for restic.
func init() {
	registerUnit(model.KindBackup, kindUnit{
		readsPaths: true,
		writable: func(job model.Job, _ model.Run) []string {
			if !hasHooks(job) || job.Backup.FSSnapshot != "" {
				// Under a file system snapshot the paths are the snapshot's, read-only: an
				// after hook sees them as the backup did.
				return nil
			}
			// Hooks prepare what the backup reads (a dump, a flushed file): its paths, and nothing else.
			return job.Paths
		},
		execArgs: func(job model.Job, _ model.Run) []string {
			var args []string
			if job.Backup.StdinFrom != "" {
				args = append(args, "--stdin-from", job.Backup.StdinFrom)
			}
			if hasHooks(job) {
				for _, h := range job.Backup.BeforeHooks {
					args = append(args, "--hook-before", h)
				}
				for _, h := range job.Backup.AfterHooks {
					args = append(args, "--hook-after", h)
				}
			}
			return args
		},
		restic: func(b *unitBuild) []string {
			// The file system snapshots another job keeps in a subvolume, and those of this one
			// (a path that is a subvolume's root shows its own, root's): never backed up.
			ej := b.ej
			if len(ej.Paths) > 0 {
				ej.Excludes = append(slices.Clone(ej.Excludes), fssnap.DirName)
			}
			return b.restic.BackupArgv(ej, b.run.ID)
		},
	})
}

// hasHooks reports whether the job's backups run hooks.
func hasHooks(job model.Job) bool { return len(job.Backup.BeforeHooks)+len(job.Backup.AfterHooks) > 0 }
