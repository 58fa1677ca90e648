package spawn

import (
	"path/filepath"
	"strconv"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
)

// A verification's unit: restic check, or a drill (`holdfast drill`) of the latest snapshot.
func init() {
	registerUnit(model.KindVerify, kindUnit{
		restic: func(b *unitBuild) []string {
			n := b.run.Verify.DrillFiles
			if n <= 0 {
				return b.restic.CheckArgv(b.ej, b.run.Verify.ReadDataSubset)
			}
			// The drill runs restic itself, in the unit, as the job's user; its scratch directory
			// lies in the attempt's own, which only this unit writes.
			return append([]string{b.cfg.Binary, "drill", "--tag", engine.JobTag(b.job.Name), "--files", strconv.Itoa(n),
				"--scratch", filepath.Join(b.scratch, "drill"), "--"}, b.restic.GlobalArgv(b.ej)...)
		},
	})
}
