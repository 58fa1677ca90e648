package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
	"github.com/holdfast-backup/holdfast/unitcmd"
)

func newRestoreCmd(g *globals) *cobra.Command {
	var target, snapshot, restic string
	var includes []string
	var overwrite, wait, asJSON, dryRun bool
	cmd := &cobra.Command{
		Use:   "restore JOB --target DIR",
		Short: "Restore a snapshot of a job into a directory, as a run of its own",
		Long: "Restore a snapshot of a job (default: its latest) into DIR on this host, as a run of kind restore:\n" +
			"a transient unit running restic as the job's user, in its sandbox, with only DIR made writable.\n" +
			"DIR must be empty (or not exist yet) unless --overwrite is given, and the job's user must be able to\n" +
			"write it. The run is followed as a backup is (run show, run logs, run stop); a reboot or a crash\n" +
			"restarts it, a stop does not. Exit codes as for run start --wait.",
		Args: exactArgs(1, "one job name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			if err := jobdef.ValidateTarget(target); err != nil {
				return inputError{err}
			}
			if err := validateSnapshotArg(snapshot); err != nil {
				return inputError{err}
			}
			for _, p := range includes {
				if p == "" || strings.ContainsAny(p, "\x00\n") {
					return badInput("--include %q: give a path or pattern of the snapshot, such as /srv/data/reports", p)
				}
			}
			if dryRun && wait {
				return badInput("--dry-run queues nothing: --wait has no run to wait for")
			}
			resticPath, err := resticBinary(restic)
			if err != nil {
				return err
			}
			req := restoreRequest{job: args[0], target: target, snapshot: snapshot, includes: includes, overwrite: overwrite, restic: resticPath}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				if dryRun {
					return g.restoreDryRun(cmd, st, req, asJSON)
				}
				return g.restore(cmd, st, req, wait, asJSON)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "", "the directory to restore into (absolute; made if it does not exist)")
	f.StringVar(&snapshot, "snapshot", "latest", "the snapshot to restore: its id (or a unique prefix) or latest, the job's newest")
	f.StringArrayVar(&includes, "include", nil, "restore only what matches this path or pattern (repeatable)")
	f.BoolVar(&overwrite, "overwrite", false, "restore into a directory that is not empty, over what is there")
	f.BoolVar(&wait, "wait", false, "wait for the restore to end, showing progress")
	f.BoolVar(&dryRun, "dry-run", false, "list what the restore would write, and what it would write over, and queue nothing")
	f.BoolVar(&asJSON, "json", false, "print the run as JSON")
	f.StringVar(&restic, "restic", "", "restic executable (default: restic in PATH)")
	return cmd
}

type restoreRequest struct {
	job, target, snapshot string
	includes              []string
	overwrite             bool
	restic                string
}

var snapshotPrefix = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{4,64}$`) })

// validateSnapshotArg checks --snapshot before anything is asked of the repository.
func validateSnapshotArg(s string) error {
	if s == "latest" || snapshotPrefix().MatchString(s) {
		return nil
	}
	return fmt.Errorf("--snapshot %q: give a snapshot id (at least 4 hex digits, as snapshot list prints) or latest", s)
}

// restoreConfig is how the CLI's restores check their target and ask the job's repository.
func (g *globals) restoreConfig(cmd *cobra.Command, st *store.Store, restic string) (runctl.RestoreConfig, func(), error) {
	self, err := g.env.executable()
	if err != nil {
		return runctl.RestoreConfig{}, nil, fmt.Errorf("find holdfast's own executable: %w", err)
	}
	rn, err := g.openSystemd(cmd.Context())
	if err != nil {
		return runctl.RestoreConfig{}, nil, err
	}
	return runctl.RestoreConfig{Store: st, Probe: []string{self, "probe-target"},
		Units: jobunit.Config{Runner: rn, StateDir: g.stateDir, Binary: unitcmd.Binary(self), ResticBinary: restic}}, rn.Close, nil
}

// restoreError is how a refused restore exits: 2 for what was asked, 69 for no daemon.
func restoreError(err error) error {
	var unavailable *runctl.UnavailableError
	switch {
	case errors.As(err, &unavailable):
		return unavailableError{err}
	case runctl.Input(err):
		return inputError{err}
	}
	return err
}

// restore admits the restore runctl.Restore checks, as the CLI asks for it, and follows it.
func (g *globals) restore(cmd *cobra.Command, st *store.Store, req restoreRequest, wait, asJSON bool) error {
	cfg, release, err := g.restoreConfig(cmd, st, req.restic)
	if err != nil {
		return err
	}
	defer release()
	restored, err := runctl.Restore(cmd.Context(), cfg, runctl.RestoreParams{Job: req.job, Target: req.target, Snapshot: req.snapshot,
		Includes: req.includes, Overwrite: req.overwrite, Wait: wait, Host: g.host()})
	for _, w := range restored.Warnings {
		fmt.Fprintf(cmd.ErrOrStderr(), "holdfast: warning: %s\n", w)
	}
	if err != nil {
		return restoreError(err)
	}
	return followRun(cmd, st, restored.Run, restored.Unable, wait, asJSON)
}

// writeOut is an entry of `restore --dry-run --json`.
type writeOut struct {
	Path        string  `json:"path"`
	Action      string  `json:"action"` // "write", or "overwrite" where something is there
	Type        string  `json:"type"`
	Size        *uint64 `json:"size,omitempty"`
	PresentSize *int64  `json:"present_size,omitempty"`
}

// restoreDryRun lists what the restore would write into its target, after its checks, and
// changes nothing.
func (g *globals) restoreDryRun(cmd *cobra.Command, st *store.Store, req restoreRequest, asJSON bool) error {
	cfg, release, err := g.restoreConfig(cmd, st, req.restic)
	if err != nil {
		return err
	}
	defer release()
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	var writes, over int
	var bytes uint64
	snap, err := runctl.RestorePlan(cmd.Context(), cfg, runctl.RestoreParams{Job: req.job, Target: req.target, Snapshot: req.snapshot,
		Includes: req.includes, Overwrite: req.overwrite, Host: g.host()}, func(w runctl.Write) error {
		action := "write"
		if w.Present && !(w.PresentDir && w.Node.Type == "dir") {
			action = "overwrite"
			over++
		}
		writes++
		if w.Node.Size != nil {
			bytes += *w.Node.Size
		}
		if asJSON {
			o := writeOut{Path: w.Path, Action: action, Type: w.Node.Type, Size: w.Node.Size}
			if action == "overwrite" {
				o.PresentSize = &w.PresentSize
			}
			return json.NewEncoder(out).Encode(o)
		}
		fmt.Fprintf(out, "%-9s %10s  %s\n", action, nodeSize(w.Node), textsafe.String(w.Path))
		return nil
	})
	if err != nil {
		return restoreError(err)
	}
	if !asJSON {
		fmt.Fprintf(cmd.ErrOrStderr(), "a restore of snapshot %.8s would write %s (%s), %d of them over what is there; nothing was written or queued\n",
			snap, count(writes, "entry", "entries"), engine.FormatBytes(int64(min(bytes, 1<<62))), over)
	}
	return nil
}
