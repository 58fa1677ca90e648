package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/store"
)

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "Inspect job schedules"}
	cmd.AddCommand(newSchedulePreviewCmd(g))
	return cmd
}

type slotOut struct {
	At    string `json:"at"`
	Local string `json:"local"`
	Note  string `json:"note,omitempty"`
}

func newSchedulePreviewCmd(g *globals) *cobra.Command {
	var count int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "preview JOB",
		Short: "List a job's next start times, marking those daylight saving time moves",
		Args:  exactArgs(1, "one job name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			if count < 1 || count > 1000 {
				return badInput("--count must be 1..1000")
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				j, err := st.JobGet(ctx, args[0])
				if err != nil {
					return err
				}
				s, err := schedule.Parse(j.Schedule, j.TimeZone)
				if err != nil {
					return err
				}
				if s.Manual() {
					return badInput("job %s has no schedule: it runs when started (holdfast run start %s)", j.Name, j.Name)
				}
				out := []slotOut{}
				for _, slot := range s.Preview(time.Now(), count) {
					out = append(out, slotOut{At: slot.At.UTC().Format(time.RFC3339),
						Local: slot.At.In(s.Zone()).Format("Mon 2006-01-02 15:04 MST"), Note: slot.Note})
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "START (%s)\tUTC\tNOTE\n", s.Zone())
				for _, o := range out {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", o.Local, o.At, o.Note)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().IntVar(&count, "count", 10, "how many start times")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
