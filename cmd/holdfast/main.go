// Command holdfast is a systemd-native backup supervisor: the daemon, the commands that run
// inside each backup's transient unit (exec, marker), and the operator's CLI.
//
// Exit codes: 0 success; 1 an operational error (database or systemd unreachable, ...);
// 2 invalid input or a request the current state refuses (nothing was changed);
// for `run start --wait`: 3 partial, 4 failed, 5 stopped, 6 paused; the daemon exits 78 for a bad
// configuration, which its service unit does not restart on.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/setup"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/textsafe"
	"github.com/holdfast-backup/holdfast/unitcmd"
)

// Exit codes.
const (
	exitOK      = 0
	exitError   = 1
	exitInput   = 2
	exitPartial = 3
	exitFailed  = 4
	exitStopped = 5
	exitPaused  = 6
	exitSkipped = 7  // a before hook skipped the backup
	exitConfig  = 78 // sysexits' EX_CONFIG; servicefiles/holdfast.service: RestartPreventExitStatus=78
	// exitUnavailable (sysexits' EX_UNAVAILABLE): no live daemon can take the run.
	exitUnavailable = 69
)

// inputError marks an error caused by the operator's input: exit 2.
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

func badInput(format string, args ...any) error { return inputError{fmt.Errorf(format, args...)} }

// configError marks a bad daemon configuration: exit 78, and systemd does not restart the daemon.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }

// exitError carries a specific exit code without a message (the command already reported).
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// unavailableError is a command that cannot be carried out because no live daemon could act on
// it; it exits exitUnavailable.
type unavailableError struct{ error }

// globals are the settings every command shares.
type globals struct {
	dsn            string
	sessionDSN     string
	systemd        string
	systemdAddress string
	stateDir       string
	journalDir     string
	env            environment
	// daemon says the command is the daemon, which reads its unit's credentials.
	daemon bool
}

// environment is what one invocation reads and writes besides its arguments: the process's own
// in main; the scenario tests run commands in their process with their own (export_test.go).
type environment struct {
	getenv func(string) string
	// fromFile is a setting of the daemon's environment file alone, which root alone writes (nil:
	// none): where a setting must not come from whoever runs the command.
	fromFile       func(string) string
	stdin          io.Reader // nil: the process's
	stdout, stderr io.Writer
	// openStore opens the database a command uses and returns how to release it.
	openStore func(ctx context.Context, addr store.Address) (*store.Store, func(), error)
	// executable is the holdfast binary that runs its helpers (probe-read, units).
	executable func() (string, error)
}

// processEnvironment is the process's own, over the settings of the daemon's environment file
// where this process may read it (root, on a host set up with holdfast setup): the CLI then talks
// to the daemon's database with nothing exported. HOLDFAST_ENV_FILE names another file.
func processEnvironment() environment {
	file, _ := setup.ReadEnv(cmp.Or(os.Getenv("HOLDFAST_ENV_FILE"), setup.DefaultEnvFile))
	getenv := func(key string) string {
		if v, ok := os.LookupEnv(key); ok {
			return v
		}
		return file[key]
	}
	return environment{getenv: getenv, fromFile: func(key string) string { return file[key] }, stdout: os.Stdout, stderr: os.Stderr, executable: os.Executable,
		openStore: openOwnStore}
}

// openOwnStore opens a pool for one command, closed when it is released.
func openOwnStore(ctx context.Context, addr store.Address) (*store.Store, func(), error) {
	st, err := store.Connect(ctx, addr)
	if err != nil {
		return nil, nil, err
	}
	return st, st.Close, nil
}

// host is the name this machine goes by among holdfast's hosts: HOLDFAST_HOST, else the host
// name. Jobs added here are pinned to it unless told otherwise.
func (g *globals) host() string {
	if h := g.env.getenv("HOLDFAST_HOST"); h != "" {
		return h
	}
	h, _ := os.Hostname()
	return h
}

func (g *globals) envOr(key, def string) string {
	if v := g.env.getenv(key); v != "" {
		return v
	}
	return def
}

// validate checks the shared settings before any command uses them.
func (g *globals) validate() error {
	if !filepath.IsAbs(g.stateDir) {
		return badInput("--state-dir %q is a relative path: give an absolute path such as /var/lib/holdfast", g.stateDir)
	}
	if g.journalDir != "" && !filepath.IsAbs(g.journalDir) {
		return badInput("--journal-dir %q is a relative path: give an absolute path", g.journalDir)
	}
	return nil
}

// requireDSN refuses to go on without a database address. None given, it is the one setup
// --encrypt keeps encrypted: for the daemon its unit's credential, else the file the
// environment file (root's, never the process's environment) names, which systemd-creds
// decrypts (as root).
func (g *globals) requireDSN() error {
	if g.dsn == "" && g.env.fromFile != nil {
		credsDir := ""
		if g.daemon {
			credsDir = g.env.getenv(credentials.DirVariable)
		}
		dsn, err := setup.EncryptedDSN(context.Background(), credsDir, g.env.fromFile(setup.DSNCredentialKey))
		if err != nil {
			return err
		}
		g.dsn = dsn
	}
	if g.dsn == "" {
		return badInput("no database: set --dsn or HOLDFAST_DSN (e.g. postgres:///holdfast?host=/run/postgresql), or as root run holdfast setup, which writes it into %s", setup.DefaultEnvFile)
	}
	return nil
}

func (g *globals) openStore(ctx context.Context) (*store.Store, func(), error) {
	if err := g.requireDSN(); err != nil {
		return nil, nil, err
	}
	return g.env.openStore(ctx, g.address())
}

// address is where the database is: --dsn, and --session-dsn when --dsn is a transaction pooler.
func (g *globals) address() store.Address {
	return store.Address{DSN: g.dsn, SessionDSN: g.sessionDSN}
}

// credentials reports whether the daemon's units get the job's secrets as systemd credentials:
// only the system manager hands them out (see package credentials).
func (g *globals) credentials() bool {
	return g.systemdAddress == "" && (g.systemd == "" || g.systemd == "system")
}

func (g *globals) openSystemd(ctx context.Context) (*systemd.Client, error) {
	cfg := systemd.Config{Manager: g.systemd, Address: g.systemdAddress}
	if err := cfg.Validate(); err != nil {
		return nil, inputError{err}
	}
	return systemd.New(ctx, cfg)
}

// openUnits is openSystemd as runctl.StopRun asks for it: no Units at all (not a nil client)
// when the manager could not be reached.
func (g *globals) openUnits(ctx context.Context) (runctl.Units, error) {
	r, err := g.openSystemd(ctx)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// withStore runs fn with the database open for one command.
func (g *globals) withStore(cmd *cobra.Command, fn func(context.Context, *store.Store) error) error {
	st, release, err := g.openStore(cmd.Context())
	if err != nil {
		return err
	}
	defer release()
	return fn(cmd.Context(), st)
}

// withRun also resolves the run arg names: a full id, or a unique prefix as `run list` prints.
func (g *globals) withRun(cmd *cobra.Command, arg string, fn func(context.Context, *store.Store, uuid.UUID) error) error {
	return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
		id, err := st.RunResolve(ctx, arg)
		if err != nil {
			return err
		}
		return fn(ctx, st, id)
	})
}

// version is the release this binary was built as: `make build` sets it from HOLDFAST_VERSION
// (-ldflags "-X main.version=...").
var version = "dev"

func newRoot(env environment) *cobra.Command {
	g := &globals{env: env}
	root := &cobra.Command{
		Use:           "holdfast",
		Version:       version,
		Short:         "A systemd-native backup supervisor that never loses track of a backup",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.dsn, "dsn", env.getenv("HOLDFAST_DSN"), "PostgreSQL connection string (env HOLDFAST_DSN)")
	pf.StringVar(&g.sessionDSN, "session-dsn", env.getenv("HOLDFAST_SESSION_DSN"),
		"PostgreSQL connection string for LISTEN and migrations when --dsn is a transaction pooler such as PgBouncer (env HOLDFAST_SESSION_DSN)")
	pf.StringVar(&g.systemd, "systemd", g.envOr("HOLDFAST_SYSTEMD", "system"), "systemd manager: system or user (env HOLDFAST_SYSTEMD)")
	pf.StringVar(&g.systemdAddress, "systemd-address", env.getenv("HOLDFAST_SYSTEMD_ADDRESS"), "D-Bus address of the manager's private socket (env HOLDFAST_SYSTEMD_ADDRESS)")
	pf.StringVar(&g.stateDir, "state-dir", g.envOr("HOLDFAST_STATE_DIR", "/var/lib/holdfast"), "state directory for run journals and exit markers (env HOLDFAST_STATE_DIR)")
	pf.StringVar(&g.journalDir, "journal-dir", env.getenv("HOLDFAST_JOURNAL_DIR"), "journald directory that 'run logs' reads instead of the system journal (env HOLDFAST_JOURNAL_DIR)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return inputError{err} })
	// One hook: cobra runs a PersistentPreRunE and then no PersistentPreRun.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := g.validate(); err != nil {
			return err
		}
		// Human output carries file names, restic's messages and reasons that the job's user or
		// the repository wrote: escape what a terminal would act on. JSON is escaped by
		// encoding/json, and the hidden helpers' output is read by holdfast, not a terminal.
		f := cmd.Flags().Lookup("json")
		if !cmd.Hidden && cmd.Annotations[outputAnnotation] != machineOutput && (f == nil || f.Value.String() != "true") {
			cmd.SetOut(textsafe.NewWriter(cmd.OutOrStdout()))
		}
		return nil
	}
	if env.stdin != nil {
		root.SetIn(env.stdin)
	}
	root.SetOut(env.stdout)
	root.SetErr(env.stderr)
	root.AddCommand(newMigrateCmd(g), newDaemonCmd(g), newJobCmd(g), newRunCmd(g), newScheduleCmd(g), newRetentionCmd(g), newSnapshotCmd(g), newAccountCmd(g), newLedgerCmd(g), newCheckCmd(g), newManCmd(), newProbeReadCmd(), newProbeTargetCmd(), newRestoreCmd(g), newApplyCmd(g), newRecoverCmd(g), newExportCmd(g), newImportCmd(g),
		newSetupCmd(g), newSetupDatabaseCmd(), newStatusCmd(g), newNotifyCmd(g), newHostCmd(g))
	// Units started by a daemon of this version run holdfast-unit when it is installed; these
	// serve units started without it, and by earlier versions.
	root.AddCommand(unitcmd.Commands(&g.stateDir)...)
	return root
}

// A command annotated outputAnnotation: machineOutput prints a format another program reads
// back (export's YAML), which escaping for a terminal would change.
const (
	outputAnnotation = "holdfast-output"
	machineOutput    = "machine"
)

// stopAckVariable names a file that main creates once it has taken a SIGINT or SIGTERM (the
// command's context has ended): a test hook, by which a scenario test knows the stop came
// before what it does next. Unset, nothing is written.
const stopAckVariable = unitcmd.StopAckVariable

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if path := os.Getenv(stopAckVariable); path != "" {
		context.AfterFunc(ctx, func() { _ = os.WriteFile(path, nil, 0o600) })
	}
	code := execute(ctx, os.Args[1:], processEnvironment())
	stop()
	os.Exit(code)
}

// execute runs one command line and returns its exit code.
func execute(ctx context.Context, args []string, env environment) int {
	root := newRoot(env)
	root.SetArgs(args)
	return exitCode(root.ExecuteContext(ctx), env.stderr)
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var code exitCodeError
	if errors.As(err, &code) {
		return code.code
	}
	var status unitcmd.ExitStatus
	if errors.As(err, &status) {
		return int(status)
	}
	fmt.Fprintln(textsafe.NewWriter(stderr), "holdfast: "+err.Error())
	var conflict *store.ConflictError
	var input inputError
	var unitInput unitcmd.InputError
	var config configError
	var unavailable unavailableError
	switch {
	case errors.As(err, &config):
		return exitConfig
	case errors.As(err, &unavailable):
		return exitUnavailable
	case errors.As(err, &input), errors.As(err, &unitInput), errors.As(err, &conflict),
		errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrJobExists), errors.Is(err, store.ErrAmbiguous),
		errors.Is(err, store.ErrTargetExists):
		return exitInput
	}
	if unitcmd.UsageError(err) {
		return exitInput
	}
	return exitError
}
