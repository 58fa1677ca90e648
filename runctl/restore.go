package runctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/catalog"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/putback"
	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/setting"
	"github.com/holdfast-backup/holdfast/store"
)

// RestoreParams is a restore asked for: of Job's snapshot (an id, a unique prefix or "latest")
// into Target on Host, only what Includes match (none: all), over what is there with Overwrite.
// With Wait, a restore no live daemon could take is refused instead of queued. RequestedBy names
// who asked through the dashboard (its credential's label); "" is the CLI.
type RestoreParams struct {
	Job, Target, Snapshot string
	Includes              []string
	Overwrite, Wait       bool
	Host                  string
	RequestedBy           string
	// ToOriginal puts Includes (paths of the snapshot, not patterns) back where they were
	// instead of restoring into Target, which is then "": see model.Restore.ToOriginal.
	// Overwrite then replaces what has changed there since the snapshot.
	ToOriginal bool
}

// RestoreConfig is what Restore needs besides the store: the job's query units (the snapshot
// asked of the repository as the job's user) and the command that probes a target as that user
// (`holdfast probe-target`, as argv).
type RestoreConfig struct {
	Store RestoreStore
	Units jobunit.Config
	Probe []string
}

// browser lists the job's snapshots from this host's catalogs, or with restic in query units.
func (cfg RestoreConfig) browser() catalog.Browser {
	return catalog.Browser{Dir: catalog.DirIn(cfg.Units.StateDir), Restic: jobunit.Browser{Config: cfg.Units}}
}

// RestoreStore is what Restore reads and writes.
type RestoreStore interface {
	JobGet(ctx context.Context, name string) (model.Job, error)
	JobRunnable(ctx context.Context, p store.JobRunnableParams) (model.Runnable, error)
	RunAdmit(ctx context.Context, p store.RunAdmitParams) (model.Run, error)
}

// RefusedError is a request refused as it was asked (a target the job's user may not write, a
// snapshot that is not there): nothing was queued or made. Input reports it.
type RefusedError struct{ Msg string }

func (e *RefusedError) Error() string { return e.Msg }

func refused(format string, args ...any) error {
	return &RefusedError{Msg: setting.Sprintf(format, args...)}
}

// Restored is a restore admitted: its run, why no live daemon can take it yet ("" one can), and
// warnings that did not stop it (with an error, what was left behind).
type Restored struct {
	Started
	Warnings []string
}

// Restore checks everything a restore needs before it admits one, changing nothing on a refusal:
// the job has a repository and may run on p.Host, the target is one the job's user may restore
// into (checked as that user, then by root along its way), and the snapshot exists (asked of the
// repository as that user). The snapshot is recorded by its full id, so a restarted restore
// gives back the same tree, and the target by its device and inode, which every start of the
// restore checks again. `holdfast restore` and the dashboard make the same run through it.
func Restore(ctx context.Context, cfg RestoreConfig, p RestoreParams) (Restored, error) {
	c, err := checkRestore(ctx, cfg, p)
	if err != nil {
		return Restored{}, err
	}
	out := Restored{Started: Started{Unable: c.unable}}
	rs := model.Restore{Target: c.target, Snapshot: c.snapshot, Includes: p.Includes, ToOriginal: p.ToOriginal, Overwrite: p.ToOriginal && p.Overwrite}
	// The totals only make the progress a percentage: without them it still counts. restic's
	// stats size a whole snapshot; a part of it named by paths is summed from its listing; one
	// named by patterns stays unsized.
	var sized bool
	var b, n int64
	switch {
	case p.ToOriginal:
		// What it would do is what decides whether it is worth a run; its files are its size.
		var put, kept, same int
		err = planWrites(ctx, cfg, p, c, func(w Write) error {
			switch w.Action {
			case WriteNew, WriteOver:
				put++
			case WriteKeep:
				kept++
			case WriteSame:
				same++
			}
			if w.Node.Type == "file" {
				n++
				if w.Node.Size != nil {
					b += int64(min(*w.Node.Size, 1<<62))
				}
			}
			return nil
		})
		if err != nil {
			return Restored{}, err
		}
		if put == 0 {
			why := count(same, "entry is", "entries are") + " as the snapshot has it"
			if kept > 0 {
				why = count(kept, "entry has", "entries have") + setting.Sprintf(" changed since the snapshot (give {Restore.Overwrite} to replace what has changed)")
				if same > 0 {
					why += " and " + count(same, "is", "are") + " as the snapshot has it"
				}
			}
			return Restored{}, refused("nothing to put back: %s; nothing was queued", why)
		}
		sized = true
	case len(p.Includes) == 0:
		b, n, err = c.restic.RestoreSize(ctx, c.ej, c.snapshot)
		sized = true
	case literalPaths(p.Includes):
		b, n, err = includedSize(ctx, cfg.browser(), c, p.Includes)
		sized = true
	}
	if sized && err == nil {
		rs.TotalBytes, rs.TotalFiles = &b, &n
	} else if sized {
		out.Warnings = append(out.Warnings, fmt.Sprintf("the restore's size is unknown, its progress shows no percentage: %v", err))
	}
	made, err := c.probe(jobdef.TargetCreate)
	if err != nil {
		return Restored{}, err
	}
	if made.Why != "" {
		return Restored{}, refused("%s; nothing was queued", made.Why)
	}
	undo := func() {
		if made.Created {
			if a, perr := c.probe(jobdef.TargetRemove); perr != nil || a.Why != "" {
				out.Warnings = append(out.Warnings, fmt.Sprintf("the target %s made for the restore was left: %v%s", c.target, perr, a.Why))
			}
		}
	}
	// The target as root finds it now is the one every spawn of the restore must find again.
	target, err := CheckTarget(c.target, c.id, true)
	if err != nil {
		undo()
		return Restored{Warnings: out.Warnings}, err
	}
	rs.TargetID = &model.FileID{Dev: target.Dev, Ino: target.Ino}
	run, err := cfg.Store.RunAdmit(ctx, store.RunAdmitParams{Job: c.job.Name, Trigger: model.TriggerManual, Kind: model.KindRestore, Host: p.Host,
		Restore: rs, RequestedBy: p.RequestedBy})
	if err != nil {
		undo()
		return Restored{Warnings: out.Warnings}, err
	}
	out.Run = run
	return out, nil
}

// literalPaths reports whether includes are all absolute paths with none of a glob's characters.
func literalPaths(includes []string) bool {
	for _, inc := range includes {
		if !strings.HasPrefix(inc, "/") || strings.ContainsAny(inc, `*?[\`) {
			return false
		}
	}
	return true
}

// includedSize is what a restore of the snapshot's includes (literal paths) writes: its regular
// files and their bytes, as a restore's progress counts them.
func includedSize(ctx context.Context, browse catalog.Browser, c restoreCheck, includes []string) (bytes, files int64, err error) {
	for _, inc := range includes {
		err := browse.Ls(ctx, c.job, c.snapshot, path.Clean(inc), true, func(n engine.Node) error {
			if n.Type == "file" {
				files++
				if n.Size != nil {
					bytes += int64(min(*n.Size, 1<<62))
				}
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
	}
	return bytes, files, nil
}

// restoreCheck is what a restore's checks found: the job, its user, why no daemon can take it
// yet, its target (for a restore to the original paths, where its stage goes), the snapshot's
// full id, and how to ask its repository and probe its target.
type restoreCheck struct {
	job      model.Job
	id       jobdef.Identity
	unable   string
	target   string
	snapshot string
	restic   engine.Restic
	ej       engine.Job
	probe    func(jobdef.TargetOp) (jobdef.TargetAnswer, error)
}

// checkRestore makes the checks a restore and its dry run share, changing nothing: the job, the
// host, the target as the job's user and as root, the snapshot in the repository.
func checkRestore(ctx context.Context, cfg RestoreConfig, p RestoreParams) (restoreCheck, error) {
	if p.ToOriginal {
		if p.Target != "" {
			return restoreCheck{}, refused("give {Restore.Target} or {Restore.ToOriginal}, not both")
		}
		if err := checkOriginals(p.Includes); err != nil {
			return restoreCheck{}, err
		}
	} else if err := jobdef.ValidateTarget(p.Target); err != nil {
		return restoreCheck{}, &RefusedError{Msg: err.Error()}
	}
	j, err := cfg.Store.JobGet(ctx, p.Job)
	if err != nil {
		return restoreCheck{}, err
	}
	if !j.HasRepository() {
		return restoreCheck{}, refused("job %s uses the %s engine: only a restic repository can be restored from", j.Name, j.Engine)
	}
	if j.Host != "" && j.Host != p.Host {
		return restoreCheck{}, refused("job %s runs on host %s: restore there (a target is a directory of the host that restores)", j.Name, j.Host)
	}
	c := restoreCheck{job: j}
	able, err := cfg.Store.JobRunnable(ctx, store.JobRunnableParams{Job: j.Name, On: p.Host})
	if err != nil {
		return restoreCheck{}, err
	}
	if able.Host == "" {
		if p.Wait {
			return restoreCheck{}, &UnavailableError{Why: able.Why}
		}
		c.unable = able.Why
	}
	if c.id, err = jobdef.ResolveIdentity(j.User, j.Group); err != nil {
		return restoreCheck{}, &RefusedError{Msg: err.Error()}
	}
	c.target = p.Target
	if p.ToOriginal {
		if c.target, err = originalBase(p.Includes, c.id); err != nil {
			return restoreCheck{}, err
		}
	}
	c.probe = func(op jobdef.TargetOp) (jobdef.TargetAnswer, error) {
		// The stage's directory is not for the restore alone: that it holds more is no matter.
		return jobdef.ProbeTargetAs(cfg.Probe, c.id, jobdef.TargetProbe{Op: op, Path: c.target, Overwrite: p.Overwrite || p.ToOriginal})
	}
	if a, err := c.probe(jobdef.TargetCheck); err != nil {
		return restoreCheck{}, err
	} else if a.Why != "" {
		return restoreCheck{}, refused("%s; nothing was queued", a.Why)
	}
	if _, err := CheckTarget(c.target, c.id, false); err != nil {
		return restoreCheck{}, err
	}
	c.restic, c.ej = jobunit.Restic(cfg.Units, j, false)
	listed, err := c.restic.ListSnapshots(ctx, c.ej)
	if err != nil {
		return restoreCheck{}, err
	}
	if c.snapshot, err = PickSnapshot(listed, j.Name, p.Snapshot); err != nil {
		return restoreCheck{}, err
	}
	return c, nil
}

// What a restore would do at one path (Write.Action).
const (
	WriteNew  = "write"     // nothing is there: it is written
	WriteOver = "overwrite" // it is written over what is there
	// A restore to the original paths only:
	WriteSame  = "same"  // it is there as the snapshot has it: left
	WriteKeep  = "keep"  // it has changed since the snapshot: kept, without Overwrite
	WriteMerge = "merge" // a directory is there: what is in it is judged entry by entry
)

// Write is what a restore would do at one path (RestorePlan): the snapshot's entry, and what is
// there now (Present, with what it is).
type Write struct {
	Path   string      // where it goes: in the target, or its own path
	Node   engine.Node // the snapshot's entry
	Action string      // WriteNew, WriteOver, ...
	// Present is set when something is there already.
	Present       bool
	PresentDir    bool
	PresentSize   int64
	PresentIsLink bool
}

// RestorePlan makes a restore's checks, as Restore does, and instead of admitting it hands each
// entry it would write to each, in the snapshot's order: a dry run, which writes and queues
// nothing. What is in the target now is read by root along a way only root and the job's user
// control (safepath), as the restore's unit would find it; what is at the original paths, as
// the unit would put the entries back (putback.Look). Includes must be absolute paths of the
// snapshot: restic's patterns are its own to match.
func RestorePlan(ctx context.Context, cfg RestoreConfig, p RestoreParams, each func(Write) error) (snapshot string, err error) {
	if !p.ToOriginal {
		for _, inc := range p.Includes {
			if !literalPaths([]string{inc}) {
				return "", refused("--include %q: a dry run lists paths of the snapshot (such as /home/alice/notes.txt), not patterns", inc)
			}
		}
	}
	c, err := checkRestore(ctx, cfg, p)
	if err != nil {
		return "", err
	}
	return c.snapshot, planWrites(ctx, cfg, p, c, each)
}

// planWrites lists what the restore c checked would do, entry by entry (RestorePlan).
func planWrites(ctx context.Context, cfg RestoreConfig, p RestoreParams, c restoreCheck, each func(Write) error) error {
	dirs := []string{"/"}
	if len(p.Includes) > 0 {
		dirs = dirs[:0]
		for _, inc := range p.Includes {
			dirs = append(dirs, path.Clean(inc))
		}
	}
	browse := cfg.browser()
	for _, dir := range dirs {
		seen := dir == "/"
		err := browse.Ls(ctx, c.job, c.snapshot, dir, true, func(n engine.Node) error {
			seen = seen || n.Path == dir
			var w Write
			var err error
			if p.ToOriginal {
				w, err = originalWrite(c.target, n, p.Overwrite)
			} else {
				w, err = targetWrite(c.target, n, int(c.id.UID))
			}
			if err != nil {
				return err
			}
			return each(w)
		})
		if err != nil {
			return err
		}
		if !seen {
			return refused("--include %s: snapshot %.8s holds nothing there", dir, c.snapshot)
		}
	}
	return nil
}

// targetWrite is what a restore into target would do with n.
func targetWrite(target string, n engine.Node, uid int) (Write, error) {
	w := Write{Path: filepath.Join(target, n.Path), Node: n, Action: WriteNew}
	there, err := safepath.Resolve(w.Path, uid)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Refused on the way (a link of another user's): the restore's unit would be too.
		return Write{}, refused("%s: %v", w.Path, err)
	}
	if err == nil {
		w.Present, w.PresentDir, w.PresentSize = true, there.IsDir(), there.Size
		if !(w.PresentDir && n.Type == "dir") {
			w.Action = WriteOver
		}
	}
	return w, nil
}

// originalWrite is what a restore to the original paths, staged in base, would do with n.
func originalWrite(base string, n engine.Node, overwrite bool) (Write, error) {
	w := Write{Path: n.Path, Node: n, Action: WriteNew}
	st, err := putback.Look(base, n.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return w, nil
	case errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
		// Below something that is not a directory now, which is replaced with Overwrite only.
		if !overwrite {
			w.Action = WriteKeep
		}
		return w, nil
	case err != nil:
		return Write{}, fmt.Errorf("look at %s: %w", n.Path, err)
	}
	w.Present, w.PresentSize = true, st.Size
	w.PresentDir = st.Mode&unix.S_IFMT == unix.S_IFDIR
	w.PresentIsLink = st.Mode&unix.S_IFMT == unix.S_IFLNK
	switch {
	case w.PresentDir && n.Type == "dir":
		w.Action = WriteMerge
	case unchanged(&st, n):
		w.Action = WriteSame
	case !overwrite || w.PresentDir:
		// A directory there is never replaced by what is not one.
		w.Action = WriteKeep
	default:
		w.Action = WriteOver
	}
	return w, nil
}

// unchanged reports whether st is the snapshot's n as far as its listing tells: one kind, owner
// and permissions, and a file of one size and modification time.
func unchanged(st *unix.Stat_t, n engine.Node) bool {
	kinds := map[string]uint32{"file": unix.S_IFREG, "dir": unix.S_IFDIR, "symlink": unix.S_IFLNK, "dev": unix.S_IFBLK,
		"chardev": unix.S_IFCHR, "fifo": unix.S_IFIFO, "socket": unix.S_IFSOCK}
	if kinds[n.Type] != st.Mode&unix.S_IFMT || uint32(n.Mode.Perm()) != st.Mode&0o777 || n.UID != st.Uid || n.GID != st.Gid {
		return false
	}
	// restic gives back a link's time too; a link's target the listing does not say.
	sameTime := n.ModTime.Equal(time.Unix(st.Mtim.Unix()))
	if n.Type != "file" {
		return n.Type == "dir" || sameTime
	}
	return n.Size != nil && *n.Size == uint64(st.Size) && sameTime
}

// checkOriginals checks a restore to the original paths' includes as they are asked for: at
// least one, each an absolute clean path (taken as a path: a glob's characters are its name's),
// none inside another.
func checkOriginals(includes []string) error {
	if len(includes) == 0 {
		return refused("{Restore.ToOriginal} puts back paths of the snapshot: give them with {Restore.Includes}, such as /home/alice/notes.txt")
	}
	for _, inc := range includes {
		// A path, not a pattern: its glob characters are escaped for restic (spawn).
		if !strings.HasPrefix(inc, "/") || path.Clean(inc) != inc || inc == "/" || strings.ContainsAny(inc, "\x00\n") {
			return refused("--include %q: {Restore.ToOriginal} puts back paths of the snapshot (such as /home/alice/notes.txt), clean and absolute, not /", inc)
		}
		for _, other := range includes {
			if strings.HasPrefix(inc, other+"/") {
				return refused("--include %s is inside --include %s: give the one", inc, other)
			}
		}
		if n := len(slices.DeleteFunc(slices.Clone(includes), func(o string) bool { return o != inc })); n > 1 {
			return refused("--include %s is given %d times: give it once", inc, n)
		}
	}
	return nil
}

// originalBase is the directory a restore to the original paths stages its tree in: the
// nearest to the includes' directories that the rule of a restore's target admits (safepath;
// for a root job root's alone, since restic writes there as root) and that is on their file
// system, so that each entry goes into place by a rename. Each include's directory must be
// there, reached without a link: the entries are put back into it, never through a link.
func originalBase(includes []string, id jobdef.Identity) (string, error) {
	var dev uint64
	var common string
	for i, inc := range includes {
		dir := filepath.Dir(inc)
		st, err := putback.Look("/", dir)
		if err != nil {
			return "", refused("--include %s: its directory %s: %s; {Restore.ToOriginal} puts entries back into directories that are there, reached without a link (put back the directory, or restore with {Restore.Target})",
				inc, dir, safepath.Cause(err))
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return "", refused("--include %s: %s is %s, not a directory", inc, dir, putback.Describe(&st))
		}
		switch {
		case i == 0:
			dev, common = st.Dev, dir
		case st.Dev != dev:
			return "", refused("--include %s is on another file system than %s: put them back one restore at a time", inc, includes[0])
		default:
			for common != "/" && dir != common && !strings.HasPrefix(dir, common+"/") {
				common = filepath.Dir(common)
			}
		}
	}
	// Not / itself: the restore's unit would have the whole file system writable.
	for d := common; d != "/"; d = filepath.Dir(d) {
		n, err := safepath.Writable(d, int(id.UID))
		// Closed to others, for a user too: whoever else may write it could swap the stage.
		if err == nil && n.IsDir() && n.Dev == dev && (id.UID == 0 || n.UID == id.UID) && n.Mode&0o022 == 0 {
			return n.Path, nil
		}
	}
	who := "root alone"
	if id.UID != 0 {
		who = "user " + id.String() + " owns and no one else may change"
	}
	return "", refused("no directory below / that %s is on the way to %s, on its file system: the restore has nowhere to stage it; put back fewer paths at a time (of one directory), or restore with {Restore.Target}",
		who, common)
}

// CheckTarget holds a restore's target to the rule its unit's spawn holds it to (safepath, for
// the job's user): no link but root's or the user's on the way, no directory on the way that
// anyone else may change, and the target itself root's or the user's and closed to others. A
// target that does not exist yet (exists false) is checked by the directory it will be made in.
// A root job's restore writes as root with every file's owner and mode, so a target any other
// user controls would let that user redirect root's writes.
func CheckTarget(target string, id jobdef.Identity, exists bool) (safepath.Node, error) {
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
	return safepath.Node{}, refused("target %s refused: %v; restore into a directory that only %s control; nothing was queued", target, err, who)
}

// PickSnapshot resolves which snapshot to restore: "latest" is the job's newest (by its tag), an
// id or a prefix must name exactly one snapshot of the repository.
func PickSnapshot(listed []engine.Snapshot, jobName, want string) (string, error) {
	if want == "latest" {
		var newest *engine.Snapshot
		for i, s := range listed {
			if slices.Contains(s.Tags, engine.JobTag(jobName)) && (newest == nil || s.Time.After(newest.Time)) {
				newest = &listed[i]
			}
		}
		if newest == nil {
			return "", refused("job %s has no snapshot in its repository yet: run a backup first, or name a snapshot with --snapshot", jobName)
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
		return "", refused("no snapshot %s in the repository of job %s: see holdfast snapshot list %s --refresh", want, jobName, jobName)
	case 1:
		return found[0], nil
	}
	return "", refused("snapshot %s is ambiguous in the repository of job %s (%d match): give more of its id", want, jobName, len(found))
}

// count is n things, in a message: "1 entry has", "2 entries have".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
