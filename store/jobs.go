package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Job is a backup job as stored.
type Job struct {
	ID                int64
	Name              string
	Engine            string
	Repository        string
	PasswordFile      string
	Paths             []string
	Excludes          []string
	User              string
	Group             string
	Nice              *int
	IOSchedulingClass string
	RuntimeMax        time.Duration // 0 = no limit
	CreatedAt         time.Time
	LastOutcome       string
	LastRunID         *uuid.UUID
}

// jobColumns reads a job aliased as j.
const jobColumns = `j.id, j.name, j.engine, j.repository, j.password_file, j.paths, j.excludes, j.run_as_user,
	j.run_as_group, j.nice, j.io_scheduling_class, j.runtime_max, j.created_at, coalesce(j.last_outcome, ''), j.last_run_id`

func scanJob(row pgx.Row) (Job, error) {
	var j Job
	var runtimeMax *time.Duration
	err := row.Scan(&j.ID, &j.Name, &j.Engine, &j.Repository, &j.PasswordFile, &j.Paths, &j.Excludes,
		&j.User, &j.Group, &j.Nice, &j.IOSchedulingClass, &runtimeMax, &j.CreatedAt, &j.LastOutcome, &j.LastRunID)
	if runtimeMax != nil {
		j.RuntimeMax = *runtimeMax
	}
	return j, err
}

// CreateJob inserts a job; the caller has validated it.
func (s *Store) CreateJob(ctx context.Context, j Job) (Job, error) {
	row := s.pool.QueryRow(ctx, `
		INSERT INTO jobs AS j (name, engine, repository, password_file, paths, excludes, run_as_user, run_as_group,
			nice, io_scheduling_class, runtime_max)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		RETURNING `+jobColumns,
		j.Name, j.Engine, j.Repository, j.PasswordFile, j.Paths, nonNil(j.Excludes), j.User, j.Group,
		j.Nice, j.IOSchedulingClass, durationToInterval(j.RuntimeMax))
	created, err := scanJob(row)
	if isUniqueViolation(err) {
		return Job{}, fmt.Errorf("job %q: %w", j.Name, ErrJobExists)
	}
	if err != nil {
		return Job{}, fmt.Errorf("create job %s: %w", j.Name, err)
	}
	return created, nil
}

// JobByName returns the named job or ErrNotFound.
func (s *Store) JobByName(ctx context.Context, name string) (Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs j WHERE j.name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, fmt.Errorf("job %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("read job %s: %w", name, err)
	}
	return j, nil
}

// Jobs lists all jobs by name.
func (s *Store) Jobs(ctx context.Context) ([]Job, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs j ORDER BY j.name`)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) { return scanJob(r) })
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// RemoveJob deletes a job that has no live run; its runs stay as history under the job's name.
func (s *Store) RemoveJob(ctx context.Context, name string) error {
	return inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var id int64
		err := tx.QueryRow(ctx, `SELECT id FROM jobs WHERE name = $1 FOR UPDATE`, name).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %q: %w", name, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("remove job %s: %w", name, err)
		}
		live, found, err := liveRunOf(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("remove job %s: %w", name, err)
		}
		if found {
			return &ConflictError{Msg: fmt.Sprintf("job %s has a live run %s: stop it first (holdfast run stop %s)", name, live, live)}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM jobs WHERE id = $1`, id); err != nil {
			return fmt.Errorf("remove job %s: %w", name, err)
		}
		return nil
	})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
