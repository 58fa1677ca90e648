package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/reconcile"
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
	var interval, lateGrace time.Duration
	var windows []string
	var windowZone, allowUsers string
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the supervisor: spawn admitted runs and reconcile live ones",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return badInput("--sweep-interval must be positive")
			}
			cfg.AllowUsers = strings.Split(allowUsers, ",")
			if err := cfg.ValidatePolicy(); err != nil {
				return inputError{err}
			}
			ctx := cmd.Context()
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			if err := g.requireDSN(); err != nil {
				return err
			}
			if _, err := migrations.Apply(ctx, g.dsn); err != nil {
				return err
			}
			st, err := g.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			rn, err := g.openRunner(ctx)
			if err != nil {
				return err
			}
			defer rn.Close()
			if cfg.Binary == "" {
				if cfg.Binary, err = os.Executable(); err != nil {
					return fmt.Errorf("find holdfast's own executable: %w", err)
				}
			}
			if cfg.ResticBinary, err = resticBinary(cfg.ResticBinary); err != nil {
				return err
			}
			cfg.Store, cfg.Runner, cfg.StateDir, cfg.Logger = st, rn, g.stateDir, logger
			if cfg.WindowZone, err = schedule.LoadZone(windowZone); err != nil {
				return inputError{err}
			}
			for _, text := range windows {
				w, err := schedule.ParseWindow(text)
				if err != nil {
					return inputError{err}
				}
				cfg.Windows = append(cfg.Windows, w)
			}
			rec, err := reconcile.New(cfg)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(g.stateDir, 0o755); err != nil {
				return fmt.Errorf("state directory: %w", err)
			}
			logger.Info("holdfast daemon started", "state_dir", g.stateDir, "systemd", g.systemd, "sweep_interval", interval,
				"allow_users", allowUsers, "allow_command_jobs", cfg.AllowCommandJobs)
			wake := make(chan struct{}, 1)
			go listen(ctx, st.Listen, wake, logger)
			admitter := &schedule.Admitter{Store: st, Grace: lateGrace, Logger: logger}
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
				// Sleep until the next pass or the earliest due slot, whichever comes first.
				wait := interval
				if next, err := st.NextDue(ctx); err == nil && next != nil {
					wait = max(0, min(wait, time.Until(*next)))
				}
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
	f.DurationVar(&interval, "sweep-interval", 2*time.Second, "time between reconciler passes")
	f.DurationVar(&cfg.SpawnGrace, "spawn-grace", 30*time.Second, "how long a spawned unit may take to appear")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", 5, "attempts a run may take before it fails")
	f.DurationVar(&cfg.RunBudget, "run-budget", 30*time.Second, "time one run may take in one pass")
	f.IntVar(&cfg.Limits.MaxRunning, "max-running", 0, "at most this many runs hold a unit at once, across all hosts (0: no limit)")
	f.IntVar(&cfg.Limits.MaxRunningHost, "max-running-host", 0, "at most this many runs hold a unit at once on this host (0: no limit)")
	f.StringArrayVar(&windows, "window", nil, "global maintenance window in which no run starts, e.g. \"Sat 01:00-05:00\" (repeatable)")
	f.StringVar(&windowZone, "window-tz", "", "time zone of the global windows (IANA name; default UTC)")
	f.DurationVar(&lateGrace, "late-grace", time.Minute, "how late a scheduled slot may still start; older slots are counted as missed")
	f.IntVar(&cfg.Workers, "workers", 8, "runs reconciled at once in one pass")
	f.StringVar(&cfg.ResticBinary, "restic", "", "restic executable (default: restic in PATH)")
	f.StringVar(&cfg.Binary, "holdfast-binary", "", "holdfast executable the units run (default: this one)")
	f.StringVar(&allowUsers, "allow-users", envOr("HOLDFAST_ALLOW_USERS", reconcile.DefaultAllowUsers),
		"users jobs may run as: comma-separated names or uids, or * for every user, root included (env HOLDFAST_ALLOW_USERS)")
	commandJobs := reconcile.DefaultAllowCommandJobs
	if v, err := strconv.ParseBool(os.Getenv("HOLDFAST_ALLOW_COMMAND_JOBS")); err == nil {
		commandJobs = v
	}
	f.BoolVar(&cfg.AllowCommandJobs, "allow-command-jobs", commandJobs,
		"let command jobs run: they run any program as their user, as root without --user (env HOLDFAST_ALLOW_COMMAND_JOBS=true)")
	return cmd
}

// listen forwards notifications to wake, reconnecting after failures; the sweep interval is the
// backstop while it is down.
func listen(ctx context.Context, fn func(context.Context, func()) error, wake chan struct{}, logger *slog.Logger) {
	for ctx.Err() == nil {
		err := fn(ctx, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		if ctx.Err() != nil {
			return
		}
		logger.Warn("listen for notifications failed; polling meanwhile", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

func newExecCmd() *cobra.Command {
	var runID, journalPath, engineName string
	var attempt int
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
				Argv: argv, Parser: parser, Emit: emit, Stderr: os.Stderr, Stdout: os.Stdout,
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
	for _, name := range []string{"run", "attempt", "journal"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
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
