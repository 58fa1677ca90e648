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
	var overwrite, wait, asJSON, dryRun, toOriginal bool
	cmd := &cobra.Command{
		Use:   "restore JOB (--target DIR | --to-original --include PATH...)",
		Short: "Restore a snapshot of a job into a directory, or back where it was, as a run of its own",
		Long: "Restore a snapshot of a job (default: its latest) into DIR on this host, as a run of kind restore:\n" +
			"a transient unit running restic as the job's user, in its sandbox, with only DIR made writable.\n" +
			"DIR must be empty (or not exist yet) unless --overwrite is given, and the job's user must be able to\n" +
			"write it. The run is followed as a backup is (run show, run logs, run stop); a reboot or a crash\n" +
			"restarts it, a stop does not. Exit codes as for run start --wait.\n\n" +
			"With --to-original, the --include paths go back where they were: restic restores them into a stage\n" +
			"next to them (in the nearest directory on their file system that root, or for a user's job that\n" +
			"user, alone controls), and the unit moves each entry into place by a rename, never following a\n" +
			"link. What is missing is put back; what is there as the snapshot has it is left; what has changed\n" +
			"since the snapshot is kept, and the run is partial, unless --overwrite replaces it. A restore that\n" +
			"would put nothing back is refused. --dry-run lists each entry's action: write, overwrite, same,\n" +
			"keep or merge (a directory that is there).",
		Args: exactArgs(1, "one job name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			if toOriginal {
				if target != "" {
					return badInput("give --target or --to-original, not both")
				}
			} else if err := jobdef.ValidateTarget(target); err != nil {
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
			req := restoreRequest{job: args[0], target: target, snapshot: snapshot, includes: includes, overwrite: overwrite, toOriginal: toOriginal,
				restic: resticPath}
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
	f.BoolVar(&toOriginal, "to-original", false, "put the --include paths back where they were, instead of into a --target")
	f.StringVar(&snapshot, "snapshot", "latest", "the snapshot to restore: its id (or a unique prefix) or latest, the job's newest")
	f.StringArrayVar(&includes, "include", nil, "restore only what matches this path or pattern (repeatable)")
	f.BoolVar(&overwrite, "overwrite", false, "restore into a directory that is not empty, over what is there (with --to-original: replace what has changed since the snapshot)")
	f.BoolVar(&wait, "wait", false, "wait for the restore to end, showing progress")
	f.BoolVar(&dryRun, "dry-run", false, "list what the restore would write, and what it would write over, and queue nothing")
	f.BoolVar(&asJSON, "json", false, "print the run as JSON")
	f.StringVar(&restic, "restic", "", "restic executable (default: restic in PATH)")
	return cmd
}

type restoreRequest struct {
	job, target, snapshot string
	includes              []string
	overwrite, toOriginal bool
	restic                string
}

// params are the request's runctl.RestoreParams, on host.
func (r restoreRequest) params(host string) runctl.RestoreParams {
	return runctl.RestoreParams{Job: r.job, Target: r.target, Snapshot: r.snapshot, Includes: r.includes, Overwrite: r.overwrite,
		ToOriginal: r.toOriginal, Host: host}
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
	p := req.params(g.host())
	p.Wait = wait
	restored, err := runctl.Restore(cmd.Context(), cfg, p)
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
	Action      string  `json:"action"` // runctl's Write.Action: write, overwrite, same, keep, merge
	Type        string  `json:"type"`
	Size        *uint64 `json:"size,omitempty"`
	PresentSize *int64  `json:"present_size,omitempty"`
}

// restoreDryRun lists what the restore would write into its target, or put back, after its
// checks, and changes nothing.
func (g *globals) restoreDryRun(cmd *cobra.Command, st *store.Store, req restoreRequest, asJSON bool) error {
	cfg, release, err := g.restoreConfig(cmd, st, req.restic)
	if err != nil {
		return err
	}
	defer release()
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	actions := map[string]int{}
	var bytes uint64
	snap, err := runctl.RestorePlan(cmd.Context(), cfg, req.params(g.host()), func(w runctl.Write) error {
		actions[w.Action]++
		if w.Node.Size != nil && (w.Action == runctl.WriteNew || w.Action == runctl.WriteOver) {
			bytes += *w.Node.Size
		}
		if asJSON {
			o := writeOut{Path: w.Path, Action: w.Action, Type: w.Node.Type, Size: w.Node.Size}
			if w.Present && !w.PresentDir {
				o.PresentSize = &w.PresentSize
			}
			return json.NewEncoder(out).Encode(o)
		}
		fmt.Fprintf(out, "%-9s %10s  %s\n", w.Action, nodeSize(w.Node), textsafe.String(w.Path))
		return nil
	})
	if err != nil {
		return restoreError(err)
	}
	if asJSON {
		return nil
	}
	writes := actions[runctl.WriteNew] + actions[runctl.WriteOver]
	if !req.toOriginal {
		fmt.Fprintf(cmd.ErrOrStderr(), "a restore of snapshot %.8s would write %s (%s), %d of them over what is there; nothing was written or queued\n",
			snap, count(writes, "entry", "entries"), engine.FormatBytes(int64(min(bytes, 1<<62))), actions[runctl.WriteOver])
		return nil
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "a restore of snapshot %.8s to the original paths would write %s (%s), %d of them over what is there; "+
		"it would keep %d changed since the snapshot (--overwrite replaces them) and leave %d as the snapshot has them; nothing was written or queued\n",
		snap, count(writes, "entry", "entries"), engine.FormatBytes(int64(min(bytes, 1<<62))), actions[runctl.WriteOver],
		actions[runctl.WriteKeep], actions[runctl.WriteSame])
	return nil
}
