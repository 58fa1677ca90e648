package main

import (
	"cmp"
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

func newHostCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "host", Short: "List the hosts whose daemons share the database; drain or forget one"}
	cmd.AddCommand(newHostListCmd(g), newHostDrainCmd(g, true), newHostDrainCmd(g, false), newHostForgetCmd(g))
	return cmd
}

type hostOut struct {
	Name          string  `json:"name"`
	Version       string  `json:"version"`
	ResticVersion string  `json:"restic_version"`
	Alive         bool    `json:"alive"`
	LastHeartbeat string  `json:"last_heartbeat"`
	LeaseUntil    string  `json:"lease_until"`
	Generation    int64   `json:"generation"`
	Holder        string  `json:"holder"`
	StartedAt     string  `json:"started_at"`
	DrainingSince *string `json:"draining_since"`
	LiveRuns      int     `json:"live_runs"`
	PinnedJobs    int     `json:"pinned_jobs"`
}

func hostJSON(h model.Host) hostOut {
	return hostOut{Name: h.Name, Version: h.Version, ResticVersion: h.ResticVersion, Alive: h.Alive, LastHeartbeat: h.HeartbeatAt.UTC().Format(time.RFC3339Nano),
		LeaseUntil: h.LeaseUntil.UTC().Format(time.RFC3339Nano), Generation: h.Generation, Holder: h.Holder,
		StartedAt: h.StartedAt.UTC().Format(time.RFC3339Nano), DrainingSince: timeStr(h.DrainingSince),
		LiveRuns: h.LiveRuns, PinnedJobs: h.PinnedJobs}
}

func newHostListCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the hosts: version, restic release, last heartbeat, alive or down, live runs",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				hosts, err := st.HostList(ctx)
				if err != nil {
					return err
				}
				out := []hostOut{}
				for _, h := range hosts {
					out = append(out, hostJSON(h))
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "HOST\tSTATE\tVERSION\tRESTIC\tLAST HEARTBEAT\tLIVE RUNS\tPINNED JOBS")
				for _, h := range hosts {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s ago\t%d\t%d\n", h.Name, h.State(), h.Version, cmp.Or(h.ResticVersion, "-"),
						h.ReadAt.Sub(h.HeartbeatAt).Round(time.Second), h.LiveRuns, h.PinnedJobs)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the hosts as JSON")
	return cmd
}

func newHostDrainCmd(g *globals, drain bool) *cobra.Command {
	use, short, done := "drain NAME", "Start no new runs on a host; its live runs go on", "draining: it starts no new runs"
	if !drain {
		use, short, done = "undrain NAME", "Let a drained host start runs again", "taking runs again"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1, "one host name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateHost(args[0]); err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				h, err := st.HostDrain(ctx, args[0], drain)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "host %s is %s (%d live runs there)\n", h.Name, done, h.LiveRuns)
				return nil
			})
		},
	}
}

func newHostForgetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "forget NAME",
		Short: "Remove a host that has no daemon, no live runs and no pinned jobs",
		Args:  exactArgs(1, "one host name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateHost(args[0]); err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				if err := st.HostForget(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "host %s forgotten\n", args[0])
				return nil
			})
		},
	}
}
