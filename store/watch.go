package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// WatchFacts is what deciding whether a job is overdue reads of it.
type WatchFacts struct {
	Job         Job
	LastSuccess *time.Time // when its last succeeded run ended
	// Recent are the statuses of its last ended runs, newest first, as many as AlertFailures.
	Recent    []string
	RecentEnd *time.Time // when the newest of them ended
	ReadAt    time.Time  // the database's now() when they were read
}

// WatchFacts reads the facts of every job.
func (s *Store) WatchFacts(ctx context.Context) ([]WatchFacts, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+`,
		(SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.status = 'succeeded'),
		coalesce((SELECT array_agg(status ORDER BY finished_at DESC) FROM (
			SELECT r.status, r.finished_at FROM runs r
			WHERE r.job_id = j.id AND r.finished_at IS NOT NULL AND r.status <> 'paused'
			ORDER BY r.finished_at DESC LIMIT j.alert_failures) last), '{}'),
		(SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.finished_at IS NOT NULL),
		now()
		FROM jobs j ORDER BY j.name`)
	if err != nil {
		return nil, fmt.Errorf("read jobs to watch: %w", err)
	}
	defer rows.Close()
	var all []WatchFacts
	for rows.Next() {
		var f WatchFacts
		var extra [4]any
		extra[0], extra[1], extra[2], extra[3] = &f.LastSuccess, &f.Recent, &f.RecentEnd, &f.ReadAt
		j, err := scanJob(rowWithExtra{rows, extra[:]})
		if err != nil {
			return nil, fmt.Errorf("read jobs to watch: %w", err)
		}
		f.Job = j
		all = append(all, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read jobs to watch: %w", err)
	}
	return all, nil
}

// rowWithExtra scans a job's columns and then extra destinations from the same row.
type rowWithExtra struct {
	row   pgx.Row
	extra []any
}

func (r rowWithExtra) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra...)...) }

// MarkOverdue starts an overdue episode of job: it records since and reason and writes the
// "overdue" event, in one statement. It reports false, writing nothing, when the job is overdue
// already (another daemon noticed first) or gone.
func (s *Store) MarkOverdue(ctx context.Context, job string, since time.Time, reason, host string) (bool, error) {
	var id *uuid.UUID
	err := s.pool.QueryRow(ctx, `
		WITH marked AS (
			UPDATE jobs SET overdue_since = $2, overdue_reason = $3
			WHERE name = $1 AND overdue_since IS NULL RETURNING name)
		INSERT INTO events (event, job_name, reason, host, details)
		SELECT 'overdue', name, $3, $4, jsonb_build_object('overdue_since', $2::timestamptz) FROM marked
		RETURNING id`, job, since, reason, host).Scan(&id)
	if err == pgx.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mark job %s overdue: %w", job, err)
	}
	return true, nil
}

// ClearOverdue ends job's overdue episode with a "recovered" event, in one statement; false if
// it was not overdue.
func (s *Store) ClearOverdue(ctx context.Context, job, reason, host string) (bool, error) {
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
		FROM cleared RETURNING id`, job, reason, host).Scan(&id)
	if err == pgx.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("clear job %s overdue: %w", job, err)
	}
	return true, nil
}

// Event is one entry of the outbox.
type Event struct {
	ID      uuid.UUID
	Seq     int64
	Event   string
	Job     string
	Run     *uuid.UUID
	Attempt *int
	Status  string
	Reason  string
	At      time.Time
	Host    string
	Details json.RawMessage
}

// Events returns the events after seq, oldest first, at most limit, of job ("" every job).
func (s *Store) Events(ctx context.Context, job string, after int64, limit int) ([]Event, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, seq, event, job_name, run_id, attempt, status, reason, at, host, details
		FROM events WHERE seq > $1 AND ($2 = '' OR job_name = $2) ORDER BY seq LIMIT $3`, after, job, limit)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var e Event
		err := row.Scan(&e.ID, &e.Seq, &e.Event, &e.Job, &e.Run, &e.Attempt, &e.Status, &e.Reason, &e.At, &e.Host, &e.Details)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return events, nil
}
