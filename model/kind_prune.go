package model

import "time"

// PruneSettings are when a job's repository is pruned (KindPrune).
type PruneSettings struct {
	// Schedule is a schedule like Job.Schedule, in the same zone; "" never. NextAt is its next
	// slot.
	Schedule string
	NextAt   *time.Time
}
