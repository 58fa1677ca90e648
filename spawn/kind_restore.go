package spawn

import (
	"context"
	"strconv"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
)

// A restore's unit: restic restore into its target, the only path it writes besides its own;
// holdfast exec measures its progress and finds what the sandbox kept it from restoring.
func init() {
	registerUnit(model.KindRestore, kindUnit{
		// The target is made, as the job's user, when the restore is asked for: the sandbox
		// makes writable only what exists when the unit starts.
		writable: func(_ model.Job, run model.Run) []string { return []string{run.Restore.Target} },
		restic:   restoreCommand,
		pins: func(run model.Run) []jobunit.Pin {
			if run.Restore.TargetID == nil {
				return nil
			}
			return []jobunit.Pin{{Path: run.Restore.Target, ID: *run.Restore.TargetID}}
		},
	})
}

func restoreCommand(b *unitBuild) []string {
	rs := b.run.Restore
	target, includes := rs.Target, rs.Includes
	if rs.ToOriginal {
		// restic restores into a stage in the target, on the paths' file system, and holdfast
		// exec puts each path back from there (putback). The paths are paths, not patterns.
		target, includes = rs.StagePath(b.run.ID), make([]string, len(rs.Includes))
		for i, inc := range rs.Includes {
			includes[i] = engine.GlobEscape(inc)
			b.exec = append(b.exec, "--put-back", inc)
		}
		b.exec = append(b.exec, "--put-back-base", rs.Target)
		if rs.Overwrite {
			b.exec = append(b.exec, "--put-back-overwrite")
		}
	}
	// restic 0.17 and later report a restore's progress as JSON; before, what is under the
	// target is measured. A restic that does not say its version is taken to be the oldest.
	v, _ := engine.ResticVersionOf(context.Background(), b.cfg.ResticBinary)
	argv := b.restic.RestoreArgv(b.ej, rs.Snapshot, target, includes, v.RestoreJSON())
	b.exec = append(b.exec, "--restore-target", target)
	if !v.RestoreJSON() {
		b.exec = append(b.exec, "--progress-dir", target)
		if rs.TotalBytes != nil && rs.TotalFiles != nil {
			b.exec = append(b.exec, "--progress-total-bytes", strconv.FormatInt(*rs.TotalBytes, 10),
				"--progress-total-files", strconv.FormatInt(*rs.TotalFiles, 10))
		}
	}
	// The sandbox refuses setuid/setgid bits, which restic does not always say it lost:
	// exec compares restic's listing of the snapshot with the target.
	for _, arg := range b.restic.ListArgv(b.ej, rs.Snapshot) {
		b.exec = append(b.exec, "--restore-list", arg)
	}
	if uid, _, err := jobunit.Identity(b.job); err == nil && uid == 0 && b.spec.Sandbox != nil {
		// A root job's restore gives files back to their owners with their modes.
		b.spec.Sandbox.Capabilities = append(b.spec.Sandbox.Capabilities, "CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE")
		b.spec.Sandbox.Chown = true
	}
	return argv
}
