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

	"github.com/holdfast-backup/holdfast/job"
	"github.com/holdfast-backup/holdfast/store"
)

func isUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "required flag", "accepts ", "requires "} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, " "+p) {
			return true
		}
	}
	return false
}

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
	cmd.AddCommand(newJobAddCmd(g), newJobListCmd(g), newJobShowCmd(g), newJobRemoveCmd(g))
	return cmd
}

func newJobAddCmd(g *globals) *cobra.Command {
	var j store.Job
	var nice int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "add NAME --repo REPO --password-file FILE --path PATH [--path PATH...]",
		Short: "Add a restic backup job",
		Args:  exactArgs(1, "one job name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			j.Name = args[0]
			if cmd.Flags().Changed("nice") {
				j.Nice = &nice
			}
			if err := job.Validate(&j); err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				created, err := st.CreateJob(ctx, j)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), jobJSON(created))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "job %s added: start a run with `holdfast run start %s`\n", created.Name, created.Name)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&j.Repository, "repo", "", "restic repository (absolute path or backend URL)")
	f.StringVar(&j.PasswordFile, "password-file", "", "file holding the repository password (absolute path)")
	f.StringArrayVar(&j.Paths, "path", nil, "absolute path to back up (repeatable)")
	f.StringArrayVar(&j.Excludes, "exclude", nil, "restic exclude pattern (repeatable)")
	f.StringVar(&j.User, "user", "", "run the backup as this user")
	f.StringVar(&j.Group, "group", "", "run the backup as this group")
	f.DurationVar(&j.RuntimeMax, "runtime-max", 0, "stop a run that takes longer than this (e.g. 6h)")
	f.IntVar(&nice, "nice", 0, "CPU niceness of the backup, -20..19")
	f.StringVar(&j.IOSchedulingClass, "io-class", "", "IO scheduling class: realtime, best-effort or idle")
	f.StringVar(&j.Engine, "engine", "restic", "backup engine: restic or command")
	f.BoolVar(&asJSON, "json", false, "print the job as JSON")
	return cmd
}

type jobOut struct {
	Name              string   `json:"name"`
	Engine            string   `json:"engine"`
	Repository        string   `json:"repository"`
	PasswordFile      string   `json:"password_file"`
	Paths             []string `json:"paths"`
	Excludes          []string `json:"excludes"`
	User              string   `json:"user,omitempty"`
	Group             string   `json:"group,omitempty"`
	Nice              *int     `json:"nice,omitempty"`
	IOSchedulingClass string   `json:"io_scheduling_class,omitempty"`
	RuntimeMaxSeconds float64  `json:"runtime_max_seconds,omitempty"`
	CreatedAt         string   `json:"created_at"`
	LastOutcome       string   `json:"last_outcome,omitempty"`
	LastRunID         string   `json:"last_run_id,omitempty"`
}

func jobJSON(j store.Job) jobOut {
	o := jobOut{Name: j.Name, Engine: j.Engine, Repository: j.Repository, PasswordFile: j.PasswordFile,
		Paths: j.Paths, Excludes: j.Excludes, User: j.User, Group: j.Group, Nice: j.Nice,
		IOSchedulingClass: j.IOSchedulingClass, RuntimeMaxSeconds: j.RuntimeMax.Seconds(),
		CreatedAt: j.CreatedAt.UTC().Format(time.RFC3339), LastOutcome: j.LastOutcome}
	if j.LastRunID != nil {
		o.LastRunID = j.LastRunID.String()
	}
	return o
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
				jobs, err := st.Jobs(ctx)
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
				fmt.Fprintln(tw, "NAME\tENGINE\tREPOSITORY\tPATHS\tLAST OUTCOME")
				for _, j := range jobs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", j.Name, j.Engine, j.Repository, strings.Join(j.Paths, ","), dash(j.LastOutcome))
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
			if err := job.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				j, err := st.JobByName(ctx, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), jobJSON(j))
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "job:           %s\nengine:        %s\nrepository:    %s\npassword file: %s\npaths:         %s\n",
					j.Name, j.Engine, j.Repository, j.PasswordFile, strings.Join(j.Paths, " "))
				if len(j.Excludes) > 0 {
					fmt.Fprintf(w, "excludes:      %s\n", strings.Join(j.Excludes, " "))
				}
				if j.User != "" {
					fmt.Fprintf(w, "runs as:       %s\n", j.User)
				}
				if j.RuntimeMax > 0 {
					fmt.Fprintf(w, "runtime limit: %s\n", j.RuntimeMax)
				}
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
			if err := job.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				if err := st.RemoveJob(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "job %s removed\n", args[0])
				return nil
			})
		},
	}
}
