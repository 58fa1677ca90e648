package model

import (
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
)

// Kind is what a run does to its job's repository (see docs/ARCHITECTURE.md, Adding a run kind).
// What is a property of the kind, not of one run, is its KindSpec, stated once in kinds below;
// the layers ask it (k.Spec()) instead of comparing kinds. The layers whose per-kind part is
// code keep it in a registry keyed by Kind: spawn's unit builders and reconcile's reasons.
type Kind string

// Run kinds. The migrations' CHECK runs_kind_check lists the same (migrations/00025_copy.sql;
// store's TestSchemaKindsAreModelKinds holds the two together).
const (
	KindBackup  Kind = "backup"
	KindPrune   Kind = "prune"   // removes the data no snapshot refers to; needs its repository to itself
	KindForget  Kind = "forget"  // deletes a retention plan's snapshots; needs its repository to itself
	KindRestore Kind = "restore" // gives a snapshot back into a target directory; reads its repository
	KindVerify  Kind = "verify"  // checks the repository (restic check) or drills a restore; needs it to itself
	KindCopy    Kind = "copy"    // copies a backup's snapshot into the job's copy repository (restic copy)
)

// KindSpec is what a kind is, whatever the run: the facts the layers read about a run's kind.
type KindSpec struct {
	// Operation is what its engine does (engine.Op*), as `holdfast exec --kind` and the outcome
	// mapping read its output (Run.Operation says which for a run: a drill is a verify's).
	Operation string
	// Exclusive: a run of the kind needs its repository to itself (restic takes its exclusive
	// lock); the others share it, and wait for the exclusive ones (store.AttemptClaimSpawn).
	Exclusive bool
	// Adds: a run of the kind adds to its repository, and so is held and settled in the ledger
	// and watched by the runaway guard (for an engine with a repository: AddsToRepository).
	Adds bool
	// LastRun: a run of the kind is its job's last run and outcome (jobs.last_run_id), which
	// dependencies, the overdue watch, the failure count and the last success read.
	LastRun bool
	// Prerequisite: a run of the kind waits for its job's prerequisite (depends_on).
	Prerequisite bool
	// Retried: a transient failure of a run of the kind admits its retry.
	Retried bool
	// Verification: a run of the kind counts as a verification of its job's repository.
	Verification bool
	// Forgets: a run of the kind deletes snapshots (its ForgetIDs), whose protections are read
	// again before it spawns.
	Forgets bool
	// Deletes: a run of the kind deletes from its repository (snapshots, or data no snapshot
	// refers to). Such runs of a job with a pruning host run there, over its pruning repository
	// (Job.AsPruner), and never through a repository the job's host writes append-only
	// (PruneSettings).
	Deletes bool
	// ReadsJobRepository: a run of the kind reads its job's own repository besides the one it
	// works on (a copy's source), and claims and unlocks both (Job.Repositories).
	ReadsJobRepository bool
	// NeedsRepository: only a job whose engine keeps a repository runs the kind; Verb says
	// what a run of it does to one, in the refusal ("only a restic repository can be %s").
	NeedsRepository bool
	Verb            string
}

// kinds is each kind's definition, in the order the kinds are listed.
var kinds = []struct {
	kind Kind
	spec KindSpec
}{
	{KindBackup, KindSpec{Operation: engine.OpBackup, Adds: true, LastRun: true, Prerequisite: true, Retried: true}},
	{KindPrune, KindSpec{Operation: engine.OpPrune, Exclusive: true, Deletes: true, NeedsRepository: true, Verb: "pruned"}},
	{KindForget, KindSpec{Operation: engine.OpForget, Exclusive: true, Forgets: true, Deletes: true, NeedsRepository: true, Verb: "forgotten from"}},
	{KindRestore, KindSpec{Operation: engine.OpRestore, NeedsRepository: true, Verb: "restored from"}},
	{KindVerify, KindSpec{Operation: engine.OpVerify, Exclusive: true, Verification: true, NeedsRepository: true, Verb: "verified"}},
	{KindCopy, KindSpec{Operation: engine.OpCopy, Retried: true, ReadsJobRepository: true, NeedsRepository: true, Verb: "copied"}},
}

// RepositorySchedule is a schedule of a job's repository beside its backup schedule: each of its
// slots admits a run of Kind. Each is defined in its kind's file (kind_<kind>.go) and listed once
// in RepositorySchedules; admission (package schedule, store.JobAdmitDueMaintenance) reads them
// and never names one.
type RepositorySchedule struct {
	// Name is the schedule's name, as admission logs it and the store keys its slot.
	Name string
	Kind Kind
	// Expr is the job's schedule ("" never), NextAt its next slot.
	Expr   func(Job) string
	NextAt func(Job) *time.Time
	// Verify is what a run admitted at a slot checks, for a schedule of verify runs; nil else.
	Verify func(Job) Verify
}

// RepositorySchedules lists every repository schedule, in the order admission reads them.
var RepositorySchedules = []RepositorySchedule{PruneSchedule, VerifySchedule, DrillSchedule}

// Kinds lists every run kind.
func Kinds() []Kind {
	ks := make([]Kind, len(kinds))
	for i, k := range kinds {
		ks[i] = k.kind
	}
	return ks
}

// ParseKind returns the kind named s, or an error if there is none: the kinds a string from
// outside (a database row, a command line) may name.
func ParseKind(s string) (Kind, error) {
	for _, k := range kinds {
		if string(k.kind) == s {
			return k.kind, nil
		}
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k.kind)
	}
	return "", fmt.Errorf("unknown run kind %q (want %s)", s, strings.Join(names, ", "))
}

// Valid reports whether k is a kind.
func (k Kind) Valid() bool {
	_, err := ParseKind(string(k))
	return err == nil
}

// Spec is the kind's definition; "" is a backup's (a request that names no kind), and a kind that
// is none has the zero KindSpec.
func (k Kind) Spec() KindSpec {
	if k == "" {
		k = KindBackup
	}
	for _, d := range kinds {
		if d.kind == k {
			return d.spec
		}
	}
	return KindSpec{}
}

// String is the kind's name, as stored and shown.
func (k Kind) String() string { return string(k) }

// Scan reads a stored kind. One this release does not know (a newer daemon's, sharing the
// database: runs_kind_check admits what its migrations listed) is kept as read, not refused:
// refusing it would fail every read of the live runs, and so every pass of this host, where only
// that run cannot be carried out (spawn and reconcile have no entry for it and say so for that
// run alone). Its Spec is the zero KindSpec and Valid is false.
func (k *Kind) Scan(src any) error {
	s, ok := src.(string)
	if !ok || s == "" {
		return fmt.Errorf("run kind: want a kind's name, got %T %v", src, src)
	}
	*k = Kind(s)
	return nil
}

// kindsWhere lists the kinds whose definition says so, as strings for a query.
func kindsWhere(is func(KindSpec) bool) []string {
	var ks []string
	for _, k := range kinds {
		if is(k.spec) {
			ks = append(ks, string(k.kind))
		}
	}
	return ks
}
