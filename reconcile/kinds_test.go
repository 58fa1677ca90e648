package reconcile

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
)

// Every kind has its ending (reconcile/kind_<kind>.go), and the registry holds no kind that is
// none; a kind without one (noop) is refused until it registers one.
func TestEveryKindHasAnEnding(t *testing.T) {
	for _, k := range model.Kinds() {
		if _, ok := kindEndings[k]; !ok {
			t.Errorf("kind %s: no ending registered (reconcile/kind_%s.go)", k, k)
		}
	}
	for k := range kindEndings {
		if !k.Valid() {
			t.Errorf("an ending is registered for %q, no kind of model.Kinds()", k)
		}
	}
	if e, err := endingOf(model.Run{}); err != nil || !e.figures {
		t.Errorf(`kind "": %+v, %v; want a backup's ending`, e, err)
	}

	const noop model.Kind = "noop"
	run := model.Run{ID: uuid.New(), Kind: noop}
	if _, err := endingOf(run); err == nil || !strings.Contains(err.Error(), `no ending for a run of kind "noop"`) {
		t.Fatalf("an ending for a kind with none registered: %v", err)
	}
	registerEnding(noop, kindEnding{succeeded: func(model.LiveRun, model.Attempt) string { return "noop complete" }})
	defer delete(kindEndings, noop)
	e, err := endingOf(run)
	if err != nil || e.succeeded(model.LiveRun{Run: run}, model.Attempt{}) != "noop complete" {
		t.Errorf("noop's ending: %+v, %v", e, err)
	}
}
