package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/catalog"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
	"github.com/holdfast-backup/holdfast/unitcmd"
)

// nodeOut is an entry of a snapshot as `snapshot ls --json` and `snapshot find --json` print
// it, one JSON object a line.
type nodeOut struct {
	Snapshot     string  `json:"snapshot,omitempty"`
	SnapshotTime *string `json:"snapshot_time,omitempty"`
	Path         string  `json:"path"`
	Type         string  `json:"type"`
	Size         *uint64 `json:"size,omitempty"`
	Mode         uint32  `json:"mode"`
	Permissions  string  `json:"permissions"`
	ModTime      string  `json:"mtime"`
	UID          uint32  `json:"uid"`
	GID          uint32  `json:"gid"`
}

func nodeJSON(n engine.Node) nodeOut {
	return nodeOut{Path: n.Path, Type: n.Type, Size: n.Size, Mode: uint32(n.Mode), Permissions: n.Mode.String(),
		ModTime: n.ModTime.UTC().Format(time.RFC3339Nano), UID: n.UID, GID: n.GID}
}

// nodeLine is an entry as the human output shows it: its mode, size, modification time and
// path, the path escaped (the repository's names are the job's user's text).
func nodeLine(w io.Writer, n engine.Node) {
	p := textsafe.String(n.Path)
	if n.Type == "dir" {
		p += "/"
	}
	fmt.Fprintf(w, "%s %10s  %s  %s\n", n.Mode, nodeSize(n), n.ModTime.Local().Format("2006-01-02 15:04:05"), p)
}

// nodeSize is a file's size as the human output shows it; "-" for what is not a file.
func nodeSize(n engine.Node) string {
	if n.Type != "file" {
		return "-"
	}
	var b uint64
	if n.Size != nil {
		b = *n.Size
	}
	return engine.FormatBytes(int64(min(b, 1<<62)))
}

// browseJob is a job whose snapshots are browsed: its snapshots as holdfast's inventory knows
// them, newest first, and its catalogs on this host or restic as the job's query units run it.
type browseJob struct {
	job       model.Job
	snapshots []model.Snapshot
	catalog.Browser
	release func()
}

// openBrowse reads the job and its snapshots and readies its query units.
func (g *globals) openBrowse(ctx context.Context, st *store.Store, name, resticFlag string) (*browseJob, error) {
	j, err := st.JobGet(ctx, name)
	if err != nil {
		return nil, err
	}
	if !j.HasRepository() {
		return nil, badInput("job %s uses the %s engine: it has no restic snapshots to browse", j.Name, j.Engine)
	}
	all, err := st.SnapshotList(ctx, j.Repository)
	if err != nil {
		return nil, err
	}
	b := &browseJob{job: j}
	for _, s := range all {
		if s.JobName == j.Name {
			b.snapshots = append(b.snapshots, s)
		}
	}
	restic, err := resticBinary(resticFlag)
	if err != nil {
		return nil, err
	}
	rn, err := g.openSystemd(ctx)
	if err != nil {
		return nil, err
	}
	self, err := g.env.executable()
	if err != nil {
		rn.Close()
		return nil, fmt.Errorf("find holdfast's own executable: %w", err)
	}
	// A snapshot this host keeps a catalog of is listed from it, any other by restic.
	b.Browser = catalog.Browser{Dir: catalog.DirIn(g.stateDir),
		Restic: jobunit.Browser{Config: jobunit.Config{Runner: rn, StateDir: g.stateDir, Binary: unitcmd.Binary(self), ResticBinary: restic}}}
	b.release = rn.Close
	return b, nil
}

// snapshot resolves "latest" or an id's prefix to one of the job's snapshots. Its ID may be the
// short one a backup's summary gave, until a listing completes it; restic takes either.
func (b *browseJob) snapshot(arg string) (model.Snapshot, error) {
	refresh := fmt.Sprintf("holdfast snapshot list --refresh %s reads its repository again", b.job.Name)
	if arg == "latest" {
		if len(b.snapshots) == 0 {
			return model.Snapshot{}, badInput("job %s has no snapshot holdfast knows (%s)", b.job.Name, refresh)
		}
		return b.snapshots[0], nil
	}
	var found []model.Snapshot
	for _, s := range b.snapshots {
		if strings.HasPrefix(s.ID, arg) {
			found = append(found, s)
		}
	}
	switch {
	case len(found) == 0:
		return model.Snapshot{}, badInput("snapshot %s is not one of job %s's snapshots holdfast knows (%s)", arg, b.job.Name, refresh)
	case len(found) > 1:
		return model.Snapshot{}, badInput("snapshot %s names %d snapshots of job %s: give more of its id", arg, len(found), b.job.Name)
	}
	return found[0], nil
}

// timeOf is when the snapshot restic names by its full id was taken, as the inventory knows it
// (by its full id, or by the short one a backup's summary gave until a listing completes it).
func (b *browseJob) timeOf(id string) (time.Time, bool) {
	for _, s := range b.snapshots {
		if strings.HasPrefix(id, s.ID) {
			return s.Time, true
		}
	}
	return time.Time{}, false
}

// snapshotPathArg checks a path in a snapshot given on the command line: absolute, and cleaned.
func snapshotPathArg(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", badInput("path %q: give an absolute path in the snapshot, such as /home/alice (holdfast snapshot ls JOB SNAPSHOT shows its top)", p)
	}
	return path.Clean(p), nil
}

func newSnapshotLsCmd(g *globals) *cobra.Command {
	var asJSON, recursive bool
	var restic string
	cmd := &cobra.Command{
		Use:   "ls JOB SNAPSHOT [PATH]",
		Short: "List what a snapshot holds under a path: one level, or everything below it with --recursive",
		Long: "List what a snapshot of the job holds under PATH (its top by default): the entries of that directory, or with\n" +
			"--recursive everything below it, each with its mode, size and modification time. SNAPSHOT is an id, or a prefix of\n" +
			"one, of a snapshot holdfast knows (holdfast snapshot list JOB), or latest. restic runs as the job's user in a\n" +
			"unit of its own, and its listing is printed as it comes, never held whole. --json prints one JSON object a line.",
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			if args[1] != "latest" {
				if err := snapshotArg(args[1]); err != nil {
					return err
				}
			}
			dir := "/"
			if len(args) == 3 {
				var err error
				if dir, err = snapshotPathArg(args[2]); err != nil {
					return err
				}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				b, err := g.openBrowse(ctx, st, args[0], restic)
				if err != nil {
					return err
				}
				defer b.release()
				snap, err := b.snapshot(args[1])
				if err != nil {
					return err
				}
				out := bufio.NewWriter(cmd.OutOrStdout())
				defer out.Flush()
				var self *engine.Node
				listed := 0
				err = b.Ls(ctx, b.job, snap.ID, dir, recursive, func(n engine.Node) error {
					if n.Path == dir {
						self = &n // restic lists the directory itself first
						if n.Type == "dir" {
							return nil
						}
					}
					listed++
					if asJSON {
						return json.NewEncoder(out).Encode(nodeJSON(n))
					}
					nodeLine(out, n)
					return nil
				})
				if err != nil {
					return err
				}
				if self == nil && dir != "/" {
					return badInput("snapshot %.8s of job %s holds nothing at %s", snap.ID, b.job.Name, textsafe.String(dir))
				}
				if listed == 0 && !asJSON {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s is empty in snapshot %.8s\n", textsafe.String(dir), snap.ID)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&recursive, "recursive", false, "list everything below the path, not only its entries")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line")
	cmd.Flags().StringVar(&restic, "restic", "", "restic executable (default: restic in PATH)")
	return cmd
}

func newSnapshotFindCmd(g *globals) *cobra.Command {
	var asJSON bool
	var newest int
	var restic string
	cmd := &cobra.Command{
		Use:   "find JOB PATTERN",
		Short: "Find which of the job's snapshots hold a file: by name or glob (report.pdf, *.conf) or by path (/etc/*.conf)",
		Long: "Find the entries of the job's snapshots whose name, or path when PATTERN holds a slash, matches PATTERN (a glob:\n" +
			"*, ?, [...]), and show them by snapshot, with their size and modification time in each: which snapshots still\n" +
			"hold a file, and which version of it. --newest N searches only the N newest snapshots holdfast knows.\n" +
			"restic runs as the job's user in a unit of its own. --json prints one JSON object a line.",
		Args: exactArgs(2, "a job name and a pattern"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := jobdef.ValidateName(args[0]); err != nil {
				return inputError{err}
			}
			pattern := args[1]
			if pattern == "" || strings.ContainsRune(pattern, 0) {
				return badInput("pattern %q: give a name or a glob, such as report.pdf or *.conf", pattern)
			}
			if _, err := path.Match(pattern, ""); err != nil {
				return badInput("pattern %q is not a glob: %v", textsafe.String(pattern), err)
			}
			if cmd.Flags().Changed("newest") && newest < 1 {
				return badInput("--newest %d: give how many of the newest snapshots to search, at least 1", newest)
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				b, err := g.openBrowse(ctx, st, args[0], restic)
				if err != nil {
					return err
				}
				defer b.release()
				var ids []string
				if newest > 0 {
					for _, s := range b.snapshots[:min(newest, len(b.snapshots))] {
						ids = append(ids, s.ID)
					}
					if len(ids) == 0 {
						return badInput("job %s has no snapshot holdfast knows (holdfast snapshot list --refresh %s reads its repository again)", b.job.Name, b.job.Name)
					}
				}
				out := bufio.NewWriter(cmd.OutOrStdout())
				defer out.Flush()
				var current string
				found, snapshots := 0, 0
				err = b.Find(ctx, b.job, pattern, ids, func(f engine.Found) error {
					found++
					at, known := b.timeOf(f.Snapshot)
					if asJSON {
						o := nodeJSON(f.Node)
						o.Snapshot = f.Snapshot
						if known {
							o.SnapshotTime = timeStr(&at)
						}
						return json.NewEncoder(out).Encode(o)
					}
					if f.Snapshot != current {
						if current != "" {
							fmt.Fprintln(out)
						}
						current = f.Snapshot
						snapshots++
						when := "a snapshot holdfast does not know yet"
						if known {
							when = at.Local().Format("2006-01-02 15:04:05")
						}
						fmt.Fprintf(out, "snapshot %.8s (%s):\n", f.Snapshot, when)
					}
					nodeLine(out, f.Node)
					return nil
				})
				if errors.Is(err, engine.ErrTooManyFound) {
					return inputError{err}
				}
				if err != nil {
					return err
				}
				if !asJSON {
					if found == 0 {
						fmt.Fprintf(cmd.ErrOrStderr(), "no entry of job %s's snapshots matches %s\n", b.job.Name, textsafe.String(pattern))
					} else {
						fmt.Fprintf(cmd.ErrOrStderr(), "%s in %s\n", count(found, "entry", "entries"), count(snapshots, "snapshot", "snapshots"))
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&newest, "newest", 0, "search only the N newest snapshots")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line")
	cmd.Flags().StringVar(&restic, "restic", "", "restic executable (default: restic in PATH)")
	return cmd
}

// count is n and the noun for n of a thing.
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
