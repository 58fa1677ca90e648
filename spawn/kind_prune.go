package spawn

import "github.com/holdfast-backup/holdfast/model"

// A prune's unit: restic prune of the repository the run works on.
func init() {
	registerUnit(model.KindPrune, kindUnit{
		restic: func(b *unitBuild) []string { return b.restic.PruneArgv(b.ej) },
	})
}
