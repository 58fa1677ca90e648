package spawn

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/journallog"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/systemd"
)

// AttemptSpec builds the transient unit of one attempt of a job as the daemon starts it: restic
// removes stale locks first only where the repository's history says one may be left (see
// staleLock), and why is that reason ("" if none). Exported so tests start what the daemon starts.
func AttemptSpec(ctx context.Context, st Store, jobs jobunit.Config, job model.Job, run model.Run, attempt int) (spec systemd.Spec, why string, err error) {
	if job.Engine == engine.NameRestic {
		// A copy uses two repositories: a lock either may hold is removed from both.
		for _, repo := range job.Repositories(run) {
			endings, err := st.AttemptEndingsSinceLastStart(ctx, repo)
			if err != nil {
				return systemd.Spec{}, "", err
			}
			if why = staleLock(endings); why != "" {
				break
			}
		}
		if why == "" && attempt > 1 {
			// A restart follows an interruption: a reboot's stop has been seen to leave restic's
			// lock behind although restic exited 130, as after a SIGINT it honoured.
			why = fmt.Sprintf("attempt %d of run %s was interrupted", attempt-1, run.ID)
		}
	}
	spec, err = unitSpec(jobs, job, run, attempt, why != "")
	return spec, why, err
}

// UnitSpec builds the transient unit of one attempt of a job whose repository holds no lock that
// may be stale, as the daemon starts it after clean endings. Exported so benchmarks start it; it
// panics for a run of no kind spawn knows (unitOf).
func UnitSpec(jobs jobunit.Config, job model.Job, run model.Run, attempt int) systemd.Spec {
	spec, err := unitSpec(jobs, job, run, attempt, false)
	if err != nil {
		panic(err)
	}
	return spec
}

// staleLock says why a repository may hold a lock that no live restic owns, from how the attempts
// on it ended since the last one started (whose `restic unlock` ran after them): one ended without
// restic's own cleanup. "" if none did. restic removes its lock when it exits, with an error too,
// and on SIGINT (130); killed by a signal, with no marker (a power loss, a vanished unit), or
// exiting 11 (it could not lock: the lock it met may be stale), it may have left one.
func staleLock(endings []model.AttemptEnd) string {
	for _, e := range endings {
		if e.ServiceResult == "" {
			return fmt.Sprintf("attempt %d of run %s ended without an exit marker", e.Attempt, e.RunID)
		}
		if e.ExitCode != "exited" {
			return fmt.Sprintf("attempt %d of run %s ended %s %s (%s)", e.Attempt, e.RunID, e.ExitCode, e.ExitStatus, e.ServiceResult)
		}
		switch e.ExitStatus {
		case "0", "1", "3", "10", "12", "130":
			continue
		}
		return fmt.Sprintf("attempt %d of run %s exited %s (%s)", e.Attempt, e.RunID, e.ExitStatus, e.ServiceResult)
	}
	return ""
}

// unitBuild is one attempt's unit as unitSpec builds it, which a kind's kindUnit adds to.
type unitBuild struct {
	cfg     jobunit.Config
	job     model.Job // the job; the unit works on job.For(run)
	run     model.Run
	spec    *systemd.Spec
	ej      engine.Job // the repository the run works on, as restic is given it
	source  engine.Job // the job's own repository, for a kind that reads it too (a copy's source)
	restic  engine.Restic
	scratch string // the attempt's own directory, which only this unit writes
	// exec is `holdfast exec`'s arguments so far.
	exec []string
	// unlocks are the repositories whose stale locks the unit removes ("--before" and
	// "--after-interrupt" for the one it works on, a copy's source with flags of its own).
	unlocks []unlockRepo
}

// unlockRepo is a repository whose stale lock `holdfast exec` removes: before the engine with the
// flag before (when the spawn found one may be left) and after an interruption with after.
type unlockRepo struct {
	before, after string
	repo          engine.Job
}

// kindUnit is what a unit of one kind adds to what every unit shares (unitSpec): one per kind,
// in spawn/kind_<kind>.go, registered in kindUnits (TestEveryKindHasAUnit). Each function may be
// nil: the kind adds nothing there.
type kindUnit struct {
	// readsPaths says the unit reads the job's paths: from a file system snapshot of them, taken
	// by the spawn, where the job asks for one (package fssnap).
	readsPaths bool
	// writable is what the unit writes besides its journal directory, its cache and its
	// repository: it is made writable in the sandbox.
	writable func(job model.Job, run model.Run) []string
	// prepare adds to the unit before `holdfast exec`'s arguments are taken from it (a copy's
	// source password as a credential).
	prepare func(b *unitBuild)
	// execArgs are `holdfast exec`'s arguments for the kind, for any engine (a backup's hooks).
	execArgs func(job model.Job, run model.Run) []string
	// restic is restic's argv for a restic job's run; it may add to b.exec, b.unlocks and the
	// unit (a restore's capabilities).
	restic func(b *unitBuild) []string
	// pins are the writable paths that must still be what the run's admission checked.
	pins func(run model.Run) []jobunit.Pin
}

// kindUnits is each kind's kindUnit, as the kind_<kind>.go files register them.
var kindUnits = map[model.Kind]kindUnit{}

// registerUnit registers a kind's unit, once.
func registerUnit(k model.Kind, u kindUnit) {
	if _, dup := kindUnits[k]; dup {
		panic("spawn: the unit of kind " + string(k) + " is registered twice")
	}
	kindUnits[k] = u
}

// unitOf is the kindUnit of a run's kind ("" a backup's).
func unitOf(run model.Run) (kindUnit, error) {
	u, ok := kindUnits[cmp.Or(run.Kind, model.KindBackup)]
	if !ok {
		return kindUnit{}, fmt.Errorf("run %s: no unit for a run of kind %q", run.ID, run.Kind)
	}
	return u, nil
}

func unitSpec(cfg jobunit.Config, job model.Job, run model.Run, attempt int, unlock bool) (systemd.Spec, error) {
	ku, err := unitOf(run)
	if err != nil {
		return systemd.Spec{}, err
	}
	name := systemd.UnitName(job.Name, run.ID, attempt)
	writable := []string{filepath.Dir(jobunit.JournalPath(cfg.StateDir, run.ID, attempt))}
	if ku.writable != nil {
		writable = append(writable, ku.writable(job, run)...)
	}
	// Every kind writes its repository, if only restic's lock: a copy, and a forget of the copy's
	// plan, the job's copy repository.
	spec, ej := jobunit.Spec(cfg, job.For(run), name, true, writable...)
	b := &unitBuild{cfg: cfg, job: job, run: run, spec: &spec, ej: ej, restic: engine.Restic{Binary: cfg.ResticBinary},
		scratch: writable[0], unlocks: []unlockRepo{{"--before", "--after-interrupt", ej}}}
	if ku.prepare != nil {
		ku.prepare(b)
	}
	b.exec = []string{cfg.Binary, "exec",
		"--run", run.ID.String(), "--attempt", strconv.Itoa(attempt),
		"--journal", jobunit.JournalPath(cfg.StateDir, run.ID, attempt),
		"--engine", job.Engine, "--kind", run.Operation()}
	b.exec = append(b.exec, jobunit.CredentialArgs(spec)...)
	if ku.execArgs != nil {
		b.exec = append(b.exec, ku.execArgs(job, run)...)
	}
	spec.Description = fmt.Sprintf("holdfast %s %s, run %s attempt %d", cmp.Or(run.Kind, model.KindBackup), job.Name, run.ID, attempt)
	spec.ExecStopPost = []string{cfg.Binary, "marker", "--state-dir", cfg.StateDir,
		"--run", run.ID.String(), "--attempt", strconv.Itoa(attempt), "--unit", name}
	spec.TimeoutStop = 2 * time.Minute
	spec.RuntimeMax = job.RuntimeMax
	spec.IOSchedulingClass = job.IOSchedulingClass
	// The fields the daemon's own lines about the run carry under systemd (its log keys).
	spec.LogExtraFields = map[string]string{
		journallog.FieldName("job"): job.Name, journallog.FieldName("run"): run.ID.String(),
		journallog.FieldName("attempt"): strconv.Itoa(attempt),
	}
	if job.Engine != engine.NameRestic {
		spec.ExecStart = append(append(b.exec, "--"), job.Command...)
		return spec, nil
	}
	if ku.restic == nil {
		return systemd.Spec{}, fmt.Errorf("run %s: a run of kind %s has no restic command", run.ID, run.Kind)
	}
	argv := ku.restic(b)
	// Stale locks go first, in the unit's own identity and sandbox: `restic unlock` removes only
	// locks of processes that are gone (or older than 30 minutes), never a live backup's. And
	// after a signal interrupted restic: restic 0.14 exiting 130 has been seen to leave its lock.
	// A copy's source too, with the source's password.
	for _, u := range b.unlocks {
		for _, arg := range b.restic.UnlockArgv(u.repo) {
			if unlock {
				b.exec = append(b.exec, u.before, arg)
			}
			b.exec = append(b.exec, u.after, arg)
		}
	}
	spec.ExecStart = append(append(b.exec, "--"), argv...)
	// restic 0.14 leaves its lock behind on SIGTERM; on SIGINT it removes it and exits 130.
	spec.KillSignal = syscall.SIGINT
	return spec, nil
}
