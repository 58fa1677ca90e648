package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
)

func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "List snapshots, look inside them, find files in them, and protect them from retention (legal hold, immutability)"}
	cmd.AddCommand(newSnapshotListCmd(g), newSnapshotLsCmd(g), newSnapshotFindCmd(g), newSnapshotHoldCmd(g), newSnapshotReleaseCmd(g), newSnapshotLockCmd(g))
	return cmd
}

type snapshotOut struct {
	ID             string   `json:"id"`
	Repository     string   `json:"repository"`
	Time           string   `json:"time"`
	Host           string   `json:"host"`
	Tags           []string `json:"tags"`
	Paths          []string `json:"paths"`
	Job            string   `json:"job,omitempty"`
	RunID          *string  `json:"run_id,omitempty"`
	BytesAdded     *int64   `json:"bytes_added,omitempty"`
	LegalHold      bool     `json:"legal_hold"`
	LegalHoldAt    *string  `json:"legal_hold_at,omitempty"`
	LegalHoldBy    string   `json:"legal_hold_by,omitempty"`
	LegalHoldWhy   string   `json:"legal_hold_why,omitempty"`
	ImmutableUntil *string  `json:"immutable_until,omitempty"`
	ImmutableBy    string   `json:"immutable_by,omitempty"`
	SeenAt         string   `json:"seen_at"`
	// Source is where the row came from: "listing" (restic listed it) or "summary" (a backup's
	// summary, until the next listing completes it; its id may be restic's short id).
	Source string `json:"source"`
}

func snapshotJSON(s model.Snapshot) snapshotOut {
	o := snapshotOut{ID: s.ID, Repository: s.Repository, Time: s.Time.UTC().Format(time.RFC3339Nano), Host: s.Host,
		Tags: s.Tags, Paths: s.Paths, Job: s.JobName, BytesAdded: s.BytesAdded, LegalHold: s.LegalHoldAt != nil,
		LegalHoldAt: timeStr(s.LegalHoldAt), LegalHoldBy: s.LegalHoldBy, LegalHoldWhy: s.LegalHoldWhy,
		ImmutableUntil: timeStr(s.ImmutableUntil), ImmutableBy: s.ImmutableBy, SeenAt: s.SeenAt.UTC().Format(time.RFC3339Nano),
		Source: s.Source}
	if s.RunID != nil {
		id := s.RunID.String()
		o.RunID = &id
	}
	return o
}

func protection(s model.Snapshot, now time.Time) string {
	var p []string
	if s.LegalHoldAt != nil {
		p = append(p, "legal hold")
	}
	if s.ImmutableUntil != nil && now.Before(*s.ImmutableUntil) {
		p = append(p, "immutable until "+s.ImmutableUntil.Local().Format("2006-01-02 15:04"))
	}
	return dash(strings.Join(p, ", "))
}

func newSnapshotListCmd(g *globals) *cobra.Command {
	var asJSON, refresh bool
	var restic string
	cmd := &cobra.Command{
		Use:   "list [JOB]",
		Short: "List the snapshots holdfast knows, of the job's repository or of all (--refresh reads the repository again)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && refresh {
				return badInput("--refresh needs a job: holdfast snapshot list --refresh JOB")
			}
			if len(args) == 1 {
				if err := jobdef.ValidateName(args[0]); err != nil {
					return inputError{err}
				}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				repository := ""
				var snaps []model.Snapshot
				if len(args) == 1 {
					j, err := st.JobGet(ctx, args[0])
					if err != nil {
						return err
					}
					if !j.HasRepository() {
						return badInput("job %s uses the %s engine: it has no restic snapshots", j.Name, j.Engine)
					}
					repository = j.Repository
					if refresh {
						path, err := resticBinary(restic)
						if err != nil {
							return err
						}
						if snaps, err = g.refreshSnapshots(ctx, st, path, j); err != nil {
							return err
						}
					}
				}
				if !refresh {
					var err error
					if snaps, err = st.SnapshotList(ctx, repository); err != nil {
						return err
					}
				}
				if asJSON {
					out := make([]snapshotOut, 0, len(snaps))
					for _, s := range snaps {
						out = append(out, snapshotJSON(s))
					}
					return writeJSON(cmd.OutOrStdout(), out)
				}
				now := time.Now()
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tTIME\tHOST\tJOB\tADDED\tPROTECTION")
				for _, s := range snaps {
					added := "-"
					if s.BytesAdded != nil {
						added = engine.FormatBytes(*s.BytesAdded)
					}
					fmt.Fprintf(tw, "%.12s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Time.Local().Format("2006-01-02 15:04:05"), textsafe.String(s.Host),
						dash(s.JobName), added, protection(s, now))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&refresh, "refresh", false, "read the job's repository again first")
	cmd.Flags().StringVar(&restic, "restic", "", "restic executable (default: restic in PATH)")
	return cmd
}

// snapshotArg checks a snapshot id (prefix) given on the command line.
func snapshotArg(s string) error {
	if len(s) < 4 || len(s) > 64 || strings.Trim(s, "0123456789abcdef") != "" {
		return badInput("snapshot id %q: give 4 to 64 lower-case hex digits of it (holdfast snapshot list shows them)", s)
	}
	return nil
}

func snapshotChange(g *globals, use, short string, change func(context.Context, *store.Store, string) (model.Snapshot, error), done func(model.Snapshot) string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1, "one snapshot id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := snapshotArg(args[0]); err != nil {
				return err
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				s, err := change(ctx, st, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), snapshotJSON(s))
				}
				fmt.Fprintln(cmd.OutOrStdout(), done(s))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the snapshot as JSON")
	return cmd
}

func newSnapshotHoldCmd(g *globals) *cobra.Command {
	var why string
	cmd := snapshotChange(g, "hold ID", "Put a snapshot under legal hold: no retention plan deletes it until it is released",
		func(ctx context.Context, st *store.Store, id string) (model.Snapshot, error) {
			return st.SnapshotHold(ctx, store.SnapshotHoldParams{Prefix: id, By: g.actor(), Why: why})
		},
		func(s model.Snapshot) string { return fmt.Sprintf("snapshot %.12s is under legal hold", s.ID) })
	cmd.Flags().StringVar(&why, "why", "", "the reason, kept with the hold")
	return cmd
}

func newSnapshotReleaseCmd(g *globals) *cobra.Command {
	return snapshotChange(g, "release ID", "Lift a snapshot's legal hold (its immutability, if any, stays)",
		func(ctx context.Context, st *store.Store, id string) (model.Snapshot, error) {
			return st.SnapshotRelease(ctx, id)
		},
		func(s model.Snapshot) string { return fmt.Sprintf("snapshot %.12s released from legal hold", s.ID) })
}

func newSnapshotLockCmd(g *globals) *cobra.Command {
	var until string
	cmd := snapshotChange(g, "lock ID --until T", "Make a snapshot immutable until a time: no retention plan deletes it before then",
		func(ctx context.Context, st *store.Store, id string) (model.Snapshot, error) {
			if until == "" {
				return model.Snapshot{}, badInput("--until is required, e.g. --until 2027-12-31")
			}
			t, err := parseTime("--until", until)
			if err != nil {
				return model.Snapshot{}, err
			}
			if !t.After(time.Now()) {
				return model.Snapshot{}, badInput("--until %s is not in the future", until)
			}
			return st.SnapshotLock(ctx, store.SnapshotLockParams{Prefix: id, Until: t, By: g.actor()})
		},
		func(s model.Snapshot) string {
			return fmt.Sprintf("snapshot %.12s is immutable until %s", s.ID, s.ImmutableUntil.Local().Format(time.RFC3339))
		})
	cmd.Flags().StringVar(&until, "until", "", "the time until which the snapshot is immutable")
	return cmd
}
