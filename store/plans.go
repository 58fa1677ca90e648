package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/model"
)

const planColumns = `p.id, p.job_name, p.repository, p.created_at, p.actor, p.plan_at, p.policy, p.forced,
	p.outcome, coalesce(p.refusal, ''), p.summary, p.delete_ids, p.decisions, p.run_id`

func scanPlan(row pgx.Row) (model.RetentionPlan, error) {
	var p model.RetentionPlan
	err := row.Scan(&p.ID, &p.JobName, &p.Repository, &p.CreatedAt, &p.Actor, &p.PlanAt, &p.Policy, &p.Forced,
		&p.Outcome, &p.Refusal, &p.Summary, &p.DeleteIDs, &p.Decisions, &p.RunID)
	return p, err
}

// PlanRecord stores a plan for audit. An applied plan with snapshots to delete also admits the
// forget run that deletes them, in the same transaction: it is refused while the job has a live
// run, and refused if one of its snapshots became protected since it was planned (the rows
// stay locked until the run exists, so no protection slips in between).
func (s *Store) PlanRecord(ctx context.Context, p model.RetentionPlan) (model.RetentionPlan, error) {
	var out model.RetentionPlan
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		id, err := uuid.NewRandom()
		if err != nil {
			return err
		}
		var runID *uuid.UUID
		if p.Outcome == model.PlanApplied {
			if len(p.DeleteIDs) == 0 {
				p.Outcome = model.PlanNothing
			} else if runID, err = admitForget(ctx, tx, p, id); err != nil {
				return err
			}
		}
		out, err = scanPlan(tx.QueryRow(ctx, `
			INSERT INTO retention_plans AS p (id, job_name, repository, actor, plan_at, policy, forced, outcome,
				refusal, summary, delete_ids, decisions, run_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, nullif($9, ''), $10, $11, $12, $13)
			RETURNING `+planColumns, id, p.JobName, p.Repository, p.Actor, p.PlanAt, p.Policy, p.Forced, p.Outcome,
			p.Refusal, p.Summary, nonNil(p.DeleteIDs), p.Decisions, runID))
		return err
	})
	if err != nil {
		return model.RetentionPlan{}, wrap(err, "record retention plan of %s", p.JobName)
	}
	return out, nil
}

func admitForget(ctx context.Context, tx pgx.Tx, p model.RetentionPlan, planID uuid.UUID) (*uuid.UUID, error) {
	var jobID int64
	var jobEngine, repository, copyTo string
	err := tx.QueryRow(ctx, `SELECT id, engine, repository, copy_to FROM jobs WHERE name = $1 FOR UPDATE`, p.JobName).
		Scan(&jobID, &jobEngine, &repository, &copyTo)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("job %q: %w", p.JobName, ErrNotFound)
		}
		return nil, err
	}
	// A plan of the job's copy repository is carried out there.
	onCopy := copyTo != "" && p.Repository == copyTo
	if !model.HasRepository(jobEngine) || repository != p.Repository && !onCopy {
		return nil, &ConflictError{Msg: fmt.Sprintf("job %s no longer backs up to %s: plan again", p.JobName, p.Repository)}
	}
	live, found, err := liveRunOf(ctx, tx, jobID)
	if err != nil {
		return nil, err
	}
	if found {
		return nil, &ConflictError{Msg: fmt.Sprintf("job %s has a live run %s: apply the plan when it has ended", p.JobName, live)}
	}
	protected, err := protectedAmong(ctx, tx, p.Repository, p.DeleteIDs, time.Now())
	if err != nil {
		return nil, err
	}
	if len(protected) > 0 {
		return nil, &ConflictError{Msg: fmt.Sprintf("snapshot(s) %s became protected after the plan was made: plan again", shortIDs(protected))}
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, err
	}
	_, err = insertRun(ctx, tx, id, newRun{jobID: jobID, jobName: p.JobName, trigger: model.TriggerManual, kind: model.KindForget,
		forgetIDs: p.DeleteIDs, planID: &planID, onCopy: onCopy})
	return &id, err
}

func shortIDs(ids []string) string {
	short := make([]string, len(ids))
	for i, id := range ids {
		short[i] = id[:min(12, len(id))]
	}
	return strings.Join(short, ", ")
}

// PlanList lists the recorded plans of a job ("" for all jobs), newest first.
func (s *Store) PlanList(ctx context.Context, job string, limit int) ([]model.RetentionPlan, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+planColumns+` FROM retention_plans p
		WHERE $1 = '' OR p.job_name = $1 ORDER BY p.created_at DESC LIMIT $2`, job, limit)
	if err != nil {
		return nil, fmt.Errorf("list retention plans: %w", err)
	}
	plans, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.RetentionPlan, error) { return scanPlan(r) })
	if err != nil {
		return nil, fmt.Errorf("list retention plans: %w", err)
	}
	return plans, nil
}
