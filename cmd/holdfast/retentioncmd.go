package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/forget"
	"github.com/holdfast-backup/holdfast/inventory"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/unitcmd"
)

// policyFlags are the retention policy flags of job add/edit, retention plan/apply and simulate.
type policyFlags struct {
	preset                                  string
	last, hourly, daily, weekly, monthly, y int
	within, zone                            string
}

func (pf *policyFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&pf.preset, "preset", "", "retention preset: "+strings.Join(retention.PresetNames(), ", ")+" (each keeps the last snapshot too)")
	f.IntVar(&pf.last, "keep-last", 0, "keep the newest N snapshots")
	f.IntVar(&pf.hourly, "keep-hourly", 0, "keep the newest snapshot of each of the last N hours that have one")
	f.IntVar(&pf.daily, "keep-daily", 0, "keep the newest snapshot of each of the last N days that have one")
	f.IntVar(&pf.weekly, "keep-weekly", 0, "keep the newest snapshot of each of the last N ISO weeks that have one")
	f.IntVar(&pf.monthly, "keep-monthly", 0, "keep the newest snapshot of each of the last N months that have one")
	f.IntVar(&pf.y, "keep-yearly", 0, "keep the newest snapshot of each of the last N years that have one")
	f.StringVar(&pf.within, "keep-within", "", "keep every snapshot younger than this, read as restic does: y years, m months, d days, h hours (e.g. 36h, 7d, 6m, 1y)")
	f.StringVar(&pf.zone, "retention-tz", "", "IANA time zone of the days, weeks, months and years (default UTC)")
}

// change is the policy change the flags given make.
func (pf *policyFlags) change(f *pflag.FlagSet) retention.Change {
	var c retention.Change
	for name, set := range map[string]func(){
		"preset": func() { c.Preset = &pf.preset }, "keep-within": func() { c.KeepWithin = &pf.within },
		"keep-last": func() { c.KeepLast = &pf.last }, "keep-hourly": func() { c.KeepHourly = &pf.hourly },
		"keep-daily": func() { c.KeepDaily = &pf.daily }, "keep-weekly": func() { c.KeepWeekly = &pf.weekly },
		"keep-monthly": func() { c.KeepMonthly = &pf.monthly }, "keep-yearly": func() { c.KeepYearly = &pf.y },
		"retention-tz": func() { c.TimeZone = &pf.zone },
	} {
		if f.Changed(name) {
			set()
		}
	}
	return c
}

// given reports whether any policy flag was set.
func (pf *policyFlags) given(f *pflag.FlagSet) bool { return pf.change(f) != retention.Change{} }

// policy returns base changed by the flags given (see retention.Change), validated.
func (pf *policyFlags) policy(f *pflag.FlagSet, base retention.Policy) (retention.Policy, error) {
	p, err := pf.change(f).Apply(base)
	if err != nil {
		return p, inputError{err}
	}
	return p, nil
}

// guardFlags are a job's retention guardrails.
type guardFlags struct {
	maxDelete int // percent
	minKeep   int
}

func (gf *guardFlags) bind(f *pflag.FlagSet) {
	f.IntVar(&gf.maxDelete, "retention-max-delete", int(retention.DefaultMaxDeleteShare*100), "refuse a plan that deletes more than this percentage of the job's snapshots (without --force)")
	f.IntVar(&gf.minKeep, "retention-min-keep", retention.DefaultMinKeep, "refuse a plan that leaves fewer snapshots than this (without --force)")
}

// applyRetention sets the policy and guardrail flags given onto j.
func applyRetention(f *pflag.FlagSet, pf *policyFlags, gf *guardFlags, j *model.Job) error {
	if pf.given(f) {
		base, _, err := jobdef.Policy(*j)
		if err != nil {
			return err
		}
		p, err := pf.policy(f, base)
		if err != nil {
			return err
		}
		if j.Retention.Policy, err = json.Marshal(p); err != nil {
			return err
		}
	}
	if f.Changed("retention-max-delete") {
		share, err := retention.MaxDeleteShare(gf.maxDelete)
		if err != nil {
			return inputError{err}
		}
		j.Retention.MaxDelete = share
	}
	if f.Changed("retention-min-keep") {
		if err := retention.CheckMinKeep(gf.minKeep); err != nil {
			return inputError{err}
		}
		j.Retention.MinKeep = gf.minKeep
	}
	return nil
}

func newRetentionCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "retention", Short: "Plan, apply and simulate retention policies"}
	cmd.AddCommand(newRetentionPlanCmd(g, false), newRetentionPlanCmd(g, true), newRetentionSimulateCmd(), newRetentionHistoryCmd(g))
	return cmd
}

// parseTime reads a time given on the command line: RFC 3339, or a date with an optional time
// of day in the local zone.
func parseTime(flag, s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, badInput("%s %q: give a time like 2026-11-30T02:00:00Z or 2026-11-30 02:00", flag, s)
}

// actor names who asked: the user sudo ran the command for, else the current user.
func (g *globals) actor() string {
	if s := g.env.getenv("SUDO_USER"); s != "" {
		return s
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprintf("uid %d", os.Getuid())
}

// resticBinary is the restic a command runs: the one its --restic flag names, else restic in PATH.
func resticBinary(flag string) (string, error) {
	path, err := runctl.ResticBinary(flag)
	if err != nil {
		return "", inputError{err}
	}
	return path, nil
}

// planOut is a plan as `retention plan|apply|simulate --json` print it.
type planOut struct {
	retention.Plan
	Job        string           `json:"job,omitempty"`
	Repository string           `json:"repository,omitempty"` // the repository planned
	At         string           `json:"at"`
	Policy     retention.Policy `json:"policy"`
	Describe   string           `json:"policy_text"`
	Guardrail  string           `json:"guardrail,omitempty"` // why apply would refuse it; "" if it would not
	PlanID     string           `json:"plan_id,omitempty"`
	RunID      string           `json:"run_id,omitempty"`
	Outcome    string           `json:"outcome,omitempty"`
}

func printPlan(w io.Writer, o planOut) {
	if o.Job != "" {
		fmt.Fprintf(w, "job %s, repository %s, plan at %s\n", o.Job, o.Repository, o.At)
	}
	fmt.Fprintf(w, "policy: %s\n", o.Describe)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT\tTIME\tDECISION\tREASON")
	for _, d := range o.Decisions {
		decision := "delete"
		switch {
		case d.OutsideScope:
			decision = "outside"
		case d.Protected:
			decision = "protected"
		case d.Keep:
			decision = "keep"
		}
		fmt.Fprintf(tw, "%.8s\t%s\t%s\t%s\n", d.SnapshotID, d.Time.Local().Format("2006-01-02 15:04:05"), decision, d.Reason)
	}
	tw.Flush()
	fmt.Fprintln(w, o.Summary)
	if o.Guardrail != "" {
		fmt.Fprintln(w, "apply would refuse: "+o.Guardrail)
	}
}

// refreshSnapshots reads the job's repository into the inventory, with restic running as the
// job's user in a unit of its own, as the daemon runs it.
func (g *globals) refreshSnapshots(ctx context.Context, st *store.Store, restic string, j model.Job) ([]model.Snapshot, error) {
	rn, err := g.openSystemd(ctx)
	if err != nil {
		return nil, err
	}
	defer rn.Close()
	self, err := g.env.executable()
	if err != nil {
		return nil, fmt.Errorf("find holdfast's own executable: %w", err)
	}
	return inventory.Refresh(ctx, inventory.Config{Store: st, Runner: rn, StateDir: g.stateDir,
		Binary: unitcmd.Binary(self), ResticBinary: restic}, j)
}

func newRetentionPlanCmd(g *globals, apply bool) *cobra.Command {
	var pf policyFlags
	var asJSON, force, wait bool
	var at, host, restic, repository string
	use, short := "plan JOB", "Show what the job's retention policy keeps and deletes, and why (changes nothing)"
	if apply {
		use, short = "apply JOB", "Delete the snapshots the job's retention plan deletes, as a transient unit"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + ".\nThe repository is read again first. Policy flags override the job's policy for this plan." +
			"\nSnapshots under legal hold or immutable, the job's newest snapshot and snapshots without the job's" +
			"\ntag and host are never deleted.",
		Args: exactArgs(1, "one job name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			planAt := time.Now()
			if at != "" {
				if apply {
					return badInput("--at is for previews: retention apply plans at the present time")
				}
				var err error
				if planAt, err = parseTime("--at", at); err != nil {
					return err
				}
			}
			if host == "" {
				var err error
				if host, err = os.Hostname(); err != nil {
					return fmt.Errorf("host name: %w", err)
				}
			}
			if repository != "job" && repository != "copy" {
				return badInput("--repository %q: give job (the job's own) or copy (its --copy-to)", repository)
			}
			resticPath, err := resticBinary(restic)
			if err != nil {
				return err
			}
			resticVersion, err := engine.ResticVersionOf(cmd.Context(), resticPath)
			if err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				pl, err := forget.Plan(ctx, st, forget.Request{Job: args[0], At: planAt, Host: host, Copy: repository == "copy",
					Restic:      resticVersion,
					Policy:      func(p retention.Policy) (retention.Policy, error) { return pf.policy(cmd.Flags(), p) },
					PolicyGiven: pf.given(cmd.Flags()),
					Read: func(ctx context.Context, j model.Job) ([]model.Snapshot, error) {
						return g.refreshSnapshots(ctx, st, resticPath, j)
					}})
				if err != nil {
					return err
				}
				o := planOut{Plan: pl.Plan, Job: pl.Job.Name, Repository: pl.Job.Repository, At: planAt.UTC().Format(time.RFC3339), Policy: pl.Policy, Describe: pl.Policy.Describe()}
				if pl.Refusal != nil {
					o.Guardrail = pl.Refusal.Error()
				}
				if !apply {
					if asJSON {
						return writeJSON(cmd.OutOrStdout(), o)
					}
					printPlan(cmd.OutOrStdout(), o)
					return nil
				}
				saved, err := forget.Apply(ctx, st, pl, g.actor(), force)
				if err != nil {
					return err
				}
				o.PlanID, o.Outcome = saved.ID.String(), saved.Outcome
				if saved.RunID != nil {
					o.RunID = saved.RunID.String()
				}
				if asJSON {
					if err := writeJSON(cmd.OutOrStdout(), o); err != nil {
						return err
					}
				} else {
					printPlan(cmd.OutOrStdout(), o)
				}
				switch {
				case saved.Outcome == model.PlanRefused:
					return badInput("retention plan %s refused: %s", saved.ID, pl.Refusal)
				case saved.RunID == nil:
					if !asJSON {
						fmt.Fprintf(cmd.OutOrStdout(), "plan %s recorded: nothing to delete\n", saved.ID)
					}
					return nil
				}
				if !asJSON {
					where := ""
					if pl.Job.Prune.Host != "" && repository == "job" {
						where = " on host " + pl.Job.Prune.Host + ", the job's pruning host,"
					}
					fmt.Fprintf(cmd.OutOrStdout(), "plan %s applied: forget run %s%s deletes %d snapshot(s) (holdfast run show %s)\n",
						saved.ID, saved.RunID, where, len(saved.DeleteIDs), saved.RunID)
				}
				if !wait {
					return nil
				}
				final, _, err := runctl.WaitRun(ctx, st, *saved.RunID, progressWriter(cmd.ErrOrStderr(), asJSON))
				if err != nil {
					return err
				}
				if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "run %s %s: %s\n", final.ID, final.Status, final.Reason)
				}
				if code := statusExit(final.Status); code != exitOK {
					return exitCodeError{code}
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	pf.bind(f)
	f.StringVar(&host, "host", "", "the host whose snapshots are the job's (default: this host's name)")
	f.StringVar(&repository, "repository", "job", "the repository planned: job (the job's own) or copy (its --copy-to, with the policy flags given or else the job's policy)")
	f.StringVar(&restic, "restic", "", "restic executable (default: restic in PATH)")
	f.BoolVar(&asJSON, "json", false, "print the plan as JSON")
	if apply {
		f.BoolVar(&force, "force", false, "apply a plan the guardrails refuse (too many deletions, too few left)")
		f.BoolVar(&wait, "wait", false, "wait for the forget run to end")
	} else {
		f.StringVar(&at, "at", "", "plan as of this time (default now)")
	}
	return cmd
}

func newRetentionSimulateCmd() *cobra.Command {
	var pf policyFlags
	var file, at, withinFrom, host, resticRelease string
	var tags []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "simulate --snapshots FILE --at T [policy flags]",
		Short: "Plan a policy over a `restic snapshots --json` listing, to choose a policy (touches nothing)",
		Long: "Plan a policy over a `restic snapshots --json` listing. All of it is one group unless --host or\n" +
			"--tag narrow it; snapshots outside are listed as such. --within-from latest measures --keep-within\n" +
			"from the newest snapshot, as restic forget does.",
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return badInput("--snapshots FILE is required: the output of restic snapshots --json")
			}
			planAt := time.Now()
			if at != "" {
				var err error
				if planAt, err = parseTime("--at", at); err != nil {
					return err
				}
			}
			var from retention.WithinFrom
			switch withinFrom {
			case "now":
				from = retention.WithinFromNow
			case "latest":
				from = retention.WithinFromLatest
			default:
				return badInput("--within-from %q: give now or latest", withinFrom)
			}
			if !pf.given(cmd.Flags()) {
				return badInput("no policy: give --preset or --keep-* flags")
			}
			p, err := pf.policy(cmd.Flags(), retention.Policy{})
			if err != nil {
				return err
			}
			restic, err := simulatedRestic(cmd.Context(), resticRelease)
			if err != nil {
				return err
			}
			data, err := readListing(file, maxListing)
			if err != nil {
				return err
			}
			snaps, err := retention.ParseResticSnapshots(data)
			if err != nil {
				return badInput("--snapshots %s: %v", file, err)
			}
			plan, err := retention.New(p, snaps, retention.Options{At: planAt, WithinFrom: from,
				Scope: retention.Scope{Host: host, Tags: tags}, KeepOldestOfUnfilledRule: restic.ForgetKeepsOldest()})
			if err != nil {
				return inputError{err}
			}
			o := planOut{Plan: plan, At: planAt.UTC().Format(time.RFC3339), Policy: p, Describe: p.Describe()}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), o)
			}
			printPlan(cmd.OutOrStdout(), o)
			return nil
		},
	}
	f := cmd.Flags()
	pf.bind(f)
	f.StringVar(&file, "snapshots", "", "file with the output of restic snapshots --json")
	f.StringVar(&at, "at", "", "plan as of this time (default now)")
	f.StringVar(&withinFrom, "within-from", "now", "measure --keep-within from now or from the latest snapshot")
	f.StringVar(&host, "host", "", "only snapshots of this host are in the group")
	f.StringArrayVar(&tags, "tag", nil, "only snapshots with this tag are in the group (repeatable: all of them)")
	f.StringVar(&resticRelease, "restic-version", "", "plan with the forget rules of this restic release, such as 0.14.0 (default: the restic in PATH's; the newest rules without one)")
	f.BoolVar(&asJSON, "json", false, "print the plan as JSON")
	return cmd
}

// simulatedRestic is the restic release whose forget rules a simulated plan follows: the one
// given, else the restic in PATH's, else none known (the zero ResticVersion).
func simulatedRestic(ctx context.Context, release string) (engine.ResticVersion, error) {
	if release != "" {
		v, err := engine.ParseResticVersion([]byte("restic " + release))
		if err != nil || v.Less(engine.OldestRestic) {
			return engine.ResticVersion{}, badInput("--restic-version %q: give a restic release such as 0.16.4, %s or later", release, engine.OldestRestic)
		}
		return v, nil
	}
	if path, err := runctl.ResticBinary(""); err == nil {
		if v, err := engine.ResticVersionOf(ctx, path); err == nil {
			return v, nil
		}
	}
	return engine.ResticVersion{}, nil
}

// maxListing bounds a `restic snapshots --json` file that simulate reads: about 100,000 snapshots.
const maxListing = 64 << 20

// readListing reads an operator's listing file: a regular file (following a link is fine; a FIFO
// or device, which could block or never end, is refused) of at most limit bytes.
func readListing(path string, limit int64) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, badInput("--snapshots %s: %v: give the file restic snapshots --json wrote", path, safepath.Cause(err))
	}
	if !info.Mode().IsRegular() {
		return nil, badInput("--snapshots %s is not a regular file: save restic snapshots --json to a file first", path)
	}
	if info.Size() > limit {
		return nil, badInput("--snapshots %s is %d bytes, more than the %d a listing may have", path, info.Size(), limit)
	}
	// O_NONBLOCK: if the path became a FIFO after the check, opening it must not wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, badInput("--snapshots %s: %v", path, safepath.Cause(err))
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil || !info.Mode().IsRegular() {
		return nil, badInput("--snapshots %s is not a regular file: save restic snapshots --json to a file first", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, badInput("--snapshots %s: %v", path, safepath.Cause(err))
	}
	if int64(len(data)) > limit {
		return nil, badInput("--snapshots %s is more than the %d bytes a listing may have", path, limit)
	}
	return data, nil
}

type planRecordOut struct {
	ID         string          `json:"id"`
	Job        string          `json:"job"`
	Repository string          `json:"repository"`
	CreatedAt  string          `json:"created_at"`
	Actor      string          `json:"actor"`
	PlanAt     string          `json:"plan_at"`
	Policy     json.RawMessage `json:"policy"`
	Forced     bool            `json:"forced"`
	Outcome    string          `json:"outcome"`
	Refusal    string          `json:"refusal,omitempty"`
	Summary    string          `json:"summary"`
	DeleteIDs  []string        `json:"delete_ids"`
	RunID      *string         `json:"run_id"`
	Decisions  json.RawMessage `json:"decisions"`
}

func newRetentionHistoryCmd(g *globals) *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "history [JOB]",
		Short: "List the retention plans applied or refused: who, when, what, and each decision (--json)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				if err := jobdef.ValidateName(args[0]); err != nil {
					return inputError{err}
				}
				name = args[0]
			}
			if limit < 1 {
				return badInput("--limit %d: give at least 1", limit)
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				plans, err := st.PlanList(ctx, name, limit)
				if err != nil {
					return err
				}
				if asJSON {
					out := make([]planRecordOut, 0, len(plans))
					for _, p := range plans {
						o := planRecordOut{ID: p.ID.String(), Job: p.JobName, Repository: p.Repository,
							CreatedAt: p.CreatedAt.UTC().Format(time.RFC3339Nano), Actor: p.Actor,
							PlanAt: p.PlanAt.UTC().Format(time.RFC3339Nano), Policy: p.Policy, Forced: p.Forced,
							Outcome: p.Outcome, Refusal: p.Refusal, Summary: p.Summary, DeleteIDs: p.DeleteIDs, Decisions: p.Decisions}
						if p.RunID != nil {
							s := p.RunID.String()
							o.RunID = &s
						}
						out = append(out, o)
					}
					return writeJSON(cmd.OutOrStdout(), out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PLAN\tJOB\tWHEN\tWHO\tOUTCOME\tSUMMARY")
				for _, p := range plans {
					outcome := p.Outcome
					if p.Forced {
						outcome += " (forced)"
					}
					fmt.Fprintf(tw, "%.8s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.JobName, p.CreatedAt.Local().Format("2006-01-02 15:04:05"),
						p.Actor, outcome, p.Summary)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, with every decision")
	cmd.Flags().IntVar(&limit, "limit", 50, "show at most this many plans")
	return cmd
}
