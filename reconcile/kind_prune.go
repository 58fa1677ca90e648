package reconcile

import "github.com/holdfast-backup/holdfast/model"

// A prune's success says what it did.
func init() {
	registerEnding(model.KindPrune, kindEnding{
		succeeded: func(model.LiveRun, model.Attempt) string {
			return "prune complete: data no snapshot refers to was removed"
		},
	})
}
