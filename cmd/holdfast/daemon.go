package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/job"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/journallog"
	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/notify"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/runner"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/supervisor"
	"github.com/holdfast-backup/holdfast/textsafe"
	"github.com/holdfast-backup/holdfast/web"
)

func newMigrateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade holdfast's database schema",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.requireDSN(); err != nil {
				return err
			}
			res, err := migrations.Apply(cmd.Context(), g.address().Session())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema at version %d (%d applied now)\n", res.Current, len(res.Applied))
			return nil
		},
	}
}

func newCheckCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Check holdfast's invariants in the database (exit 1 if one is violated)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				found, err := st.Violations(ctx)
				if err != nil {
					return err
				}
				for _, v := range found {
					fmt.Fprintln(cmd.OutOrStdout(), v)
				}
				if len(found) > 0 {
					return fmt.Errorf("%d invariant violation(s)", len(found))
				}
				fmt.Fprintln(cmd.OutOrStdout(), "ok: no invariant is violated")
				return nil
			})
		},
	}
}

func newDaemonCmd(g *globals) *cobra.Command {
	cfg := supervisor.Defaults()
	var allowUsers, logLevel string
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the supervisor: spawn admitted runs and reconcile live ones",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			// Every setting is checked before PostgreSQL or systemd is asked anything: a bad
			// configuration exits 78, which the service unit does not restart on.
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return configError{fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)}
			}
			var handler slog.Handler = slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})
			if g.env.stderr == os.Stderr && journallog.ToJournal() {
				// Under systemd: journal fields (HOLDFAST_RUN=...) and priorities, not a text line.
				handler = journallog.NewHandler(level)
			}
			logger := slog.New(handler)
			if err := g.requireDSN(); err != nil {
				return configError{err}
			}
			cfg.Database.Address, cfg.StateDir, cfg.Logger, cfg.Version = g.address(), g.stateDir, logger, version
			cfg.Notify.JournalDir, cfg.JournalDir = g.journalDir, g.journalDir
			cfg.Systemd = runner.Config{Manager: g.systemd, Address: g.systemdAddress}
			cfg.AllowUsers = strings.Split(allowUsers, ",")
			cfg.WebAuthFile = webAuthFile(cfg.Listen, cfg.WebAuthFile, cmd.Flags().Changed("web-auth-file"))
			if err := cfg.Validate(); err != nil {
				return configError{err}
			}
			st, err := store.New(ctx, cfg.Database)
			if err != nil {
				return err
			}
			defer st.Close()
			if cfg.Database.Pooled() {
				if err := warnUnbounded(ctx, st, logger); err != nil {
					return err
				}
			}
			applied, err := st.AppliedMigrations(ctx)
			if err != nil {
				return err
			}
			if _, err := migrations.ApplyPending(ctx, cfg.Database.Session(), applied); err != nil {
				return err
			}
			rn, err := runner.New(ctx, cfg.Systemd)
			if err != nil {
				return err
			}
			defer rn.Close()
			cfg.Store, cfg.Runner = st, rn
			sup, err := supervisor.New(cfg)
			if err != nil {
				return err
			}
			if err := sup.Start(ctx); err != nil {
				return err
			}
			logger.Info("holdfast daemon started", "version", version, "host", cfg.Host, "state_dir", g.stateDir, "systemd", g.systemd, "sweep_interval", cfg.SweepInterval,
				"pass_timeout", cfg.PassTimeout, "allow_users", allowUsers, "allow_command_jobs", cfg.AllowCommandJobs,
				"allow_notify_commands", cfg.Notify.AllowCommands, "listen", cfg.Listen, "tls", cfg.TLSCert != "",
				"statement_timeout", cfg.Database.StatementTimeout, "behind_pooler", cfg.Database.Pooled())
			select {
			case <-ctx.Done():
			case err := <-sup.Failed():
				// Another daemon took this host's lease (supervisor.ErrLeaseTaken): exit 1, so
				// that systemd shows the failure and restarts this one, which then waits for
				// the lease as at any start.
				logger.Error("holdfast daemon stopping; running backups continue in their units", "err", err)
				sup.Stop()
				return err
			}
			logger.Info("holdfast daemon stopping; running backups continue in their units")
			sup.Stop()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&logLevel, "log-level", g.envOr("HOLDFAST_LOG_LEVEL", "info"), "debug (each run's decision in each pass), info, warn or error (env HOLDFAST_LOG_LEVEL)")
	f.DurationVar(&cfg.SweepInterval, "sweep-interval", supervisor.DefaultSweepInterval, "time between reconciler passes")
	f.DurationVar(&cfg.SpawnGrace, "spawn-grace", reconcile.DefaultSpawnGrace, "how long a spawned unit may take to appear")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", reconcile.DefaultMaxAttempts, "attempts a run may take before it fails")
	f.DurationVar(&cfg.RunBudget, "run-budget", reconcile.DefaultRunBudget, "time one run may take in one pass")
	f.StringVar(&cfg.Host, "host", g.env.getenv("HOLDFAST_HOST"), "this daemon's host among those sharing the database: it runs the jobs pinned to it and any-host jobs (env HOLDFAST_HOST; default the host name)")
	f.DurationVar(&cfg.Lease, "lease", supervisor.DefaultLease, "how long the host's lease lasts unless the daemon renews it; a host is seen down this long after its daemon stopped")
	f.DurationVar(&cfg.TakeoverGrace, "takeover-grace", reconcile.DefaultTakeoverGrace, "how long after another host's lease expired its runs of any-host jobs are taken over here")
	f.IntVar(&cfg.Limits.MaxRunning, "max-running", 0, "at most this many runs hold a unit at once, across all hosts (0: no limit)")
	f.IntVar(&cfg.Limits.MaxRunningHost, "max-running-host", 0, "at most this many runs hold a unit at once on this host (0: no limit)")
	f.StringArrayVar(&cfg.Windows, "window", nil, "global maintenance window in which no run starts, e.g. \"Sat 01:00-05:00\" (repeatable)")
	f.StringVar(&cfg.WindowZone, "window-tz", "", "time zone of the global windows (IANA name; default UTC)")
	f.DurationVar(&cfg.LateGrace, "late-grace", supervisor.DefaultLateGrace, "how late a scheduled slot may still start; older slots are counted as missed")
	f.DurationVar(&cfg.StartLead, "start-lead", supervisor.DefaultStartLead, "admit and prepare a run this long before its time, so that systemd starts it at that time from a transient timer (0: start runs when their time has come)")
	f.DurationVar(&cfg.DependsWait, "depends-wait", reconcile.DefaultDependsWait, "how long a run waits for its prerequisite's next outcome when the prerequisite's last run did not succeed")
	f.IntVar(&cfg.Workers, "workers", reconcile.DefaultWorkers, "runs reconciled at once in one pass")
	f.StringVar(&cfg.ResticBinary, "restic", "", "restic executable (default: restic in PATH)")
	f.StringVar(&cfg.Binary, "holdfast-binary", "", "holdfast executable the units run (default: this one)")
	f.StringVar(&cfg.KeepRunFiles, "keep-run-files", supervisor.DefaultKeepRunFiles, "remove the journals and exit markers of runs that ended longer ago than this (the database keeps their facts)")
	f.StringVar(&cfg.KeepHistory, "keep-history", supervisor.DefaultKeepHistory, "remove ended runs, their events, delivered notifications and ledger entries older than this from the database (35d or more; balances are kept in checkpoints)")
	f.DurationVar(&cfg.RunFilesEvery, "run-files-every", supervisor.DefaultRunFilesEvery, "how often ended runs' files are looked for")
	_ = f.MarkHidden("run-files-every") // for tests
	f.StringVar(&cfg.Listen, "listen", g.env.getenv("HOLDFAST_LISTEN"), "serve Prometheus metrics at /metrics and the dashboard at / on this address, e.g. 127.0.0.1:9750 (env HOLDFAST_LISTEN; \"\" none)")
	f.StringVar(&cfg.WebAuthFile, "web-auth-file", g.env.getenv("HOLDFAST_WEB_AUTH_FILE"), "file of \"bearer TOKEN\" and \"basic USER PASSWORD\" lines (root's, mode 0600, secrets of 16 characters or more) that every request to --listen needs (env HOLDFAST_WEB_AUTH_FILE; default "+web.DefaultAuthFile+" if it exists, which holdfast setup writes)")
	f.StringArrayVar(&cfg.WebHosts, "web-host", splitList(g.env.getenv("HOLDFAST_WEB_HOST")), "a host name requests to --listen may give besides the listener's own (a reverse proxy's, the machine's DNS name; repeatable; env HOLDFAST_WEB_HOST, comma-separated)")
	f.StringVar(&cfg.TLSCert, "tls-cert", g.env.getenv("HOLDFAST_TLS_CERT"), "serve --listen over TLS with this PEM certificate chain, reloaded when it changes; needed off localhost (env HOLDFAST_TLS_CERT)")
	f.StringVar(&cfg.TLSKey, "tls-key", g.env.getenv("HOLDFAST_TLS_KEY"), "the PEM private key of --tls-cert (env HOLDFAST_TLS_KEY)")
	f.DurationVar(&cfg.Notify.Backoff, "notify-backoff", notify.DefaultBackoff, "delay before a failed notification is tried again; doubled for each next try")
	f.IntVar(&cfg.Notify.MaxTries, "notify-max-tries", notify.DefaultMaxTries, "tries of a notification before it is kept as failed")
	f.DurationVar(&cfg.Notify.Timeout, "notify-timeout", notify.DefaultTimeout, "longest send of one notification")
	f.DurationVar(&cfg.Notify.Lease, "notify-lease", notify.DefaultLease, "how long a notification being sent is this daemon's (longer than --notify-timeout)")
	notifyCommands := false
	if v, err := strconv.ParseBool(g.env.getenv("HOLDFAST_ALLOW_NOTIFY_COMMANDS")); err == nil {
		notifyCommands = v
	}
	f.BoolVar(&cfg.Notify.AllowCommands, "allow-notify-commands", notifyCommands,
		"run command notification targets (whoever can write the database names their program; env HOLDFAST_ALLOW_NOTIFY_COMMANDS=true)")
	f.StringVar(&cfg.Notify.CommandUser, "notify-command-user", g.envOr("HOLDFAST_NOTIFY_COMMAND_USER", notify.DefaultCommandUser),
		"user command notification targets run as (env HOLDFAST_NOTIFY_COMMAND_USER)")
	f.DurationVar(&cfg.WatchInterval, "watch-interval", supervisor.DefaultWatchInterval, "how often jobs are judged overdue or not")
	f.DurationVar(&cfg.PassTimeout, "pass-timeout", reconcile.DefaultPassTimeout, "longest one admission pass or one sweep may take")
	f.DurationVar(&cfg.Database.StatementTimeout, "db-statement-timeout", store.DefaultStatementTimeout, "PostgreSQL's statement_timeout for the daemon's sessions")
	f.DurationVar(&cfg.Database.LockTimeout, "db-lock-timeout", store.DefaultLockTimeout, "PostgreSQL's lock_timeout for the daemon's sessions")
	f.StringVar(&allowUsers, "allow-users", g.envOr("HOLDFAST_ALLOW_USERS", reconcile.DefaultAllowUsers),
		"users jobs may run as: comma-separated names or uids, or * for every user, root included (env HOLDFAST_ALLOW_USERS)")
	commandJobs := reconcile.DefaultAllowCommandJobs
	if v, err := strconv.ParseBool(g.env.getenv("HOLDFAST_ALLOW_COMMAND_JOBS")); err == nil {
		commandJobs = v
	}
	f.BoolVar(&cfg.AllowCommandJobs, "allow-command-jobs", commandJobs,
		"let command jobs run: they run any program as their user, as root without --user (env HOLDFAST_ALLOW_COMMAND_JOBS=true)")
	// The daemon's bad settings, flags included, exit 78 rather than 2 (see configError).
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if err := g.validate(); err != nil {
			return configError{err}
		}
		return nil
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return configError{err} })
	return cmd
}

// webAuthFile is the daemon's auth file: the one given (flag or environment), or, when it
// listens and none was given, web.DefaultAuthFile if that exists (holdfast setup writes it).
func webAuthFile(listen, given string, flagGiven bool) string {
	if given != "" || flagGiven || listen == "" {
		return given
	}
	if _, err := os.Lstat(web.DefaultAuthFile); err == nil {
		return web.DefaultAuthFile
	}
	return ""
}

// splitList splits a comma-separated setting, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// credentialFlags are the flags by which a unit's command learns which credentials it was given.
type credentialFlags struct{ password, env, fromPassword bool }

func (c *credentialFlags) add(f *pflag.FlagSet) {
	f.BoolVar(&c.password, "password-credential", false, "set RESTIC_PASSWORD_FILE to the unit's password credential")
	f.BoolVar(&c.env, "env-credential", false, "add the variables of the unit's environment credential")
	f.BoolVar(&c.fromPassword, "from-password-credential", false, "set RESTIC_FROM_PASSWORD_FILE to the unit's credential of a copy's source password")
}

func (c credentialFlags) environ() ([]string, error) {
	env, err := credentials.Environ(os.Environ(), c.password, c.env)
	if err != nil || !c.fromPassword {
		return env, err
	}
	return credentials.WithFromPassword(env)
}

// newCredexecCmd runs a command with the unit's credentials in its environment, in place of this
// process (restic unlock before a backup, restic's queries as the job's user).
func newCredexecCmd() *cobra.Command {
	var creds credentialFlags
	cmd := &cobra.Command{
		Use:    "credexec [--password-credential] [--env-credential] -- COMMAND...",
		Short:  "Run a command with the unit's credentials in its environment (used by the daemon's units)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, argv []string) error {
			env, err := creds.environ()
			if err != nil {
				return fmt.Errorf("credentials: %w", err)
			}
			path, err := exec.LookPath(argv[0])
			if err != nil {
				return fmt.Errorf("credexec: %w", err)
			}
			return syscall.Exec(path, argv, env)
		},
	}
	creds.add(cmd.Flags())
	return cmd
}

// afterInterruptTimeout bounds the command after an interrupted engine; the unit's stop timeout
// (2 min) is longer.
const afterInterruptTimeout = time.Minute

// restoreProgressEvery is how often a restore's target is measured for its progress.
const restoreProgressEvery = 3 * time.Second

func newExecCmd() *cobra.Command {
	var runID, journalPath, engineName, kind, progressDir, stdinFrom string
	var attempt int
	var totalBytes, totalFiles int64
	var creds credentialFlags
	var before, afterInterrupt, beforeSource, afterInterruptSource, hooksBefore, hooksAfter []string
	cmd := &cobra.Command{
		Use:    "exec --run R --attempt N --journal FILE --engine restic -- COMMAND...",
		Short:  "Run an engine inside a backup unit, writing its run journal (used by the daemon's units)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, argv []string) error {
			run, err := uuid.Parse(runID)
			if err != nil {
				return badInput("--run %q is not a run id", runID)
			}
			parser, err := engine.ForOperation(engineName, "", kind)
			if err != nil {
				return inputError{err}
			}
			var progress func() (engine.Progress, bool)
			if progressDir != "" {
				progress = engine.TreeProgress(progressDir, totalBytes, totalFiles)
			}
			env, err := creds.environ()
			if err != nil {
				// The engine cannot reach its repository without them: fail as it would.
				fmt.Fprintf(os.Stderr, "holdfast exec: credentials: %v\n", err)
				return exitCodeError{1}
			}
			if len(before) > 0 {
				if status, stopped := engine.RunBefore(cmd.Context(), before, env); stopped {
					return exitCodeError{status}
				}
			}
			if len(beforeSource) > 0 {
				if status, stopped := engine.RunBefore(cmd.Context(), beforeSource, sourceEnv(env)); stopped {
					return exitCodeError{status}
				}
			}
			emit := func(string, any) error { return nil }
			closeJournal := func() {}
			w, err := journal.Create(journalPath, run, attempt)
			if err != nil {
				// The backup matters more than its progress figures: run it without a journal.
				fmt.Fprintf(os.Stderr, "holdfast exec: no run journal, progress will not be recorded: %v\n", err)
			} else {
				defer w.Close()
				emit = func(typ string, payload any) error {
					if typ == engine.TypeSummary {
						// The engine's own figures also go to journald, where `run logs` shows them.
						if b, err := json.Marshal(payload); err == nil {
							fmt.Fprintf(os.Stderr, "holdfast: %s summary: %s\n", engineName, b)
						}
					}
					return w.Append(typ, payload)
				}
				closeJournal = func() {
					if err := w.Close(); err != nil {
						fmt.Fprintf(os.Stderr, "holdfast exec: close run journal: %v\n", err)
					}
				}
			}
			if len(hooksBefore) > 0 {
				if status, fatal := runBeforeHooks(cmd.Context(), hooksBefore, runID, attempt, emit); status != 0 {
					outcome := parser.Classify(engine.Evidence{ExitStatus: status, Fatal: fatal, Operation: kind})
					runAfterHooks(hooksAfter, runID, attempt, status, outcome.Status, emit)
					closeJournal()
					return exitCodeError{status}
				}
			}
			var producer *engine.Producer
			if stdinFrom != "" {
				pargv, err := job.SplitHook(stdinFrom)
				if err != nil {
					return badInput("--stdin-from: %v", err)
				}
				// As a hook's: the run in its environment, never the engine's secrets.
				producer = &engine.Producer{Argv: pargv, Env: hookEnv(runID, attempt, "stdin"), Line: textsafe.String(stdinFrom)}
			}
			// The context ends at the unit's stop signal, however early it came (main catches it
			// from the start): Exec passes it on to the engine, or starts none if it came first.
			// One the runtime hands on only as the engine starts reaches the engine, at once.
			status, err := engine.Exec(cmd.Context(), engine.ExecConfig{
				Argv: argv, Env: env, Parser: parser, Emit: emit, Stderr: os.Stderr, Stdout: os.Stdout,
				Progress: progress, ProgressEvery: restoreProgressEvery, Producer: producer,
			})
			if err != nil {
				fmt.Fprintf(os.Stderr, "holdfast exec: %v\n", err)
				return exitCodeError{127}
			}
			if status == 128+int(syscall.SIGINT) || status == 128+int(syscall.SIGTERM) {
				if len(afterInterrupt) > 0 {
					engine.RunAfterInterrupt(afterInterrupt, env, afterInterruptTimeout)
				}
				if len(afterInterruptSource) > 0 {
					engine.RunAfterInterrupt(afterInterruptSource, sourceEnv(env), afterInterruptTimeout)
				}
			}
			// What the daemon will make of the exit, as far as the status says: the engine's own reading.
			outcome := parser.Classify(engine.Evidence{ExitStatus: status, Operation: kind})
			runAfterHooks(hooksAfter, runID, attempt, status, outcome.Status, emit)
			closeJournal()
			return exitCodeError{status}
		},
	}
	f := cmd.Flags()
	f.StringVar(&runID, "run", "", "run id")
	f.IntVar(&attempt, "attempt", 0, "attempt number")
	f.StringVar(&journalPath, "journal", "", "run journal file")
	f.StringVar(&engineName, "engine", engine.NameRestic, "engine: restic or command")
	f.StringVar(&kind, "kind", "", "the run's kind (backup, restore, verify, ...): how the engine's output reads")
	f.StringVar(&progressDir, "progress-dir", "", "measure progress as what is under this directory (a restore's target)")
	f.Int64Var(&totalBytes, "progress-total-bytes", 0, "the bytes --progress-dir will hold at the end (0: unknown)")
	f.Int64Var(&totalFiles, "progress-total-files", 0, "the files --progress-dir will hold at the end (0: unknown)")
	f.StringArrayVar(&before, "before", nil, "a command to run first, one argument per flag; its failure is ignored")
	f.StringArrayVar(&hooksAfter, "hook-after", nil, "a job's after hook, as --hook-before, run whatever the outcome (repeatable, in order)")
	f.StringArrayVar(&hooksBefore, "hook-before", nil, "a job's before hook, a command line split as a shell splits words (repeatable, in order)")
	f.StringVar(&stdinFrom, "stdin-from", "", "a command line (split as --hook-before) whose standard output is the engine's standard input, closed only if it exits 0")
	f.StringArrayVar(&beforeSource, "before-source", nil, "as --before, with a copy's source password as restic's (RESTIC_FROM_PASSWORD_FILE as RESTIC_PASSWORD_FILE)")
	f.StringArrayVar(&afterInterruptSource, "after-interrupt-source", nil, "as --after-interrupt, with a copy's source password as restic's")
	f.StringArrayVar(&afterInterrupt, "after-interrupt", nil, "a command to run when a signal interrupted the engine (restic unlock), one argument per flag")
	creds.add(f)
	for _, name := range []string{"run", "attempt", "journal"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// sourceEnv is env for restic on a copy's source repository: its password (the credential in
// RESTIC_FROM_PASSWORD_FILE, if the unit has one) as RESTIC_PASSWORD_FILE.
func sourceEnv(env []string) []string {
	from := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "RESTIC_FROM_PASSWORD_FILE="); ok {
			from = v
		}
	}
	if from == "" {
		return env
	}
	return append(slices.Clone(env), "RESTIC_PASSWORD_FILE="+from) // the last one counts
}

// runBeforeHooks runs a job's before hooks in order, as this process (the job's user, in its
// unit), their output on stderr, with the run's id, job and attempt in their environment (and
// not the engine's secrets). The first that fails ends the attempt: its failure is journaled as
// the fatal error ("before hook … exited N", which the engines classify) with the exit, and the
// engine is never started; one that exits engine.HookSkip ends it so, to be skipped. A stop meanwhile reaches the hook as SIGINT and ends the attempt as
// interrupted (130). It returns the status to exit with, 0 if every hook succeeded, and the fatal
// error it journaled.
func runBeforeHooks(ctx context.Context, hooks []string, runID string, attempt int, emit func(string, any) error) (int, string) {
	env := hookEnv(runID, attempt, "before")
	end := func(status int, why string) (int, string) {
		if why != "" {
			fmt.Fprintf(os.Stderr, "holdfast: %s\n", why)
			_ = emit(engine.TypeFatal, engine.Fatal{Message: why})
		}
		_ = emit(engine.TypeExit, engine.Exit{ExitStatus: status})
		return status, why
	}
	for _, h := range hooks {
		argv, err := job.SplitHook(h)
		if err != nil {
			return end(1, engine.HookFailed+textsafe.String(h)+": "+err.Error())
		}
		if ctx.Err() != nil {
			return end(130, "")
		}
		c := exec.Command(argv[0], argv[1:]...)
		c.Env, c.Dir, c.Stdout, c.Stderr = env, "/", os.Stderr, os.Stderr
		if err := c.Start(); err != nil {
			return end(1, engine.HookFailed+textsafe.String(h)+" could not start: "+job.Cause(err))
		}
		waited := make(chan error, 1)
		go func() { waited <- c.Wait() }()
		var werr error
		select {
		case werr = <-waited:
		case <-ctx.Done():
			_ = c.Process.Signal(os.Interrupt)
			<-waited
			return end(130, "")
		}
		if werr != nil && c.ProcessState.ExitCode() == engine.HookSkip {
			return end(engine.HookSkip, engine.HookFailed+textsafe.String(h)+fmt.Sprintf(" exited %d: it asked that this backup be skipped", engine.HookSkip))
		}
		if werr != nil {
			return end(1, engine.HookFailed+textsafe.String(h)+" "+engine.DescribeExit(c.ProcessState, werr))
		}
	}
	return 0, ""
}

// hookEnv is a hook's environment: this process's, without the engine's secrets, and the run's.
func hookEnv(runID string, attempt int, kind string, extra ...string) []string {
	env := append(os.Environ(), "HOLDFAST_RUN="+runID, "HOLDFAST_ATTEMPT="+strconv.Itoa(attempt), "HOLDFAST_HOOK="+kind)
	return append(env, extra...)
}

// runAfterHooks runs a job's after hooks in order, whatever the attempt's outcome (the engine's
// classification of status: succeeded, partial, failed, interrupted or skipped), which they get
// in HOLDFAST_OUTCOME and HOLDFAST_EXIT_STATUS beside the run; they cannot change it. The first
// failure is journaled (a hook_error event: the run's reason names it). Signals are not passed
// on: the unit is stopping, and the hooks are what it does last; its stop timeout bounds them.
func runAfterHooks(hooks []string, runID string, attempt, status int, outcome string, emit func(string, any) error) {
	env := hookEnv(runID, attempt, "after", "HOLDFAST_OUTCOME="+outcome, "HOLDFAST_EXIT_STATUS="+strconv.Itoa(status))
	failed := false
	for _, h := range hooks {
		why := ""
		if argv, err := job.SplitHook(h); err != nil {
			why = err.Error()
		} else {
			c := exec.Command(argv[0], argv[1:]...)
			c.Env, c.Dir, c.Stdout, c.Stderr = env, "/", os.Stderr, os.Stderr
			if err := c.Run(); err != nil {
				why = "after hook " + textsafe.String(h) + " " + engine.DescribeExit(c.ProcessState, err)
			}
		}
		if why != "" {
			fmt.Fprintf(os.Stderr, "holdfast: %s\n", why)
			if !failed {
				_ = emit(engine.TypeHookError, engine.HookError{Message: why})
				failed = true
			}
		}
	}
}

func newMarkerCmd(g *globals) *cobra.Command {
	var runID, unit string
	var attempt int
	cmd := &cobra.Command{
		Use:    "marker --run R --attempt N --unit U",
		Short:  "Write an attempt's exit marker from systemd's $SERVICE_RESULT, $EXIT_CODE, $EXIT_STATUS (ExecStopPost)",
		Hidden: true,
		Args:   exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			run, err := uuid.Parse(runID)
			if err != nil {
				return badInput("--run %q is not a run id", runID)
			}
			m, err := runner.MarkerFromEnv(run, attempt, unit, os.Getenv, time.Now())
			if err != nil {
				return inputError{err}
			}
			if err := runner.WriteMarker(g.stateDir, m); err != nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&runID, "run", "", "run id")
	cmd.Flags().IntVar(&attempt, "attempt", 0, "attempt number")
	cmd.Flags().StringVar(&unit, "unit", "", "unit name")
	return cmd
}

// warnUnbounded warns of the statement bounds a daemon behind a transaction pooler lacks: it
// cannot send its own (store.Config), so they are the role's or the database's.
func warnUnbounded(ctx context.Context, st *store.Store, logger *slog.Logger) error {
	b, err := st.Bounds(ctx)
	if err != nil {
		return err
	}
	var missing []string
	for _, bound := range []struct {
		setting string
		d       time.Duration
	}{{"statement_timeout", b.Statement}, {"lock_timeout", b.Lock}, {"idle_in_transaction_session_timeout", b.IdleInTransaction}} {
		if bound.d == 0 {
			missing = append(missing, bound.setting)
		}
	}
	if len(missing) > 0 {
		logger.Warn("behind a transaction pooler the daemon's statements get the database's bounds, and these are none: set them for holdfast's role, e.g. ALTER ROLE holdfast SET statement_timeout = '30s'",
			"unset", strings.Join(missing, ","))
	}
	return nil
}
