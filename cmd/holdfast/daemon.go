package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/journallog"
	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/notify"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/supervisor"
	"github.com/holdfast-backup/holdfast/systemd"
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
				found, err := st.InvariantViolations(ctx)
				if err != nil {
					return err
				}
				// And the stored jobs as the daemon reads them: windows or a zone that do not
				// parse hold the job's runs back.
				jobs, err := st.JobList(ctx)
				if err != nil {
					return err
				}
				found = append(found, jobdef.StoredProblems(jobs)...)
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
	cfg := supervisor.Defaults() // the settings' errors name their flags (settingFlag)
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
			g.daemon = true
			if err := g.requireDSN(); err != nil {
				return configError{err}
			}
			cfg.Database.Address, cfg.Reconcile.StateDir, cfg.Logger, cfg.Version = g.address(), g.stateDir, logger, version
			cfg.Notify.JournalDir, cfg.JournalDir = g.journalDir, g.journalDir
			cfg.Systemd = systemd.Config{Manager: g.systemd, Address: g.systemdAddress}
			cfg.Reconcile.AllowUsers = strings.Split(allowUsers, ",")
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
			applied, err := st.MigrationListApplied(ctx)
			if err != nil {
				return err
			}
			if _, err := migrations.ApplyPending(ctx, cfg.Database.Session(), applied); err != nil {
				return err
			}
			rn, err := systemd.New(ctx, cfg.Systemd)
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
			logger.Info("holdfast daemon started", "version", version, "host", cfg.Reconcile.Host, "state_dir", g.stateDir, "systemd", g.systemd, "sweep_interval", cfg.SweepInterval,
				"pass_timeout", cfg.Reconcile.PassTimeout, "allow_users", allowUsers, "allow_command_jobs", cfg.Reconcile.AllowCommandJobs,
				"allow_notify_commands", cfg.Notify.AllowCommands, "listen", cfg.Listen, "tls", cfg.TLSCert != "",
				"statement_timeout", cfg.Database.StatementTimeout, "behind_pooler", cfg.Database.Pooled(),
				"unit_binary", cfg.Reconcile.Binary, // holdfast-unit, or this binary where it is not installed
				"restic", cfg.Reconcile.ResticBinary, "restic_version", cfg.ResticVersion.String())
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
	bindDaemonFlags(cmd.Flags(), g, &cfg, &allowUsers, &logLevel)
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

// bindDaemonFlags binds the daemon's flags to cfg's settings, each to the setting daemonFlags
// names it for, and --allow-users and --log-level to allowUsers and logLevel.
func bindDaemonFlags(f *pflag.FlagSet, g *globals, cfg *supervisor.Config, allowUsers, logLevel *string) {
	rc := &cfg.Reconcile
	f.StringVar(logLevel, "log-level", g.envOr("HOLDFAST_LOG_LEVEL", "info"), "debug (each run's decision in each pass), info, warn or error (env HOLDFAST_LOG_LEVEL)")
	f.DurationVar(&cfg.SweepInterval, "sweep-interval", supervisor.DefaultSweepInterval, "time between reconciler passes while anything is live (an idle daemon waits for a wake, 30s at most)")
	f.DurationVar(&rc.SpawnGrace, "spawn-grace", reconcile.DefaultSpawnGrace, "how long a spawned unit may take to appear")
	f.IntVar(&rc.MaxAttempts, "max-attempts", reconcile.DefaultMaxAttempts, "attempts a run may take before it fails")
	f.DurationVar(&rc.RunBudget, "run-budget", reconcile.DefaultRunBudget, "time one run may take in one pass")
	f.StringVar(&rc.Host, "host", g.env.getenv("HOLDFAST_HOST"), "this daemon's host among those sharing the database: it runs the jobs pinned to it and any-host jobs (env HOLDFAST_HOST; default the host name)")
	f.DurationVar(&cfg.Lease, "lease", supervisor.DefaultLease, "how long the host's lease lasts unless the daemon renews it; a host is seen down this long after its daemon stopped")
	f.DurationVar(&rc.TakeoverGrace, "takeover-grace", reconcile.DefaultTakeoverGrace, "how long after another host's lease expired its runs of any-host jobs are taken over here")
	f.IntVar(&rc.Limits.MaxRunning, "max-running", 0, "at most this many runs hold a unit at once, across all hosts (0: no limit)")
	f.IntVar(&rc.Limits.MaxRunningHost, "max-running-host", 0, "at most this many runs hold a unit at once on this host (0: no limit)")
	f.StringArrayVar(&rc.Windows, "window", nil, "global maintenance window in which no run starts, e.g. \"Sat 01:00-05:00\" (repeatable)")
	f.StringVar(&rc.WindowZone, "window-tz", "", "time zone of the global windows (IANA name; default UTC)")
	f.DurationVar(&cfg.LateGrace, "late-grace", supervisor.DefaultLateGrace, "how late a scheduled slot may still start; older slots are counted as missed")
	f.DurationVar(&rc.StartLead, "start-lead", reconcile.DefaultStartLead, "admit and prepare a run this long before its time, so that systemd starts it at that time from a transient timer (0: start runs when their time has come)")
	f.DurationVar(&rc.DependsWait, "depends-wait", reconcile.DefaultDependsWait, "how long a run waits for its prerequisite's next outcome when the prerequisite's last run did not succeed")
	f.IntVar(&rc.Workers, "workers", reconcile.DefaultWorkers, "runs reconciled at once in one pass")
	f.StringVar(&rc.ResticBinary, "restic", "", "restic executable (default: restic in PATH)")
	f.StringVar(&rc.Binary, "holdfast-binary", "", "holdfast executable the units run (default: holdfast-unit installed beside this one, else this one)")
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
	f.DurationVar(&rc.PassTimeout, "pass-timeout", reconcile.DefaultPassTimeout, "longest one admission pass or one sweep may take")
	f.DurationVar(&cfg.Database.StatementTimeout, "db-statement-timeout", store.DefaultStatementTimeout, "PostgreSQL's statement_timeout for the daemon's sessions")
	f.DurationVar(&cfg.Database.LockTimeout, "db-lock-timeout", store.DefaultLockTimeout, "PostgreSQL's lock_timeout for the daemon's sessions")
	f.StringVar(allowUsers, "allow-users", g.envOr("HOLDFAST_ALLOW_USERS", reconcile.DefaultAllowUsers),
		"users jobs may run as: comma-separated names or uids, or * for every user, root included (env HOLDFAST_ALLOW_USERS)")
	commandJobs := reconcile.DefaultAllowCommandJobs
	if v, err := strconv.ParseBool(g.env.getenv("HOLDFAST_ALLOW_COMMAND_JOBS")); err == nil {
		commandJobs = v
	}
	f.BoolVar(&rc.AllowCommandJobs, "allow-command-jobs", commandJobs,
		"let command jobs run: they run any program as their user, as root without --user (env HOLDFAST_ALLOW_COMMAND_JOBS=true)")
}

// daemonFlags is the daemon's flag for each setting of supervisor.Config, by its path there
// (bindDaemonFlags binds them): the settings' owners name a setting by its path in their errors
// and reasons, and holdfast shows its flag (settingFlag).
var daemonFlags = map[string]string{
	"SweepInterval": "sweep-interval", "Lease": "lease", "LateGrace": "late-grace",
	"KeepRunFiles": "keep-run-files", "KeepHistory": "keep-history", "RunFilesEvery": "run-files-every",
	"WatchInterval": "watch-interval", "Listen": "listen", "WebAuthFile": "web-auth-file", "WebHosts": "web-host",
	"TLSCert": "tls-cert", "TLSKey": "tls-key",
	"Notify.Backoff": "notify-backoff", "Notify.MaxTries": "notify-max-tries", "Notify.Timeout": "notify-timeout",
	"Notify.Lease": "notify-lease", "Notify.AllowCommands": "allow-notify-commands", "Notify.CommandUser": "notify-command-user",
	"Database.StatementTimeout": "db-statement-timeout", "Database.LockTimeout": "db-lock-timeout",
	"Reconcile.SpawnGrace": "spawn-grace", "Reconcile.MaxAttempts": "max-attempts", "Reconcile.RunBudget": "run-budget",
	"Reconcile.Host": "host", "Reconcile.TakeoverGrace": "takeover-grace",
	"Reconcile.Limits.MaxRunning": "max-running", "Reconcile.Limits.MaxRunningHost": "max-running-host",
	"Reconcile.Windows": "window", "Reconcile.WindowZone": "window-tz", "Reconcile.StartLead": "start-lead",
	"Reconcile.DependsWait": "depends-wait", "Reconcile.Workers": "workers", "Reconcile.ResticBinary": "restic",
	"Reconcile.Binary": "holdfast-binary", "Reconcile.PassTimeout": "pass-timeout",
	"Reconcile.AllowUsers": "allow-users", "Reconcile.AllowCommandJobs": "allow-command-jobs",
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
