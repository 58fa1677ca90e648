package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/model"
)

// JobWatchFacts reads the facts of the jobs of scope. The daemons read them every
// --watch-interval, so only what the watch needs is read, through jobs_host for a host.
func (s *Store) JobWatchFacts(ctx context.Context, scope model.WatchScope) ([]model.WatchFacts, error) {
	where, args := "", []any{}
	switch {
	case scope.Unattended:
		// The hosts jobs are pinned to, each found once by a skip through jobs_host (a probe
		// per host, not a read of every job), less those with a row; and the down hosts. The
		// comment names the statement a duty's in pg_stat_statements (make bench-fleet).
		where = `/* fleet duty */ WHERE j.host IN (
			WITH RECURSIVE pinned(host) AS (
				(SELECT host FROM jobs WHERE host IS NOT NULL ORDER BY host LIMIT 1)
				UNION ALL
				SELECT (SELECT host FROM jobs WHERE host > p.host ORDER BY host LIMIT 1) FROM pinned p WHERE p.host IS NOT NULL)
			SELECT host FROM pinned WHERE host IS NOT NULL AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.name = pinned.host)
			UNION ALL
			SELECT name FROM hosts WHERE lease_mark < now() AND lease_until < now())`
	case scope.Host != "":
		where, args = "WHERE "+hostMayRun(1), []any{scope.Host}
	}
	rows, err := s.pool.Query(ctx, `SELECT j.name, j.created_at, j.schedule, j.time_zone, j.alert_after, j.alert_failures,
		j.expect_every, j.overdue_since, coalesce(j.overdue_reason, ''), coalesce(j.last_outcome, ''), j.next_run_at,
		(SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.status = 'succeeded' AND r.kind = 'backup'),
		coalesce((SELECT array_agg(status ORDER BY finished_at DESC) FROM (
			SELECT r.status, r.finished_at FROM runs r
			WHERE r.job_id = j.id AND r.finished_at IS NOT NULL AND r.status NOT IN ('paused', 'skipped') AND r.kind = 'backup'
			ORDER BY r.finished_at DESC LIMIT j.alert_failures) last), '{}'),
		(SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.finished_at IS NOT NULL AND r.kind = 'backup'),
		j.verify_schedule, j.verify_alert_after, j.verify_since,
		(SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.status = 'succeeded' AND r.kind = 'verify'),
		coalesce((SELECT r.status FROM runs r WHERE r.job_id = j.id AND r.kind = 'verify' AND r.finished_at IS NOT NULL
			ORDER BY r.finished_at DESC LIMIT 1), ''),
		(SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.kind = 'verify' AND r.drill_files > 0 AND r.status = 'succeeded'),
		coalesce((SELECT r.status FROM runs r WHERE r.job_id = j.id AND r.kind = 'verify' AND r.drill_files > 0 AND r.finished_at IS NOT NULL
			ORDER BY r.finished_at DESC LIMIT 1), ''),
		now()
		FROM jobs j `+where+` ORDER BY j.name`, args...)
	if err != nil {
		return nil, fmt.Errorf("read jobs to watch: %w", err)
	}
	defer rows.Close()
	var all []model.WatchFacts
	for rows.Next() {
		var f model.WatchFacts
		j := &f.Job
		var alertAfter, expectEvery, verifyAlertAfter *time.Duration
		if err := rows.Scan(&j.Name, &j.CreatedAt, &j.Schedule, &j.TimeZone, &alertAfter, &j.AlertFailures,
			&expectEvery, &j.OverdueSince, &j.OverdueReason, &j.LastOutcome, &j.NextRunAt,
			&f.LastSuccess, &f.Recent, &f.RecentEnd, &j.VerifySchedule, &verifyAlertAfter, &j.VerifySince, &f.LastVerified, &f.LastVerify, &f.LastDrilled, &f.LastDrill, &f.ReadAt); err != nil {
			return nil, fmt.Errorf("read jobs to watch: %w", err)
		}
		if alertAfter != nil {
			j.AlertAfter = *alertAfter
		}
		if expectEvery != nil {
			j.ExpectEvery = *expectEvery
		}
		if verifyAlertAfter != nil {
			j.VerifyAlertAfter = *verifyAlertAfter
		}
		all = append(all, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read jobs to watch: %w", err)
	}
	return all, nil
}

// JobMarkOverdueParams is the overdue episode JobMarkOverdue starts.
type JobMarkOverdueParams struct {
	Job    string
	Since  time.Time // when the job became overdue
	Reason string
	Host   string // the host of the event: the daemon that noticed
}

// JobMarkOverdue starts an overdue episode of p.Job: it records p.Since and p.Reason and writes
// the "overdue" event, in one statement. It reports false, writing nothing, when the job is overdue
// already (another daemon noticed first) or gone.
func (s *Store) JobMarkOverdue(ctx context.Context, p JobMarkOverdueParams) (bool, error) {
	var id *uuid.UUID
	err := s.pool.QueryRow(ctx, `
		WITH marked AS (
			UPDATE jobs SET overdue_since = $2, overdue_reason = $3
			WHERE name = $1 AND overdue_since IS NULL RETURNING name)
		INSERT INTO events (event, job_name, reason, host, details)
		SELECT 'overdue', name, $3, $4, jsonb_build_object('overdue_since', $2::timestamptz) FROM marked
		RETURNING id`, p.Job, p.Since, p.Reason, p.Host).Scan(&id)
	if err == pgx.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mark job %s overdue: %w", p.Job, err)
	}
	return true, nil
}

// JobClearOverdueParams is the overdue episode JobClearOverdue ends.
type JobClearOverdueParams struct {
	Job    string
	Reason string // why it recovered
	Host   string // the host of the event: the daemon that noticed
}

// JobClearOverdue ends p.Job's overdue episode with a "recovered" event, in one statement; false if
// it was not overdue.
func (s *Store) JobClearOverdue(ctx context.Context, p JobClearOverdueParams) (bool, error) {
	var id *uuid.UUID
	err := s.pool.QueryRow(ctx, `
		WITH episode AS (
			SELECT id, overdue_since, overdue_reason FROM jobs WHERE name = $1 AND overdue_since IS NOT NULL FOR UPDATE),
		cleared AS (
			UPDATE jobs j SET overdue_since = NULL, overdue_reason = NULL FROM episode
			WHERE j.id = episode.id AND j.overdue_since IS NOT NULL
			RETURNING j.name, episode.overdue_since, episode.overdue_reason)
		INSERT INTO events (event, job_name, reason, host, details)
		SELECT 'recovered', name, $2, $3, jsonb_build_object('overdue_since', overdue_since, 'overdue_reason', overdue_reason)
		FROM cleared RETURNING id`, p.Job, p.Reason, p.Host).Scan(&id)
	if err == pgx.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("clear job %s overdue: %w", p.Job, err)
	}
	return true, nil
}

// EventListParams says which events EventList returns.
type EventListParams struct {
	Job   string // "" every job
	After int64  // the events after this seq
	Limit int
}

// EventList returns the events of p.Job after p.After, oldest first, at most p.Limit.
func (s *Store) EventList(ctx context.Context, p EventListParams) ([]model.Event, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, seq, event, job_name, run_id, attempt, status, reason, at, host, details
		FROM events WHERE seq > $1 AND ($2 = '' OR job_name = $2) ORDER BY seq LIMIT $3`, p.After, p.Job, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (model.Event, error) {
		var e model.Event
		err := row.Scan(&e.ID, &e.Seq, &e.Event, &e.Job, &e.Run, &e.Attempt, &e.Status, &e.Reason, &e.At, &e.Host, &e.Details)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return events, nil
}

// AttemptListStalled lists host's running attempts, not yet marked stalled nor asked to stop or pause, whose
// progress figures have not moved for their job's stall_after (on the database's clock).
func (s *Store) AttemptListStalled(ctx context.Context, host string) ([]model.Stall, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT a.run_id, a.attempt_no, r.job_name, j.stall_after, j.stall_action, coalesce(a.progress_changed_at, a.started_at)
		FROM attempts a JOIN runs r ON r.id = a.run_id JOIN jobs j ON j.id = r.job_id
		WHERE a.host = $1 AND r.status = 'running' AND a.ended_at IS NULL AND a.started_at IS NOT NULL AND a.stalled_at IS NULL
		  AND r.stop_requested_at IS NULL AND r.paused_reason IS NULL
		  AND coalesce(a.progress_changed_at, a.started_at) < now() - j.stall_after
		ORDER BY a.run_id`, host)
	if err != nil {
		return nil, fmt.Errorf("read stalled runs: %w", err)
	}
	stalls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (model.Stall, error) {
		var st model.Stall
		err := row.Scan(&st.Run, &st.Attempt, &st.Job, &st.StallAfter, &st.StallAction, &st.Since)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("read stalled runs: %w", err)
	}
	return stalls, nil
}

// AttemptMarkStalledParams is the stall AttemptMarkStalled records.
type AttemptMarkStalledParams struct {
	Stall  model.Stall
	Reason string
	Host   string // the host of the event when the attempt names none: the daemon that noticed
}

// AttemptMarkStalled records that the attempt stalled, with its "stalled" event, and with
// StallStop asks its run to stop for p.Reason, all in one statement and once: marked is false if
// it was marked already or ended meanwhile. stopped reports whether the stop was asked for.
func (s *Store) AttemptMarkStalled(ctx context.Context, p AttemptMarkStalledParams) (marked, stopped bool, err error) {
	err = s.pool.QueryRow(ctx, `
		WITH marked AS (
			UPDATE attempts SET stalled_at = now()
			WHERE run_id = $1 AND attempt_no = $2 AND stalled_at IS NULL AND ended_at IS NULL
			RETURNING run_id, attempt_no, host),
		event AS (
			INSERT INTO events (event, job_name, run_id, attempt, status, reason, host, details)
			SELECT 'stalled', $3, run_id, attempt_no, 'running', $4, coalesce(nullif(host, ''), $6),
				jsonb_build_object('stall_action', $5::text, 'progress_since', $7::timestamptz)
			FROM marked RETURNING run_id),
		stop AS (
			UPDATE runs SET stop_requested_at = coalesce(stop_requested_at, clock_timestamp()), stop_reason = coalesce(stop_reason, $4)
			WHERE $5 = 'stop' AND id IN (SELECT run_id FROM event) AND status IN ('queued', 'running')
			RETURNING id)
		SELECT EXISTS (SELECT 1 FROM marked), EXISTS (SELECT 1 FROM stop)`,
		p.Stall.Run, p.Stall.Attempt, p.Stall.Job, p.Reason, p.Stall.StallAction, p.Host, p.Stall.Since).Scan(&marked, &stopped)
	if err != nil {
		return false, false, fmt.Errorf("mark run %s attempt %d stalled: %w", p.Stall.Run, p.Stall.Attempt, err)
	}
	if stopped {
		// The daemons stop it at once rather than at their next sweep.
		if err := notifyRun(ctx, s.pool, p.Stall.Run); err != nil {
			return marked, stopped, fmt.Errorf("notify the stop of run %s: %w", p.Stall.Run, err)
		}
	}
	return marked, stopped, nil
}
