package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/watch"
)

type statusJobOut struct {
	Name          string  `json:"name"`
	State         string  `json:"state"`
	LastOutcome   string  `json:"last_outcome,omitempty"`
	LastSuccess   *string `json:"last_success_at"`
	LastVerified  *string `json:"last_verified_at"`
	LastVerify    string  `json:"last_verify,omitempty"`
	LastDrilled   *string `json:"last_drilled_at"`
	LastDrill     string  `json:"last_drill,omitempty"`
	NextRun       *string `json:"next_run_at"`
	OverdueSince  *string `json:"overdue_since"`
	OverdueReason string  `json:"overdue_reason,omitempty"`
	Note          string  `json:"note,omitempty"`
}

type statusLiveOut struct {
	Run        string       `json:"run"`
	Job        string       `json:"job"`
	Status     string       `json:"status"`
	Attempt    int          `json:"attempt"`
	StartedAt  *string      `json:"started_at"`
	Progress   *progressOut `json:"progress"`
	ETASeconds *float64     `json:"eta_seconds"`
	State      string       `json:"state"`
	StalledAt  *string      `json:"stalled_at"`
}

type statusAccountOut struct {
	Name         string  `json:"name"`
	State        string  `json:"state"`
	GrantedBytes int64   `json:"granted_bytes"`
	SettledBytes int64   `json:"settled_bytes"`
	HeldBytes    int64   `json:"held_bytes"`
	UsedShare    float64 `json:"used_share"`
}

type statusHostOut struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Note  string `json:"note,omitempty"`
}

type statusOut struct {
	State    string             `json:"state"`
	Error    string             `json:"error,omitempty"`
	At       *string            `json:"at"`
	Jobs     []statusJobOut     `json:"jobs"`
	Live     []statusLiveOut    `json:"live_runs"`
	Accounts []statusAccountOut `json:"accounts"`
	Hosts    []statusHostOut    `json:"hosts"`
	// Notifications kept as failed: holdfast notify log.
	FailedDeliveries int64 `json:"failed_deliveries"`
}

// statusTimeout bounds reading the status, connecting included.
const statusTimeout = 30 * time.Second

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "One screen: each job's last outcome and success, overdue jobs, live runs, accounts near their quota",
		Long: `One screen of how the backups are doing. The exit status is what monitoring plugins
expect: 0 all well, 1 warning (a job's last run did not succeed, an account uses 90% of its
quota or more, a host is down with nothing of its own), 2 critical (a job is overdue, a host is
down with live runs or pinned jobs), 3 unknown (the database cannot be read).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Any failure to read is UNKNOWN (3), as monitoring plugins report it, never a hang.
			ctx, cancel := context.WithTimeout(cmd.Context(), statusTimeout)
			defer cancel()
			var r watch.Report
			st, release, err := g.openStore(ctx)
			if err == nil {
				r, err = watch.Status(ctx, st)
				release()
			}
			if err != nil {
				r.State = watch.Unknown
			}
			out := cmd.OutOrStdout()
			if asJSON {
				o := statusJSON(r)
				if err != nil {
					o.Error = err.Error()
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(o); err != nil {
					return err
				}
			} else if err != nil {
				fmt.Fprintf(out, "holdfast status: UNKNOWN: %v\n", err)
			} else {
				printStatus(out, r)
			}
			if r.State != watch.OK {
				return exitCodeError{int(r.State)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func statusJSON(r watch.Report) statusOut {
	o := statusOut{State: r.State.String(), FailedDeliveries: r.FailedDeliveries, Jobs: []statusJobOut{}, Live: []statusLiveOut{}, Accounts: []statusAccountOut{},
		Hosts: []statusHostOut{}}
	if !r.At.IsZero() {
		o.At = timeStr(&r.At)
	}
	for _, j := range r.Jobs {
		o.Jobs = append(o.Jobs, statusJobOut{Name: j.Name, State: j.State.String(), LastOutcome: j.LastOutcome,
			LastSuccess: timeStr(j.LastSuccess), LastVerified: timeStr(j.LastVerified), LastVerify: j.LastVerify,
			LastDrilled: timeStr(j.LastDrilled), LastDrill: j.LastDrill, NextRun: timeStr(j.NextRun), OverdueSince: timeStr(j.OverdueSince),
			OverdueReason: j.OverdueReason, Note: j.Note})
	}
	for _, l := range r.Live {
		s := statusLiveOut{Run: l.Run.String(), Job: l.Job, Status: l.Status, Attempt: l.Attempt, StartedAt: timeStr(l.Started),
			State: l.State.String(), StalledAt: timeStr(l.Stalled), Progress: progressJSON(l.Progress)}
		if l.ETA != nil {
			secs := l.ETA.Seconds()
			s.ETASeconds = &secs
		}
		o.Live = append(o.Live, s)
	}
	for _, h := range r.Hosts {
		o.Hosts = append(o.Hosts, statusHostOut{Name: h.Name, State: h.State.String(), Note: h.Note})
	}
	for _, a := range r.Accounts {
		o.Accounts = append(o.Accounts, statusAccountOut{Name: a.Name, State: a.State.String(), GrantedBytes: a.Granted,
			SettledBytes: a.Settled, HeldBytes: a.Held, UsedShare: a.UsedShare})
	}
	return o
}

func printStatus(w io.Writer, r watch.Report) {
	fmt.Fprintf(w, "holdfast status: %s\n", strings.ToUpper(r.State.String()))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(r.Jobs) == 0 {
		fmt.Fprintln(tw, "\nno jobs (holdfast job add)")
	} else {
		fmt.Fprintln(tw, "\nJOB\tSTATE\tLAST RUN\tLAST SUCCESS\tVERIFIED\tDRILLED\tNEXT RUN\tNOTE")
		for _, j := range r.Jobs {
			next := "manual"
			if j.NextRun != nil {
				next = j.NextRun.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.State, dash(j.LastOutcome), watch.Age(j.LastSuccess, r.At),
				watch.Checked(j.LastVerified, j.LastVerify, r.At), watch.Checked(j.LastDrilled, j.LastDrill, r.At), next, j.Note)
		}
	}
	if len(r.Live) > 0 {
		fmt.Fprintln(tw, "\nLIVE RUN\tJOB\tSTATUS\tATTEMPT\tPROGRESS\tETA\tNOTE")
		for _, l := range r.Live {
			progress, eta := "-", "-"
			if p := l.Progress; p != nil {
				progress = fmt.Sprintf("%.1f%% %s/%s", p.PercentDone*100, ledger.FormatSize(p.BytesDone), ledger.FormatSize(p.TotalBytes))
			}
			if l.ETA != nil {
				eta = l.ETA.String()
			}
			note := ""
			if l.Stalled != nil {
				note = "STALLED since " + l.Stalled.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%.8s\t%s\t%s\t%d\t%s\t%s\t%s\n", l.Run, l.Job, l.Status, l.Attempt, progress, eta, note)
		}
	}
	if len(r.Accounts) > 0 {
		fmt.Fprintln(tw, "\nACCOUNT\tSTATE\tUSED\tQUOTA")
		for _, a := range r.Accounts {
			fmt.Fprintf(tw, "%s\t%s\t%.0f%% (%s settled, %s held)\t%s\n", a.Name, a.State, a.UsedShare*100,
				ledger.FormatSize(a.Settled), ledger.FormatSize(a.Held), ledger.FormatSize(a.Granted))
		}
	}
	if len(r.Hosts) > 1 || len(r.Hosts) == 1 && r.Hosts[0].State != watch.OK {
		fmt.Fprintln(tw, "\nHOST\tSTATE\tNOTE")
		for _, h := range r.Hosts {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", h.Name, h.State, h.Note)
		}
	}
	tw.Flush()
	if r.FailedDeliveries > 0 {
		fmt.Fprintf(w, "\n%d notification(s) failed for good: holdfast notify log\n", r.FailedDeliveries)
	}
}
