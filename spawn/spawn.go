// Package spawn starts the attempts the reconciler decided to run. A spawn claims the attempt
// in the store (exactly once across daemons; limits and busy repositories are decided by the
// claim), prepares its directories, measures its local repository, and has systemd start the
// attempt's transient unit now or arm a timer that starts it later. Until systemd has the unit
// a failure gives the claim back, so the next pass claims the same attempt again.
//
// Spawns run as a service (Start, Stop): the sweep hands a spawn over and never waits for it.
// Not started, a Spawner spawns in its caller. See docs/ARCHITECTURE.md §3 (Spawn) and §8.
package spawn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/attemptqueue"
	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/fssnap"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

const (
	// DefaultWorkers is how many spawns (claim, directories, StartTransientUnit or arm) run at
	// once when spawning runs as a service.
	DefaultWorkers = 8
	// queueSize bounds the spawns waiting for a worker; past it a spawn is refused and the
	// next pass decides it again.
	queueSize = 4096
)

// Store is what a spawn reads and writes: each write is guarded in the store by "this attempt
// is still live", and each that takes a model.Lease by the host's lease.
type Store interface {
	AttemptEndingsSinceLastStart(ctx context.Context, repository string) ([]model.AttemptEnd, error)
	AttemptClaimSpawn(ctx context.Context, w model.Lease, c model.SpawnClaim) (claimed bool, blocked string, err error)
	AttemptReleaseSpawnClaim(ctx context.Context, w model.Lease, p store.AttemptReleaseSpawnClaimParams) error
	AttemptSetRepoBaseline(ctx context.Context, w model.Lease, p store.AttemptSetRepoBaselineParams) error
	AttemptHoldSize(ctx context.Context, w model.Lease, p store.AttemptHoldSizeParams) (model.SizedHold, error)
	AttemptMarkStarted(ctx context.Context, w model.Lease, p store.AttemptMarkStartedParams) error
	RunSetWaiting(ctx context.Context, p store.RunSetWaitingParams) error
}

// Units is what a spawn asks of systemd.
type Units interface {
	Start(ctx context.Context, s systemd.Spec) (existed bool, err error)
	Arm(ctx context.Context, s systemd.Spec, at time.Time) (existed bool, err error)
}

// Config is what a Spawner works with. Store, Units, Lease and Refused are required; the
// reconciler validated its own store and manager, so New checks only the functions.
type Config struct {
	Store Store
	Units Units
	// Jobs is what the attempts' units are made from (state directory, binaries, manager).
	Jobs jobunit.Config
	// BootID is this host's current boot id, recorded with each claim ("" if unknown).
	BootID string
	// Limits are the places for running units, decided by each claim.
	Limits model.RunningLimits
	// Workers is how many spawns run at once once started. Default DefaultWorkers.
	Workers int
	// Budget is each spawn's time, from when a worker takes it.
	Budget time.Duration
	Logger *slog.Logger
	// Lease is the lease the host's writes are fenced by, and whether it is held now: without
	// it nothing is claimed and systemd is not asked. It is asked again before each step.
	Lease func() (model.Lease, bool)
	// Starting is told of each attempt just before systemd is asked for its unit (to start it
	// or arm it), its repository's baseline just measured (RepoBytesBefore): the runaway guard
	// follows it from then on, from before the unit can write. Optional.
	Starting func(model.LiveRun)
	// Refused closes an attempt that never ran, with why: systemd refused its unit as a bad
	// request, or a path of its unit broke the rule (jobunit.Guard).
	Refused func(ctx context.Context, l model.LiveRun, reason string) error
	// Unstarted is told of each spawn handed over that left its run queued without a unit (its
	// claim blocked by the repository or the places, a failure, the lease lost): the next pass
	// hands it over again. Optional.
	Unstarted func()
	// Hook, if set, is called by each spawn before its claim; for tests, which hold a spawn
	// there to see what happens meanwhile.
	Hook func(ctx context.Context, run uuid.UUID)
}

// Spawner carries out spawns, as a service once started.
type Spawner struct {
	cfg   Config
	queue *attemptqueue.Queue
	// armRefused is set once systemd refused a transient timer: runs then start at their time.
	armRefused atomic.Bool
}

// New returns a Spawner, not started.
func New(cfg Config) (*Spawner, error) {
	switch {
	case cfg.Lease == nil || cfg.Refused == nil:
		return nil, errors.New("spawn: Lease and Refused are required")
	case cfg.Workers < 0:
		return nil, fmt.Errorf("spawn: %d workers: give at least 1", cfg.Workers)
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Starting == nil {
		cfg.Starting = func(model.LiveRun) {}
	}
	if cfg.Unstarted == nil {
		cfg.Unstarted = func() {}
	}
	limited := cfg.Limits.Set()
	q, err := attemptqueue.New(attemptqueue.Config{Name: "spawning", Workers: cfg.Workers, Size: queueSize,
		Budget: cfg.Budget, Logger: cfg.Logger, Ordered: limited})
	if err != nil {
		return nil, err
	}
	return &Spawner{cfg: cfg, queue: q}, nil
}

// Name is the service's name.
func (s *Spawner) Name() string { return s.queue.Name() }

// Start starts the workers. Stop waits for the spawns begun and drops those not begun: their
// runs are still queued without a unit, and the next sweep (this daemon's or another's) hands
// them over again.
func (s *Spawner) Start(ctx context.Context) error { return s.queue.Start(ctx) }

// Stop stops the workers (see Start).
func (s *Spawner) Stop() { s.queue.Stop() }

// ArmRefused reports whether systemd refused a transient timer: runs then start at their time.
func (s *Spawner) ArmRefused() bool { return s.armRefused.Load() }

// Spawn hands the spawn of l's attempt over, started now (at nil) or armed to start at at. A
// spawn of an attempt already queued or being spawned is dropped.
func (s *Spawner) Spawn(ctx context.Context, l model.LiveRun, job model.Job, at *time.Time) error {
	return s.queue.Submit(ctx, l.Ref(), func(ctx context.Context, claimed func()) error {
		if s.cfg.Hook != nil {
			s.cfg.Hook(ctx, l.Run.ID)
		}
		settled := false
		err := s.spawn(ctx, l, job, at, claimed, &settled)
		if !settled {
			s.cfg.Unstarted()
		}
		return err
	})
}

func (s *Spawner) acting() bool {
	_, held := s.cfg.Lease()
	return held
}

func (s *Spawner) fence() model.Lease {
	l, _ := s.cfg.Lease()
	return l
}

// spawn claims the attempt's spawn, prepares its directories and starts its unit, or, with at,
// arms it so that systemd starts it at at. claimed is called once the claim was answered (the
// queue's order: with limits, runs claim in the order they were handed over). settled is set
// once the run no longer waits for a spawn: systemd has its unit, or it ended without one.
func (s *Spawner) spawn(ctx context.Context, l model.LiveRun, job model.Job, at *time.Time, claimed func(), settled *bool) error {
	spec, unlock, err := AttemptSpec(ctx, s.cfg.Store, s.cfg.Jobs, job, l.Run, l.Attempt.No)
	if err != nil {
		return err
	}
	if unlock != "" {
		s.cfg.Logger.Info("stale restic locks are removed first", "run", l.Run.ID, "attempt", l.Attempt.No, "why", unlock)
	}
	crashpoint.At("spawn-before-claim")
	if !s.acting() { // the next pass, under the lease again, hands it over again
		claimed()
		return nil
	}
	fence := s.fence()
	claim := model.SpawnClaim{Attempt: l.Ref(), Unit: spec.Name, Boot: s.cfg.BootID, Limits: s.cfg.Limits, ArmedFor: at}
	if job.Engine == engine.NameRestic {
		// Asked once per binary (engine.ResticVersionOf); one that no longer answers records
		// nothing here, and the unit's restic says what is wrong.
		if v, err := engine.ResticVersionOf(ctx, s.cfg.Jobs.ResticBinary); err == nil {
			claim.ResticVersion = v.String()
		}
	}
	got, blocked, err := s.cfg.Store.AttemptClaimSpawn(ctx, fence, claim)
	claimed()
	if err != nil {
		return err
	}
	if blocked != "" {
		return s.cfg.Store.RunSetWaiting(ctx, store.RunSetWaitingParams{RunID: l.Run.ID, Reason: blocked})
	}
	if !got {
		// Another daemon or an earlier spawn has it, or a stop arrived (whose notification wakes
		// the pass): nothing waits for this spawn.
		*settled = true
		return nil
	}
	crashpoint.At("spawn-claimed")
	// Until systemd has the unit, a failure gives the claim back: the next pass claims the same
	// attempt again, rather than waiting out the spawn grace and counting an attempt that never ran.
	// After systemd was asked (mayExist), the unit may exist even though the call failed.
	release := func(err error, mayExist bool) error {
		// Even when the spawn's budget is spent, but bounded: the database may be what hangs.
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Budget)
		defer cancel()
		giveBack := store.AttemptReleaseSpawnClaimParams{Ref: l.Ref(), Unit: spec.Name, MayExist: mayExist}
		if rerr := s.cfg.Store.AttemptReleaseSpawnClaim(relCtx, s.fence(), giveBack); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	if job.DeletesAppendOnly(l.Run) {
		*settled = true
		return s.cfg.Refused(ctx, l, fmt.Sprintf("refused before the unit started: job %s writes its repository append-only, and host %s, where this %s was pinned, is no longer its pruning host (%q): ask for it again",
			job.Name, l.Run.Host, l.Run.Kind, job.Prune.Host))
	}
	if err := prepareDirs(s.cfg.Jobs.StateDir, job, l.Ref()); err != nil {
		return release(fmt.Errorf("prepare run %s attempt %d: %w", l.Run.ID, l.Attempt.No, err), false)
	}
	// Every path the unit makes writable or loads as root is held to the rule again now, however
	// long ago the run was admitted: a path refused ends the attempt before systemd sees it.
	key := credentials.AttemptKey(l.Run.ID, l.Attempt.No)
	if err := jobunit.Guard(s.cfg.Jobs, job, &spec, key, pins(l.Run)...); err != nil {
		_ = credentials.RemoveStaged(s.cfg.Jobs.StateDir, key)
		if safepath.Refused(err) {
			s.cfg.Logger.Warn("run refused: a path of its unit breaks the rule", "run", l.Run.ID, "attempt", l.Attempt.No, "err", err)
			*settled = true
			return s.cfg.Refused(ctx, l, "refused before the unit started: "+err.Error())
		}
		return release(fmt.Errorf("prepare run %s attempt %d: %w", l.Run.ID, l.Attempt.No, err), false)
	}
	// A backup of a job with a file system snapshot reads one taken now, as its unit starts: on
	// whatever ends the attempt before systemd has the unit, it is released with the credentials.
	// Otherwise the daemon's sweep releases it once the attempt has ended (fssnap.Sweeper).
	snapRecords, snapped := fssnap.RecordDir(s.cfg.Jobs.StateDir), false
	snapper := fssnap.Helper{Runner: s.cfg.Jobs.Runner, Binary: s.cfg.Jobs.Binary}
	unstage := func() {
		_ = credentials.RemoveStaged(s.cfg.Jobs.StateDir, key)
		if snapped {
			relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Budget)
			defer cancel()
			if err := snapper.Release(relCtx, snapRecords, key); err != nil {
				s.cfg.Logger.Warn("Btrfs snapshots left for the sweep", "run", l.Run.ID, "attempt", l.Attempt.No, "err", err)
			}
		}
	}
	if job.Backup.FSSnapshot != "" {
		ku, err := unitOf(l.Run)
		if err == nil && ku.readsPaths && spec.Sandbox == nil {
			err = errors.New("a file system snapshot is mounted in the unit's sandbox, and it has none")
		}
		if err == nil && ku.readsPaths {
			// The unit's writable paths (resolved by Guard) and the state directory, where its
			// exit marker writes below the same mounts: no path may hold one of them.
			writes := slices.Clone(spec.Sandbox.ReadWritePaths)
			if state, err := filepath.EvalSymlinks(s.cfg.Jobs.StateDir); err == nil {
				writes = append(writes, state)
			}
			var snaps fssnap.Taken
			if snaps, err = snapper.Take(ctx, snapRecords, key, job.Paths, writes); err == nil {
				// Kept from an earlier spawn whose unit may read them: the sweep releases those.
				snapped = snaps.Fresh
				spec.Sandbox.BindReadOnly = snaps.Binds
			}
		}
		if err != nil {
			unstage()
			if safepath.Refused(err) {
				s.cfg.Logger.Warn("run refused: its file system snapshot cannot be taken", "run", l.Run.ID, "attempt", l.Attempt.No, "err", err)
				*settled = true
				return s.cfg.Refused(ctx, l, "refused before the unit started: "+job.Backup.FSSnapshot+" snapshot: "+err.Error())
			}
			return release(fmt.Errorf("prepare run %s attempt %d: %s snapshot: %w", l.Run.ID, l.Attempt.No, job.Backup.FSSnapshot, err), false)
		}
	}
	// A backup with no ceiling and no history holds nothing yet: what its paths hold is measured
	// now, and its hold is taken from that, or the run pauses where its account cannot hold it.
	if l.Run.BudgetBytes == nil && l.Attempt.HoldBytes == nil && model.AddsToRepository(l.Run.Kind, job.Engine) &&
		len(job.Paths) > 0 && job.Backup.StdinFrom == "" {
		paused, err := s.sizeHold(ctx, fence, &l, job)
		if err != nil {
			unstage()
			return release(err, false)
		}
		if paused {
			unstage()
			*settled = true
			return nil
		}
	}
	// What a local repository holds before the backup starts: its growth is what the attempt
	// added, for the runaway guard and for a settlement without restic's own figure.
	if model.AddsToRepository(l.Run.Kind, job.Engine) {
		// The attempt as the runaway watch gets it (Starting) carries this baseline, not one a
		// start given back earlier left.
		l.Attempt.RepoBytesBefore = nil
		if size, err := ledger.RepoSize(job.Repository); err == nil {
			if err := s.cfg.Store.AttemptSetRepoBaseline(ctx, fence, store.AttemptSetRepoBaselineParams{Ref: l.Ref(), Bytes: size}); err != nil {
				unstage()
				return release(err, false)
			}
			l.Attempt.RepoBytesBefore = &size
		} else if !errors.Is(err, ledger.ErrNotLocal) {
			s.cfg.Logger.Warn("repository not measured; its growth will not be known", "run", l.Run.ID, "err", err)
		}
	}
	// The lease may have been lost since the claim: then systemd is not asked; the claim is given
	// back if the lease is ours again by then, else its next holder judges the attempt.
	if !s.acting() {
		unstage()
		return release(fmt.Errorf("run %s attempt %d not started: %w", l.Run.ID, l.Attempt.No, store.ErrLeaseLost), false)
	}
	watched := l
	watched.Attempt.Unit = spec.Name
	s.cfg.Starting(watched)
	if at != nil {
		return s.arm(ctx, l, spec, *at, release, settled)
	}
	existed, err := s.cfg.Units.Start(ctx, spec)
	if err != nil {
		// The staged credentials stay: a unit systemd may have after all reads them when it
		// starts, and its exit marker or the next spawn of the attempt replaces them.
		if systemd.BadRequest(err) {
			unstage()
			*settled = true
			return s.cfg.Refused(ctx, l, "systemd refused to start the unit: "+err.Error())
		}
		return release(err, true) // systemd could not be asked, or refused for now (shutting down)
	}
	crashpoint.At("spawn-started")
	*settled = true
	s.cfg.Logger.Info("run spawned", "run", l.Run.ID, "attempt", l.Attempt.No, "unit", spec.Name, "existed", existed)
	return s.cfg.Store.AttemptMarkStarted(ctx, s.fence(), store.AttemptMarkStartedParams{Ref: l.Ref(), At: time.Time{}}) // on the database's clock
}

// maxSourceWalk bounds the walk of a first backup's paths; half of the spawn's time left bounds
// it too. A walk cut short falls back to the space used on the paths' filesystems.
const maxSourceWalk = 2 * time.Minute

// sizeHold measures the paths of l's job and takes the attempt's hold from what they hold
// (store.AttemptHoldSize), updating l; paused reports that the run ended paused instead.
func (s *Spawner) sizeHold(ctx context.Context, fence model.Lease, l *model.LiveRun, job model.Job) (paused bool, err error) {
	within := maxSourceWalk
	if deadline, ok := ctx.Deadline(); ok {
		within = min(within, time.Until(deadline)/2)
	}
	walkCtx, cancel := context.WithTimeout(ctx, within)
	started := time.Now()
	src := ledger.MeasureSource(walkCtx, job.Paths)
	cancel()
	h, err := s.cfg.Store.AttemptHoldSize(ctx, fence, store.AttemptHoldSizeParams{Attempt: l.Ref(), Source: src})
	if err != nil || !h.Taken {
		return false, err
	}
	s.cfg.Logger.Info("first backup sized from its paths", "run", l.Run.ID, "attempt", l.Attempt.No, "source", ledger.FormatSize(src.Bytes),
		"entries", src.Entries, "bound", src.Bound, "unmeasured", src.Unmeasured, "took", time.Since(started).Round(time.Millisecond),
		"budget", ledger.FormatSize(h.Budget))
	if h.Paused != "" {
		s.cfg.Logger.Warn("run paused before its unit started", "run", l.Run.ID, "attempt", l.Attempt.No, "reason", h.Paused)
		return true, nil
	}
	l.Run.BudgetBytes, l.Attempt.HoldBytes = &h.Budget, &h.Bytes
	return false, nil
}

// arm has systemd start the claimed attempt's unit at at. The run stays queued until the unit
// is there: a later pass marks it running. A manager that refuses the timer gets no more timers
// from this daemon, and the attempt is started at its time like any other.
func (s *Spawner) arm(ctx context.Context, l model.LiveRun, spec systemd.Spec, at time.Time, release func(error, bool) error, settled *bool) error {
	existed, err := s.cfg.Units.Arm(ctx, spec, at)
	if err != nil {
		if systemd.BadRequest(err) && !s.armRefused.Swap(true) {
			s.cfg.Logger.Warn("systemd refused a transient timer; runs start at their time instead", "run", l.Run.ID, "err", err)
		}
		return release(err, true)
	}
	crashpoint.At("spawn-armed")
	*settled = true
	s.cfg.Logger.Info("run armed", "run", l.Run.ID, "attempt", l.Attempt.No, "unit", spec.Name, "at", at, "existed", existed)
	return nil
}

// prepareDirs creates the attempt's journal directory and the job's cache, owned by the job's user
// so its units can write there, and the markers directory, which only the privileged
// ExecStopPost writes.
func prepareDirs(stateDir string, job model.Job, ref model.AttemptRef) error {
	if err := os.MkdirAll(filepath.Dir(systemd.MarkerPath(stateDir, ref.Run, ref.No)), 0o755); err != nil {
		return err
	}
	uid, gid, err := jobunit.Identity(job)
	if err != nil {
		return err
	}
	journalDir := filepath.Dir(jobunit.JournalPath(stateDir, ref.Run, ref.No))
	if err := os.MkdirAll(filepath.Dir(journalDir), 0o755); err != nil {
		return err
	}
	if err := jobunit.OwnedDir(journalDir, uid, gid, 0o755); err != nil {
		return err
	}
	return jobunit.PrepareCache(stateDir, job)
}

// pins are the writable paths of a run's units that must still be what its admission checked
// (its kind's kindUnit.pins): a restore's target.
func pins(r model.Run) []jobunit.Pin {
	if u, err := unitOf(r); err == nil && u.pins != nil {
		return u.pins(r)
	}
	return nil
}
