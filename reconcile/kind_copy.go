package reconcile

import "github.com/holdfast-backup/holdfast/model"

// A copy's success names the snapshot it copied.
func init() {
	registerEnding(model.KindCopy, kindEnding{
		succeeded: func(l model.LiveRun, _ model.Attempt) string {
			return "copy complete: snapshot " + shortID(l.Run.CopySnapshot) + " is in the copy repository"
		},
	})
}
