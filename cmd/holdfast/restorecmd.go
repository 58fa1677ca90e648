package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/unitcmd"
)

func newRestoreCmd(g *globals) *cobra.Command {
	var target, snapshot, restic string
	var includes []string
	var overwrite, wait, asJSON bool
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
			resticPath, err := resticBinary(restic)
			if err != nil {
				return err
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				return g.restore(cmd, st, restoreRequest{job: args[0], target: target, snapshot: snapshot, includes: includes,
					overwrite: overwrite, restic: resticPath}, wait, asJSON)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "", "the directory to restore into (absolute; made if it does not exist)")
	f.StringVar(&snapshot, "snapshot", "latest", "the snapshot to restore: its id (or a unique prefix) or latest, the job's newest")
	f.StringArrayVar(&includes, "include", nil, "restore only what matches this path or pattern (repeatable)")
	f.BoolVar(&overwrite, "overwrite", false, "restore into a directory that is not empty, over what is there")
	f.BoolVar(&wait, "wait", false, "wait for the restore to end, showing progress")
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

// restore checks everything a restore needs before it admits one, changing nothing on a refusal:
// the job has a repository and may run here, the target is one the job's user may restore into
// (checked as that user), and the snapshot exists (asked of the repository as that user); the
// snapshot is recorded by its full id, so a restarted restore gives back the same tree.
func (g *globals) restore(cmd *cobra.Command, st *store.Store, req restoreRequest, wait, asJSON bool) error {
	ctx := cmd.Context()
	j, err := st.JobGet(ctx, req.job)
	if err != nil {
		return err
	}
	if !j.HasRepository() {
		return badInput("job %s uses the %s engine: only a restic repository can be restored from", j.Name, j.Engine)
	}
	here := g.host()
	if j.Host != "" && j.Host != here {
		return badInput("job %s runs on host %s: run holdfast restore there (a target is a directory of the host that restores)", j.Name, j.Host)
	}
	able, err := st.JobRunnable(ctx, store.JobRunnableParams{Job: j.Name, On: here})
	if err != nil {
		return err
	}
	unable := "" // why no live daemon can run it
	if able.Host == "" {
		if wait {
			return unavailableError{&runctl.UnavailableError{Why: able.Why}}
		}
		unable = able.Why
	}
	id, err := jobdef.ResolveIdentity(j.User, j.Group)
	if err != nil {
		return inputError{err}
	}
	self, err := g.env.executable()
	if err != nil {
		return fmt.Errorf("find holdfast's own executable: %w", err)
	}
	probe := func(op jobdef.TargetOp) (jobdef.TargetAnswer, error) {
		return jobdef.ProbeTargetAs([]string{self, "probe-target"}, id, jobdef.TargetProbe{Op: op, Path: req.target, Overwrite: req.overwrite})
	}
	if a, err := probe(jobdef.TargetCheck); err != nil {
		return err
	} else if a.Why != "" {
		return badInput("%s; nothing was queued", a.Why)
	}
	if _, err := checkTarget(req.target, id, false); err != nil {
		return err
	}

	rn, err := g.openSystemd(ctx)
	if err != nil {
		return err
	}
	defer rn.Close()
	restic, ej := jobunit.Restic(jobunit.Config{Runner: rn, StateDir: g.stateDir, Binary: unitcmd.Binary(self), ResticBinary: req.restic}, j, false)
	listed, err := restic.ListSnapshots(ctx, ej)
	if err != nil {
		return err
	}
	snap, err := pickSnapshot(listed, j.Name, req.snapshot)
	if err != nil {
		return inputError{err}
	}
	rs := model.Restore{Target: req.target, Snapshot: snap, Includes: req.includes}
	if len(req.includes) == 0 {
		// The totals only make the progress a percentage: without them it still counts.
		if b, n, err := restic.RestoreSize(ctx, ej, snap); err == nil {
			rs.TotalBytes, rs.TotalFiles = &b, &n
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "holdfast: warning: the restore's size is unknown, its progress shows no percentage: %v\n", err)
		}
	}

	made, err := probe(jobdef.TargetCreate)
	if err != nil {
		return err
	}
	if made.Why != "" {
		return badInput("%s; nothing was queued", made.Why)
	}
	undo := func() {
		if made.Created {
			if a, perr := probe(jobdef.TargetRemove); perr != nil || a.Why != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "holdfast: warning: the target %s made for the restore was left: %v%s\n", req.target, perr, a.Why)
			}
		}
	}
	// The target as root finds it now is the one every spawn of the restore must find again.
	target, err := checkTarget(req.target, id, true)
	if err != nil {
		undo()
		return err
	}
	rs.TargetID = &model.FileID{Dev: target.Dev, Ino: target.Ino}
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: j.Name, Trigger: model.TriggerManual, Kind: model.KindRestore, Host: here, Restore: rs})
	if err != nil {
		undo()
		return err
	}
	return followRun(cmd, st, run, unable, wait, asJSON)
}

// checkTarget holds a restore's target to the rule its unit's spawn holds it to (safepath, for
// the job's user): no link but root's or the user's on the way, no directory on the way that
// anyone else may change, and the target itself root's or the user's and closed to others. A
// target that does not exist yet (exists false) is checked by the directory it will be made in.
// A root job's restore writes as root with every file's owner and mode, so a target any other
// user controls would let that user redirect root's writes.
func checkTarget(target string, id jobdef.Identity, exists bool) (safepath.Node, error) {
	n, err := safepath.Writable(target, int(id.UID))
	if !exists && errors.Is(err, fs.ErrNotExist) {
		n, err = safepath.Parent(target, int(id.UID))
	}
	if err == nil {
		return n, nil
	}
	if !safepath.Refused(err) {
		return safepath.Node{}, fmt.Errorf("target %s: %w", target, err)
	}
	who := "root"
	if id.UID != 0 {
		who = "root and user " + id.String()
	}
	return safepath.Node{}, badInput("target %s refused: %v; restore into a directory that only %s control; nothing was queued", target, err, who)
}

// pickSnapshot resolves which snapshot to restore: "latest" is the job's newest (by its tag), an
// id or a prefix must name exactly one snapshot of the repository.
func pickSnapshot(listed []engine.Snapshot, jobName, want string) (string, error) {
	if want == "latest" {
		var newest *engine.Snapshot
		for i, s := range listed {
			if slices.Contains(s.Tags, engine.JobTag(jobName)) && (newest == nil || s.Time.After(newest.Time)) {
				newest = &listed[i]
			}
		}
		if newest == nil {
			return "", fmt.Errorf("job %s has no snapshot in its repository yet: run a backup first, or name a snapshot with --snapshot", jobName)
		}
		return newest.ID, nil
	}
	var found []string
	for _, s := range listed {
		if strings.HasPrefix(s.ID, want) {
			found = append(found, s.ID)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no snapshot %s in the repository of job %s: see holdfast snapshot list %s --refresh", want, jobName, jobName)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("snapshot %s is ambiguous in the repository of job %s (%d match): give more of its id", want, jobName, len(found))
}
