package reconcile

import (
	"encoding/json"
	"fmt"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
)

// A check keeps restic's reason ("no errors", or its findings); a drill's success names its
// sample.
func init() {
	registerEnding(model.KindVerify, kindEnding{
		succeeded: func(l model.LiveRun, a model.Attempt) string {
			if l.Run.Verify.DrillFiles > 0 {
				return drilled(a)
			}
			return ""
		},
	})
}

// drilled is a succeeded drill's reason, from its summary (as the unit reported it).
func drilled(a model.Attempt) string {
	var d engine.Drill
	if len(a.Summary) == 0 || json.Unmarshal(a.Summary, &d) != nil || len(d.Files) == 0 {
		return "drill complete, but no sample was recorded"
	}
	return fmt.Sprintf("drill complete: %d file(s), %s, of snapshot %s (chosen at random among %d) restored and verified; first: %s",
		len(d.Files), engine.FormatBytes(d.Bytes), shortID(d.SnapshotID), d.Candidates, clipText(d.Files[0], 256))
}
