package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	jobdef "github.com/holdfast-backup/holdfast/job"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/journallog"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runner"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
)

// JournalPath is where an attempt's run journal lives under the state directory.
func JournalPath(stateDir string, run uuid.UUID, attempt int) string {
	return filepath.Join(stateDir, "runs", run.String(), "a"+strconv.Itoa(attempt), "journal.jsonl")
}

// JournalSource is how the daemon opens an attempt's journal: below the state directory,
// following no link, and only if uid (the job's user; 0 for root) owns it.
func JournalSource(stateDir string, run uuid.UUID, attempt, uid int) journal.Source {
	rel, _ := filepath.Rel(stateDir, JournalPath(stateDir, run, attempt))
	return journal.Source{Dir: stateDir, Name: rel, UID: uid}
}

// CacheDir is the restic cache of a job under the identity it runs as. Keyed by uid, a job moved
// to another user starts a cache of its own instead of finding one a previous identity owns.
func CacheDir(stateDir string, uid int, job string) string {
	return filepath.Join(stateDir, "cache", strconv.Itoa(uid), job)
}

// prepareCache makes the job's cache directory for the identity it runs as: the cache root and
// the per-uid directories are root's, the job's own directory is its user's alone.
func prepareCache(stateDir string, job model.Job) error {
	uid, gid, err := jobIdentity(job)
	if err != nil {
		return err
	}
	dir := CacheDir(stateDir, uid, job.Name)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	return ownedDir(dir, uid, gid, 0o700)
}

// ownedDir makes dir a directory owned by uid:gid with mode perm, refusing anything else found in
// its place (a link included). Its parent must be root's, so nobody else can swap it meanwhile.
func ownedDir(dir string, uid, gid int, perm os.FileMode) error {
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s)", dir, fi.Mode().Type())
	}
	if err := os.Lchown(dir, uid, gid); err != nil {
		return err
	}
	return os.Chmod(dir, perm)
}

// jobIdentity resolves the uid and gid a job's units run as.
func jobIdentity(job model.Job) (uid, gid int, err error) { return userIdentity(job.User) }

// userIdentity resolves a job's user as systemd's User= does (a name or a number): root for "".
func userIdentity(name string) (uid, gid int, err error) {
	if name == "" {
		return 0, 0, nil
	}
	u, err := jobdef.LookupUser(name)
	if err != nil {
		return 0, 0, fmt.Errorf("job user %s: %w", name, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid, nil
}

// jobUnit is what every unit touching a job's files shares, backups and restic queries alike: the
// job's user, a sandbox in which only the job's repository, cache and journal are writable, and
// its secrets as credentials. It also returns the engine's view of the job inside such a unit.
// The repository is writable only where the unit writes it (a backup, forget or prune).
func jobUnit(cfg Config, job model.Job, name string, writesRepository bool, writable ...string) (runner.Spec, engine.Job) {
	uid, _, err := jobIdentity(job)
	if err != nil {
		uid = -1 // the spawn fails on the missing user before this unit is started
	}
	ej := engine.Job{Name: job.Name, Repository: job.Repository, Paths: job.Paths, Excludes: job.Excludes, LimitUpload: job.LimitUploadKiB,
		CacheDir: CacheDir(cfg.StateDir, uid, job.Name)}
	spec := runner.Spec{
		Name:             name,
		User:             job.User,
		Group:            job.Group,
		Nice:             job.Nice,
		SyslogIdentifier: "holdfast-" + job.Name,
		WorkingDirectory: "/",
	}
	if job.Engine == engine.NameCommand {
		return spec, ej
	}

	// A user manager hands no credentials (measured on systemd 252: the unit's credentials
	// directory stays empty, and with User= it is refused): there the password file is named by
	// its path, which the job's user must be able to read, and the environment file is read by
	// the manager into the unit's environment.
	if cfg.Runner != nil && cfg.Runner.SystemManager() {
		spec.LoadCredentials = []runner.Credential{{Name: credentials.Password, Path: job.PasswordFile}}
		if job.EnvFile != "" {
			spec.LoadCredentials = append(spec.LoadCredentials, runner.Credential{Name: credentials.Env, Path: job.EnvFile})
		}
	} else {
		ej.PasswordFile = job.PasswordFile
		if job.EnvFile != "" {
			spec.EnvironmentFiles = []string{job.EnvFile}
		}
	}

	rw := append([]string{ej.CacheDir}, writable...)
	if dir, local := ledger.Local(job.Repository); local && writesRepository {
		rw = append(rw, dir)
	}
	sandbox := &runner.Sandbox{ReadOnlySystem: true, ReadWritePaths: rw,
		PrivateTmp: !anyUnderTmp(append([]string{cfg.Binary, cfg.ResticBinary, cfg.StateDir}, append(rw, job.Paths...)...))}
	if !sandbox.PrivateTmp {
		// The host's /tmp is read-only in the sandbox; restic's temporary packs go to the cache.
		spec.Environment = append(spec.Environment, "TMPDIR="+ej.CacheDir)
	}
	if uid == 0 {
		// A root backup reads every file; it never needs to write where its owner could not.
		sandbox.Capabilities = []string{"CAP_DAC_READ_SEARCH"}
	}
	spec.Sandbox = sandbox
	return spec, ej
}

// credentialArgs are the flags that make `holdfast exec` and `holdfast credexec` read the unit's
// credentials into the engine's environment.
func credentialArgs(spec runner.Spec) []string {
	var args []string
	for _, c := range spec.LoadCredentials {
		switch c.Name {
		case credentials.Password:
			args = append(args, "--password-credential")
		case credentials.Env:
			args = append(args, "--env-credential")
		}
	}
	return args
}

// anyUnderTmp reports whether a path lies in /tmp or /var/tmp, which a private /tmp would hide.
func anyUnderTmp(paths []string) bool {
	for _, p := range paths {
		for _, tmp := range []string{"/tmp", "/var/tmp"} {
			if p == tmp || strings.HasPrefix(p, tmp+"/") {
				return true
			}
		}
	}
	return false
}

// AttemptSpec builds the transient unit of one attempt of a job as the daemon starts it: restic
// removes stale locks first only where the repository's history says one may be left (see
// staleLock), and why is that reason ("" if none). Exported so tests start what the daemon starts.
func AttemptSpec(ctx context.Context, cfg Config, job model.Job, run model.Run, attempt int) (spec runner.Spec, why string, err error) {
	if job.Engine == engine.NameRestic {
		endings, err := cfg.Store.EndingsSinceLastStart(ctx, job.Repository)
		if err != nil {
			return runner.Spec{}, "", err
		}
		why = staleLock(endings)
		if why == "" && attempt > 1 {
			// A restart follows an interruption: a reboot's stop has been seen to leave restic's
			// lock behind although restic exited 130, as after a SIGINT it honoured.
			why = fmt.Sprintf("attempt %d of run %s was interrupted", attempt-1, run.ID)
		}
	}
	return unitSpec(cfg, job, run, attempt, why != ""), why, nil
}

// UnitSpec builds the transient unit of one attempt of a job whose repository holds no lock that
// may be stale, as the daemon starts it after clean endings. Exported so benchmarks start it.
func UnitSpec(cfg Config, job model.Job, run model.Run, attempt int) runner.Spec {
	return unitSpec(cfg, job, run, attempt, false)
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

func unitSpec(cfg Config, job model.Job, run model.Run, attempt int, unlock bool) runner.Spec {
	name := runner.UnitName(job.Name, run.ID, attempt)
	journalDir := filepath.Dir(JournalPath(cfg.StateDir, run.ID, attempt))
	spec, ej := jobUnit(cfg, job, name, true, journalDir)
	restic := engine.Restic{Binary: cfg.ResticBinary}
	execArgv := []string{cfg.Binary, "exec",
		"--run", run.ID.String(), "--attempt", strconv.Itoa(attempt),
		"--journal", JournalPath(cfg.StateDir, run.ID, attempt),
		"--engine", job.Engine}
	execArgv = append(execArgv, credentialArgs(spec)...)
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
	spec.ExecStart = append(append(execArgv, "--"), argv...)
	// restic 0.14 leaves its lock behind on SIGTERM; on SIGINT it removes it and exits 130.
	spec.KillSignal = syscall.SIGINT
	return spec
}

// maxQueryOutput bounds what one restic query may print: a listing of about 100,000 snapshots.
const maxQueryOutput = 64 << 20

// JobRestic returns restic as it runs for questions about a job's repository (its snapshots,
// their sizes): each command in a short unit of its own with the job's user, sandbox, cache and
// credentials, never as root on files the job's user controls, its output bounded.
func JobRestic(cfg Config, job model.Job) (engine.Restic, engine.Job) {
	return jobRestic(cfg, job, false)
}

// jobRestic is JobRestic, in units that may write the repository if writes (restic unlock).
func jobRestic(cfg Config, job model.Job, writes bool) (engine.Restic, engine.Job) {
	_, ej := jobUnit(cfg, job, "", writes)
	return engine.Restic{Binary: cfg.ResticBinary, Run: func(ctx context.Context, argv []string) ([]byte, error) {
		if err := prepareCache(cfg.StateDir, job); err != nil {
			return nil, fmt.Errorf("cache of job %s: %w", job.Name, err)
		}
		spec, _ := jobUnit(cfg, job, runner.QueryUnitName(job.Name, uuid.New()), writes)
		spec.Description = fmt.Sprintf("holdfast %s: restic %s", job.Name, argv[len(argv)-1])
		spec.ExecStart = append(append(append([]string{cfg.Binary, "credexec"}, credentialArgs(spec)...), "--"), argv...)
		res, err := cfg.Runner.Output(ctx, spec, maxQueryOutput)
		if err != nil {
			return nil, err
		}
		if res.ExitStatus != 0 || res.Killed {
			return nil, fmt.Errorf("restic exited with status %d: %s", res.ExitStatus, textsafe.String(fatalLine(string(res.Stderr))))
		}
		return res.Stdout, nil
	}}, ej
}

// fatalLine is the line of restic's standard error that says why it failed: its "Fatal:" line,
// else its last (warnings, such as an unusable cache, come first).
func fatalLine(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "Fatal:") {
			return l
		}
	}
	return lines[len(lines)-1]
}
