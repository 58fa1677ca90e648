package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/model"
)

// JobAdmitDueParams says which due jobs JobAdmitDue admits, and how.
type JobAdmitDueParams struct {
	By       string    // who admits: recorded with each run as its admitting host
	Now      time.Time // a slot due at Now is admitted
	Horizon  time.Time // a slot up to Horizon (after Now) is admitted ahead
	Limit    int       // at most this many jobs
	SetAside time.Duration
	Decide   func(model.Job) model.SlotDecision
}

// JobAdmitDue claims up to p.Limit jobs whose next slot is due at p.Now (FOR UPDATE SKIP
// LOCKED, so daemons sharing the database take different jobs), asks p.Decide about each, and in
// the same transaction admits the runs, advances next_run_at and records skipped slots.
//
// A slot up to p.Horizon is admitted ahead, so the run can be prepared before its time: the run
// is queued with its slot as not_before. Only a job without a live run is admitted ahead; a job
// with one is decided at its slot, as an overlap or not.
//
// Each job is admitted under its own savepoint: a job that cannot be (its row cannot be read,
// a statement about it fails) is rolled back alone, and set aside for p.SetAside with the error
// recorded on it (Job.AdmissionError), so it neither blocks the others nor is claimed again
// at once. Its slot stays as it was: once it can be admitted, missed slots are counted as usual.
func (s *Store) JobAdmitDue(ctx context.Context, p JobAdmitDueParams) ([]model.Admitted, error) {
	var out []model.Admitted
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		due, err := claimDue(ctx, tx, "next_run_at", p.Now, p.Horizon, p.Limit)
		if err != nil {
			return err
		}
		for _, d := range due {
			var a model.Admitted
			err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
				j, err := readJob(ctx, sp, d.id)
				if err != nil {
					return err
				}
				a, err = admitSlot(ctx, sp, j, p.Decide(j), p.Now, p.By)
				return err
			})
			if err != nil {
				if a, err = setJobAside(ctx, tx, d, p.Now, p.SetAside, err); err != nil {
					return err
				}
			}
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("admit due jobs: %w", err)
	}
	return out, nil
}

// dueJob is a claimed job: only its id and name, which a broken row still has.
type dueJob struct {
	id   int64
	name string
}

// claimDue locks up to limit jobs whose slot in the given column (next_run_at, next_prune_at or next_verify_at)
// is due, or due by horizon for a job without a live run, skipping jobs another daemon has
// locked and jobs set aside, earliest first.
func claimDue(ctx context.Context, tx pgx.Tx, column string, now, horizon time.Time, limit int) ([]dueJob, error) {
	if column != "next_run_at" && column != "next_prune_at" && column != "next_verify_at" && column != "next_drill_at" {
		return nil, fmt.Errorf("claim due jobs: no slot column %q", column)
	}
	rows, err := tx.Query(ctx, `SELECT j.id, j.name FROM jobs j
		WHERE (j.`+column+` <= $1 OR j.`+column+` <= $2 AND NOT EXISTS (SELECT 1 FROM runs r
			WHERE r.job_id = j.id AND r.status IN ('queued', 'running')))
		AND (j.admission_retry_at IS NULL OR j.admission_retry_at <= $1)
		ORDER BY j.`+column+` LIMIT $3 FOR UPDATE SKIP LOCKED`, now, horizon, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dueJob, error) {
		var d dueJob
		return d, r.Scan(&d.id, &d.name)
	})
}

func readJob(ctx context.Context, tx pgx.Tx, id int64) (model.Job, error) {
	j, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs j WHERE j.id = $1`, id))
	if err != nil {
		return model.Job{}, fmt.Errorf("read the job: %w", err)
	}
	return j, nil
}

// setJobAside records why a claimed job could not be admitted and keeps admission away from it
// for a while. An error of the transaction itself (the context ended, the connection is gone)
// is returned instead: nothing can be recorded then.
func setJobAside(ctx context.Context, tx pgx.Tx, d dueJob, now time.Time, wait time.Duration, cause error) (model.Admitted, error) {
	if ctx.Err() != nil || tx.Conn().IsClosed() {
		return model.Admitted{}, fmt.Errorf("job %s: %w", d.name, cause)
	}
	retry := now.Add(wait)
	why := fmt.Sprintf("admission failed: %v; set aside until %s", cause, retry.UTC().Format(time.RFC3339))
	if _, err := tx.Exec(ctx, `UPDATE jobs SET admission_error = $2, admission_retry_at = $3 WHERE id = $1`,
		d.id, why, retry); err != nil {
		return model.Admitted{}, fmt.Errorf("job %s: %w (and setting it aside failed: %v)", d.name, cause, err)
	}
	return model.Admitted{Job: d.name, Failed: why, RetryAt: &retry}, nil
}

func admitSlot(ctx context.Context, tx pgx.Tx, j model.Job, d model.SlotDecision, now time.Time, by string) (model.Admitted, error) {
	a := model.Admitted{Job: j.Name, Trigger: d.Trigger, Planned: d.Planned, Missed: d.Missed, NextRunAt: d.Next}
	var skipWhy string
	overlapSkips := 0
	if d.Missed > 0 {
		skipWhy = fmt.Sprintf("%d slot(s) up to %s missed while holdfast was not running; not replayed",
			d.Missed, d.Planned.UTC().Format(time.RFC3339))
	}
	if d.Run {
		live, found, err := liveRunOf(ctx, tx, j.ID)
		if err != nil {
			return a, err
		}
		if found && d.Planned.After(now) {
			return model.Admitted{Job: j.Name}, nil // a run came meanwhile: the slot is decided at its time
		}
		if found {
			a.Overlap = &live
			overlapSkips = 1
			skipWhy = fmt.Sprintf("slot %s skipped: the previous run %s is still live", d.Planned.UTC().Format(time.RFC3339), live)
		} else {
			id, err := uuid.NewRandom()
			if err != nil {
				return a, err
			}
			n := newRun{jobID: j.ID, jobName: j.Name, trigger: d.Trigger, plannedAt: &d.Planned, admittedBy: by}
			if d.Planned.After(now) {
				n.notBefore = &d.Planned // admitted ahead: it starts at its slot
			}
			paused, err := insertRun(ctx, tx, id, n)
			if err != nil {
				return a, err
			}
			if paused {
				a.Paused = "its account could not hold what the run needs: run paused (quota_exhausted or run_ceiling; see holdfast run show " + id.String() + ")"
			}
			a.Run = &id
			crashpoint.At("admit-slot-before-commit")
		}
	}
	if d.Next == nil && d.Why != "" {
		skipWhy = "scheduling stopped: " + d.Why
	}
	a.SkipWhy = skipWhy
	_, err := tx.Exec(ctx, `
		UPDATE jobs SET next_run_at = $2, missed_slots = missed_slots + $3, overlap_skips = overlap_skips + $4,
			last_run_id = coalesce($5, last_run_id),
			last_skip_at = CASE WHEN $6 <> '' THEN $7 ELSE last_skip_at END,
			last_skip_why = coalesce(nullif($6, ''), last_skip_why),
			admission_error = NULL, admission_retry_at = NULL
		WHERE id = $1`, j.ID, d.Next, d.Missed, overlapSkips, a.Run, skipWhy, now)
	return a, err
}

// maintenanceSlots is the slot column of each of model.RepositorySchedules, by its name.
var maintenanceSlots = map[string]string{
	model.PruneSchedule.Name:  "next_prune_at",
	model.VerifySchedule.Name: "next_verify_at",
	model.DrillSchedule.Name:  "next_drill_at",
}

// JobAdmitDueMaintenanceParams says which due slots of a repository's schedule
// JobAdmitDueMaintenance admits, and how.
type JobAdmitDueMaintenanceParams struct {
	By       string // who admits: recorded with each run as its admitting host
	Schedule model.RepositorySchedule
	Now      time.Time
	Limit    int // at most this many jobs
	SetAside time.Duration
	Next     func(model.Job) *time.Time // the job's slot after the one admitted
}

// JobAdmitDueMaintenance claims up to p.Limit jobs whose slot of p.Schedule is due at p.Now (FOR
// UPDATE SKIP LOCKED) and admits its run for each, advancing the slot with p.Next. A job with a
// live run keeps its slot due: the run is put off, not dropped, and admitted once the job is
// free. As in JobAdmitDue, a job that cannot be admitted is rolled back alone and set aside for
// p.SetAside.
func (s *Store) JobAdmitDueMaintenance(ctx context.Context, p JobAdmitDueMaintenanceParams) ([]model.MaintenanceAdmitted, error) {
	column, ok := maintenanceSlots[p.Schedule.Name]
	if !ok {
		return nil, fmt.Errorf("admit due maintenance: no schedule %q", p.Schedule.Name)
	}
	var out []model.MaintenanceAdmitted
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		due, err := claimDue(ctx, tx, column, p.Now, p.Now, p.Limit)
		if err != nil {
			return err
		}
		for _, d := range due {
			var a model.MaintenanceAdmitted
			err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
				j, err := readJob(ctx, sp, d.id)
				if err != nil {
					return err
				}
				a, err = admitMaintenance(ctx, sp, p.Schedule, j, p.Next, p.By)
				return err
			})
			if err != nil {
				failed, err := setJobAside(ctx, tx, d, p.Now, p.SetAside, err)
				if err != nil {
					return err
				}
				a = model.MaintenanceAdmitted{Job: d.name, Schedule: p.Schedule.Name, Failed: failed.Failed, RetryAt: failed.RetryAt}
			}
			crashpoint.At("admit-prune-before-commit") // a verification's too
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("admit due %s runs: %w", p.Schedule.Name, err)
	}
	return out, nil
}

func admitMaintenance(ctx context.Context, tx pgx.Tx, schedule model.RepositorySchedule, j model.Job, next func(model.Job) *time.Time, by string) (model.MaintenanceAdmitted, error) {
	n := newRun{jobID: j.ID, jobName: j.Name, trigger: model.TriggerSchedule, kind: schedule.Kind, admittedBy: by}
	if schedule.Verify != nil {
		n.verify = schedule.Verify(j)
	}
	a := model.MaintenanceAdmitted{Job: j.Name, Schedule: schedule.Name, Planned: *schedule.NextAt(j)}
	live, found, err := liveRunOf(ctx, tx, j.ID)
	if err != nil {
		return a, err
	}
	if found {
		a.Waiting = &live
		return a, nil
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return a, err
	}
	// planned_at stays empty: the slot is this schedule's, not the backup schedule's.
	if _, err := insertRun(ctx, tx, id, n); err != nil {
		return a, err
	}
	a.Run, a.NextSlot = &id, next(j)
	_, err = tx.Exec(ctx, `UPDATE jobs SET `+maintenanceSlots[schedule.Name]+` = $2, admission_error = NULL, admission_retry_at = NULL
		WHERE id = $1`, j.ID, a.NextSlot)
	return a, err
}

// JobNextDue returns the earliest time the daemon of host has something to do without being told: a
// slot of a job it may run (pinned to it, or any-host), or the not-before time of a queued run
// it may spawn (a retry's delay, a window's end, the slot of a run admitted ahead), each lead
// earlier where the daemon prepares it ahead: a slot of a job without a live run, and a queued
// run without a unit. Nil if there is none. It reads the host's jobs and their live runs only
// (jobs_host, runs_live_job), never the fleet's or the history.
func (s *Store) JobNextDue(ctx context.Context, host string, lead time.Duration) (*time.Time, error) {
	// A job set aside is due again at its retry time, not at its slot. Each run is reached from
	// its job, and its live attempt from the run, by a lookup per row (LATERAL; the attempt by
	// the primary key, with the live test liveRuns uses): statistics from before a burst of
	// admissions (a new table's, or any before autovacuum's next analyze) otherwise had the
	// planner loop over every live run once per live run, seconds at 1,000.
	rows, err := s.queryGeneric(ctx, `
		WITH j AS (
			SELECT j.id, j.next_run_at, j.next_prune_at, j.next_verify_at, j.next_drill_at, j.admission_retry_at,
				-- A lookup per job: an EXISTS may be planned as a hash of every live run of the fleet.
				coalesce((SELECT true FROM runs r WHERE r.job_id = j.id AND r.status IN ('queued', 'running') LIMIT 1), false) AS live
			FROM jobs j WHERE `+hostMayRun(2)+`),
		q AS (
			SELECT r.id, r.not_before FROM j CROSS JOIN LATERAL (
				SELECT r.id, r.not_before FROM runs r
				WHERE r.job_id = j.id AND r.status = 'queued' AND r.not_before > now() AND r.host IS NULL) r
			WHERE j.live
			UNION ALL
			SELECT r.id, r.not_before FROM runs r
			WHERE (r.host = $2 OR r.job_id IS NULL AND r.host IS NULL) AND r.status IN ('queued', 'running')
			  AND r.status = 'queued' AND r.not_before > now())
		SELECT least(
			(SELECT min(greatest(next_run_at - CASE WHEN live THEN interval '0' ELSE $1 * interval '1 microsecond' END,
				admission_retry_at)) FROM j WHERE next_run_at IS NOT NULL),
			(SELECT min(greatest(next_prune_at, admission_retry_at)) FROM j WHERE NOT live AND next_prune_at IS NOT NULL),
			(SELECT min(greatest(next_verify_at, admission_retry_at)) FROM j WHERE NOT live AND next_verify_at IS NOT NULL),
			(SELECT min(greatest(next_drill_at, admission_retry_at)) FROM j WHERE NOT live AND next_drill_at IS NOT NULL),
			(SELECT min(CASE WHEN a.unarmed AND q.not_before - $1 * interval '1 microsecond' > now()
					THEN q.not_before - $1 * interval '1 microsecond' ELSE q.not_before END)
				FROM q CROSS JOIN LATERAL (
					SELECT a.unit IS NULL AS unarmed FROM attempts a
					WHERE a.run_id = q.id AND coalesce(a.ended_at, 'infinity') = 'infinity' OFFSET 0) a))`, lead.Microseconds(), host)
	var next *time.Time
	if err == nil {
		next, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[*time.Time])
	}
	if err != nil {
		return nil, fmt.Errorf("next due job: %w", err)
	}
	return next, nil
}

// RunSetWaitingParams says why a queued run waits.
type RunSetWaitingParams struct {
	RunID     uuid.UUID
	Reason    string
	NotBefore *time.Time // the earliest time it may be spawned; nil leaves it as it is
}

// RunSetWaiting records why a queued run is not spawned yet and, optionally, the earliest time it
// may be. It writes only when something changed.
func (s *Store) RunSetWaiting(ctx context.Context, p RunSetWaitingParams) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE runs SET waiting_reason = nullif($2, ''), not_before = coalesce($3, not_before)
		WHERE id = $1 AND status = 'queued'
		  AND (waiting_reason IS DISTINCT FROM nullif($2, '') OR ($3::timestamptz IS NOT NULL AND not_before IS DISTINCT FROM $3))`,
		p.RunID, p.Reason, p.NotBefore)
	if err != nil {
		return fmt.Errorf("record why run %s waits: %w", p.RunID, err)
	}
	return nil
}
