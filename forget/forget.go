// Package forget plans a job's retention over its repository as it is now, and applies it.
// Package retention decides the plan; this package gathers what it decides on (the job, its
// policy, the repository read again) and records what was decided: an applied plan is recorded
// for audit with the forget run that deletes its snapshots, admitted in the same transaction; a
// plan the job's guardrails refuse is recorded as refused, unless forced.
package forget

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/setting"
	"github.com/holdfast-backup/holdfast/store"
)

// Store is what Plan reads: the job. The CLI and the dashboard give their store.Store.
type Store interface {
	JobGet(ctx context.Context, name string) (model.Job, error)
}

// Recorder is what Apply writes: the plan, with the forget run that applies it. The CLI gives
// its store.Store.
type Recorder interface {
	PlanRecord(ctx context.Context, p model.RetentionPlan) (model.RetentionPlan, error)
}

// Request asks for a plan of a job's retention.
type Request struct {
	Job  string
	At   time.Time // the plan's reference time
	Host string    // the host whose snapshots are the job's
	// Policy turns the job's stored policy (the zero Policy if it has none) into the plan's,
	// e.g. with the operator's flags; nil keeps the stored one. PolicyGiven says it changes
	// something: a job without a stored policy needs one given.
	Policy      func(stored retention.Policy) (retention.Policy, error)
	PolicyGiven bool
	// Read reads the job's repository again into the inventory and returns its snapshots
	// (restic runs as the job's user, in a unit of its own).
	Read func(context.Context, model.Job) ([]model.Snapshot, error)
	// Copy plans the job's copy repository (see model.Job.AsCopy) instead of its own.
	Copy bool
	// Restic is the release of the restic that runs the job's commands: its forget rules are the
	// plan's (engine.ResticVersion.ForgetKeepsOldest). Zero, not known, keeps what any release
	// would keep.
	Restic engine.ResticVersion
}

// Planned is a plan with what it was made from.
type Planned struct {
	Job    model.Job
	Policy retention.Policy
	At     time.Time
	Plan   retention.Plan
	// Refusal says why the job's guardrails refuse the plan (apply needs --force); nil if they
	// do not.
	Refusal error
}

// Plan reads the job's repository again and plans its retention. A job that is not a restic
// job, or has no policy and is given none, gets a *store.ConflictError.
func Plan(ctx context.Context, st Store, req Request) (Planned, error) {
	j, err := st.JobGet(ctx, req.Job)
	if err != nil {
		return Planned{}, err
	}
	if !j.HasRepository() {
		return Planned{}, &store.ConflictError{Msg: fmt.Sprintf("job %s uses the %s engine: retention applies to restic repositories", j.Name, j.Engine)}
	}
	if req.Copy {
		c, ok := j.AsCopy()
		if !ok {
			return Planned{}, &store.ConflictError{Msg: setting.Sprintf("job %s has no copy repository: give it one (holdfast job edit %s {Job.Copy.To} REPO {Job.Copy.PasswordFile} FILE)", j.Name, j.Name)}
		}
		j = c
	}
	p, ok, err := jobdef.Policy(j)
	if err != nil {
		return Planned{}, err
	}
	if !ok && !req.PolicyGiven {
		return Planned{}, &store.ConflictError{Msg: setting.Sprintf("job %s has no retention policy: set one (holdfast job edit %s {Change.Preset} 30d) or give policy flags", j.Name, j.Name)}
	}
	if req.Policy != nil {
		if p, err = req.Policy(p); err != nil {
			return Planned{}, err
		}
	}
	recorded, err := req.Read(ctx, j)
	if err != nil {
		return Planned{}, err
	}
	plan, err := retention.New(p, Snapshots(recorded), retention.Options{At: req.At, WithinFrom: retention.WithinFromNow,
		Scope: retention.Scope{Job: j.Name, Host: req.Host}, KeepOldestOfUnfilledRule: req.Restic.ForgetKeepsOldest()})
	if err != nil {
		return Planned{}, err
	}
	return Planned{Job: j, Policy: p, At: req.At, Plan: plan, Refusal: jobdef.Guardrail(j).Check(plan)}, nil
}

// Snapshots are the inventory's snapshots as a policy sees them.
func Snapshots(recorded []model.Snapshot) []retention.Snapshot {
	snaps := make([]retention.Snapshot, len(recorded))
	for i, s := range recorded {
		snaps[i] = retention.Snapshot{ID: s.ID, Time: s.Time, Host: s.Host, Tags: s.Tags, Paths: s.Paths,
			LegalHold: s.LegalHoldAt != nil, ImmutableUntil: s.ImmutableUntil}
		if s.BytesAdded != nil {
			snaps[i].Bytes = *s.BytesAdded
		}
	}
	return snaps
}

// Record is the audit record of applying the plan: refused if its guardrails refuse it and
// force is not set, else applied (forced, if they refuse it).
func Record(pl Planned, actor string, force bool) (model.RetentionPlan, error) {
	rec := model.RetentionPlan{JobName: pl.Job.Name, Repository: pl.Job.Repository, Actor: actor, PlanAt: pl.At,
		Forced: force && pl.Refusal != nil, Outcome: model.PlanApplied, Summary: pl.Plan.Summary, DeleteIDs: pl.Plan.DeleteIDs()}
	var err error
	if rec.Policy, err = json.Marshal(pl.Policy); err != nil {
		return model.RetentionPlan{}, fmt.Errorf("encode the retention policy: %w", err)
	}
	if rec.Decisions, err = json.Marshal(pl.Plan.Decisions); err != nil {
		return model.RetentionPlan{}, fmt.Errorf("encode the plan's decisions: %w", err)
	}
	if pl.Refusal != nil && !force {
		rec.Outcome, rec.Refusal = model.PlanRefused, pl.Refusal.Error()
	}
	return rec, nil
}

// Apply records the plan (see Record); an applied plan with snapshots to delete admits the
// forget run that deletes them. The caller reports a refused plan as refused.
func Apply(ctx context.Context, st Recorder, pl Planned, actor string, force bool) (model.RetentionPlan, error) {
	rec, err := Record(pl, actor, force)
	if err != nil {
		return model.RetentionPlan{}, err
	}
	crashpoint.At("retention-apply-before")
	saved, err := st.PlanRecord(ctx, rec)
	if err != nil {
		return model.RetentionPlan{}, err
	}
	crashpoint.At("retention-apply-after")
	return saved, nil
}
