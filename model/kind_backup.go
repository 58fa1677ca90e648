package model

// BackupSettings are a job's settings for its backups (KindBackup): the hooks around the
// engine and, for a backup of a command's output, that command.
type BackupSettings struct {
	// BeforeHooks are command lines run in the backup's unit, in order, before the engine (see
	// hook.Split); the first that fails fails the run.
	BeforeHooks []string
	HookSkips   int // backups a before hook skipped (exit 75)
	// AfterHooks run in the unit after the engine, whatever the outcome, which they see in
	// HOLDFAST_OUTCOME; their failure is recorded, never changing the outcome.
	AfterHooks []string
	// StdinFrom, if set, is a command line (split as a hook's) whose standard output the backup
	// is, as one file called StdinFilename (restic --stdin); the job then has no Paths.
	StdinFrom     string
	StdinFilename string
	// Catalog keeps a listing of each new snapshot on the host (package catalog), so that a
	// snapshot's directories are listed without restic.
	Catalog bool
	// FSSnapshot, if set ("btrfs", package fssnap), has each backup read a read-only snapshot of
	// the file systems of Paths, taken as its attempt starts, mounted over them in its unit.
	FSSnapshot string
}
