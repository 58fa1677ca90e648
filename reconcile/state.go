package reconcile

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// State is what the reconciler reads from and writes to the database: exactly the store
// methods it calls, so that its decisions can be carried out against a fake in a unit test
// (harness_test.go). The daemon gives it its store.Store.
type State interface {
	StateReader
	StateWriter
}

// StateReader is what the reconciler reads: the live runs and the facts a decision rests on.
// Nothing in it changes a run.
type StateReader interface {
	RunListLive(ctx context.Context, host string) ([]model.LiveRun, error)
	RunListSpawnable(ctx context.Context, host string, ids []uuid.UUID) ([]model.LiveRun, error)
	RunListSpawned(ctx context.Context, host string, ids []uuid.UUID) ([]model.LiveRun, error)
	JobListForHost(ctx context.Context, host string) ([]model.Job, error)
	JobGet(ctx context.Context, name string) (model.Job, error)
	RunGet(ctx context.Context, id uuid.UUID) (model.Run, error)
	AttemptGet(ctx context.Context, ref model.AttemptRef) (model.Attempt, error)
	AttemptOtherWriter(ctx context.Context, ref model.AttemptRef) (*uuid.UUID, error)
	SnapshotProtectedAmong(ctx context.Context, p store.SnapshotProtectedAmongParams) ([]string, error)
	AttemptEndingsSinceLastStart(ctx context.Context, repository string) ([]model.AttemptEnd, error)
	RunListEndedBefore(ctx context.Context, ids []uuid.UUID, t time.Time) ([]uuid.UUID, error)
	HostList(ctx context.Context) ([]model.Host, error)
	HostListDown(ctx context.Context, me string, grace time.Duration) (down []string, unnoticed bool, err error)
	HostNextDown(ctx context.Context, me string, grace time.Duration) (in time.Duration, ok bool, err error)
	RunListOrphaned(ctx context.Context, host string, grace time.Duration) ([]model.LiveRun, error)
	AttemptListSuperseded(ctx context.Context, host string, within time.Duration) ([]model.SupersededAttempt, error)
	AttemptListDeferred(ctx context.Context, host string) ([]model.DeferredSettlement, error)
}

// StateWriter is what the reconciler writes: each a change of one run (or of the hosts'
// notices), guarded in the store by "this attempt is still live" and, where it takes a
// model.Lease, by the host's lease.
type StateWriter interface {
	AttemptClaimSpawn(ctx context.Context, w model.Lease, c model.SpawnClaim) (claimed bool, blocked string, err error)
	AttemptReleaseSpawnClaim(ctx context.Context, w model.Lease, p store.AttemptReleaseSpawnClaimParams) error
	AttemptSetRepoBaseline(ctx context.Context, w model.Lease, p store.AttemptSetRepoBaselineParams) error
	AttemptHoldSize(ctx context.Context, w model.Lease, p store.AttemptHoldSizeParams) (model.SizedHold, error)
	AttemptMarkStarted(ctx context.Context, w model.Lease, p store.AttemptMarkStartedParams) error
	RunSetWaiting(ctx context.Context, p store.RunSetWaitingParams) error
	AttemptApplyJournal(ctx context.Context, w model.Lease, p store.AttemptApplyJournalParams) (bool, error)
	AttemptQuarantine(ctx context.Context, w model.Lease, p store.AttemptQuarantineParams) error
	AttemptFinish(ctx context.Context, w model.Lease, e model.Ending) (bool, error)
	AttemptRestart(ctx context.Context, w model.Lease, r model.Restarting) (moved bool, paused string, err error)
	RunRequestPause(ctx context.Context, runID uuid.UUID, reason string) (bool, error)
	AttemptSettleDeferred(ctx context.Context, ref model.AttemptRef, st ledger.Settlement) error
	HostNoticeDown(ctx context.Context, by string, grace time.Duration) ([]string, error)
	RunTakeOver(ctx context.Context, w model.Lease, t model.TakeOver) (bool, error)
}

// Units is what the reconciler asks of systemd: exactly the systemd.Client methods it calls, and
// those of jobunit.Runner, which it hands on to the units it builds (the spawner's, and the query
// units of restic's questions about a repository). The daemon gives it a *systemd.Client.
type Units interface {
	Start(ctx context.Context, s systemd.Spec) (existed bool, err error)
	Arm(ctx context.Context, s systemd.Spec, at time.Time) (existed bool, err error)
	States(ctx context.Context, names []string) (map[string]systemd.State, error)
	Alive(ctx context.Context, name string) (bool, systemd.State, error)
	Stop(ctx context.Context, name string) error
	ResetFailed(ctx context.Context, name string) error
	jobunit.Runner
}

// unitLister is Units that can also tell the state of every unit whose name matches a
// pattern, in one call. The sweep asks such Units about all of holdfast's units while it reads
// the live runs; other Units are asked by name once the runs are read.
type unitLister interface {
	StatesMatching(ctx context.Context, pattern string) (map[string]systemd.State, error)
}

// The systemd client lists units by pattern (the sweep's one call).
var _ unitLister = (*systemd.Client)(nil)
