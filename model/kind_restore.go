package model

import (
	"path/filepath"

	"github.com/google/uuid"
)

// Restore is what a restore run gives back and where.
type Restore struct {
	Target   string   // the absolute directory it restores into
	Snapshot string   // the snapshot's full id, resolved when the restore was asked for
	Includes []string // restic --include patterns; none restores the whole snapshot
	// TotalBytes and TotalFiles are the snapshot's restore size as restic gave it, the totals of
	// the restore's progress; nil if unknown (a restore of some paths only).
	TotalBytes *int64
	TotalFiles *int64
	// TargetID is the target directory as root found it when the restore was admitted: a
	// target replaced since is refused at every spawn. Nil for restores admitted without it.
	TargetID *FileID
	// ToOriginal puts Includes (paths) back where they were: restic restores them into a stage
	// the unit makes in Target (StagePath), and the unit moves each into place (package
	// putback). Overwrite lets it replace what has changed there since the snapshot.
	ToOriginal bool
	Overwrite  bool
}

// StagePath is where a restore to the original paths (ToOriginal) has restic restore, in its
// Target: named by the run, so that each attempt clears what an earlier one left.
func (r Restore) StagePath(run uuid.UUID) string {
	return filepath.Join(r.Target, ".holdfast-restore-"+run.String())
}
