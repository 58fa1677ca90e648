// Package recovery brings a database holdfast rebuilt after a loss (holdfast recover) back to
// what this host and the repositories show. The jobs are in the database already, from the
// operator's configuration or a restored dump of the database. Run then, for the jobs this host
// may run:
//
//   - lists each job's repository into the snapshot inventory (inventory.List), as the job's
//     user, so that snapshots newer than a dump are known; a snapshot counts for its own job
//     only, the repository being its user's to write;
//   - ends each run this host's daemon would reconcile by evidence, never for want of it
//     (closeLive, its table read top to bottom, over holdfast's units and the exit markers,
//     each read once: evidence.readHost): a unit of the run still there, its exit
//     marker left, a time to come or no start at all leave it to the daemon; a backup whose
//     snapshot is in its job's repository succeeded; anything else failed, not run again;
//   - records each job's newest snapshot as its last success (store.RunRecord), with the
//     figures restic kept in it, unless the database knows a later success, and its oldest
//     as when the job existed by (the watch expects its runs from its creation on);
//   - re-bases each account of those jobs on what its local repositories measure
//     (store.AccountRebase): one recovered entry per account, which says what was measured.
//
// It runs while no daemon does (the caller holds store.LockRecovery), and may be run again:
// what it recorded once it does not record twice.
package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/inventory"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// Store is what a recovery reads and writes. The CLI gives its store.Store.
type Store interface {
	inventory.Store
	JobList(ctx context.Context) ([]model.Job, error)
	JobListForHost(ctx context.Context, host string) ([]model.Job, error)
	RunListLive(ctx context.Context, host string) ([]model.LiveRun, error)
	RunRecord(ctx context.Context, p store.RunRecordParams) (*uuid.UUID, error)
	RunClose(ctx context.Context, p store.RunCloseParams) (bool, error)
	AccountRebase(ctx context.Context, p store.AccountRebaseParams) (model.LedgerEntry, error)
}

// Units is what a recovery asks this host's systemd: holdfast's units, by a pattern.
type Units interface {
	StatesMatching(ctx context.Context, pattern string) (map[string]systemd.State, error)
}

// Config is what a recovery needs.
type Config struct {
	Store Store
	// Inventory lists the repositories; its Store is set to Store.
	Inventory inventory.Config
	Units     Units
	// Host is this host's name among holdfast's hosts: the jobs it may run are recovered, and
	// the live runs whose attempt it held.
	Host string
	// StateDir is where the units' exit markers are (the daemon's state directory).
	StateDir string
	// Actor is who the ledger's entries name.
	Actor string
	// Measure is the size of a local repository. Default ledger.RepoSize.
	Measure func(repository string) (int64, error)
}

// Validate checks that cfg names what a recovery needs and fills in its defaults.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("recovery: no store")
	case c.Units == nil:
		return errors.New("recovery: no systemd")
	case c.Host == "":
		return errors.New("recovery: no host name")
	case c.StateDir == "":
		return errors.New("recovery: no state directory")
	}
	c.Inventory.Store = c.Store
	if c.Measure == nil {
		c.Measure = ledger.RepoSize
	}
	c.Actor = cmp.Or(c.Actor, "holdfast recover")
	return c.Inventory.Validate()
}

// Report is what a recovery found and did.
type Report struct {
	Jobs     []JobReport     `json:"jobs"`
	Runs     []RunReport     `json:"live_runs"`
	Accounts []AccountReport `json:"accounts"`
	// Elsewhere are the jobs pinned to other hosts: holdfast recover there recovers them.
	Elsewhere []string `json:"elsewhere"`
}

// Complete reports whether every job's repository was read and no run waits for evidence: a
// recovery that is not complete leaves jobs without their snapshots or runs live, and may be
// run again.
func (r Report) Complete() bool {
	for _, j := range r.Jobs {
		if j.Error != "" {
			return false
		}
	}
	for _, rr := range r.Runs {
		if rr.Pending {
			return false
		}
	}
	return true
}

// JobReport is one job's recovery.
type JobReport struct {
	Job       string `json:"job"`
	Snapshots int    `json:"snapshots"`       // the job's snapshots in its repository
	Added     int    `json:"added_snapshots"` // snapshots of the repository the inventory did not know
	// Recorded is the run recorded from the job's newest snapshot; nil if none was (no
	// snapshot, or the database knows a later success).
	Recorded    *uuid.UUID `json:"recorded_run"`
	Snapshot    string     `json:"snapshot,omitempty"` // the newest snapshot of the job
	LastSuccess *time.Time `json:"last_success_at"`    // its end, as recorded
	Error       string     `json:"error,omitempty"`    // why the repository could not be read
}

// RunReport is what became of a run the database held live.
type RunReport struct {
	Run    uuid.UUID `json:"run"`
	Job    string    `json:"job"`
	Kind   string    `json:"kind"`
	Status string    `json:"status"` // the status it was ended with; "" if it was left live
	Reason string    `json:"reason"`
	// Pending: it was left live for want of evidence that a later recovery may find.
	Pending bool `json:"pending,omitempty"`
}

// AccountReport is one account's re-basing.
type AccountReport struct {
	Account    string   `json:"account"`
	Measured   int64    `json:"measured_bytes"` // what its repositories measured here
	Charged    int64    `json:"charged_bytes"`  // the recovered entry's bytes
	Note       string   `json:"note"`
	Unmeasured []string `json:"unmeasured,omitempty"` // repositories that are not local directories
}

// Run recovers the jobs this host may run (see the package comment).
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	var rep Report
	all, err := cfg.Store.JobList(ctx)
	if err != nil {
		return rep, err
	}
	jobs, err := cfg.Store.JobListForHost(ctx, cfg.Host)
	if err != nil {
		return rep, err
	}
	here := map[string]bool{}
	for _, j := range jobs {
		here[j.Name] = true
	}
	for _, j := range all {
		if !here[j.Name] {
			rep.Elsewhere = append(rep.Elsewhere, j.Name)
		}
	}

	// Each job's repository as restic lists it now. The repository is the job's user's to
	// write: a snapshot counts for its own job only (its job tag, in that job's repository),
	// never for another job's run its tags name, and its figures are its own.
	ev := evidence{snaps: map[string][]listed{}, unread: map[string]string{}, pinnedHere: map[string]bool{}}
	for _, j := range jobs {
		ev.pinnedHere[j.Name] = j.Host == cfg.Host
		if !j.HasRepository() {
			continue
		}
		jr := JobReport{Job: j.Name}
		l, added, err := inventory.List(ctx, cfg.Inventory, j)
		if err != nil {
			jr.Error = err.Error()
			ev.unread[j.Name] = jr.Error
			rep.Jobs = append(rep.Jobs, jr)
			continue
		}
		jr.Added = added
		for _, s := range l {
			if snap := inventory.Listed(j.Repository, s); snap.JobName == j.Name {
				ev.snaps[j.Name] = append(ev.snaps[j.Name], listed{snap, s.Summary})
			}
		}
		jr.Snapshots = len(ev.snaps[j.Name])
		rep.Jobs = append(rep.Jobs, jr)
	}

	// The live runs first: a run closed by its snapshot is the job's last success, and none is
	// recorded twice.
	live, err := cfg.Store.RunListLive(ctx, cfg.Host)
	if err != nil {
		return rep, err
	}
	if len(live) > 0 {
		if err := ev.readHost(ctx, cfg); err != nil {
			return rep, err
		}
	}
	for _, l := range live {
		rr, err := closeLive(ctx, cfg, l, ev)
		if err != nil {
			return rep, err
		}
		rep.Runs = append(rep.Runs, rr)
	}

	// A snapshot dated later than now was not made by a backup that has run: its time is its
	// writer's word, and it would hold off the job's overdue alert for as long.
	now := time.Now().Add(clockSkew)
	for i := range rep.Jobs {
		jr := &rep.Jobs[i]
		var snaps []listed
		for _, l := range ev.snaps[jr.Job] {
			if !l.Time.After(now) {
				snaps = append(snaps, l)
			}
		}
		if jr.Error != "" || len(snaps) == 0 {
			continue
		}
		newest := slices.MaxFunc(snaps, func(a, b listed) int { return a.Time.Compare(b.Time) })
		oldest := slices.MinFunc(snaps, func(a, b listed) int { return a.Time.Compare(b.Time) })
		p := store.RunRecordParams{Job: jr.Job, SnapshotID: newest.ID, StartedAt: newest.Time, FinishedAt: newest.Time, Oldest: oldest.Time,
			Reason: fmt.Sprintf("recovered by holdfast recover from snapshot %.12s, the job's newest in its repository", newest.ID)}
		figures(newest.summary, now, &p.StartedAt, &p.FinishedAt, &p.BytesAdded, &p.BytesProcessed, &p.FilesProcessed)
		// A snapshot without a run tag was not made by a holdfast run, and a tag may name a
		// run of another job: the run's id is then made from the snapshot's, so that a second
		// recovery finds it recorded.
		p.OwnID = uuid.NewSHA1(uuid.NameSpaceOID, []byte("holdfast-snapshot:"+newest.Repository+":"+newest.ID))
		p.ID = p.OwnID
		if newest.RunID != nil {
			p.ID = *newest.RunID
		}
		id, err := cfg.Store.RunRecord(ctx, p)
		if err != nil {
			return rep, err
		}
		jr.Snapshot = newest.ID
		if id != nil {
			jr.Recorded, jr.LastSuccess = id, &p.FinishedAt
		}
	}

	accounts, err := rebase(ctx, cfg, jobs)
	rep.Accounts = accounts
	return rep, err
}

// clockSkew is how far a snapshot's time may be ahead of this host's clock (the host that made
// it may be another) and still be taken for a backup that has run.
const clockSkew = 5 * time.Minute

// listed is a snapshot of a job as its repository listed it, with what restic kept of its
// backup (restic 0.17 and later).
type listed struct {
	model.Snapshot
	summary *engine.SnapshotSummary
}

// evidence is what the repositories showed: each job's snapshots, and the jobs whose repository
// could not be read, with why; and what this host shows of the live runs: holdfast's units, and
// the attempts whose exit marker is there, by run.
type evidence struct {
	snaps  map[string][]listed
	unread map[string]string
	// pinnedHere are the jobs only this host runs.
	pinnedHere map[string]bool
	units      map[string]systemd.State
	markers    map[uuid.UUID][]int
	// noMarkers: the state directory has no markers directory.
	noMarkers bool
}

// readHost reads, once for every live run, holdfast's units at this host's systemd and the exit
// markers in the state directory, whatever they say.
func (e *evidence) readHost(ctx context.Context, cfg Config) error {
	units, err := cfg.Units.StatesMatching(ctx, systemd.UnitPattern)
	if err != nil {
		return fmt.Errorf("ask systemd about holdfast's units: %w", err)
	}
	e.units, e.markers = units, map[uuid.UUID][]int{}
	entries, err := os.ReadDir(filepath.Dir(systemd.MarkerPath(cfg.StateDir, uuid.Nil, 1)))
	if errors.Is(err, fs.ErrNotExist) {
		e.noMarkers = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the exit markers: %w (is %s the daemon's state directory? --state-dir)", err, cfg.StateDir)
	}
	for _, d := range entries {
		if run, n, ok := systemd.ParseMarkerName(d.Name()); ok {
			e.markers[run] = append(e.markers[run], n)
		}
	}
	return nil
}

// snapshotOf is the snapshot of job that carries run's tag, if its repository has one.
func (e evidence) snapshotOf(job string, run uuid.UUID) (listed, bool) {
	for _, l := range e.snaps[job] {
		if l.RunID != nil && *l.RunID == run {
			return l, true
		}
	}
	return listed{}, false
}

// figures sets a run's start, end and figures from what restic recorded of its backup, if it
// did (restic 0.17 and later). The start and end are taken only when the backup started at the
// snapshot's time, as a backup holdfast runs does (one given another time, restic backup
// --time, ran at another moment than the one it stands for), and ended before now; a figure
// below zero is none.
func figures(s *engine.SnapshotSummary, now time.Time, start, end *time.Time, added, processed, files **int64) {
	if s == nil {
		return
	}
	if d := s.BackupStart.Sub(*start); d > -time.Second && d < time.Second && !s.BackupEnd.Before(s.BackupStart) && !s.BackupEnd.After(now) {
		*start, *end = s.BackupStart, s.BackupEnd
	}
	for _, f := range []struct {
		v   int64
		out **int64
	}{{s.DataAdded, added}, {s.TotalBytesProcessed, processed}, {s.TotalFilesProcessed, files}} {
		if f.v >= 0 {
			v := f.v
			*f.out = &v
		}
	}
}

// closeLive ends a run the database holds live by the evidence there is (see the package
// comment), or leaves it to a daemon. Read top to bottom; the first row that applies decides.
func closeLive(ctx context.Context, cfg Config, l model.LiveRun, ev evidence) (RunReport, error) {
	r, a := l.Run, l.Attempt
	rr := RunReport{Run: r.ID, Job: r.JobName, Kind: string(r.Kind)}
	leave := func(why string) (RunReport, error) {
		rr.Reason = "left live: " + why
		return rr, nil
	}
	if a.Host != "" && a.Host != cfg.Host {
		return leave(fmt.Sprintf("its attempt %d is on host %s, whose systemd only holdfast recover there can ask", a.No, a.Host))
	}
	if why, ok := ev.unread[r.JobName]; ok {
		rr.Pending = true
		return leave("its job's repository could not be read (" + why + "); run holdfast recover again once it can")
	}
	// Admitted ahead of its time, or armed for it: it has not run yet, and starting it then is
	// no second start.
	if r.NotBefore != nil && r.NotBefore.After(l.Now()) {
		return leave("its time, " + r.NotBefore.UTC().Format(time.RFC3339) + ", has not come, and the daemon starts it then")
	}
	// Every unit and marker of the run, of this attempt and of any other: the run may have
	// gone on after the database the recovery started from was taken.
	for name, st := range ev.units {
		n, ok := attemptOf(name, r.ID)
		switch {
		case !ok || !st.Alive():
		case n == a.No:
			return leave(fmt.Sprintf("its unit %s is there (%s), and the daemon follows it", name, st.ActiveState))
		default:
			rr.Pending = true
			return leave(fmt.Sprintf("its attempt %d's unit %s runs, which the database does not hold live: run holdfast recover again once it ended", n, name))
		}
	}
	// A state directory without markers holds none, unless the run was spawned: then it is not
	// the daemon's state directory.
	if ev.noMarkers && (a.Unit != "" || a.SpawnClaimedAt != nil) {
		return rr, fmt.Errorf("run %s was started, but %s has no exit markers: is it the daemon's state directory? (--state-dir)", r.ID, cfg.StateDir)
	}
	markers := ev.markers[r.ID]
	later := slices.Max(append(markers, 0)) > a.No
	p := store.RunCloseParams{ID: r.ID, Status: model.StatusFailed}
	snap, found := ev.snapshotOf(r.JobName, r.ID)
	switch {
	// Its own marker says how it ended, partial included, and the daemon settles it.
	case slices.Contains(markers, a.No) && !later:
		return leave("its exit marker is there, and the daemon ends the run from it")
	case found && r.Kind == model.KindBackup:
		p.Status, p.SnapshotID = model.StatusSucceeded, snap.ID
		p.Reason = fmt.Sprintf("closed by holdfast recover: its snapshot %.12s is in the repository", snap.ID)
		start, end := snap.Time, snap.Time
		figures(snap.summary, time.Now().Add(clockSkew), &start, &end, &p.BytesAdded, &p.BytesProcessed, &p.FilesProcessed)
		p.FinishedAt = &end
	case later:
		p.Reason = fmt.Sprintf("closed by holdfast recover: the run went on in attempt %d, which the database does not hold, and no snapshot of it is in its repository; it is not run again (holdfast run start %s does)",
			slices.Max(markers), r.JobName)
	// Never started as far as anything here shows, by a job only this host runs: starting it
	// is its first start. One that another host may have taken is not run again.
	case a.Unit == "" && a.SpawnClaimedAt == nil && ev.pinnedHere[r.JobName]:
		return leave("it was never started (no unit, no exit marker, no snapshot of it), and the daemon starts it")
	case a.Unit == "" && a.SpawnClaimedAt == nil:
		p.Reason = fmt.Sprintf("closed by holdfast recover: it was not started here, and its job is any host's, so another host may have run it after the database was taken; it is not run again (holdfast run start %s does)", r.JobName)
	default:
		p.Reason = fmt.Sprintf("closed by holdfast recover: its unit is gone, with no exit marker and no snapshot of it in its repository; it is not run again (holdfast run start %s does)", r.JobName)
	}
	switch {
	case p.Status != model.StatusFailed:
	case r.StopRequestedAt != nil:
		p.Status, p.Reason = model.StatusStopped, "stopped; "+p.Reason
	case r.PausedReason != "":
		p.Status, p.Reason = model.StatusPaused, "paused: "+r.PausedReason+"; "+p.Reason
	}
	closed, err := cfg.Store.RunClose(ctx, p)
	if err != nil {
		return rr, err
	}
	if !closed {
		return leave("it ended meanwhile")
	}
	rr.Status, rr.Reason = p.Status, p.Reason
	return rr, nil
}

// attemptOf is the attempt a unit of run is named for (systemd.UnitName, or its timer).
func attemptOf(unit string, run uuid.UUID) (int, bool) {
	_, rest, ok := strings.Cut(unit, run.String()+"-a")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSuffix(rest, ".service"), ".timer"))
	return n, err == nil && n > 0
}

// rebase re-bases each account of jobs on its local repositories, each repository counted
// once, for the first account (by name) whose job writes it.
func rebase(ctx context.Context, cfg Config, jobs []model.Job) ([]AccountReport, error) {
	repos := map[string][]string{}
	owner := map[string]string{}
	for _, j := range jobs {
		acct := cmp.Or(j.Account, store.DefaultAccount)
		if _, ok := repos[acct]; !ok {
			repos[acct] = nil
		}
		if !j.HasRepository() {
			continue
		}
		if o, ok := owner[j.Repository]; !ok || acct < o {
			owner[j.Repository] = acct
		}
	}
	for repo, acct := range owner {
		repos[acct] = append(repos[acct], repo)
	}
	names := make([]string, 0, len(repos))
	for a := range repos {
		names = append(names, a)
	}
	slices.Sort(names)
	var out []AccountReport
	for _, name := range names {
		ar := AccountReport{Account: name}
		measured := map[string]int64{}
		slices.Sort(repos[name])
		for _, repo := range repos[name] {
			size, err := cfg.Measure(repo)
			if errors.Is(err, ledger.ErrNotLocal) {
				ar.Unmeasured = append(ar.Unmeasured, repo)
				continue
			}
			if err != nil {
				return out, fmt.Errorf("account %s: %w", name, err)
			}
			measured[repo] = size
			ar.Measured += size
		}
		e, err := cfg.Store.AccountRebase(ctx, store.AccountRebaseParams{Account: name, Measured: measured, Unmeasured: ar.Unmeasured, Actor: cfg.Actor})
		if err != nil {
			return out, err
		}
		ar.Charged, ar.Note = e.Bytes, e.Note
		out = append(out, ar)
	}
	return out, nil
}
