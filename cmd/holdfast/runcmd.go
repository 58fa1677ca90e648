package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/control"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/journallog"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
)

func newRunCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "run", Short: "Start, stop, list and inspect backup runs"}
	cmd.AddCommand(newRunStartCmd(g), newRunStopCmd(g), newRunListCmd(g), newRunShowCmd(g), newRunLogsCmd(g), newRunResumeCmd(g))
	return cmd
}

type attemptOut struct {
	Attempt          int     `json:"attempt"`
	Unit             string  `json:"unit"`
	Host             string  `json:"host,omitempty"`
	BootID           string  `json:"boot_id,omitempty"`
	SpawnedAt        *string `json:"spawned_at"` // the spawn claim, just before systemd was asked
	StalledAt        *string `json:"stalled_at,omitempty"`
	StartedAt        *string `json:"started_at"`
	EndedAt          *string `json:"ended_at"`
	ServiceResult    string  `json:"service_result"`
	ExitCode         string  `json:"exit_code"`
	ExitStatus       string  `json:"exit_status"`
	QuarantineReason string  `json:"quarantine_reason,omitempty"`
	HoldBytes        *int64  `json:"hold_bytes"`
	HoldNote         string  `json:"hold_note,omitempty"` // how the hold was sized
	ResticVersion    string  `json:"restic_version,omitempty"`
	SettleDeferred   string  `json:"settle_deferred,omitempty"`
	Settlement       string  `json:"settlement,omitempty"`
	SupersededAt     *string `json:"superseded_at,omitempty"` // another host took the run over
	SupersededBy     string  `json:"superseded_by,omitempty"`
}

type progressOut struct {
	PercentDone float64 `json:"percent_done"`
	FilesDone   int64   `json:"files_done"`
	TotalFiles  int64   `json:"total_files"`
	BytesDone   int64   `json:"bytes_done"`
	TotalBytes  int64   `json:"total_bytes"`
}

// progressJSON is an attempt's progress as the CLI prints it; nil without one.
func progressJSON(p *model.Progress) *progressOut {
	if p == nil {
		return nil
	}
	return &progressOut{p.PercentDone, p.FilesDone, p.TotalFiles, p.BytesDone, p.TotalBytes}
}

type restoreOut struct {
	// Target is where it restores into; for one to the original paths, where it stages them.
	Target     string   `json:"target"`
	ToOriginal bool     `json:"to_original,omitempty"`
	Overwrite  bool     `json:"overwrite,omitempty"`
	Snapshot   string   `json:"snapshot"`
	Includes   []string `json:"includes,omitempty"`
	TotalBytes *int64   `json:"total_bytes"`
	TotalFiles *int64   `json:"total_files"`
}

type runOut struct {
	ID              string       `json:"id"`
	Job             string       `json:"job"`
	Kind            model.Kind   `json:"kind"`
	Trigger         string       `json:"trigger"`
	Status          string       `json:"status"`
	Reason          string       `json:"reason"`
	FailureClass    string       `json:"failure_class,omitempty"`
	PausedReason    string       `json:"paused_reason,omitempty"`
	StopRequestedAt *string      `json:"stop_requested_at"`
	CreatedAt       string       `json:"created_at"`
	StartedAt       *string      `json:"started_at"`
	FinishedAt      *string      `json:"finished_at"`
	SnapshotID      string       `json:"snapshot_id"`
	BytesAdded      *int64       `json:"bytes_added"`
	BytesProcessed  *int64       `json:"bytes_processed"`
	FilesProcessed  *int64       `json:"files_processed"`
	FilesSkipped    int64        `json:"files_skipped"`
	Progress        *progressOut `json:"progress,omitempty"`
	PlannedAt       *string      `json:"planned_at"`
	NotBefore       *string      `json:"not_before,omitempty"`
	WaitingReason   string       `json:"waiting_reason,omitempty"`
	RetryOf         string       `json:"retry_of,omitempty"`
	RetryNumber     int          `json:"retry_number,omitempty"`
	RetriedBy       string       `json:"retried_by,omitempty"`
	BudgetBytes     *int64       `json:"budget_bytes"`
	HoldBytes       int64        `json:"hold_bytes"`
	SettledBytes    int64        `json:"settled_bytes"`
	ForgetIDs       []string     `json:"forget_ids,omitempty"`
	PlanID          string       `json:"plan_id,omitempty"`
	Host            string       `json:"host,omitempty"` // the host the run must run on (a restore's)
	Restore         *restoreOut  `json:"restore,omitempty"`
	ReadDataSubset  string       `json:"read_data_subset,omitempty"`
	DrillFiles      int          `json:"drill_files,omitempty"`
	CopySnapshot    string       `json:"copy_snapshot,omitempty"` // the snapshot a copy run copies
	OnCopy          bool         `json:"on_copy,omitempty"`       // the run works on the job's copy repository
	// Drill is a drill's sample and result as its unit reported them (its last attempt's).
	Drill    *engine.Drill `json:"drill,omitempty"`
	Attempts []attemptOut  `json:"attempts,omitempty"`
}

func timeStr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

func runJSON(r model.Run, attempts []model.Attempt) runOut {
	o := runOut{ID: r.ID.String(), Job: r.JobName, Kind: r.Kind, Trigger: r.Trigger, Status: r.Status, Reason: r.Reason,
		FailureClass: r.FailureClass, PausedReason: r.PausedReason, StopRequestedAt: timeStr(r.StopRequestedAt),
		CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano), StartedAt: timeStr(r.StartedAt), FinishedAt: timeStr(r.FinishedAt),
		SnapshotID: r.SnapshotID, BytesAdded: r.BytesAdded, BytesProcessed: r.BytesProcessed,
		FilesProcessed: r.FilesProcessed, FilesSkipped: r.FilesSkipped,
		PlannedAt: timeStr(r.PlannedAt), NotBefore: timeStr(r.NotBefore), WaitingReason: r.WaitingReason,
		RetryNumber: r.RetryNumber}
	if r.RetryOf != nil {
		o.RetryOf = r.RetryOf.String()
	}
	if r.RetriedBy != nil {
		o.RetriedBy = r.RetriedBy.String()
	}
	o.ForgetIDs = r.ForgetIDs
	o.Host, o.ReadDataSubset, o.DrillFiles = r.Host, r.Verify.ReadDataSubset, r.Verify.DrillFiles
	o.CopySnapshot, o.OnCopy = r.CopySnapshot, r.OnCopy
	if n := len(attempts); n > 0 && r.Verify.DrillFiles > 0 && len(attempts[n-1].Summary) > 0 {
		var d engine.Drill
		if json.Unmarshal(attempts[n-1].Summary, &d) == nil {
			o.Drill = &d
		}
	}
	if rs := r.Restore; rs.Target != "" {
		o.Restore = &restoreOut{Target: rs.Target, ToOriginal: rs.ToOriginal, Overwrite: rs.Overwrite, Snapshot: rs.Snapshot, Includes: rs.Includes,
			TotalBytes: rs.TotalBytes, TotalFiles: rs.TotalFiles}
	}
	o.BudgetBytes, o.HoldBytes, o.SettledBytes = r.BudgetBytes, r.HeldBytes, r.SettledBytes
	if r.PlanID != nil {
		o.PlanID = r.PlanID.String()
	}
	for _, a := range attempts {
		o.Attempts = append(o.Attempts, attemptOut{Attempt: a.No, Unit: a.Unit, Host: a.Host, BootID: a.BootID,
			SpawnedAt: timeStr(a.SpawnClaimedAt), StalledAt: timeStr(a.StalledAt), StartedAt: timeStr(a.StartedAt), EndedAt: timeStr(a.EndedAt), ServiceResult: a.ServiceResult,
			ExitCode: a.ExitCode, ExitStatus: a.ExitStatus, QuarantineReason: a.QuarantineReason,
			HoldBytes: a.HoldBytes, HoldNote: a.HoldNote, ResticVersion: a.ResticVersion, SettleDeferred: a.SettleDeferred, Settlement: a.Settlement,
			SupersededAt: timeStr(a.SupersededAt), SupersededBy: a.SupersededBy})
	}
	if n := len(attempts); n > 0 && model.Live(r.Status) {
		o.Progress = progressJSON(attempts[n-1].Progress)
		if r.FilesSkipped == 0 {
			o.FilesSkipped = attempts[n-1].ItemErrors
		}
	}
	return o
}

func statusExit(status string) int {
	switch status {
	case model.StatusSucceeded:
		return exitOK
	case model.StatusPartial:
		return exitPartial
	case model.StatusStopped:
		return exitStopped
	case model.StatusPaused:
		return exitPaused
	case model.StatusSkipped:
		return exitSkipped
	}
	return exitFailed
}

func newRunStartCmd(g *globals) *cobra.Command {
	var wait, asJSON, prune, verifyRun bool
	var verify model.Verify
	cmd := &cobra.Command{
		Use:   "start JOB",
		Short: "Start a run of a job now",
		Long: "Start a run of a job now. The daemon spawns it as a transient systemd unit.\n" +
			"On the daemon's host the command asks the daemon to admit the run, over its control socket (STATE_DIR/daemon.sock);\n" +
			"elsewhere, or with no daemon there, it admits the run through the database itself.\n" +
			"With --wait, show progress and exit 0 only if the run succeeded (3 partial, 4 failed, 5 stopped, 6 paused, 7 skipped by a before hook);\n" +
			"exit 69 at once, queueing nothing, if no live daemon can run the job (none runs, or its host is down or draining).",
		Args: exactArgs(1, "one job name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			p := runctl.StartParams{Job: args[0], Kind: model.KindBackup, Verify: verify, Wait: wait}
			switch {
			case prune && verifyRun:
				return badInput("--prune and --verify are two runs: start them one after the other")
			case prune:
				p.Kind = model.KindPrune
			case verifyRun:
				p.Kind = model.KindVerify
			case verify.ReadDataSubset != "" || cmd.Flags().Changed("drill"):
				return badInput("--read-data-subset and --drill are for verification runs: add --verify")
			}
			if cmd.Flags().Changed("drill") {
				if err := jobdef.ValidateDrill(verify); err != nil {
					return inputError{err}
				}
			}
			if verify.ReadDataSubset != "" {
				if err := engine.ValidateReadDataSubset(verify.ReadDataSubset); err != nil {
					return inputError{err}
				}
			}
			if err := g.requireDSN(); err != nil {
				return err
			}
			// The daemon on this host admits the run on its warm connection and spawns it at
			// once; where none takes the request, the run is admitted through the database.
			started, err := control.StartRun(cmd.Context(), control.SocketPath(g.stateDir), g.dsn, p)
			var refused *control.Refused
			switch {
			case errors.As(err, &refused) && refused.Input:
				return inputError{refused}
			case errors.As(err, &refused) && refused.Unavailable:
				return unavailableError{refused}
			case err == nil && !wait:
				return followRun(cmd, nil, started.Run, started.Unable, wait, asJSON)
			case err == nil:
				st, release, err := g.openStore(cmd.Context())
				if err != nil {
					return fmt.Errorf("run %s of %s was admitted, but it cannot be followed (holdfast run show %s): %w", started.Run.ID, p.Job, started.Run.ID, err)
				}
				defer release()
				return followRun(cmd, st, started.Run, started.Unable, wait, asJSON)
			case !errors.Is(err, control.ErrNotServed):
				return err
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				started, err := runctl.StartRun(ctx, st, p)
				var unavailable *runctl.UnavailableError
				if errors.As(err, &unavailable) {
					return unavailableError{err}
				}
				if err != nil {
					return err
				}
				return followRun(cmd, st, started.Run, started.Unable, wait, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the run to end, showing progress")
	cmd.Flags().BoolVar(&prune, "prune", false, "prune the job's repository instead of backing up (waits until no backup of it runs)")
	cmd.Flags().BoolVar(&verifyRun, "verify", false, "verify the job's repository (restic check) instead of backing up")
	cmd.Flags().StringVar(&verify.ReadDataSubset, "read-data-subset", "", "with --verify, also read this part of the data: a percentage (5%) or n/t (1/7)")
	cmd.Flags().IntVar(&verify.DrillFiles, "drill", 0, "with --verify, instead of restic check: restore this many files of the job's latest snapshot, chosen at random, into a scratch directory and verify them")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
	return cmd
}

// followRun reports a run just admitted as `run start` does: queued (or paused at once), or with
// wait its end (st is read only then), and exits with its status. unable says why no live
// daemon can run it yet ("" one can).
func followRun(cmd *cobra.Command, st *store.Store, run model.Run, unable string, wait, asJSON bool) error {
	ctx := cmd.Context()
	if unable != "" && run.Status != model.StatusPaused {
		fmt.Fprintf(cmd.ErrOrStderr(), "holdfast: warning: %s; the run waits until then\n", unable)
	}
	if !wait {
		if asJSON {
			if err := writeJSON(cmd.OutOrStdout(), runJSON(run, nil)); err != nil {
				return err
			}
		} else if run.Status == model.StatusPaused {
			fmt.Fprintf(cmd.OutOrStdout(), "run %s of %s %s\n", run.ID, run.JobName, textsafe.String(run.Reason))
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "run %s of %s queued\n", run.ID, run.JobName)
		}
		if run.Status == model.StatusPaused {
			return exitCodeError{exitPaused} // admitted, but its account could not hold it
		}
		return nil
	}
	if !asJSON {
		fmt.Fprintf(cmd.ErrOrStderr(), "run %s of %s queued\n", run.ID, run.JobName)
	}
	final, attempts, err := runctl.WaitRun(ctx, st, run.ID, progressWriter(cmd.ErrOrStderr(), asJSON))
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(cmd.OutOrStdout(), runJSON(final, attempts)); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(cmd.OutOrStdout(), "run %s %s: %s\n", final.ID, final.Status, textsafe.String(final.Reason))
	}
	if code := statusExit(final.Status); code != exitOK {
		return exitCodeError{code}
	}
	return nil
}

// progressWriter returns where runctl.WaitRun reports progress: a line redrawn in place on a terminal,
// a line every few seconds elsewhere, nothing under --json.
func progressWriter(w io.Writer, quiet bool) func(model.Run, *model.Progress) {
	if quiet {
		return func(model.Run, *model.Progress) {}
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	var last string
	var lastAt time.Time
	return func(r model.Run, p *model.Progress) {
		if !model.Live(r.Status) {
			// The ending is printed by the caller, with the run's own figures.
			if tty && last != "" {
				fmt.Fprint(w, "\r\033[K")
			}
			return
		}
		line := r.Status
		if p != nil {
			line = fmt.Sprintf("%s %5.1f%%  %d/%d files  %s/%s", r.Status, p.PercentDone*100, p.FilesDone, p.TotalFiles,
				engine.FormatBytes(p.BytesDone), engine.FormatBytes(p.TotalBytes))
		}
		switch {
		case tty:
			if line != last {
				fmt.Fprintf(w, "\r\033[K%s", line)
			}
		case line != last && time.Since(lastAt) > 5*time.Second:
			fmt.Fprintln(w, line)
			lastAt = time.Now()
		}
		last = line
	}
}

func newRunStopCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "stop RUN",
		Short: "Stop a queued or running run (it is never restarted)",
		Args:  exactArgs(1, "one run id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withRun(cmd, args[0], func(ctx context.Context, st *store.Store, id uuid.UUID) error {
				run, unreached, err := runctl.StopRun(ctx, st, g.openUnits, id, g.host())
				if err != nil {
					return err
				}
				if unreached != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "holdfast: stop recorded, but systemd was not reached (%v); the daemon will stop the unit\n", unreached)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s: stop requested\n", id)
				if strings.Contains(run.WaitingReason, "host ") {
					// Only the daemon of the host that holds the run can end it.
					fmt.Fprintf(cmd.ErrOrStderr(), "holdfast: %s; that host's daemon stops the run when it is back\n", textsafe.String(run.WaitingReason))
				}
				return nil
			})
		},
	}
}

func newRunResumeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "resume RUN",
		Short: "Continue a stopped or paused run as a new attempt",
		Args:  exactArgs(1, "one run id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withRun(cmd, args[0], func(ctx context.Context, st *store.Store, id uuid.UUID) error {
				if _, err := st.RunResume(ctx, id); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s: resumed as a new attempt\n", id)
				return nil
			})
		},
	}
}

func newRunListCmd(g *globals) *cobra.Command {
	var jobName string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if jobName != "" {
				if err := jobdef.ValidateName(jobName); err != nil {
					return inputError{err}
				}
			}
			if limit < 1 {
				return badInput("--limit must be at least 1")
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				runs, err := st.RunList(ctx, jobName, limit)
				if err != nil {
					return err
				}
				if asJSON {
					out := make([]runOut, 0, len(runs))
					for _, r := range runs {
						out = append(out, runJSON(r, nil))
					}
					return writeJSON(cmd.OutOrStdout(), out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "RUN\tJOB\tSTATUS\tCREATED\tADDED\tREASON")
				for _, r := range runs {
					added := "-"
					if r.BytesAdded != nil {
						added = engine.FormatBytes(*r.BytesAdded)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID.String()[:8], r.JobName, r.Status,
						r.CreatedAt.Local().Format("2006-01-02 15:04:05"), added, truncate(textsafe.String(r.Reason), 70))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&jobName, "job", "", "only runs of this job")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many runs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func newRunShowCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show RUN",
		Short: "Show a run and its attempts",
		Args:  exactArgs(1, "one run id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withRun(cmd, args[0], func(ctx context.Context, st *store.Store, id uuid.UUID) error {
				run, err := st.RunGet(ctx, id)
				if err != nil {
					return err
				}
				attempts, err := st.AttemptList(ctx, id)
				if err != nil {
					return err
				}
				o := runJSON(run, attempts)
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), o)
				}
				printRun(cmd.OutOrStdout(), o)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printRun(w io.Writer, o runOut) {
	opt := func(p *string) string {
		if p == nil {
			return "-"
		}
		return *p
	}
	num := func(p *int64, bytes bool) string {
		switch {
		case p == nil:
			return "unknown"
		case bytes:
			return engine.FormatBytes(*p)
		}
		return fmt.Sprint(*p)
	}
	fmt.Fprintf(w, "run:       %s\njob:       %s\nstatus:    %s\nreason:    %s\n", o.ID, o.Job, o.Status, dash(textsafe.String(o.Reason)))
	if o.FailureClass != "" {
		fmt.Fprintf(w, "class:     %s\n", o.FailureClass)
	}
	fmt.Fprintf(w, "trigger:   %s\n", o.Trigger)
	if o.PlannedAt != nil {
		fmt.Fprintf(w, "planned:   %s\n", *o.PlannedAt)
	}
	if o.RetryOf != "" {
		fmt.Fprintf(w, "retry:     %d, of run %s\n", o.RetryNumber, o.RetryOf)
	}
	if o.WaitingReason != "" {
		fmt.Fprintf(w, "waiting:   %s\n", textsafe.String(o.WaitingReason))
	}
	if o.RetriedBy != "" {
		fmt.Fprintf(w, "retried:   as run %s\n", o.RetriedBy)
	}
	fmt.Fprintf(w, "created:   %s\nstarted:   %s\nfinished:  %s\n", o.CreatedAt, opt(o.StartedAt), opt(o.FinishedAt))
	if o.StopRequestedAt != nil {
		fmt.Fprintf(w, "stop requested: %s\n", *o.StopRequestedAt)
	}
	fmt.Fprintf(w, "snapshot:  %s\nadded:     %s\nprocessed: %s files, %s\nskipped:   %d files\n",
		dash(textsafe.String(o.SnapshotID)), num(o.BytesAdded, true), num(o.FilesProcessed, false), num(o.BytesProcessed, true), o.FilesSkipped)
	if p := o.Progress; p != nil {
		fmt.Fprintf(w, "progress:  %.1f%%  %d/%d files  %s/%s\n", p.PercentDone*100, p.FilesDone, p.TotalFiles,
			engine.FormatBytes(p.BytesDone), engine.FormatBytes(p.TotalBytes))
	}
	for _, a := range o.Attempts {
		ended := strings.TrimSpace(strings.Join([]string{a.ServiceResult, a.ExitCode, a.ExitStatus}, " "))
		fmt.Fprintf(w, "attempt %d: unit %s on %s, started %s, ended %s %s\n", a.Attempt, dash(a.Unit), dash(a.Host),
			opt(a.StartedAt), opt(a.EndedAt), ended)
		if a.SupersededAt != nil {
			fmt.Fprintf(w, "  taken over by host %s at %s: its host had lost its lease\n", a.SupersededBy, *a.SupersededAt)
		}
		if a.QuarantineReason != "" {
			fmt.Fprintf(w, "  journal quarantined: %s\n", textsafe.String(a.QuarantineReason))
		}
		if a.ResticVersion != "" {
			fmt.Fprintf(w, "  restic:  %s\n", a.ResticVersion)
		}
		if a.HoldBytes != nil {
			fmt.Fprintf(w, "  held:    %s: %s\n", engine.FormatBytes(*a.HoldBytes), a.HoldNote)
		}
		switch {
		case a.Settlement != "":
			fmt.Fprintf(w, "  charged from: %s\n", a.Settlement)
		case a.SettleDeferred != "":
			fmt.Fprintf(w, "  settlement deferred: %s\n", a.SettleDeferred)
		}
	}
}

func newRunLogsCmd(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs RUN",
		Short: "Show the journald logs of a run: its units' and the daemon's lines about it (wraps journalctl)",
		Args:  exactArgs(1, "one run id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withRun(cmd, args[0], func(ctx context.Context, st *store.Store, id uuid.UUID) error {
				attempts, err := st.AttemptList(ctx, id)
				if err != nil {
					return err
				}
				// Each unit logged to the journal of the host that ran it.
				here := g.host()
				for _, a := range attempts {
					if a.Host != "" && a.Host != here {
						fmt.Fprintf(cmd.ErrOrStderr(), "holdfast: attempt %d ran on host %s: its lines are in that host's journal (holdfast run logs %s, there)\n",
							a.No, a.Host, id)
					}
				}
				units := model.UnitNames(attempts)
				if len(units) == 0 {
					return badInput("run %s has not started a unit yet: no logs", id)
				}
				// Through holdfast, not journalctl's own output: only trusted sources, each
				// line escaped and clipped, also with --follow.
				return journallog.RunLogs(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), g.journalDir, id, units, follow)
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new entries")
	return cmd
}
