package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/store"
)

// spawnFacts reads what decides whether a queued attempt may be spawned now into f, and returns
// its job. jobs are the jobs as read for this pass. Nothing else is read about a removed job.
func (r *Reconciler) spawnFacts(ctx context.Context, l model.LiveRun, jobs map[string]model.Job, f *facts) (model.Job, error) {
	job, found := jobs[l.Run.JobName]
	if !found {
		var err error
		job, err = r.cfg.Store.JobGet(ctx, l.Run.JobName)
		if errors.Is(err, store.ErrNotFound) {
			f.jobMissing = true
			return job, nil
		}
		if err != nil {
			return job, err
		}
	}
	if l.JobEngine == "" {
		f.jobMissing = true // a job of the same name was added since: it is not this run's
		return job, nil
	}
	f.refusal = r.policyRefusal(job)
	f.notBefore = l.Run.NotBefore
	// Maintenance windows: the job's own in its zone, then the global ones, at the run's own
	// time if that is ahead (an armed run starts then, not now). Windows or a zone that do not
	// parse hold the run back: they are never read as no window, or as UTC.
	at := f.now
	if f.notBefore != nil && f.notBefore.After(at) {
		at = *f.notBefore
	}
	windows, zone, err := r.jobWindows(job)
	if err != nil {
		f.windowsProblem = fmt.Sprintf("the maintenance windows of job %s cannot be judged, as its stored windows or time zone do not parse: %v", job.Name, err)
	} else if until, name := schedule.Allowed(at, windows, zone); name != "" {
		f.window = &held{name: name, job: job.Name, until: until}
	}
	if until, name := schedule.Allowed(at, r.cfg.windows, r.cfg.zone); name != "" {
		f.globalWindow = &held{name: name, until: until}
	}
	if l.Run.Kind.Spec().Forgets {
		// A plan of the copy: its snapshots' protections.
		among := store.SnapshotProtectedAmongParams{Repository: job.For(l.Run).Repository, IDs: l.Run.ForgetIDs, At: f.now}
		if f.protected, err = r.cfg.Store.SnapshotProtectedAmong(ctx, among); err != nil {
			return job, err
		}
	}
	if job.DependsOn != "" && l.Run.Kind.Spec().Prerequisite {
		if f.prereq, err = r.prerequisite(ctx, job.DependsOn); err != nil {
			return job, err
		}
	}
	if f.identityMissing, err = missingIdentity(job); err != nil {
		return job, err
	}
	// Asked only when this host refuses: whether another live host (draining ones too: a drain
	// ends) may run an any-host job. An attempt this host kept after a failed start is its own, and
	// a run pinned to this host (a restore, a pruning host's) no other host may take.
	if (f.refusal != "" || f.identityMissing != "") && job.Host == "" && l.Run.Host == "" && l.Attempt.Host == "" {
		hosts, err := r.cfg.Store.HostList(ctx)
		if err != nil {
			return job, err
		}
		f.elsewhere = slices.ContainsFunc(hosts, func(h model.Host) bool { return h.Alive && h.Name != r.cfg.Host })
	}
	return job, nil
}

// prerequisite reads what is known about the job named name, which a job depends on.
func (r *Reconciler) prerequisite(ctx context.Context, name string) (*prereq, error) {
	p := &prereq{name: name}
	dep, err := r.cfg.Store.JobGet(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return p, nil
	}
	if err != nil {
		return nil, err
	}
	p.exists, p.lastOutcome = true, dep.LastOutcome
	if dep.LastRunID != nil {
		run, err := r.cfg.Store.RunGet(ctx, *dep.LastRunID)
		if err != nil {
			return nil, err
		}
		p.lastRun = &run
		// The run is read after the job: if it ended meanwhile, the job's last outcome read
		// before may be older than the ending (the two are written together), so the run's
		// own status is the outcome.
		if !model.Live(run.Status) {
			p.lastOutcome = run.Status
		}
	}
	return p, nil
}

// retryPlan returns the retry of a backup that failed for a transient reason, or nil if its job
// allows no more. A prune or forget is not retried: the next one is planned anew.
func (r *Reconciler) retryPlan(ctx context.Context, l model.LiveRun) (*model.Retry, error) {
	if l.JobEngine == "" || !l.Run.Kind.Spec().Retried {
		return nil, nil
	}
	job, err := r.cfg.Store.JobGet(ctx, l.Run.JobName)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n := l.Run.RetryNumber + 1
	if n > job.RetryMax {
		return nil, nil
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, err
	}
	// Due a backoff after the failed run's end as the database records it (store.AttemptFinish), on
	// the database's clock: the host's clock may be off.
	return &model.Retry{ID: id, Number: n, Delay: schedule.Backoff(job.RetryBackoff, schedule.MaxBackoff, n),
		Why: fmt.Sprintf("waiting: retry %d of %d after run %s failed for a transient reason", n, job.RetryMax, l.Run.ID)}, nil
}

// windowsMemo holds the jobs' maintenance windows parsed (jobWindows), by the text they were
// parsed from.
type windowsMemo struct {
	mu sync.Mutex
	m  map[windowsKey]parsedWindows
}

// windowsKey is a job's name and the text of its zone and windows.
type windowsKey struct{ job, zone, windows string }

type parsedWindows struct {
	windows []schedule.Window
	zone    *time.Location
	err     error
}

// windowsMemoMax bounds the memo; past it, it starts again empty.
const windowsMemoMax = 4096

// jobWindows is the job's maintenance windows and their zone (jobdef.Windows), parsed once for
// each text they have, not at every pass for every run. jobdef.Validate refuses windows or a zone
// that do not parse before a job is stored, so such a job was written around it (or its zone left
// the host's tzdata); its runs wait (decide's "unspawned, job windows unreadable"), and this
// logs it once for each text it has.
func (r *Reconciler) jobWindows(j model.Job) ([]schedule.Window, *time.Location, error) {
	if len(j.Windows) == 0 {
		// No window to judge: the zone is read for none, so a zone this host cannot load holds
		// nothing back (its schedule is admission's, and holdfast check reports it).
		return nil, time.UTC, nil
	}
	key := windowsKey{job: j.Name, zone: j.TimeZone, windows: strings.Join(j.Windows, "\x00")} // text holds no NUL in PostgreSQL
	m := &r.windows
	m.mu.Lock()
	p, ok := m.m[key]
	m.mu.Unlock()
	if ok {
		return p.windows, p.zone, p.err
	}
	p.windows, p.zone, p.err = jobdef.Windows(j)
	if p.err != nil {
		r.cfg.Logger.Error("job's maintenance windows or time zone do not parse: its runs wait until they are corrected (holdfast check reports it)",
			"job", j.Name, "err", p.err)
	}
	m.mu.Lock()
	if m.m == nil || len(m.m) >= windowsMemoMax {
		m.m = map[windowsKey]parsedWindows{}
	}
	m.m[key] = p
	m.mu.Unlock()
	return p.windows, p.zone, p.err
}
