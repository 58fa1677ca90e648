package model

import "time"

// PruneSettings are when a job's repository is pruned (KindPrune).
type PruneSettings struct {
	// Schedule is a schedule like Job.Schedule, in the same zone; "" never. NextAt is its next
	// slot.
	Schedule string
	NextAt   *time.Time
}

// PruneSchedule admits a prune at each slot of a job's prune schedule.
var PruneSchedule = RepositorySchedule{Name: "prune", Kind: KindPrune,
	Expr:   func(j Job) string { return j.Prune.Schedule },
	NextAt: func(j Job) *time.Time { return j.Prune.NextAt }}
