package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/crashpoint"
)

// SlotDecision is what the scheduler decided about one due job.
type SlotDecision struct {
	Run     bool       // admit a run for Planned
	Trigger string     // "schedule" or "catch-up"
	Planned time.Time  // the slot
	Missed  int        // slots skipped, never replayed
	Next    *time.Time // the job's next slot; nil stops scheduling it
	Why     string     // set when scheduling stopped: the reason
}

// Admitted reports what admission did with one due job.
type Admitted struct {
	Job       string
	Run       *uuid.UUID // the run admitted, if any
	Trigger   string
	Planned   time.Time
	Missed    int
	Overlap   *uuid.UUID // the live run that made this slot be skipped
	SkipWhy   string
	NextRunAt *time.Time
	Paused    string // the admitted run was paused at once: its account could not hold it
}

// AdmitDue claims up to limit jobs whose next slot is due at now (FOR UPDATE SKIP LOCKED, so
// daemons sharing the database take different jobs), asks decide about each, and in the same
// transaction admits the runs, advances next_run_at and records skipped slots.
func (s *Store) AdmitDue(ctx context.Context, now time.Time, limit int, decide func(Job) SlotDecision) ([]Admitted, error) {
	var out []Admitted
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		jobs, err := claimDue(ctx, tx, "next_run_at", now, limit)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			a, err := admitSlot(ctx, tx, j, decide(j), now)
			if err != nil {
				return fmt.Errorf("job %s: %w", j.Name, err)
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

// claimDue locks up to limit jobs whose slot in the given column (next_run_at or next_prune_at)
// is due, skipping jobs another daemon has locked, earliest first.
func claimDue(ctx context.Context, tx pgx.Tx, column string, now time.Time, limit int) ([]Job, error) {
	if column != "next_run_at" && column != "next_prune_at" {
		return nil, fmt.Errorf("claim due jobs: no slot column %q", column)
	}
	rows, err := tx.Query(ctx, `SELECT `+jobColumns+` FROM jobs j WHERE j.`+column+` <= $1
		ORDER BY j.`+column+` LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) { return scanJob(r) })
}

func admitSlot(ctx context.Context, tx pgx.Tx, j Job, d SlotDecision, now time.Time) (Admitted, error) {
	a := Admitted{Job: j.Name, Trigger: d.Trigger, Planned: d.Planned, Missed: d.Missed, NextRunAt: d.Next}
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
		if found {
			a.Overlap = &live
			overlapSkips = 1
			skipWhy = fmt.Sprintf("slot %s skipped: the previous run %s is still live", d.Planned.UTC().Format(time.RFC3339), live)
		} else {
			id, err := uuid.NewRandom()
			if err != nil {
				return a, err
			}
			paused, err := insertRun(ctx, tx, id, newRun{jobID: j.ID, jobName: j.Name, trigger: d.Trigger, plannedAt: &d.Planned})
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
			last_skip_why = coalesce(nullif($6, ''), last_skip_why)
		WHERE id = $1`, j.ID, d.Next, d.Missed, overlapSkips, a.Run, skipWhy, now)
	return a, err
}

// PruneAdmitted reports a prune admitted on its schedule, or a prune slot put off.
type PruneAdmitted struct {
	Job      string
	Run      *uuid.UUID // nil: put off, see Waiting
	Planned  time.Time
	Waiting  *uuid.UUID // the job's live run the prune waits for; the slot stays due
	NextSlot *time.Time
}

// AdmitDuePrunes claims up to limit jobs whose prune slot is due (FOR UPDATE SKIP LOCKED) and
// admits a prune run for each, advancing next_prune_at with next. A job with a live run keeps
// its slot due: the prune is put off, not dropped, and admitted once the job is free.
func (s *Store) AdmitDuePrunes(ctx context.Context, now time.Time, limit int, next func(Job) *time.Time) ([]PruneAdmitted, error) {
	var out []PruneAdmitted
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		jobs, err := claimDue(ctx, tx, "next_prune_at", now, limit)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			a := PruneAdmitted{Job: j.Name, Planned: *j.NextPruneAt}
			live, found, err := liveRunOf(ctx, tx, j.ID)
			if err != nil {
				return err
			}
			if found {
				a.Waiting = &live
				out = append(out, a)
				continue
			}
			id, err := uuid.NewRandom()
			if err != nil {
				return err
			}
			// planned_at stays empty: the slot is the prune schedule's, not the backup schedule's.
			if _, err := insertRun(ctx, tx, id, newRun{jobID: j.ID, jobName: j.Name, trigger: "schedule", kind: KindPrune}); err != nil {
				return err
			}
			a.Run, a.NextSlot = &id, next(j)
			if _, err := tx.Exec(ctx, `UPDATE jobs SET next_prune_at = $2 WHERE id = $1`, j.ID, a.NextSlot); err != nil {
				return err
			}
			crashpoint.At("admit-prune-before-commit")
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("admit due prunes: %w", err)
	}
	return out, nil
}

// NextDue returns the earliest time the daemon has something to do without being told: a
// job's next slot, or a queued run's not-before time (a retry's delay, a window's end). Nil
// if there is none.
func (s *Store) NextDue(ctx context.Context) (*time.Time, error) {
	var next *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT least(
			(SELECT min(next_run_at) FROM jobs),
			(SELECT min(next_prune_at) FROM jobs WHERE NOT EXISTS (SELECT 1 FROM runs r
				WHERE r.job_id = jobs.id AND r.status IN ('queued', 'running'))),
			(SELECT min(not_before) FROM runs WHERE status = 'queued' AND not_before > now()))`).Scan(&next); err != nil {
		return nil, fmt.Errorf("next due job: %w", err)
	}
	return next, nil
}

// SetWaiting records why a queued run is not spawned yet and, optionally, the earliest time it
// may be. It writes only when something changed.
func (s *Store) SetWaiting(ctx context.Context, runID uuid.UUID, reason string, notBefore *time.Time) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE runs SET waiting_reason = nullif($2, ''), not_before = coalesce($3, not_before)
		WHERE id = $1 AND status = 'queued'
		  AND (waiting_reason IS DISTINCT FROM nullif($2, '') OR ($3::timestamptz IS NOT NULL AND not_before IS DISTINCT FROM $3))`,
		runID, reason, notBefore)
	if err != nil {
		return fmt.Errorf("record why run %s waits: %w", runID, err)
	}
	return nil
}
