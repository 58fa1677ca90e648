package storetest

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// LeaseOpts says what Lease takes; the zero value is host h1's lease for holder-1, for an hour.
type LeaseOpts struct {
	Host     string        // "" is h1
	Holder   string        // "" is holder-1
	Duration time.Duration // 0 is an hour
}

// Lease takes a host's lease for a holder as opts say, at once, from whichever daemon held it
// (every other holder is gone), with a takeover grace of a second.
func Lease(t testing.TB, st *store.Store, opts *LeaseOpts) model.Lease {
	t.Helper()
	o := cmp.Or(opts, &LeaseOpts{})
	host, holder := cmp.Or(o.Host, "h1"), cmp.Or(o.Holder, "holder-1")
	l, err := st.LeaseAcquire(context.Background(), store.LeaseAcquireParams{Host: host, Holder: holder, Duration: cmp.Or(o.Duration, time.Hour),
		Grace: time.Second, HolderGone: func(string) bool { return true }})
	if err != nil {
		t.Fatalf("lease of %s for %s: %v", host, holder, err)
	}
	return l
}

var jobSeq atomic.Int64

// JobOpts says what Job makes; the zero value is a restic backup job of any host.
type JobOpts struct {
	Name       string // "" is a name of its own
	Engine     string // "" is restic; "command" runs /bin/true
	Repository string // "" is a repository of the job's own (a restic job)
	Host       string // the host the job is pinned to; "" is any host
	Account    string // "" is the default account
	MaxAdded   *int64
	Catalog    bool // its snapshots are catalogued (Job.Backup.Catalog)
	// Prune is where its runs that delete run (append-only, a pruning host).
	Prune model.PruneSettings
}

// Job creates a job.
func Job(t testing.TB, st *store.Store, opts *JobOpts) model.Job {
	t.Helper()
	o := cmp.Or(opts, &JobOpts{})
	name := cmp.Or(o.Name, fmt.Sprintf("job-%d", jobSeq.Add(1)))
	j := model.Job{Name: name, Engine: cmp.Or(o.Engine, "restic"), Host: o.Host, Account: o.Account, MaxAdded: o.MaxAdded}
	j.Backup.Catalog, j.Prune = o.Catalog, o.Prune
	if j.Engine == "command" {
		j.Command = []string{"/bin/true"}
	} else {
		j.Repository, j.PasswordFile, j.Paths = cmp.Or(o.Repository, "/srv/backup/"+name), "/pw", []string{"/data"}
	}
	j, err := st.JobCreate(context.Background(), j)
	if err != nil {
		t.Fatalf("create job %s: %v", name, err)
	}
	return j
}

// RunOpts says what Run makes; the zero value is a queued manual backup of a new job, its first
// attempt not claimed.
type RunOpts struct {
	Job     string     // the job's name; "" is a new job made as JobOpts says
	JobOpts *JobOpts   // for the new job
	Kind    model.Kind // "" is a backup
	Trigger string     // "" is manual
	// Claim, if set, takes the run on as the daemon holding that lease does: it claims the
	// spawn of attempt 1 with its derived unit (Unit), and with Started it marks the attempt
	// started on the database's clock.
	Claim   *model.Lease
	Started bool
}

// Run admits a run and takes it as far as opts say, and returns it as the store reads it then.
func Run(t testing.TB, st *store.Store, opts *RunOpts) model.Run {
	t.Helper()
	ctx := context.Background()
	o := cmp.Or(opts, &RunOpts{})
	job := o.Job
	if job == "" {
		job = Job(t, st, o.JobOpts).Name
	}
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: job, Trigger: cmp.Or(o.Trigger, model.TriggerManual), Kind: cmp.Or(o.Kind, model.KindBackup)})
	if err != nil {
		t.Fatalf("admit a run of %s: %v", job, err)
	}
	if o.Claim == nil {
		if o.Started {
			t.Fatal("storetest.Run: Started needs Claim")
		}
		return run
	}
	claimed, blocked, err := st.AttemptClaimSpawn(ctx, *o.Claim, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: Unit(run, 1)})
	if err != nil || !claimed {
		t.Fatalf("claim the spawn of run %s: claimed=%v blocked=%q err=%v", run.ID, claimed, blocked, err)
	}
	// As a spawn does before it starts the unit: the hold of a first backup, from its paths.
	if _, err := st.AttemptHoldSize(ctx, *o.Claim, store.AttemptHoldSizeParams{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Source: Source}); err != nil {
		t.Fatal(err)
	}
	if o.Started {
		if err := st.AttemptMarkStarted(ctx, *o.Claim, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, At: time.Time{}}); err != nil {
			t.Fatal(err)
		}
	}
	if run, err = st.RunGet(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	if o.Started && run.Status != model.StatusRunning {
		t.Fatalf("run %s marked started is %s", run.ID, run.Status)
	}
	return run
}

// Source is what the paths of a job of the factory hold, as a spawn would measure them: none
// are on this machine, so the budget is the default estimate.
var Source = ledger.Source{Unmeasured: "storetest: the job's paths are not on this machine"}

// Unit is the unit name derived from the run's attempt, the one a claim must record.
func Unit(run model.Run, attempt int) string { return systemd.UnitName(run.JobName, run.ID, attempt) }
