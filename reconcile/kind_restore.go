package reconcile

import (
	"fmt"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
)

// A restore's success says what it gave back where.
func init() {
	registerEnding(model.KindRestore, kindEnding{
		succeeded: func(l model.LiveRun, a model.Attempt) string { return restored(l.Run.Restore, a.Progress) },
	})
}

// restored is a succeeded restore's reason: what it gave back where, with the figures its last
// progress measured.
func restored(rs model.Restore, p *model.Progress) string {
	what := "snapshot " + shortID(rs.Snapshot)
	if len(rs.Includes) > 0 && !rs.ToOriginal {
		what += fmt.Sprintf(" (%d include pattern(s))", len(rs.Includes))
	}
	reason := fmt.Sprintf("restore complete: %s restored into %s", what, rs.Target)
	if rs.ToOriginal {
		reason = fmt.Sprintf("restore complete: snapshot %s put back where it was (%d include path(s))", shortID(rs.Snapshot), len(rs.Includes))
	}
	if p != nil {
		reason += fmt.Sprintf(", %d files, %s", p.FilesDone, engine.FormatBytes(p.BytesDone))
	}
	return reason
}
