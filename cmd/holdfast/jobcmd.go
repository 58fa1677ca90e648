package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
)

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return badInput("expected %s, got %d argument(s)", what, len(args))
		}
		return nil
	}
}

func newJobCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "job", Short: "Add, list, show and remove backup jobs"}
	cmd.AddCommand(newJobAddCmd(g), newJobEditCmd(g), newJobListCmd(g), newJobShowCmd(g), newJobRemoveCmd(g))
	return cmd
}

// jobFlags binds the settings an operator can give a job (add) or change (edit).
type jobFlags struct {
	job      model.Job
	noBefore bool
	noAfter  bool
	nice     int
	maxAdded string
	anyHost  bool
	policy   policyFlags
	guard    guardFlags
}

func (jf *jobFlags) bind(f *pflag.FlagSet) {
	j := &jf.job
	f.StringVar(&j.Repository, "repo", "", "restic repository (absolute path or backend URL)")
	f.StringVar(&j.PasswordFile, "password-file", "", "file holding the repository password (absolute path; may be root's alone, mode 0600)")
	f.StringVar(&j.EnvFile, "env-file", "", `file of KEY=VALUE lines for restic's environment, e.g. AWS_* or B2_* for a remote repository (absolute path, root's alone; "" none)`)
	f.StringArrayVar(&j.Paths, "path", nil, "absolute path to back up (repeatable)")
	f.StringArrayVar(&j.Excludes, "exclude", nil, "restic exclude pattern (repeatable)")
	f.StringArrayVar(&j.Command, "command", nil, "with --engine command: the program and its arguments, one per flag")
	f.StringVar(&j.User, "user", "", "run the backup as this user")
	f.StringVar(&j.Group, "group", "", "run the backup as this group")
	f.DurationVar(&j.RuntimeMax, "runtime-max", 0, "stop a run that takes longer than this (e.g. 6h)")
	f.IntVar(&jf.nice, "nice", 0, "CPU niceness of the backup, -20..19")
	f.DurationVar(&j.AlertAfter, "alert-after", 0, "a scheduled job with no success this long after a slot is overdue (default: one period of its schedule)")
	f.IntVar(&j.AlertFailures, "alert-failures", jobdef.DefaultAlertFailures, "this many runs in a row that did not succeed make the job overdue (0: never)")
	f.DurationVar(&j.ExpectEvery, "expect-every", 0, "a job without --schedule is overdue without a success this often (e.g. 168h; 0: never)")
	f.DurationVar(&j.StallAfter, "stall-after", model.DefaultStallAfter, "a live run whose progress stands still this long is stalled (an event)")
	f.StringVar(&j.StallAction, "stall-action", model.StallAlert, "what a stall does besides its event: alert, or stop the run")
	f.IntVar(&j.LimitUploadKiB, "limit-upload", 0, "limit what restic writes to the repository to this many KiB/s (restic --limit-upload); 0 no limit")
	f.StringVar(&j.IOSchedulingClass, "io-class", "", "IO scheduling class: realtime, best-effort or idle")
	f.StringVar(&j.Engine, "engine", engine.NameRestic, "backup engine: "+engine.NameRestic+" or "+engine.NameCommand)
	f.StringVar(&j.Schedule, "schedule", "", `when to run: cron ("0 2 * * *"), @daily, @every 6h; "" runs only by hand`)
	f.StringVar(&j.TimeZone, "tz", "", "IANA time zone of the schedule and windows (default UTC)")
	f.BoolVar(&j.CatchUp, "catch-up", false, "after downtime, run once for the missed slots instead of only counting them")
	f.IntVar(&j.RetryMax, "retry-max", 0, "retries of a run that failed for a transient reason")
	f.DurationVar(&j.RetryBackoff, "retry-backoff", jobdef.DefaultRetryBackoff, "delay before the first retry; doubled for each next one")
	f.StringArrayVar(&j.Windows, "window", nil, `maintenance window in which no run of the job starts, e.g. "Sat 01:00-05:00" (repeatable)`)
	f.IntVar(&j.Priority, "priority", 0, "higher runs first when runs wait for a free place")
	f.StringVar(&j.DependsOn, "depends-on", "", "a job whose last run must have succeeded before this one starts")
	f.StringVar(&j.Account, "account", store.DefaultAccount, "the ledger account the job's runs are charged to")
	f.StringVar(&jf.maxAdded, "max-added", "", `what one run may add to the repository, e.g. 5GiB ("" : estimated from the job's history)`)
	f.StringVar(&j.Host, "host", "", "pin the job to this host: only its daemon runs it (default for a new job: this host, HOLDFAST_HOST or the host name)")
	f.BoolVar(&jf.anyHost, "any-host", false, "let any host's daemon run the job: its paths and repository must be reachable from every host")
	f.StringArrayVar(&j.Backup.BeforeHooks, "before", nil, `run this command in the backup's unit, as the job's user, before the engine (repeatable, in order; split as a shell splits words, never run by one); one that fails fails the run`)
	f.BoolVar(&jf.noBefore, "no-before", false, "remove the job's before hooks")
	f.StringArrayVar(&j.Backup.AfterHooks, "after", nil, `run this command in the backup's unit, as the job's user, after the engine whatever the outcome, which it gets in HOLDFAST_OUTCOME (repeatable, in order; split as --before); its failure is recorded, the outcome stands`)
	f.BoolVar(&jf.noAfter, "no-after", false, "remove the job's after hooks")
	f.StringVar(&j.Backup.StdinFrom, "stdin-from", "", `back up this command's standard output as one file instead of --path, e.g. "/usr/bin/pg_dump -Fc shop" (split as --before; run as the job's user in the unit); a failing command fails the run and leaves no snapshot; "" back up --path again`)
	f.StringVar(&j.Backup.StdinFilename, "stdin-filename", "", "the name the output of --stdin-from has in the snapshot, e.g. shop.dump")
	f.StringVar(&j.Backup.FSSnapshot, "fs-snapshot", "", `read each backup from a read-only snapshot of its paths' file systems, taken as it starts and mounted over the paths in its unit, so that it is of one instant: "btrfs" (each path on a Btrfs subvolume that only root controls); "" the live paths`)
	f.BoolVar(&j.Backup.Catalog, "catalog", false, "list each new snapshot once, after its backup, into a catalog on this host's disk, so that snapshot ls reads it instead of restic (restic jobs)")
	f.StringVar(&j.Copy.To, "copy-to", "", `copy each snapshot a backup makes into this second restic repository (a run of kind copy); "" no copy`)
	f.StringVar(&j.Copy.PasswordFile, "copy-password-file", "", "the copy repository's password file (absolute path; may be root's alone)")
	f.StringVar(&j.Copy.EnvFile, "copy-env-file", "", `KEY=VALUE lines for restic's environment in a copy, in place of --env-file (root's alone; "" the job's)`)
	f.StringVar(&j.Prune.Schedule, "prune-schedule", "", `when to prune the repository (restic prune), a schedule like --schedule; "" never`)
	f.BoolVar(&j.Prune.AppendOnly, "append-only", false, "the job's host writes its repository append-only (e.g. rclone serve restic --append-only): its forgets and prunes never run through it, and are refused without --prune-host")
	f.StringVar(&j.Prune.Host, "prune-host", "", `run the job's forgets and prunes on this host's daemon, over --prune-repository with --prune-env-file; "" where the job runs`)
	f.StringVar(&j.Prune.Repository, "prune-repository", "", `the job's repository as the pruning host reaches it with the right to delete; "" the job's --repo`)
	f.StringVar(&j.Prune.EnvFile, "prune-env-file", "", `KEY=VALUE lines for restic's environment on the pruning host, a file there (root's alone); "" the job's --env-file`)
	f.StringVar(&j.Verify.Schedule, "verify-schedule", "", `when to verify the repository (restic check), a schedule like --schedule; "" never`)
	f.StringVar(&j.Verify.ReadData, "verify-read-data", "", `the part of the data each scheduled verification reads: a percentage (5%) or n/t (1/7); "" the structure only`)
	f.StringVar(&j.Drill.Schedule, "drill-schedule", "", `when to drill a restore of the latest snapshot (a verification), a schedule like --schedule; "" never`)
	f.IntVar(&j.Drill.Files, "drill-files", 0, "how many files, chosen at random, each scheduled drill restores and verifies (default 10)")
	f.DurationVar(&j.Verify.AlertAfter, "verify-alert-after", 0, "the job is overdue when its last successful verification is older than this (0: two periods of --verify-schedule)")
	jf.policy.bind(f)
	jf.guard.bind(f)
}

// apply copies the flags the operator gave onto j.
func (jf *jobFlags) apply(f *pflag.FlagSet, j *model.Job) error {
	src := jf.job
	set := map[string]func(){
		"repo": func() { j.Repository = src.Repository }, "password-file": func() { j.PasswordFile = src.PasswordFile },
		"env-file": func() { j.EnvFile = src.EnvFile },
		"path":     func() { j.Paths = src.Paths }, "exclude": func() { j.Excludes = src.Excludes },
		"command": func() { j.Command = src.Command }, "user": func() { j.User = src.User },
		"group": func() { j.Group = src.Group }, "runtime-max": func() { j.RuntimeMax = src.RuntimeMax },
		"nice": func() { n := jf.nice; j.Nice = &n }, "io-class": func() { j.IOSchedulingClass = src.IOSchedulingClass },
		"engine": func() { j.Engine = src.Engine }, "schedule": func() { j.Schedule = src.Schedule },
		"tz": func() { j.TimeZone = src.TimeZone }, "catch-up": func() { j.CatchUp = src.CatchUp },
		"catalog":     func() { j.Backup.Catalog = src.Backup.Catalog },
		"fs-snapshot": func() { j.Backup.FSSnapshot = src.Backup.FSSnapshot },
		"retry-max":   func() { j.RetryMax = src.RetryMax }, "retry-backoff": func() { j.RetryBackoff = src.RetryBackoff },
		"window": func() { j.Windows = src.Windows }, "priority": func() { j.Priority = src.Priority },
		"depends-on": func() { j.DependsOn = src.DependsOn }, "prune-schedule": func() { j.Prune.Schedule = src.Prune.Schedule },
		"append-only": func() { j.Prune.AppendOnly = src.Prune.AppendOnly },
		"prune-host": func() {
			j.Prune.Host = src.Prune.Host
			if src.Prune.Host == "" {
				j.Prune.Repository, j.Prune.EnvFile = "", ""
			}
		},
		"prune-repository": func() { j.Prune.Repository = src.Prune.Repository },
		"prune-env-file":   func() { j.Prune.EnvFile = src.Prune.EnvFile },
		"verify-schedule":  func() { j.Verify.Schedule = src.Verify.Schedule }, "verify-read-data": func() { j.Verify.ReadData = src.Verify.ReadData },
		"verify-alert-after": func() { j.Verify.AlertAfter = src.Verify.AlertAfter },
		"drill-schedule":     func() { j.Drill.Schedule = src.Drill.Schedule }, "drill-files": func() { j.Drill.Files = src.Drill.Files },
		"before": func() { j.Backup.BeforeHooks = src.Backup.BeforeHooks }, "no-before": func() {
			if jf.noBefore {
				j.Backup.BeforeHooks = nil
			}
		},
		"stdin-from": func() {
			j.Backup.StdinFrom = src.Backup.StdinFrom
			if src.Backup.StdinFrom != "" && !f.Changed("path") {
				j.Paths, j.Excludes = nil, nil // a stream replaces the paths
			}
			if src.Backup.StdinFrom == "" && !f.Changed("stdin-filename") {
				j.Backup.StdinFilename = "" // no stream, no name for it
			}
		},
		"stdin-filename": func() { j.Backup.StdinFilename = src.Backup.StdinFilename },
		"copy-to": func() {
			j.Copy.To = src.Copy.To
			if src.Copy.To == "" {
				j.Copy.PasswordFile, j.Copy.EnvFile = "", ""
			}
		},
		"copy-password-file": func() { j.Copy.PasswordFile = src.Copy.PasswordFile },
		"copy-env-file":      func() { j.Copy.EnvFile = src.Copy.EnvFile },
		"after":              func() { j.Backup.AfterHooks = src.Backup.AfterHooks }, "no-after": func() {
			if jf.noAfter {
				j.Backup.AfterHooks = nil
			}
		},
		"account": func() { j.Account = src.Account }, "limit-upload": func() { j.LimitUploadKiB = src.LimitUploadKiB },
		"alert-after": func() { j.AlertAfter = src.AlertAfter }, "alert-failures": func() { j.AlertFailures = src.AlertFailures },
		"expect-every": func() { j.ExpectEvery = src.ExpectEvery }, "stall-after": func() { j.StallAfter = src.StallAfter },
		"stall-action": func() { j.StallAction = src.StallAction },
		"host":         func() { j.Host = src.Host }, "any-host": func() {
			if jf.anyHost {
				j.Host = ""
			}
		},
	}
	if f.Changed("before") && f.Changed("no-before") {
		return badInput("--before and --no-before contradict each other: give one")
	}
	if f.Changed("after") && f.Changed("no-after") {
		return badInput("--after and --no-after contradict each other: give one")
	}
	if f.Changed("copy-to") && src.Copy.To == "" && (src.Copy.PasswordFile != "" || src.Copy.EnvFile != "") {
		return badInput(`--copy-to "" removes the copy repository, its password and environment files with it: drop --copy-password-file and --copy-env-file`)
	}
	if f.Changed("prune-host") && src.Prune.Host == "" && (src.Prune.Repository != "" || src.Prune.EnvFile != "") {
		return badInput(`--prune-host "" runs forgets and prunes where the job runs, without the pruning host's repository and environment file: drop --prune-repository and --prune-env-file`)
	}
	if f.Changed("host") && f.Changed("any-host") {
		return badInput("--host and --any-host contradict each other: give one")
	}
	if f.Changed("host") {
		if err := jobdef.ValidateHost(src.Host); err != nil {
			return inputError{err}
		}
	}
	f.Visit(func(flag *pflag.Flag) {
		if fn, ok := set[flag.Name]; ok {
			fn()
		}
	})
	if f.Changed("max-added") {
		j.MaxAdded = nil
		if jf.maxAdded != "" {
			n, err := ledger.ParseSize(jf.maxAdded)
			if err != nil {
				return badInput("--max-added: %v", err)
			}
			j.MaxAdded = &n
		}
	}
	if f.Changed("account") {
		if err := jobdef.ValidateName(j.Account); err != nil {
			return badInput("--account %q: an account name is lower-case letters, digits, '.', '_' and '-'", j.Account)
		}
	}
	return applyRetention(f, &jf.policy, &jf.guard, j)
}

func newJobAddCmd(g *globals) *cobra.Command {
	var jf jobFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "add NAME --repo REPO --password-file FILE --path PATH [--path PATH...]",
		Short: "Add a backup job",
		Args:  exactArgs(1, "one job name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			j := jobdef.New(args[0])
			// Local paths exist where the job is added: it runs there unless said otherwise.
			j.Host = g.host()
			if err := jf.apply(cmd.Flags(), &j); err != nil {
				return err
			}
			if err := jobdef.Validate(&j); err != nil {
				return inputError{err}
			}
			if err := jobdef.CheckAccess(j, g.probeAs, g.credentials()); err != nil {
				return inputError{err}
			}
			if err := jobdef.Slots(&j, nil, time.Now()); err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				created, err := st.JobCreate(ctx, j)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), jobJSON(created))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "job %s added: %s\n", created.Name, nextRunText(created))
				return nil
			})
		},
	}
	jf.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as JSON")
	return cmd
}

func newJobEditCmd(g *globals) *cobra.Command {
	var jf jobFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "edit NAME [flags of job add]",
		Short: "Change a job's settings (only the flags given)",
		Args:  exactArgs(1, "one job name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			if cmd.Flags().NFlag() == 0 || (cmd.Flags().NFlag() == 1 && asJSON) {
				return badInput("nothing to change: give the flags to change, e.g. --schedule \"0 3 * * *\"")
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				updated, err := st.JobUpdate(ctx, args[0], func(j *model.Job) error {
					before := *j
					if err := jf.apply(cmd.Flags(), j); err != nil {
						return err
					}
					if err := jobdef.Validate(j); err != nil {
						return inputError{err}
					}
					if jobdef.AccessChanged(before, *j) {
						if err := jobdef.CheckAccess(*j, g.probeAs, g.credentials()); err != nil {
							return inputError{err}
						}
					}
					if err := jobdef.Slots(j, &before, time.Now()); err != nil {
						return inputError{err}
					}
					return nil
				})
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), jobJSON(updated))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "job %s changed: %s\n", updated.Name, nextRunText(updated))
				return nil
			})
		},
	}
	jf.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as JSON")
	return cmd
}

func nextRunText(j model.Job) string {
	if j.NextRunAt == nil {
		return fmt.Sprintf("runs when started (holdfast run start %s)", j.Name)
	}
	return "next run at " + j.NextRunAt.Local().Format(time.RFC3339)
}

type jobOut struct {
	Name               string            `json:"name"`
	Engine             string            `json:"engine"`
	Repository         string            `json:"repository"`
	PasswordFile       string            `json:"password_file"`
	EnvFile            string            `json:"env_file,omitempty"`
	Paths              []string          `json:"paths"`
	Excludes           []string          `json:"excludes"`
	User               string            `json:"user,omitempty"`
	Group              string            `json:"group,omitempty"`
	Nice               *int              `json:"nice,omitempty"`
	IOSchedulingClass  string            `json:"io_scheduling_class,omitempty"`
	RuntimeMaxSeconds  float64           `json:"runtime_max_seconds,omitempty"`
	LimitUploadKiB     int               `json:"limit_upload_kib,omitempty"`
	AlertAfterSeconds  float64           `json:"alert_after_seconds,omitempty"`
	AlertFailures      int               `json:"alert_failures"`
	ExpectEverySeconds float64           `json:"expect_every_seconds,omitempty"`
	StallAfterSeconds  float64           `json:"stall_after_seconds"`
	StallAction        string            `json:"stall_action"`
	OverdueSince       *string           `json:"overdue_since"`
	OverdueReason      string            `json:"overdue_reason,omitempty"`
	CreatedAt          string            `json:"created_at"`
	LastOutcome        string            `json:"last_outcome,omitempty"`
	LastRunID          string            `json:"last_run_id,omitempty"`
	Command            []string          `json:"command,omitempty"`
	Schedule           string            `json:"schedule"`
	TimeZone           string            `json:"time_zone,omitempty"`
	CatchUp            bool              `json:"catch_up"`
	NextRunAt          *string           `json:"next_run_at"`
	MissedSlots        int64             `json:"missed_slots"`
	OverlapSkips       int64             `json:"overlap_skips"`
	LastSkipAt         *string           `json:"last_skip_at,omitempty"`
	LastSkipWhy        string            `json:"last_skip_why,omitempty"`
	RetryMax           int               `json:"retry_max"`
	RetryBackoffSecs   float64           `json:"retry_backoff_seconds"`
	Windows            []string          `json:"windows"`
	Priority           int               `json:"priority"`
	DependsOn          string            `json:"depends_on,omitempty"`
	Retention          *retention.Policy `json:"retention"`
	RetentionText      string            `json:"retention_text,omitempty"`
	RetentionMaxDelete float64           `json:"retention_max_delete"`
	RetentionMinKeep   int               `json:"retention_min_keep"`
	PruneSchedule      string            `json:"prune_schedule"`
	NextPruneAt        *string           `json:"next_prune_at"`
	AppendOnly         bool              `json:"append_only,omitempty"`
	PruneHost          string            `json:"prune_host,omitempty"`
	PruneRepository    string            `json:"prune_repository,omitempty"`
	PruneEnvFile       string            `json:"prune_env_file,omitempty"`
	BeforeHooks        []string          `json:"before,omitempty"`
	AfterHooks         []string          `json:"after,omitempty"`
	StdinFrom          string            `json:"stdin_from,omitempty"`
	Catalog            bool              `json:"catalog,omitempty"`
	FSSnapshot         string            `json:"fs_snapshot,omitempty"`
	StdinFilename      string            `json:"stdin_filename,omitempty"`
	CopyTo             string            `json:"copy_to,omitempty"`
	CopyPasswordFile   string            `json:"copy_password_file,omitempty"`
	CopyEnvFile        string            `json:"copy_env_file,omitempty"`
	HookSkips          int               `json:"hook_skips"`
	VerifySchedule     string            `json:"verify_schedule"`
	NextVerifyAt       *string           `json:"next_verify_at"`
	VerifyReadData     string            `json:"verify_read_data,omitempty"`
	VerifyAlertAfter   float64           `json:"verify_alert_after_seconds,omitempty"`
	DrillSchedule      string            `json:"drill_schedule"`
	NextDrillAt        *string           `json:"next_drill_at"`
	DrillFiles         int               `json:"drill_files,omitempty"`
	Host               string            `json:"host"`
	AnyHost            bool              `json:"any_host"`
	Account            string            `json:"account"`
	MaxAddedBytes      *int64            `json:"max_added_bytes"`
	AdmissionError     string            `json:"admission_error,omitempty"`
	AdmissionRetryAt   *string           `json:"admission_retry_at,omitempty"`
	// Changes are the newest changes holdfast apply made to the job (job show only).
	Changes []jobChangeOut `json:"changes,omitempty"`
}

type jobChangeOut struct {
	At     string   `json:"at"`
	Actor  string   `json:"actor"`
	Action string   `json:"action"`
	Fields []string `json:"fields,omitempty"`
	Source string   `json:"source"`
	Hash   string   `json:"hash"`
}

func jobJSON(j model.Job) jobOut {
	o := jobOut{Name: j.Name, Engine: j.Engine, Repository: j.Repository, PasswordFile: j.PasswordFile,
		EnvFile: j.EnvFile, Paths: j.Paths, Excludes: j.Excludes, User: j.User, Group: j.Group, Nice: j.Nice,
		IOSchedulingClass: j.IOSchedulingClass, RuntimeMaxSeconds: j.RuntimeMax.Seconds(), LimitUploadKiB: j.LimitUploadKiB,
		AlertAfterSeconds: j.AlertAfter.Seconds(), AlertFailures: j.AlertFailures, ExpectEverySeconds: j.ExpectEvery.Seconds(),
		OverdueSince: timeStr(j.OverdueSince), OverdueReason: j.OverdueReason,
		StallAfterSeconds: j.StallAfter.Seconds(), StallAction: j.StallAction,
		CreatedAt: j.CreatedAt.UTC().Format(time.RFC3339Nano), LastOutcome: j.LastOutcome}
	if j.LastRunID != nil {
		o.LastRunID = j.LastRunID.String()
	}
	o.Command, o.Schedule, o.TimeZone, o.CatchUp = j.Command, j.Schedule, j.TimeZone, j.CatchUp
	o.NextRunAt, o.MissedSlots, o.OverlapSkips = timeStr(j.NextRunAt), j.MissedSlots, j.OverlapSkips
	o.LastSkipAt, o.LastSkipWhy, o.RetryMax = timeStr(j.LastSkipAt), j.LastSkipWhy, j.RetryMax
	o.RetryBackoffSecs, o.Windows, o.Priority, o.DependsOn = j.RetryBackoff.Seconds(), j.Windows, j.Priority, j.DependsOn
	if p, ok, err := jobdef.Policy(j); ok && err == nil {
		o.Retention, o.RetentionText = &p, p.Describe()
	}
	o.RetentionMaxDelete, o.RetentionMinKeep = j.Retention.MaxDelete, j.Retention.MinKeep
	o.PruneSchedule, o.NextPruneAt = j.Prune.Schedule, timeStr(j.Prune.NextAt)
	o.AppendOnly, o.PruneHost, o.PruneRepository, o.PruneEnvFile = j.Prune.AppendOnly, j.Prune.Host, j.Prune.Repository, j.Prune.EnvFile
	o.BeforeHooks, o.AfterHooks, o.HookSkips = j.Backup.BeforeHooks, j.Backup.AfterHooks, j.Backup.HookSkips
	o.StdinFrom, o.StdinFilename, o.Catalog, o.FSSnapshot = j.Backup.StdinFrom, j.Backup.StdinFilename, j.Backup.Catalog, j.Backup.FSSnapshot
	o.CopyTo, o.CopyPasswordFile, o.CopyEnvFile = j.Copy.To, j.Copy.PasswordFile, j.Copy.EnvFile
	o.VerifySchedule, o.NextVerifyAt, o.VerifyReadData = j.Verify.Schedule, timeStr(j.Verify.NextAt), j.Verify.ReadData
	o.VerifyAlertAfter = j.Verify.AlertAfter.Seconds()
	o.DrillSchedule, o.NextDrillAt, o.DrillFiles = j.Drill.Schedule, timeStr(j.Drill.NextAt), j.Drill.Files
	o.Account, o.MaxAddedBytes = j.Account, j.MaxAdded
	o.Host, o.AnyHost = j.Host, j.Host == ""
	o.AdmissionError, o.AdmissionRetryAt = j.AdmissionError, timeStr(j.AdmissionRetryAt)
	return o
}

// printMaintenance prints one of the schedules of a job's repository as job show does, if set.
func printMaintenance(w io.Writer, label, schedule, what string, next *time.Time) {
	if schedule == "" {
		return
	}
	fmt.Fprintf(w, "%s%s%s", label, schedule, what)
	if next != nil {
		fmt.Fprintf(w, ", next at %s", next.Local().Format(time.RFC3339))
	}
	fmt.Fprintln(w)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newJobListCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				jobs, err := st.JobList(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					out := make([]jobOut, 0, len(jobs))
					for _, j := range jobs {
						out = append(out, jobJSON(j))
					}
					return writeJSON(cmd.OutOrStdout(), out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tENGINE\tHOST\tREPOSITORY\tPATHS\tLAST OUTCOME")
				for _, j := range jobs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.Engine, cmp.Or(j.Host, "any"), textsafe.String(j.Repository),
						textsafe.String(strings.Join(j.Paths, ",")), dash(j.LastOutcome))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newJobShowCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a job",
		Args:  exactArgs(1, "one job name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				j, err := st.JobGet(ctx, args[0])
				if err != nil {
					return err
				}
				changes, err := st.JobChangeList(ctx, j.Name, 5)
				if err != nil {
					return err
				}
				if asJSON {
					o := jobJSON(j)
					for _, c := range changes {
						o.Changes = append(o.Changes, jobChangeOut{At: c.At, Actor: c.Actor, Action: c.Action, Fields: c.Fields, Source: c.Source, Hash: c.Hash})
					}
					return writeJSON(cmd.OutOrStdout(), o)
				}
				w := cmd.OutOrStdout()
				defer func() {
					for _, c := range changes {
						what := c.Action
						if len(c.Fields) > 0 {
							what += " " + strings.Join(c.Fields, ", ")
						}
						fmt.Fprintf(w, "applied:       %s %s by %s from %s (content %s)\n", c.At, what, textsafe.String(c.Actor), textsafe.String(c.Source), c.Hash)
					}
				}()
				fmt.Fprintf(w, "job:           %s\nengine:        %s\nrepository:    %s\npassword file: %s\npaths:         %s\n",
					j.Name, j.Engine, j.Repository, j.PasswordFile, strings.Join(j.Paths, " "))
				if j.EnvFile != "" {
					fmt.Fprintf(w, "env file:      %s\n", j.EnvFile)
				}
				if len(j.Excludes) > 0 {
					fmt.Fprintf(w, "excludes:      %s\n", strings.Join(j.Excludes, " "))
				}
				if j.User != "" {
					fmt.Fprintf(w, "runs as:       %s\n", j.User)
				}
				if j.Host != "" {
					fmt.Fprintf(w, "host:          %s (pinned)\n", j.Host)
				} else {
					fmt.Fprintf(w, "host:          any\n")
				}
				if j.RuntimeMax > 0 {
					fmt.Fprintf(w, "runtime limit: %s\n", j.RuntimeMax)
				}
				if j.OverdueSince != nil {
					fmt.Fprintf(w, "OVERDUE:       since %s: %s\n", j.OverdueSince.UTC().Format(time.RFC3339), j.OverdueReason)
				}
				if j.LimitUploadKiB > 0 {
					fmt.Fprintf(w, "upload limit:  %d KiB/s\n", j.LimitUploadKiB)
				}
				if len(j.Command) > 0 {
					fmt.Fprintf(w, "command:       %s\n", strings.Join(j.Command, " "))
				}
				sched := "manual (holdfast run start " + j.Name + ")"
				if j.Schedule != "" {
					sched = j.Schedule
					if j.TimeZone != "" {
						sched += " (" + j.TimeZone + ")"
					}
					if j.CatchUp {
						sched += ", catch-up after downtime"
					}
				}
				fmt.Fprintf(w, "schedule:      %s\n", sched)
				if j.NextRunAt != nil {
					fmt.Fprintf(w, "next run:      %s\n", j.NextRunAt.Local().Format(time.RFC3339))
				}
				fmt.Fprintf(w, "missed slots:  %d (holdfast down)   skipped slots: %d (previous run still live)\n", j.MissedSlots, j.OverlapSkips)
				if j.LastSkipWhy != "" {
					fmt.Fprintf(w, "last skip:     %s\n", j.LastSkipWhy)
				}
				if j.AdmissionError != "" {
					fmt.Fprintf(w, "not admitted:  %s\n", j.AdmissionError)
				}
				if j.RetryMax > 0 {
					fmt.Fprintf(w, "retries:       up to %d, first after %s, doubling\n", j.RetryMax, j.RetryBackoff)
				}
				if len(j.Windows) > 0 {
					fmt.Fprintf(w, "windows:       %s\n", strings.Join(j.Windows, "; "))
				}
				if j.Priority != 0 {
					fmt.Fprintf(w, "priority:      %d\n", j.Priority)
				}
				if j.DependsOn != "" {
					fmt.Fprintf(w, "depends on:    %s (its last run must have succeeded)\n", j.DependsOn)
				}
				switch p, ok, err := jobdef.Policy(j); {
				case err != nil:
					fmt.Fprintf(w, "retention:     %v\n", err)
				case ok:
					fmt.Fprintf(w, "retention:     %s\n", p.Describe())
					fmt.Fprintf(w, "guardrails:    a plan may delete at most %.0f%% of the snapshots and must leave at least %d (else --force)\n",
						j.Retention.MaxDelete*100, j.Retention.MinKeep)
				default:
					fmt.Fprintf(w, "retention:     none: nothing is ever deleted (holdfast job edit %s --preset 30d)\n", j.Name)
				}
				if j.Copy.To != "" {
					fmt.Fprintf(w, "copy to:       %s (password file %s), after each backup that made a snapshot\n", textsafe.String(j.Copy.To), textsafe.String(j.Copy.PasswordFile))
				}
				if j.Backup.StdinFrom != "" {
					fmt.Fprintf(w, "stdin from:    %s, as %s in the snapshot\n", textsafe.String(j.Backup.StdinFrom), textsafe.String(j.Backup.StdinFilename))
				}
				if j.Backup.FSSnapshot != "" {
					fmt.Fprintf(w, "fs snapshot:   %s: each backup reads a read-only snapshot of its paths, taken as it starts\n", j.Backup.FSSnapshot)
				}
				for _, h := range j.Backup.BeforeHooks {
					fmt.Fprintf(w, "before hook:   %s\n", textsafe.String(h))
				}
				for _, h := range j.Backup.AfterHooks {
					fmt.Fprintf(w, "after hook:    %s\n", textsafe.String(h))
				}
				if j.Backup.HookSkips > 0 {
					fmt.Fprintf(w, "hook skips:    %d backups skipped by a before hook (exit 75)\n", j.Backup.HookSkips)
				}
				verify := ""
				if j.Verify.ReadData != "" {
					verify = ", reading " + j.Verify.ReadData + " of the data"
				}
				printMaintenance(w, "prune:         ", j.Prune.Schedule, "", j.Prune.NextAt)
				switch {
				case j.Prune.Host != "":
					fmt.Fprintf(w, "deletes from:  host %s, through %s: its daemon runs the job's forgets and prunes\n", j.Prune.Host, textsafe.String(j.AsPruner().ResticRepository()))
				case j.Prune.AppendOnly:
					fmt.Fprintf(w, "deletes from:  nowhere: the repository is written append-only, and forgets and prunes are refused (holdfast job edit %s --prune-host HOST)\n", j.Name)
				}
				if j.Prune.AppendOnly {
					fmt.Fprintf(w, "append-only:   this job's host writes the repository append-only\n")
				}
				printMaintenance(w, "verify:        ", j.Verify.Schedule, verify, j.Verify.NextAt)
				printMaintenance(w, "drill:         ", j.Drill.Schedule, fmt.Sprintf(", %d files", j.Drill.Files), j.Drill.NextAt)
				budget := "estimated from the job's recent runs"
				if j.MaxAdded != nil {
					budget = "at most " + ledger.FormatSize(*j.MaxAdded) + " per run"
				}
				fmt.Fprintf(w, "account:       %s (%s)\n", j.Account, budget)
				fmt.Fprintf(w, "last outcome:  %s\n", dash(j.LastOutcome))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newJobRemoveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a job (its runs stay as history)",
		Args:  exactArgs(1, "one job name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				if err := st.JobDelete(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "job %s removed\n", args[0])
				return nil
			})
		},
	}
}
