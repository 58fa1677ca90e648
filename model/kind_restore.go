package model

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
}
