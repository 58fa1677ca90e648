// Package recovery brings a database holdfast rebuilt after a loss (holdfast recover) back to
// what this host and the repositories show. The jobs are in the database already, from the
// operator's configuration or a restored dump of the database. Run then, for the jobs this host
// may run:
//
//   - lists each job's repository into the snapshot inventory (inventory.List), as the job's
//     user, so that snapshots newer than a dump are known;
//   - ends each run the database holds live, by evidence and never by a restart: a unit that is
//     still running, an exit marker that is still there or a run whose time has not come is left
//     to the daemon, which follows them; a run whose snapshot is in its repository succeeded;
//     any other ends failed, with why;
//   - records each job's newest snapshot as its last success (store.RunRecord), with the
//     figures restic kept in it, unless the database knows a later success, and its oldest
//     as when the job existed by (the watch expects its runs from its creation on);
//   - re-bases each account of those jobs on what its local repositories measure
//     (store.AccountRebase): one recovered entry per account, which says what was measured.
//
// It runs while no daemon does (the caller checks that no host holds its lease), and may be run
// again: what it recorded once it does not record twice.
package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	RunRecord(ctx context.Context, p store.RunRecordParams) (bool, error)
	RunClose(ctx context.Context, p store.RunCloseParams) (bool, error)
	AccountRebase(ctx context.Context, p store.AccountRebaseParams) (model.LedgerEntry, error)
}

// Units is what a recovery asks this host's systemd: whether a run's unit is still running.
type Units interface {
	Alive(ctx context.Context, name string) (bool, systemd.State, error)
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

// Complete reports whether every job's repository was read: a recovery that is not complete
// leaves jobs without their snapshots, and may be run again.
func (r Report) Complete() bool {
	for _, j := range r.Jobs {
		if j.Error != "" {
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
}

// AccountReport is one account's re-basing.
type AccountReport struct {
	Account    string   `json:"account"`
	Measured   int64    `json:"measured_bytes"`
	Charged    int64    `json:"charged_bytes"` // the recovered entry's bytes
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

	// Each job's repository as restic lists it now; a run's snapshot is found by its tag.
	listed := map[string][]model.Snapshot{}
	summaries := map[string]*engine.SnapshotSummary{}
	byRun := map[uuid.UUID]model.Snapshot{}
	for _, j := range jobs {
		if !j.HasRepository() {
			continue
		}
		jr := JobReport{Job: j.Name}
		l, added, err := inventory.List(ctx, cfg.Inventory, j)
		if err != nil {
			jr.Error = err.Error()
			rep.Jobs = append(rep.Jobs, jr)
			continue
		}
		jr.Added = added
		for _, s := range l {
			snap := inventory.Listed(j.Repository, s)
			summaries[s.ID] = s.Summary
			if snap.RunID != nil {
				byRun[*snap.RunID] = snap
			}
			if snap.JobName == j.Name {
				listed[j.Name] = append(listed[j.Name], snap)
			}
		}
		jr.Snapshots = len(listed[j.Name])
		rep.Jobs = append(rep.Jobs, jr)
	}

	// The live runs first: a run closed by its snapshot is the job's last success, and none is
	// recorded twice.
	live, err := cfg.Store.RunListLive(ctx, "")
	if err != nil {
		return rep, err
	}
	for _, l := range live {
		rr, err := closeLive(ctx, cfg, l, byRun, summaries)
		if err != nil {
			return rep, err
		}
		rep.Runs = append(rep.Runs, rr)
	}

	for i := range rep.Jobs {
		jr := &rep.Jobs[i]
		snaps := listed[jr.Job]
		if jr.Error != "" || len(snaps) == 0 {
			continue
		}
		newest := slices.MaxFunc(snaps, func(a, b model.Snapshot) int { return a.Time.Compare(b.Time) })
		oldest := slices.MinFunc(snaps, func(a, b model.Snapshot) int { return a.Time.Compare(b.Time) })
		p := store.RunRecordParams{Job: jr.Job, SnapshotID: newest.ID, StartedAt: newest.Time, FinishedAt: newest.Time, Oldest: oldest.Time,
			Reason: fmt.Sprintf("recovered by holdfast recover from snapshot %.12s, the job's newest in its repository", newest.ID)}
		figures(summaries[newest.ID], &p.StartedAt, &p.FinishedAt, &p.BytesAdded, &p.BytesProcessed, &p.FilesProcessed)
		// A snapshot without a run tag was not made by a holdfast run: its id is made from the
		// snapshot's, so that a second recovery finds it recorded.
		p.ID = uuid.NewSHA1(uuid.NameSpaceOID, []byte("holdfast-snapshot:"+newest.ID))
		if newest.RunID != nil {
			p.ID = *newest.RunID
		}
		recorded, err := cfg.Store.RunRecord(ctx, p)
		if err != nil {
			return rep, err
		}
		jr.Snapshot = newest.ID
		if recorded {
			jr.Recorded, jr.LastSuccess = &p.ID, &p.FinishedAt
		}
	}

	accounts, err := rebase(ctx, cfg, jobs)
	rep.Accounts = accounts
	return rep, err
}

// figures sets a run's start, end and figures from what restic recorded of its backup, if it
// did (restic 0.17 and later). The start and end are taken only when the backup started at the
// snapshot's time, as a backup holdfast runs does: one given another time (restic backup --time)
// ran at another moment than the one it stands for.
func figures(s *engine.SnapshotSummary, start, end *time.Time, added, processed, files **int64) {
	if s == nil {
		return
	}
	if d := s.BackupStart.Sub(*start); d > -time.Second && d < time.Second && !s.BackupEnd.Before(s.BackupStart) {
		*start, *end = s.BackupStart, s.BackupEnd
	}
	*added, *processed, *files = &s.DataAdded, &s.TotalBytesProcessed, &s.TotalFilesProcessed
}

// closeLive ends a run the database holds live, by the evidence there is, or leaves it to the
// daemon when its unit or its exit marker is still there.
func closeLive(ctx context.Context, cfg Config, l model.LiveRun, byRun map[uuid.UUID]model.Snapshot,
	summaries map[string]*engine.SnapshotSummary) (RunReport, error) {
	r, a := l.Run, l.Attempt
	rr := RunReport{Run: r.ID, Job: r.JobName, Kind: string(r.Kind)}
	if a.Host != "" && a.Host != cfg.Host {
		rr.Reason = fmt.Sprintf("left live: its attempt %d is on host %s, whose systemd only holdfast recover there can ask", a.No, a.Host)
		return rr, nil
	}
	// Admitted ahead of its time, or armed for it: it has not run yet, and starting it then is
	// no second start.
	if r.NotBefore != nil && r.NotBefore.After(l.Now()) {
		rr.Reason = "left live: its time, " + r.NotBefore.UTC().Format(time.RFC3339) + ", has not come, and the daemon starts it then"
		return rr, nil
	}
	unit := cmp.Or(a.Unit, systemd.UnitName(r.JobName, r.ID, a.No))
	alive, _, err := cfg.Units.Alive(ctx, unit)
	if err != nil {
		return rr, fmt.Errorf("ask systemd about run %s: %w", r.ID, err)
	}
	if alive {
		rr.Reason = fmt.Sprintf("left live: its unit %s is running, and the daemon follows it", unit)
		return rr, nil
	}
	if _, err := systemd.ReadMarker(cfg.StateDir, r.ID, a.No); !errors.Is(err, systemd.ErrNoMarker) {
		rr.Reason = "left live: its exit marker is there, and the daemon ends the run from it"
		return rr, nil
	}
	p := store.RunCloseParams{ID: r.ID, Status: model.StatusFailed,
		Reason: "closed by holdfast recover: the database was restored while the run was live, and its unit is gone with no exit marker " +
			"and no snapshot of it in its repository; it is not run again (holdfast run start " + r.JobName + " does)"}
	if snap, ok := byRun[r.ID]; ok && r.Kind == model.KindBackup {
		p.Status, p.SnapshotID = model.StatusSucceeded, snap.ID
		p.Reason = fmt.Sprintf("closed by holdfast recover: its snapshot %.12s is in the repository", snap.ID)
		start, end := snap.Time, snap.Time
		figures(summaries[snap.ID], &start, &end, &p.BytesAdded, &p.BytesProcessed, &p.FilesProcessed)
		p.FinishedAt = &end
	}
	closed, err := cfg.Store.RunClose(ctx, p)
	if err != nil {
		return rr, err
	}
	if !closed {
		rr.Reason = "left as it is: it ended meanwhile"
		return rr, nil
	}
	rr.Status, rr.Reason = p.Status, p.Reason
	return rr, nil
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
		slices.Sort(repos[name])
		var parts []string
		for _, repo := range repos[name] {
			size, err := cfg.Measure(repo)
			if errors.Is(err, ledger.ErrNotLocal) {
				ar.Unmeasured = append(ar.Unmeasured, repo)
				continue
			}
			if err != nil {
				return out, fmt.Errorf("account %s: %w", name, err)
			}
			ar.Measured += size
			parts = append(parts, fmt.Sprintf("%s %s", repo, ledger.FormatSize(size)))
		}
		note := "repositories " + strings.Join(parts, ", ")
		if len(parts) == 0 {
			note = "no local repository"
		}
		if len(ar.Unmeasured) > 0 {
			note += "; not measured, not local: " + strings.Join(ar.Unmeasured, ", ")
		}
		e, err := cfg.Store.AccountRebase(ctx, store.AccountRebaseParams{Account: name, Measured: ar.Measured, Note: note, Actor: cfg.Actor})
		if err != nil {
			return out, err
		}
		ar.Charged, ar.Note = e.Bytes, e.Note
		out = append(out, ar)
	}
	return out, nil
}
