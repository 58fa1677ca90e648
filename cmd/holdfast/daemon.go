package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/runner"
	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/store"
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
			res, err := migrations.Apply(cmd.Context(), g.dsn)
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
	cfg := reconcile.Config{}
	dbCfg := store.Config{}
	var d daemonFlags
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the supervisor: spawn admitted runs and reconcile live ones",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			// Every setting is checked before PostgreSQL or systemd is asked anything: a bad
			// configuration exits 78, which the service unit does not restart on.
			if err := d.validate(g, &cfg); err != nil {
				return configError{err}
			}
			dbCfg.DSN = g.dsn
			if err := dbCfg.Validate(); err != nil {
				return inputError{err}
			}
			if _, err := migrations.Apply(ctx, g.dsn); err != nil {
				return err
			}
			st, err := store.New(ctx, dbCfg)
			if err != nil {
				return err
			}
			defer st.Close()
			rn, err := runner.New(ctx, runner.Config{Manager: g.systemd, Address: g.systemdAddress})
			if err != nil {
				return err
			}
			defer rn.Close()
			cfg.Store, cfg.Runner, cfg.StateDir, cfg.Logger = st, rn, g.stateDir, logger
			rec, err := reconcile.New(cfg)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(g.stateDir, 0o755); err != nil {
				return fmt.Errorf("state directory: %w", err)
			}
			admitter := &schedule.Admitter{Store: st, Grace: d.lateGrace, Logger: logger, Timeout: cfg.PassTimeout}
			if err := admitter.Validate(); err != nil {
				return err
			}
			logger.Info("holdfast daemon started", "state_dir", g.stateDir, "systemd", g.systemd, "sweep_interval", d.interval,
				"pass_timeout", cfg.PassTimeout, "allow_users", d.allowUsers, "allow_command_jobs", cfg.AllowCommandJobs,
				"statement_timeout", dbCfg.StatementTimeout)
			wake := make(chan struct{}, 1)
			go listen(ctx, st.Listen, wake, logger)
			var cleaned time.Time
			for {
				if _, err := admitter.AdmitDue(ctx, time.Now()); err != nil && ctx.Err() == nil {
					logger.Error("admission of due jobs failed", "err", err)
				}
				// The first pass is the boot pass: it is an ordinary one.
				stats, err := rec.Sweep(ctx)
				switch {
				case err != nil && ctx.Err() == nil:
					logger.Error("sweep failed", "err", err)
				case stats.Errors > 0 || stats.Duration > time.Second:
					logger.Warn("sweep", "runs", stats.Runs, "errors", stats.Errors, "duration", stats.Duration,
						"systemd", stats.SystemdDuration, "journal_lag_bytes", stats.JournalLag)
				}
				if time.Since(cleaned) >= d.cleanEvery && ctx.Err() == nil {
					cleaned = time.Now()
					n, err := rec.RemoveRunFiles(ctx, time.Since(d.keepRunFiles.Before(time.Now())))
					if err != nil {
						logger.Warn("run files not all removed; the next round tries again", "err", err)
					}
					if n > 0 {
						logger.Info("journals and exit markers of ended runs removed", "runs", n, "ended_before", d.keepRunFilesText)
					}
				}
				// Sleep until the next pass or the earliest due slot, whichever comes first; never
				// for nothing, should a due job stay due (another daemon holds it, say).
				wait := d.interval
				nextCtx, cancel := context.WithTimeout(ctx, dbCfg.StatementTimeout)
				if next, err := st.NextDue(nextCtx); err == nil && next != nil {
					wait = max(minWait, min(wait, time.Until(*next)))
				}
				cancel()
				timer := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					timer.Stop()
					logger.Info("holdfast daemon stopping; running backups continue in their units")
					return nil
				case <-wake:
					timer.Stop()
				case <-timer.C:
				}
			}
		},
	}
	f := cmd.Flags()
	f.DurationVar(&d.interval, "sweep-interval", 2*time.Second, "time between reconciler passes")
	f.DurationVar(&cfg.SpawnGrace, "spawn-grace", 30*time.Second, "how long a spawned unit may take to appear")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", 5, "attempts a run may take before it fails")
	f.DurationVar(&cfg.RunBudget, "run-budget", 30*time.Second, "time one run may take in one pass")
	f.IntVar(&cfg.Limits.MaxRunning, "max-running", 0, "at most this many runs hold a unit at once, across all hosts (0: no limit)")
	f.IntVar(&cfg.Limits.MaxRunningHost, "max-running-host", 0, "at most this many runs hold a unit at once on this host (0: no limit)")
	f.StringArrayVar(&d.windows, "window", nil, "global maintenance window in which no run starts, e.g. \"Sat 01:00-05:00\" (repeatable)")
	f.StringVar(&d.windowZone, "window-tz", "", "time zone of the global windows (IANA name; default UTC)")
	f.DurationVar(&d.lateGrace, "late-grace", time.Minute, "how late a scheduled slot may still start; older slots are counted as missed")
	f.DurationVar(&cfg.DependsWait, "depends-wait", reconcile.DefaultDependsWait, "how long a run waits for its prerequisite's next outcome when the prerequisite's last run did not succeed")
	f.IntVar(&cfg.Workers, "workers", 8, "runs reconciled at once in one pass")
	f.StringVar(&cfg.ResticBinary, "restic", "", "restic executable (default: restic in PATH)")
	f.StringVar(&cfg.Binary, "holdfast-binary", "", "holdfast executable the units run (default: this one)")
	f.StringVar(&d.keepRunFilesText, "keep-run-files", "30d", "remove the journals and exit markers of runs that ended longer ago than this (the database keeps their facts)")
	f.DurationVar(&d.cleanEvery, "run-files-every", time.Hour, "how often ended runs' files are looked for")
	_ = f.MarkHidden("run-files-every") // for tests
	f.DurationVar(&cfg.PassTimeout, "pass-timeout", reconcile.DefaultPassTimeout, "longest one admission pass or one sweep may take")
	f.DurationVar(&dbCfg.StatementTimeout, "db-statement-timeout", store.DefaultStatementTimeout, "PostgreSQL's statement_timeout for the daemon's sessions")
	f.DurationVar(&dbCfg.LockTimeout, "db-lock-timeout", store.DefaultLockTimeout, "PostgreSQL's lock_timeout for the daemon's sessions")
	f.StringVar(&d.allowUsers, "allow-users", envOr("HOLDFAST_ALLOW_USERS", reconcile.DefaultAllowUsers),
		"users jobs may run as: comma-separated names or uids, or * for every user, root included (env HOLDFAST_ALLOW_USERS)")
	commandJobs := reconcile.DefaultAllowCommandJobs
	if v, err := strconv.ParseBool(os.Getenv("HOLDFAST_ALLOW_COMMAND_JOBS")); err == nil {
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

// daemonFlags are the daemon's settings that are not reconcile.Config fields.
type daemonFlags struct {
	interval, lateGrace time.Duration
	windows             []string
	windowZone          string
	allowUsers          string
	keepRunFilesText    string
	keepRunFiles        retention.Duration // parsed from keepRunFilesText by validate
	cleanEvery          time.Duration
}

// validate checks every daemon setting and fills cfg's binaries and windows, touching nothing.
func (d *daemonFlags) validate(g *globals, cfg *reconcile.Config) error {
	if err := g.requireDSN(); err != nil {
		return err
	}
	if err := (&runner.Config{Manager: g.systemd, Address: g.systemdAddress}).Validate(); err != nil {
		return err
	}
	for _, v := range []struct {
		flag    string
		d       time.Duration
		example string
	}{{"--sweep-interval", d.interval, "2s"}, {"--spawn-grace", cfg.SpawnGrace, "30s"}, {"--run-budget", cfg.RunBudget, "30s"},
		{"--depends-wait", cfg.DependsWait, "6h"}} {
		if v.d <= 0 {
			return fmt.Errorf("%s %s must be positive, e.g. %s", v.flag, v.d, v.example)
		}
	}
	var err error
	if d.keepRunFiles, err = retention.ParseDuration(d.keepRunFilesText); err != nil || d.keepRunFiles.IsZero() {
		return fmt.Errorf("--keep-run-files %q: give a positive duration such as 30d, 2m or 36h", d.keepRunFilesText)
	}
	if d.cleanEvery <= 0 {
		return errors.New("--run-files-every must be positive")
	}
	if cfg.PassTimeout < 0 {
		return errors.New("--pass-timeout must be positive")
	}
	cfg.AllowUsers = strings.Split(d.allowUsers, ",")
	if err := cfg.ValidatePolicy(); err != nil {
		return err
	}
	if d.lateGrace < 0 {
		return fmt.Errorf("--late-grace %s is negative: give 0 or more, e.g. 1m", d.lateGrace)
	}
	for _, v := range []struct {
		flag string
		n    int
		min  int
	}{{"--max-attempts", cfg.MaxAttempts, 1}, {"--workers", cfg.Workers, 1},
		{"--max-running", cfg.Limits.MaxRunning, 0}, {"--max-running-host", cfg.Limits.MaxRunningHost, 0}} {
		if v.n < v.min {
			return fmt.Errorf("%s %d is out of range: give at least %d", v.flag, v.n, v.min)
		}
	}
	if cfg.Binary == "" {
		if cfg.Binary, err = os.Executable(); err != nil {
			return fmt.Errorf("find holdfast's own executable: %w", err)
		}
	} else if err := checkExecutable("--holdfast-binary", cfg.Binary); err != nil {
		return err
	}
	if cfg.ResticBinary, err = resticBinary(cfg.ResticBinary); err != nil {
		return err
	}
	if cfg.WindowZone, err = schedule.LoadZone(d.windowZone); err != nil {
		return fmt.Errorf("--window-tz: %w", err)
	}
	for _, text := range d.windows {
		w, err := schedule.ParseWindow(text)
		if err != nil {
			return err
		}
		cfg.Windows = append(cfg.Windows, w)
	}
	return nil
}

// minWait is the shortest sleep between two passes.
const minWait = 100 * time.Millisecond

// listen forwards notifications to wake, reconnecting after failures; the sweep interval is the
// backstop while it is down.
func listen(ctx context.Context, fn func(context.Context, func()) error, wake chan struct{}, logger *slog.Logger) {
	failed := false
	for ctx.Err() == nil {
		err := fn(ctx, func() {
			if failed {
				// fn wakes once when it listens again.
				logger.Info("listening for notifications again")
				failed = false
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		if ctx.Err() != nil {
			return
		}
		failed = true
		logger.Warn("listen for notifications failed; polling meanwhile", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// credentialFlags are the flags by which a unit's command learns which credentials it was given.
type credentialFlags struct{ password, env bool }

func (c *credentialFlags) add(f *pflag.FlagSet) {
	f.BoolVar(&c.password, "password-credential", false, "set RESTIC_PASSWORD_FILE to the unit's password credential")
	f.BoolVar(&c.env, "env-credential", false, "add the variables of the unit's environment credential")
}

func (c credentialFlags) environ() ([]string, error) {
	return credentials.Environ(os.Environ(), c.password, c.env)
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

func newExecCmd() *cobra.Command {
	var runID, journalPath, engineName string
	var attempt int
	var creds credentialFlags
	var before []string
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
			var parser engine.Parser
			switch engineName {
			case "restic":
				parser = engine.Restic{}
			case "command":
				parser = engine.Command{}
			default:
				return badInput("unknown engine %q", engineName)
			}
			env, err := creds.environ()
			if err != nil {
				// The engine cannot reach its repository without them: fail as it would.
				fmt.Fprintf(os.Stderr, "holdfast exec: credentials: %v\n", err)
				return exitCodeError{1}
			}
			if len(before) > 0 {
				if status, stopped := runBefore(before, env); stopped {
					return exitCodeError{status}
				}
			}
			emit := func(string, any) error { return nil }
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
			}
			// The engine's signals are forwarded by engine.Exec; cobra's context must not kill it.
			status, err := engine.Exec(context.WithoutCancel(cmd.Context()), engine.ExecConfig{
				Argv: argv, Env: env, Parser: parser, Emit: emit, Stderr: os.Stderr, Stdout: os.Stdout,
			})
			if err != nil {
				fmt.Fprintf(os.Stderr, "holdfast exec: %v\n", err)
				return exitCodeError{127}
			}
			if w != nil {
				if err := w.Close(); err != nil {
					fmt.Fprintf(os.Stderr, "holdfast exec: close run journal: %v\n", err)
				}
			}
			return exitCodeError{status}
		},
	}
	f := cmd.Flags()
	f.StringVar(&runID, "run", "", "run id")
	f.IntVar(&attempt, "attempt", 0, "attempt number")
	f.StringVar(&journalPath, "journal", "", "run journal file")
	f.StringVar(&engineName, "engine", "restic", "engine: restic or command")
	f.StringArrayVar(&before, "before", nil, "a command to run first, one argument per flag; its failure is ignored")
	creds.add(f)
	for _, name := range []string{"run", "attempt", "journal"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// runBefore runs the command that goes before the engine. Its failure is not the engine's: the
// engine's own run says what went wrong. A stop that arrives meanwhile is passed on to it as
// SIGINT, and then the engine is not started: stopped is true, with the status to exit with.
func runBefore(argv, env []string) (status int, stopped bool) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "holdfast exec: %s: %v\n", argv[0], err)
		return 0, false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case <-sigs:
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGINT)
		case err := <-done:
			if err != nil && !stopped {
				fmt.Fprintf(os.Stderr, "holdfast exec: %s: %v\n", argv[0], err)
			}
			return 128 + int(syscall.SIGINT), stopped
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
			if attempt < 1 {
				return badInput("--attempt must be at least 1")
			}
			m := runner.Marker{Run: run, Attempt: attempt, Unit: unit,
				ServiceResult: os.Getenv("SERVICE_RESULT"), ExitCode: os.Getenv("EXIT_CODE"),
				ExitStatus: os.Getenv("EXIT_STATUS"), At: time.Now().UTC()}
			if m.ServiceResult == "" {
				return badInput("SERVICE_RESULT is not set: this command runs as a unit's ExecStopPost")
			}
			if m.ExitCode == "exited" {
				if _, err := strconv.Atoi(m.ExitStatus); err != nil {
					return badInput("EXIT_STATUS %q is not a number", m.ExitStatus)
				}
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
