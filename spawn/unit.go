package spawn

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/journallog"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runner"
	"github.com/holdfast-backup/holdfast/store"
)

// AttemptSpec builds the transient unit of one attempt of a job as the daemon starts it: restic
// removes stale locks first only where the repository's history says one may be left (see
// staleLock), and why is that reason ("" if none). Exported so tests start what the daemon starts.
func AttemptSpec(ctx context.Context, st Store, jobs jobunit.Config, job model.Job, run model.Run, attempt int) (spec runner.Spec, why string, err error) {
	if job.Engine == engine.NameRestic {
		// A copy uses two repositories: a lock either may hold is removed from both.
		for _, repo := range job.Repositories(run) {
			endings, err := st.EndingsSinceLastStart(ctx, repo)
			if err != nil {
				return runner.Spec{}, "", err
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
	return unitSpec(jobs, job, run, attempt, why != ""), why, nil
}

// UnitSpec builds the transient unit of one attempt of a job whose repository holds no lock that
// may be stale, as the daemon starts it after clean endings. Exported so benchmarks start it.
func UnitSpec(jobs jobunit.Config, job model.Job, run model.Run, attempt int) runner.Spec {
	return unitSpec(jobs, job, run, attempt, false)
}

// staleLock says why a repository may hold a lock that no live restic owns, from how the attempts
// on it ended since the last one started (whose `restic unlock` ran after them): one ended without
// restic's own cleanup. "" if none did. restic removes its lock when it exits, with an error too,
// and on SIGINT (130); killed by a signal, with no marker (a power loss, a vanished unit), or
// exiting 11 (it could not lock: the lock it met may be stale), it may have left one.
func staleLock(endings []store.AttemptEnd) string {
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

func unitSpec(cfg jobunit.Config, job model.Job, run model.Run, attempt int, unlock bool) runner.Spec {
	name := runner.UnitName(job.Name, run.ID, attempt)
	writable := []string{filepath.Dir(jobunit.JournalPath(cfg.StateDir, run.ID, attempt))}
	if run.Kind == model.KindRestore {
		// The target is made, as the job's user, when the restore is asked for: the sandbox
		// makes writable only what exists when the unit starts.
		writable = append(writable, run.Restore.Target)
	}
	hooks := run.Operation() == engine.OpBackup && len(job.BeforeHooks)+len(job.AfterHooks) > 0
	if hooks {
		// Hooks prepare what the backup reads (a dump, a flushed file): its paths, and nothing else.
		writable = append(writable, job.Paths...)
	}
	// Every kind writes its repository, if only restic's lock: a copy, and a forget of the copy's
	// plan, the job's copy repository.
	spec, ej := jobunit.Spec(cfg, job.For(run), name, true, writable...)
	var copyFrom engine.Job
	if run.Kind == model.KindCopy {
		copyFrom = copySource(cfg, job, &spec)
	}
	restic := engine.Restic{Binary: cfg.ResticBinary}
	execArgv := []string{cfg.Binary, "exec",
		"--run", run.ID.String(), "--attempt", strconv.Itoa(attempt),
		"--journal", jobunit.JournalPath(cfg.StateDir, run.ID, attempt),
		"--engine", job.Engine, "--kind", run.Operation()}
	execArgv = append(execArgv, jobunit.CredentialArgs(spec)...)
	if run.Operation() == engine.OpBackup && job.StdinFrom != "" {
		execArgv = append(execArgv, "--stdin-from", job.StdinFrom)
	}
	if hooks {
		for _, h := range job.BeforeHooks {
			execArgv = append(execArgv, "--hook-before", h)
		}
		for _, h := range job.AfterHooks {
			execArgv = append(execArgv, "--hook-after", h)
		}
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
		spec.ExecStart = append(append(execArgv, "--"), job.Command...)
		return spec
	}
	argv := restic.BackupArgv(ej, run.ID)
	switch run.Kind {
	case model.KindPrune:
		argv = restic.PruneArgv(ej)
	case model.KindForget:
		argv = restic.ForgetArgv(ej, run.ForgetIDs)
	case model.KindCopy:
		argv = restic.CopyArgv(ej, copyFrom, run.CopySnapshot)
	case model.KindVerify:
		argv = restic.CheckArgv(ej, run.Verify.ReadDataSubset)
		if n := run.Verify.DrillFiles; n > 0 {
			// The drill runs restic itself, in the unit, as the job's user; its scratch directory
			// lies in the attempt's own, which only this unit writes.
			argv = append([]string{cfg.Binary, "drill", "--tag", engine.JobTag(job.Name), "--files", strconv.Itoa(n),
				"--scratch", filepath.Join(writable[0], "drill"), "--"}, restic.GlobalArgv(ej)...)
		}
	case model.KindRestore:
		rs := run.Restore
		argv = restic.RestoreArgv(ej, rs.Snapshot, rs.Target, rs.Includes, false)
		// restic 0.14 reports no progress of a restore: what is under the target is measured.
		execArgv = append(execArgv, "--progress-dir", rs.Target, "--restore-target", rs.Target)
		// The sandbox refuses setuid/setgid bits, which restic does not always say it lost:
		// exec compares restic's listing of the snapshot with the target.
		for _, arg := range restic.ListArgv(ej, rs.Snapshot) {
			execArgv = append(execArgv, "--restore-list", arg)
		}
		if rs.TotalBytes != nil && rs.TotalFiles != nil {
			execArgv = append(execArgv, "--progress-total-bytes", strconv.FormatInt(*rs.TotalBytes, 10),
				"--progress-total-files", strconv.FormatInt(*rs.TotalFiles, 10))
		}
		if uid, _, err := jobunit.Identity(job); err == nil && uid == 0 && spec.Sandbox != nil {
			// A root job's restore gives files back to their owners with their modes.
			spec.Sandbox.Capabilities = append(spec.Sandbox.Capabilities, "CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE")
			spec.Sandbox.Chown = true
		}
	}
	// Stale locks go first, in the unit's own identity and sandbox: `restic unlock` removes only
	// locks of processes that are gone (or older than 30 minutes), never a live backup's. And
	// after a signal interrupted restic: restic 0.14 exiting 130 has been seen to leave its lock.
	for _, arg := range restic.UnlockArgv(ej) {
		if unlock {
			execArgv = append(execArgv, "--before", arg)
		}
		execArgv = append(execArgv, "--after-interrupt", arg)
	}
	if run.Kind == model.KindCopy {
		// The source's lock too, with the source's password.
		for _, arg := range restic.UnlockArgv(copyFrom) {
			if unlock {
				execArgv = append(execArgv, "--before-source", arg)
			}
			execArgv = append(execArgv, "--after-interrupt-source", arg)
		}
	}
	spec.ExecStart = append(append(execArgv, "--"), argv...)
	// restic 0.14 leaves its lock behind on SIGTERM; on SIGINT it removes it and exits 130.
	spec.KillSignal = syscall.SIGINT
	return spec
}

// copySource is the job's own repository as a copy's source: its password reaches the unit as a
// credential of its own under the system manager (else by its path), and a local repository is
// made writable for restic's lock on it.
func copySource(cfg jobunit.Config, job model.Job, spec *runner.Spec) engine.Job {
	_, src := jobunit.Spec(cfg, job, "", false)
	if cfg.Runner != nil && cfg.Runner.SystemManager() {
		spec.LoadCredentials = append(spec.LoadCredentials, runner.Credential{Name: credentials.FromPassword, Path: job.PasswordFile})
	}
	if dir, local := ledger.Local(job.Repository); local && spec.Sandbox != nil {
		spec.Sandbox.ReadWritePaths = append(spec.Sandbox.ReadWritePaths, dir)
	}
	return src
}
