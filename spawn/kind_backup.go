package spawn

import (
	"path/filepath"
	"slices"

	"github.com/holdfast-backup/holdfast/engine"
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
			// The snapshots' directories are left out where they are, never by their name anywhere
			// (a user could hide a directory from every backup by naming it so): those of the
			// snapshots other attempts keep under the paths now (their records), and, under a
			// snapshot, a path's own when it is a subvolume's root.
			ej := b.ej
			ej.Excludes = slices.Clone(ej.Excludes)
			for _, d := range fssnap.RecordedDirs(fssnap.RecordDir(b.cfg.StateDir), ej.Paths) {
				ej.Excludes = append(ej.Excludes, engine.GlobEscape(d))
			}
			if b.job.Backup.FSSnapshot != "" {
				for _, p := range ej.Paths {
					ej.Excludes = append(ej.Excludes, engine.GlobEscape(filepath.Join(p, fssnap.DirName)))
				}
			}
			return b.restic.BackupArgv(ej, b.run.ID)
		},
	})
}

// hasHooks reports whether the job's backups run hooks.
func hasHooks(job model.Job) bool { return len(job.Backup.BeforeHooks)+len(job.Backup.AfterHooks) > 0 }
