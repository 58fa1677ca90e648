// Package jobunit is what every transient unit touching a job's files shares, backups and restic's
// questions about the job's repository alike: the job's user, a sandbox in which only the job's
// repository, cache and journal are writable, its secrets as credentials, and its restic cache
// under the identity it runs as (Spec, PrepareCache). Restic runs those questions each in a short
// unit of its own with all of that, never as root on files the job's user controls, its output
// bounded. It knows nothing about runs or PostgreSQL: reconcile builds its attempts' units on
// Spec, and the snapshot inventory asks restic through Restic.
package jobunit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/textsafe"
)

// DefaultResticBinary is the restic executable the units run when none is named.
const DefaultResticBinary = "restic" // resolved in PATH

// Runner is what a job's units ask of systemd: Restic runs its query units through Output, and
// Spec and the spawner build a unit's credentials for the manager SystemManager says it is. The
// daemon and the CLI give a *systemd.Client.
type Runner interface {
	// SystemManager reports whether the manager is the system's, the only one that hands
	// credentials to a unit with User=.
	SystemManager() bool
	// Stream runs s once, handing its standard output to consume as it comes (systemd.Client.Stream).
	Stream(ctx context.Context, s systemd.Spec, consume func(stdout io.Reader) error) (systemd.Result, error)
}

// Config is what a job's units are made from.
type Config struct {
	// Runner starts the units (Restic's query units; Spec only asks it which manager it is).
	// Without one, Spec builds units as for a user manager; Restic's queries need one.
	Runner Runner
	// StateDir holds the caches (and the daemon's markers and run journals); it must be the same
	// path inside the units.
	StateDir string
	// Binary is the holdfast executable the units run (`holdfast credexec`, `holdfast exec`).
	Binary string
	// ResticBinary is the restic executable the units run; "" runs restic in PATH.
	ResticBinary string
}

// CacheDir is the restic cache of a job under the identity it runs as. Keyed by uid, a job moved
// to another user starts a cache of its own instead of finding one a previous identity owns.
func CacheDir(stateDir string, uid int, job string) string {
	return filepath.Join(stateDir, "cache", strconv.Itoa(uid), job)
}

// PrepareCache makes the job's cache directory for the identity it runs as: the cache root and
// the per-uid directories are root's, the job's own directory is its user's alone.
func PrepareCache(stateDir string, job model.Job) error {
	uid, gid, err := Identity(job)
	if err != nil {
		return err
	}
	dir := CacheDir(stateDir, uid, job.Name)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	return OwnedDir(dir, uid, gid, 0o700)
}

// OwnedDir makes dir a directory owned by uid:gid with mode perm, refusing anything else found in
// its place (a link included). Its parent must be root's, so nobody else can swap it meanwhile.
func OwnedDir(dir string, uid, gid int, perm os.FileMode) error {
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

// Identity resolves the uid and gid a job's units run as.
func Identity(job model.Job) (uid, gid int, err error) { return UserIdentity(job.User) }

// UserIdentity resolves a job's user as systemd's User= does (a name or a number): root for "".
func UserIdentity(name string) (uid, gid int, err error) {
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

// Spec is what every unit touching a job's files shares, backups and restic queries alike: the
// job's user, a sandbox in which only the job's repository, cache and journal are writable, and
// its secrets as credentials. It also returns the engine's view of the job inside such a unit.
// The repository is writable only where the unit writes it (a backup, forget or prune).
func Spec(cfg Config, job model.Job, name string, writesRepository bool, writable ...string) (systemd.Spec, engine.Job) {
	uid, _, err := Identity(job)
	if err != nil {
		uid = -1 // the spawn fails on the missing user before this unit is started
	}
	ej := engine.Job{Name: job.Name, Repository: job.ResticRepository(), Paths: job.Paths, Excludes: job.Excludes, LimitUpload: job.LimitUploadKiB,
		CacheDir: CacheDir(cfg.StateDir, uid, job.Name), StdinFilename: job.Backup.StdinFilename}
	spec := systemd.Spec{
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
		spec.LoadCredentials = []systemd.Credential{{Name: credentials.Password, Path: job.PasswordFile}}
		if job.EnvFile != "" {
			spec.LoadCredentials = append(spec.LoadCredentials, systemd.Credential{Name: credentials.Env, Path: job.EnvFile})
		}
	} else {
		ej.PasswordFile = job.PasswordFile
		if job.EnvFile != "" {
			spec.EnvironmentFiles = []string{job.EnvFile}
		}
	}

	rw := append([]string{ej.CacheDir}, writable...)
	if dir, local := ledger.Local(job.ResticRepository()); local && writesRepository {
		rw = append(rw, dir)
	}
	// A stream's producer may talk to its server through a socket in the host's /tmp (MySQL's).
	sandbox := &systemd.Sandbox{ReadOnlySystem: true, ReadWritePaths: rw,
		PrivateTmp: job.Backup.StdinFrom == "" && !anyUnderTmp(append([]string{cfg.Binary, cfg.ResticBinary, cfg.StateDir}, append(rw, job.Paths...)...))}
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

// CredentialArgs are the flags that make `holdfast exec` and `holdfast credexec` read the unit's
// credentials into the engine's environment.
func CredentialArgs(spec systemd.Spec) []string {
	var args []string
	for _, c := range spec.LoadCredentials {
		switch c.Name {
		case credentials.Password:
			args = append(args, "--password-credential")
		case credentials.Env:
			args = append(args, "--env-credential")
		case credentials.FromPassword:
			args = append(args, "--from-password-credential")
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

// maxQueryOutput bounds what one restic query may print: a listing of about 100,000 snapshots.
const maxQueryOutput = 64 << 20

// Restic returns restic as it runs for questions about a job's repository (its snapshots, their
// sizes, their trees): each command in a short unit of its own with the job's user, sandbox, cache
// and credentials, never as root on files the job's user controls; an answer read whole (Run) is
// bounded, one streamed (Stream) is read as it comes. The units may write the repository only if
// writesRepository (restic unlock).
func Restic(cfg Config, job model.Job, writesRepository bool) (engine.Restic, engine.Job) {
	_, ej := Spec(cfg, job, "", writesRepository)
	stream := func(ctx context.Context, argv []string, consume func(io.Reader) error) error {
		if err := PrepareCache(cfg.StateDir, job); err != nil {
			return fmt.Errorf("cache of job %s: %w", job.Name, err)
		}
		spec, _ := Spec(cfg, job, systemd.QueryUnitName(job.Name, uuid.New()), writesRepository)
		key := stageKey(spec.Name)
		defer credentials.RemoveStaged(cfg.StateDir, key) // the unit has ended: its output was read to its end
		if err := Guard(cfg, job, &spec, key); err != nil {
			return fmt.Errorf("restic's unit for job %s refused: %w", job.Name, err)
		}
		spec.Description = fmt.Sprintf("holdfast %s: restic %s", job.Name, queryVerb(argv))
		spec.ExecStart = append(append(append([]string{cfg.Binary, "credexec"}, CredentialArgs(spec)...), "--"), argv...)
		res, err := cfg.Runner.Stream(ctx, spec, consume)
		if err != nil {
			return err
		}
		if res.ExitStatus != 0 || res.Killed {
			return fmt.Errorf("restic exited with status %d: %s", res.ExitStatus, textsafe.String(fatalLine(string(res.Stderr))))
		}
		if err := engine.QueryPartial(res.Stderr); err != nil {
			return errors.New(textsafe.String(err.Error()))
		}
		return nil
	}
	return engine.Restic{Binary: cfg.ResticBinary,
		Run: func(ctx context.Context, argv []string) ([]byte, error) {
			var out []byte
			err := stream(ctx, argv, func(stdout io.Reader) error {
				var err error
				out, err = systemd.ReadAtMost(stdout, maxQueryOutput)
				return err
			})
			return out, err
		},
		Stream: stream,
	}, ej
}

// queryVerb is the restic command of a query's argv, for the unit's description: the first
// argument that is neither an option nor an option's value. What follows it (a path, a pattern)
// is the job's user's text and stays out of the description.
func queryVerb(argv []string) string {
	for i := 1; i < len(argv); i++ {
		switch a := argv[i]; {
		case a == "--repo" || a == "--password-file" || a == "--limit-upload" || a == "--cache-dir":
			i++
		case !strings.HasPrefix(a, "-"):
			return a
		}
	}
	return "query"
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

// JournalPath is where an attempt's run journal lives under the state directory.
func JournalPath(stateDir string, run uuid.UUID, attempt int) string {
	return filepath.Join(stateDir, journalName(run, attempt))
}

// journalName is JournalPath relative to the state directory.
func journalName(run uuid.UUID, attempt int) string {
	return "runs/" + run.String() + "/a" + strconv.Itoa(attempt) + "/journal.jsonl"
}

// JournalSource is how the daemon opens an attempt's journal: below the state directory,
// following no link, and only if uid (the job's user; 0 for root) owns it.
func JournalSource(stateDir string, run uuid.UUID, attempt, uid int) journal.Source {
	return journal.Source{Dir: stateDir, Name: journalName(run, attempt), UID: uid}
}

// Browser looks inside a job's snapshots (restic ls and find) through Restic's query units: as
// the job's user, the repository read-only, the answer read as it comes.
type Browser struct{ Config Config }

// Ls lists snapshot's entries under dir, or everything below it with recursive (engine.Restic.Ls).
func (b Browser) Ls(ctx context.Context, job model.Job, snapshot, dir string, recursive bool, each func(engine.Node) error) error {
	r, ej := Restic(b.Config, job, false)
	return r.Ls(ctx, ej, snapshot, dir, recursive, each)
}

// Find searches snapshots (none: all of the job's) for pattern (engine.Restic.Find).
func (b Browser) Find(ctx context.Context, job model.Job, pattern string, snapshots []string, each func(engine.Found) error) error {
	r, ej := Restic(b.Config, job, false)
	return r.Find(ctx, ej, pattern, snapshots, each)
}
