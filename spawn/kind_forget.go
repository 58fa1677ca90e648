package spawn

import "github.com/holdfast-backup/holdfast/model"

// A forget's unit: restic forget of exactly its plan's snapshots.
func init() {
	registerUnit(model.KindForget, kindUnit{
		restic: func(b *unitBuild) []string { return b.restic.ForgetArgv(b.ej, b.run.ForgetIDs) },
	})
}
