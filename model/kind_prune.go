package model

import (
	"cmp"
	"time"
)

// PruneSettings are when and where a job's repository is pruned (KindPrune) and its snapshots
// are forgotten (KindForget): the runs whose kind deletes (KindSpec.Deletes).
type PruneSettings struct {
	// Schedule is a schedule like Job.Schedule, in the same zone; "" never. NextAt is its next
	// slot.
	Schedule string
	NextAt   *time.Time
	// AppendOnly says that the job's repository, as its host reaches it, accepts no deletion (an
	// append-only REST server): a run that deletes never runs through it, and without a Host is
	// refused before it is admitted.
	AppendOnly bool
	// Host, if set, is the host whose daemon runs the job's deleting runs (each is pinned to it
	// when admitted), over Repository ("" the job's) with EnvFile ("" the job's): the same
	// repository, as that host reaches it with the right to delete.
	Host       string
	Repository string
	EnvFile    string
}

// AsPruner is the job as its pruning host sees it: its pruning repository and environment file
// in place of its own. A job without a pruning host is itself.
func (j Job) AsPruner() Job {
	if j.Prune.Host == "" {
		return j
	}
	if j.Prune.Repository != j.Repository {
		j.Via = j.Prune.Repository
	}
	j.EnvFile = cmp.Or(j.Prune.EnvFile, j.EnvFile)
	return j
}

// ResticRepository is the location restic is given for the job's repository: Via, else
// Repository.
func (j Job) ResticRepository() string { return cmp.Or(j.Via, j.Repository) }

// onPruningHost reports whether run r of the job is one its pruning host runs: a run that deletes
// from the job's own repository, pinned to that host (store.insertRun pins it).
func (j Job) onPruningHost(r Run) bool {
	return r.Kind.Spec().Deletes && !r.OnCopy && j.Prune.Host != "" && r.Host == j.Prune.Host
}

// PruneSchedule admits a prune at each slot of a job's prune schedule.
var PruneSchedule = RepositorySchedule{Name: "prune", Kind: KindPrune,
	Expr:   func(j Job) string { return j.Prune.Schedule },
	NextAt: func(j Job) *time.Time { return j.Prune.NextAt }}

// DeletesAppendOnly reports whether run r of the job would delete through the repository the
// job's host writes append-only: a deleting run of an append-only job that its pruning host does
// not run, as when the pruning host was changed or removed after the run was pinned to the old
// one. Such a run must not start: its deletions would only be refused, after restic's retries.
func (j Job) DeletesAppendOnly(r Run) bool {
	return r.Kind.Spec().Deletes && !r.OnCopy && j.Prune.AppendOnly && !j.onPruningHost(r)
}
