package reconcile

import (
	"cmp"
	"context"
	"fmt"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/systemd"
)

// kindEnding is how a run of one kind is closed once its unit left a readable marker (row 4,
// finishFromMarker), past the outcome mapping (outcome.go), which reads every kind's evidence
// alike: one per kind, in reconcile/kind_<kind>.go, registered in kindEndings
// (TestEveryKindHasAnEnding). The decision table does not look at kinds: what it decides is
// carried out the same for each, save what these say.
type kindEnding struct {
	// succeeded is a succeeded run's reason; nil or "" keeps the engine's.
	succeeded func(l model.LiveRun, a model.Attempt) string
	// close closes the run with v; nil closes it as it is (finishAttempt).
	close func(r *Reconciler, ctx context.Context, l model.LiveRun, a model.Attempt, m systemd.Marker, v verdict) error
	// figures: the run's summary is a backup's, whose figures (added, processed) are the run's.
	figures bool
}

// kindEndings is each kind's kindEnding, as the kind_<kind>.go files register them.
var kindEndings = map[model.Kind]kindEnding{}

// registerEnding registers a kind's ending, once.
func registerEnding(k model.Kind, e kindEnding) {
	if _, dup := kindEndings[k]; dup {
		panic("reconcile: the ending of kind " + string(k) + " is registered twice")
	}
	kindEndings[k] = e
}

// endingOf is the kindEnding of a run's kind ("" a backup's).
func endingOf(run model.Run) (kindEnding, error) {
	e, ok := kindEndings[cmp.Or(run.Kind, model.KindBackup)]
	if !ok {
		return kindEnding{}, fmt.Errorf("run %s: no ending for a run of kind %q", run.ID, run.Kind)
	}
	return e, nil
}
