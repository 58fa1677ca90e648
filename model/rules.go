package model

import (
	"slices"

	"github.com/holdfast-backup/holdfast/engine"
)

// repositoryEngines are the engines whose jobs keep a repository holdfast knows: only their jobs
// are pruned, have snapshots and retention plans, share a repository's lock between runs, and
// take holds in the ledger for what a backup adds.
var repositoryEngines = []string{engine.NameRestic}

// RepositoryEngines lists them, for a query that selects their jobs.
func RepositoryEngines() []string { return slices.Clone(repositoryEngines) }

// HasRepository reports whether jobs of the named engine keep a repository.
func HasRepository(engineName string) bool { return slices.Contains(repositoryEngines, engineName) }

// HasRepository reports whether the job keeps a repository.
func (j Job) HasRepository() bool { return HasRepository(j.Engine) }

// AddsToRepository reports whether a run of this kind by the named engine adds to a repository,
// and so is held and settled in the ledger: backups do (KindSpec.Adds); prunes and forgets
// remove, commands have none.
func AddsToRepository(kind Kind, engineName string) bool {
	return kind.Spec().Adds && HasRepository(engineName)
}

// NeedsRepositoryAlone reports whether a run of this kind must have its repository to itself
// (KindSpec.Exclusive): restic takes its exclusive lock for a prune, a forget and a check. A
// backup and a restore take the shared lock and may run beside each other.
func NeedsRepositoryAlone(kind Kind) bool { return kind.Spec().Exclusive }

// ExclusiveKinds lists the kinds that need their repository alone, for a query.
func ExclusiveKinds() []string { return kindsWhere(func(s KindSpec) bool { return s.Exclusive }) }

// For is the job as run r sees it: its copy (AsCopy) for a run on the copy repository, its
// pruner (AsPruner) for a run its pruning host runs, else the job.
func (j Job) For(r Run) Job {
	if c, ok := j.AsCopy(); ok && r.OnCopy {
		return c
	}
	if j.onPruningHost(r) {
		return j.AsPruner()
	}
	return j
}

// Repositories are the repositories run r of the job uses: the one it works on and, for a copy,
// the job's own, which it reads (store.runRepositories says the same in SQL).
func (j Job) Repositories(r Run) []string {
	repos := []string{j.For(r).Repository}
	if r.Kind.Spec().ReadsJobRepository && repos[0] != j.Repository {
		repos = append(repos, j.Repository)
	}
	return repos
}

// Operation is what a run's engine does, as `holdfast exec --kind` and the outcome mapping read
// its output: its kind's (KindSpec.Operation), or engine.OpDrill for a verification that drills
// a restore.
func (r Run) Operation() string {
	if r.Kind == KindVerify && r.Verify.DrillFiles > 0 {
		return engine.OpDrill
	}
	return r.Kind.Spec().Operation
}
