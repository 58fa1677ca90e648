// Package jobdef validates backup job definitions before they reach the database, so that bad
// input gets a one-line error that says what is wrong and what to do, and nothing is stored. It
// also states a new job's defaults (New), the first slots of its schedules (Slots), its stored
// retention policy and guardrail, and checks its files as the job's user (CheckAccess, ProbeAs).
package jobdef

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/setting"
)

// MinRuntimeMax is the shortest RuntimeMax of a job: systemd's RuntimeMaxSec= has to let the unit start.
const MinRuntimeMax = time.Second

// The names' lengths are checked apart from their patterns: a counted repetition ({0,62})
// compiles to a program as long, at the start of every holdfast process, a unit's among them.
var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`) })

// ValidateName checks a job name: it becomes part of unit names, tags and paths.
func ValidateName(name string) error {
	if len(name) > 63 || !nameRE().MatchString(name) {
		return fmt.Errorf("invalid job name %q: use 1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

var hostRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`) })

// ValidateHost checks a host name (a job's or a daemon's Host): it names the daemon's row and pins jobs.
func ValidateHost(name string) error {
	if len(name) > 63 || !hostRE().MatchString(name) {
		return fmt.Errorf("invalid host name %q: use 1-63 characters of A-Z, a-z, 0-9, '.', '_' or '-', starting with a letter or digit (the machine's host name, or HOLDFAST_HOST)", name)
	}
	return nil
}

// remoteRepository reports whether a restic repository string names a backend rather than a local path.
func remoteRepository(repo string) bool {
	for _, scheme := range []string{"sftp:", "rest:", "s3:", "b2:", "azure:", "gs:", "swift:", "rclone:"} {
		if strings.HasPrefix(repo, scheme) {
			return true
		}
	}
	return false
}

// Validate checks a job about to be created and normalizes its defaults.
func Validate(j *model.Job) error {
	if j.Host != "" {
		if err := ValidateHost(j.Host); err != nil {
			return err
		}
	}
	if err := ValidateName(j.Name); err != nil {
		return err
	}
	if j.Engine == "" {
		j.Engine = engine.NameRestic
	}
	if j.Engine != engine.NameRestic && j.Engine != engine.NameCommand {
		return fmt.Errorf("unknown engine %q: use restic or command", j.Engine)
	}
	if j.Engine == engine.NameCommand {
		if len(j.Command) == 0 || !filepath.IsAbs(j.Command[0]) {
			return setting.Errorf("a command job needs {Job.Command} with an absolute program path first, e.g. {Job.Command} /usr/local/bin/dump {Job.Command} --all")
		}
	}
	if j.Engine == engine.NameRestic {
		if len(j.Command) > 0 {
			return setting.Errorf("{Job.Command} is for {Job.Engine} command; a restic job backs up {Job.Paths}")
		}
		if j.Repository == "" {
			return setting.Errorf("no repository: give {Job.Repository} PATH (an absolute path) or a restic backend such as sftp:host:/path")
		}
		repo, err := checkRepository("repository", j.Repository)
		if err != nil {
			return err
		}
		j.Repository = repo
		if j.EnvFile != "" {
			if err := credentials.CheckEnvFile("{Job.EnvFile}", j.EnvFile); err != nil {
				return err
			}
		}
		if j.PasswordFile == "" {
			return setting.Errorf("no password file: give {Job.PasswordFile} FILE (holdfast never stores the password itself)")
		}
		if !filepath.IsAbs(j.PasswordFile) {
			return fmt.Errorf("password file %q is a relative path: give an absolute path", j.PasswordFile)
		}
	}
	if err := validateCopy(j); err != nil {
		return err
	}
	if err := validatePruning(j); err != nil {
		return err
	}
	if j.Engine != engine.NameRestic && j.EnvFile != "" {
		return setting.Errorf("{Job.EnvFile} is for restic jobs")
	}
	if j.Backup.StdinFrom != "" || j.Backup.StdinFilename != "" {
		if err := validateStdin(j); err != nil {
			return err
		}
	} else if j.Engine == engine.NameRestic && len(j.Paths) == 0 {
		return setting.Errorf("no paths to back up: give {Job.Paths} PATH at least once (or {Job.Backup.StdinFrom} CMD to back up a command's output)")
	}
	for _, p := range j.Paths {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("path %q is relative: give an absolute path", p)
		}
	}
	if err := validateFSSnapshot(j); err != nil {
		return err
	}
	for _, x := range j.Excludes {
		if strings.TrimSpace(x) == "" {
			return setting.Errorf("empty {Job.Excludes} pattern")
		}
	}
	for _, v := range []struct{ name, value string }{{"{Job.User}", j.User}, {"{Job.Group}", j.Group}} {
		if v.value == "" {
			continue
		}
		if err := ValidUserGroupName(v.value); err != nil {
			return fmt.Errorf("%s %w", setting.Render(v.name), err)
		}
	}
	if j.User != "" {
		if _, err := LookupUser(j.User); err != nil {
			return setting.Errorf("user %q does not exist on this host: create it or give another {Job.User} (%w)", j.User, err)
		}
	}
	if j.Group != "" {
		if _, err := LookupGroup(j.Group); err != nil {
			return setting.Errorf("group %q does not exist on this host: create it or give another {Job.Group} (%w)", j.Group, err)
		}
	}
	if j.Nice != nil && (*j.Nice < -20 || *j.Nice > 19) {
		return fmt.Errorf("nice %d is out of range: use -20..19", *j.Nice)
	}
	switch j.IOSchedulingClass {
	case "", "realtime", "best-effort", "idle":
	default:
		return fmt.Errorf("unknown IO scheduling class %q: use realtime, best-effort or idle", j.IOSchedulingClass)
	}
	if j.RuntimeMax != 0 && j.RuntimeMax < MinRuntimeMax {
		return setting.Errorf("{Job.RuntimeMax} %s is too short: give at least %s (e.g. 6h), or 0 for no limit", j.RuntimeMax, MinRuntimeMax)
	}
	if j.LimitUploadKiB < 0 || j.LimitUploadKiB > math.MaxInt32 {
		return setting.Errorf("{Job.LimitUploadKiB} %d is out of range: give a rate in KiB/s (e.g. 10240 for 10 MiB/s), or 0 for no limit", j.LimitUploadKiB)
	}
	if j.LimitUploadKiB > 0 && j.Engine == engine.NameCommand {
		return setting.Errorf("{Job.LimitUploadKiB} is restic's: a command job cannot have one; drop it")
	}
	if j.StallAfter < 0 || j.StallAfter > 0 && j.StallAfter < time.Second {
		return setting.Errorf("{Job.StallAfter} %s: give at least 1s (e.g. 15m), or 0 for the default of %s", j.StallAfter, model.DefaultStallAfter)
	}
	switch j.StallAction {
	case "", model.StallAlert, model.StallStop:
	default:
		return setting.Errorf("{Job.StallAction} %q: use %s (an event) or %s (an event, and the run is stopped)", j.StallAction, model.StallAlert, model.StallStop)
	}
	if j.AlertAfter < 0 || j.ExpectEvery < 0 {
		return setting.Errorf("{Job.AlertAfter} %s, {Job.ExpectEvery} %s: give a positive duration (e.g. 2h, 168h), or 0 for the default", j.AlertAfter, j.ExpectEvery)
	}
	if err := validateHooks("{Job.Backup.BeforeHooks}", j.Backup.BeforeHooks); err != nil {
		return err
	}
	if err := validateHooks("{Job.Backup.AfterHooks}", j.Backup.AfterHooks); err != nil {
		return err
	}
	if j.Drill.Schedule != "" && j.Drill.Files == 0 {
		j.Drill.Files = DefaultDrillFiles
	}
	if j.Drill.Files < 0 || j.Drill.Files > engine.MaxDrillFiles {
		return setting.Errorf("{Job.Drill.Files} %d: give how many files each drill restores and verifies, 1 to %d", j.Drill.Files, engine.MaxDrillFiles)
	}
	if j.Verify.AlertAfter < 0 {
		return setting.Errorf("{Job.Verify.AlertAfter} %s: give a positive duration (e.g. 336h), or 0 for two periods of {Job.Verify.Schedule}", j.Verify.AlertAfter)
	}
	if j.Verify.ReadData != "" {
		if err := engine.ValidateReadDataSubset(j.Verify.ReadData); err != nil {
			return setting.Errorf("{Job.Verify.ReadData}: %w", err)
		}
	}
	if (j.Verify.ReadData != "" || j.Verify.AlertAfter > 0) && j.Verify.Schedule == "" {
		return setting.Errorf("{Job.Verify.ReadData} and {Job.Verify.AlertAfter} are for scheduled verifications: add {Job.Verify.Schedule}")
	}
	if j.AlertFailures < 0 || j.AlertFailures > 1000 {
		return setting.Errorf("{Job.AlertFailures} %d is out of range: give 0..1000 (0: failures alone never make the job overdue)", j.AlertFailures)
	}
	if j.ExpectEvery > 0 && j.Schedule != "" {
		return setting.Errorf("{Job.ExpectEvery} is for a job without {Job.Schedule}; a scheduled job is overdue by its slots ({Job.AlertAfter})")
	}
	if j.Priority < math.MinInt32 || j.Priority > math.MaxInt32 {
		return setting.Errorf("{Job.Priority} %d is out of range: use %d..%d", j.Priority, math.MinInt32, math.MaxInt32)
	}
	return ValidateSchedule(j)
}

// DefaultDrillFiles is how many files a scheduled drill restores when the job does not say.
const DefaultDrillFiles = 10

// ValidateDrill checks what a verification run is asked to do: a drill of 1 to
// engine.MaxDrillFiles files, which reads no further data (it is no restic check).
func ValidateDrill(v model.Verify) error {
	if v.DrillFiles < 1 || v.DrillFiles > engine.MaxDrillFiles {
		return setting.Errorf("{Verify.DrillFiles} %d: give how many files to restore and verify, 1 to %d", v.DrillFiles, engine.MaxDrillFiles)
	}
	if v.ReadDataSubset != "" {
		return setting.Errorf("{Verify.DrillFiles} and {Verify.ReadDataSubset} are two verifications: a drill restores files, a check reads the repository; start them one after the other")
	}
	return nil
}

// ValidateSchedule checks the scheduling settings of a job.
func ValidateSchedule(j *model.Job) error {
	if _, err := schedule.Parse(j.Schedule, j.TimeZone); err != nil {
		return err
	}
	if _, _, err := Windows(*j); err != nil {
		return err
	}
	if j.RetryMax < 0 || j.RetryMax > 100 {
		return setting.Errorf("{Job.RetryMax} %d is out of range: use 0..100", j.RetryMax)
	}
	if j.RetryBackoff <= 0 {
		return setting.Errorf("{Job.RetryBackoff} %s must be positive, e.g. 5m", j.RetryBackoff)
	}
	if j.RetryBackoff > schedule.MaxBackoff {
		return setting.Errorf("{Job.RetryBackoff} %s is past the cap of %s (retries are never further apart): give at most %s", j.RetryBackoff, schedule.MaxBackoff, schedule.MaxBackoff)
	}
	if j.DependsOn != "" {
		if err := ValidateName(j.DependsOn); err != nil {
			return setting.Errorf("{Job.DependsOn}: %w", err)
		}
		if j.DependsOn == j.Name {
			return fmt.Errorf("job %s cannot depend on itself", j.Name)
		}
	}
	return nil
}

// Windows are the job's maintenance windows, parsed, and the time zone they are read in: the
// one reading of them. Validate refuses a job whose windows or zone do not parse, so a stored job
// they fail for was written around it (by SQL, or by a holdfast whose parser took what this one
// refuses), or its zone left the host's tzdata: the sweep holds its runs back rather than read
// it as no window or as UTC, and holdfast check reports it (StoredProblems).
func Windows(j model.Job) ([]schedule.Window, *time.Location, error) {
	zone, err := schedule.LoadZone(j.TimeZone)
	if err != nil {
		return nil, nil, err
	}
	windows, err := schedule.ParseWindows(j.Windows)
	if err != nil {
		return nil, nil, err
	}
	return windows, zone, nil
}

// StoredProblems is a line for each of jobs whose windows or time zone do not parse (Windows):
// holdfast check reports them with the database's invariants.
func StoredProblems(jobs []model.Job) []string {
	var found []string
	for _, j := range jobs {
		if _, _, err := Windows(j); err != nil {
			found = append(found, fmt.Sprintf("a job's maintenance windows and time zone parse: job %s: %v", j.Name, err))
		}
	}
	return found
}

// validateCopy checks a job's copy repository (Copy.To), checked as its own repository is, and
// spelled the same way for a local one.
func validateCopy(j *model.Job) error {
	if j.Copy.To == "" {
		if j.Copy.PasswordFile != "" || j.Copy.EnvFile != "" {
			return setting.Errorf("{Job.Copy.PasswordFile} and {Job.Copy.EnvFile} are for a copy repository: give {Job.Copy.To} REPO too, or drop them")
		}
		return nil
	}
	if j.Engine != engine.NameRestic {
		return setting.Errorf("{Job.Copy.To} is for restic jobs: a command job keeps no repository to copy")
	}
	repo, err := checkRepository("{Job.Copy.To}", j.Copy.To)
	if err != nil {
		return err
	}
	j.Copy.To = repo
	if j.Copy.To == j.Repository {
		return setting.Errorf("{Job.Copy.To} %s is the job's own repository: a copy belongs in another one", j.Copy.To)
	}
	if j.Copy.PasswordFile == "" || !filepath.IsAbs(j.Copy.PasswordFile) {
		return setting.Errorf("{Job.Copy.To} needs {Job.Copy.PasswordFile} FILE, an absolute path: the copy repository's own password")
	}
	if j.Copy.EnvFile != "" {
		if err := credentials.CheckEnvFile("{Job.Copy.EnvFile}", j.Copy.EnvFile); err != nil {
			return err
		}
	}
	return nil
}

// validatePruning checks where a job's runs that delete run (model.PruneSettings). The pruning
// host's files are on that host: only their paths are checked here, the files where it uses them.
func validatePruning(j *model.Job) error {
	p := &j.Prune
	switch {
	case p.Host == "" && (p.Repository != "" || p.EnvFile != ""):
		return setting.Errorf("{Job.Prune.Repository} and {Job.Prune.EnvFile} are how a pruning host reaches the repository: give {Job.Prune.Host} HOST too, or drop them")
	case !p.AppendOnly && p.Host == "":
		return nil
	case j.Engine != engine.NameRestic:
		return setting.Errorf("{Job.Prune.AppendOnly} and {Job.Prune.Host} are for restic jobs: a command job keeps no repository to prune")
	case p.Host == "" && p.Schedule != "":
		return setting.Errorf("{Job.Prune.Schedule} would prune through a repository written append-only ({Job.Prune.AppendOnly}), which deletes nothing: give a pruning host that may delete ({Job.Prune.Host} HOST {Job.Prune.Repository} REPO), or drop the schedule")
	case p.Host == "":
		return nil
	}
	if err := ValidateHost(p.Host); err != nil {
		return setting.Errorf("{Job.Prune.Host}: %w", err)
	}
	if p.Repository != "" {
		repo, err := checkRepository("{Job.Prune.Repository}", p.Repository)
		if err != nil {
			return err
		}
		p.Repository = repo
	}
	if p.EnvFile != "" && !filepath.IsAbs(p.EnvFile) {
		return setting.Errorf("{Job.Prune.EnvFile} %q is a relative path: give an absolute path (a file on the pruning host)", p.EnvFile)
	}
	// A host that backs the job up (its own, or any host for an any-host job) would reach the
	// repository as its backups do, append-only, unless told another way.
	sameWay := (p.Repository == "" || p.Repository == j.Repository) && (p.EnvFile == "" || p.EnvFile == j.EnvFile)
	switch {
	case p.AppendOnly && sameWay && p.Host == j.Host:
		return setting.Errorf("{Job.Prune.Host} %s is the job's own host, which writes the repository append-only: give another host, or how this one may delete ({Job.Prune.Repository} REPO, {Job.Prune.EnvFile} FILE)", p.Host)
	case p.AppendOnly && sameWay && j.Host == "":
		return setting.Errorf("{Job.Prune.Host} %s backs up this any-host job too, through the repository written append-only: give how it may delete ({Job.Prune.Repository} REPO, {Job.Prune.EnvFile} FILE), or pin the job ({Job.Host} NAME)", p.Host)
	}
	return nil
}

// checkRepository checks a repository location (what names it in a refusal, a placeholder of package setting or words) and returns its one
// spelling: a local one ("local:/srv/r/" is "/srv/r" to restic) as a clean absolute path, so
// jobs sharing it are seen to share it (busy repository, growth, protections).
func checkRepository(what, repo string) (string, error) {
	if !remoteRepository(repo) {
		dir := strings.TrimPrefix(repo, "local:")
		if !filepath.IsAbs(dir) {
			return "", fmt.Errorf("%s %q is a relative path: give an absolute path (or local:/path)", setting.Render(what), repo)
		}
		repo = filepath.Clean(dir)
	}
	return repo, credentials.CheckRepository(repo)
}
