package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/model"
)

// JobEdit is an update of a stored job: Edit receives the job as stored, under its row lock, and
// changes it in place; Fields are the settings it changes, for the record.
type JobEdit struct {
	Name   string
	Fields []string
	Edit   func(*model.Job) error
}

// ConfigApplyParams is a set of changes made from configuration files, all or none.
type ConfigApplyParams struct {
	Create []model.Job // validated by the caller
	Update []JobEdit
	Delete []string // jobs to remove; one with a live run refuses the whole set
	// Accounts to add, and changes of existing ones; accounts are never removed (their ledger is
	// history). They come first, so that a job created here may be charged to one.
	CreateAccounts []AccountCreateParams
	UpdateAccounts []AccountChange
	// Notification targets to add, to change (found by name) and to remove.
	CreateTargets, UpdateTargets []model.Target
	DeleteTargets                []string
	// Source names the files the changes come from, Hash their content, Actor who applied them:
	// recorded with each job changed (JobChangeList).
	Source, Hash, Actor string
}

// ConfigApply makes the changes of a in one transaction: if any of them is refused (a job that
// exists already, is gone, or has a live run), none is made. The daemons are woken once.
func (s *Store) ConfigApply(ctx context.Context, a ConfigApplyParams) error {
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		record := func(name, action string, fields []string) error {
			_, err := tx.Exec(ctx, `INSERT INTO job_changes (job_name, actor, action, fields, source, hash)
				VALUES ($1, $2, $3, $4, $5, $6)`, name, a.Actor, action, nonNil(fields), a.Source, a.Hash)
			return err
		}
		for _, acct := range a.CreateAccounts {
			acct.Actor = a.Actor
			if _, err := createAccount(ctx, tx, acct); err != nil {
				return err
			}
		}
		for _, c := range a.UpdateAccounts {
			if c.Grant > 0 {
				if _, err := grant(ctx, tx, c.Name, c.Grant, a.Actor, "holdfast apply: quota raised in "+a.Source); err != nil {
					return err
				}
			}
			if c.SetAllowance {
				if _, err := tx.Exec(ctx, `UPDATE accounts SET allowance_bytes = $2, allowance_period = nullif($3, '') WHERE name = $1`,
					c.Name, c.Allowance, c.Period); err != nil {
					return fmt.Errorf("change the allowance of account %s: %w", c.Name, err)
				}
			}
		}
		for _, j := range a.Create {
			if _, err := createJob(ctx, tx, j); err != nil {
				return err
			}
			if err := record(j.Name, "create", nil); err != nil {
				return err
			}
		}
		for _, e := range a.Update {
			if _, err := updateJob(ctx, tx, e.Name, e.Edit); err != nil {
				return err
			}
			if err := record(e.Name, "update", e.Fields); err != nil {
				return err
			}
		}
		// A target names its job by name only: the order of targets and jobs does not matter.
		for _, name := range a.DeleteTargets {
			if err := removeTarget(ctx, tx, name); err != nil {
				return err
			}
		}
		for _, t := range a.CreateTargets {
			if err := addTarget(ctx, tx, t); err != nil {
				return err
			}
		}
		for _, t := range a.UpdateTargets {
			tag, err := tx.Exec(ctx, `UPDATE notify_targets SET kind = $2, url = $3, secret_file = $4, command = $5,
				job_name = nullif($6, ''), events = $7 WHERE name = $1`, t.Name, t.Kind, t.URL, t.SecretFile, nonNil(t.Command), t.Job, t.Events)
			if err != nil {
				return fmt.Errorf("change notification target %s: %w", t.Name, err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("notification target %s: %w", t.Name, ErrNotFound)
			}
		}
		for _, name := range a.Delete {
			if err := removeJob(ctx, tx, name); err != nil {
				return err
			}
			if err := record(name, "delete", nil); err != nil {
				return err
			}
		}
		return notifyHost(ctx, tx, "")
	})
	if err != nil {
		return wrap(err, "apply configuration")
	}
	return nil
}

// AccountChange is a change of an existing account: a grant that raises its quota, and its
// allowance set anew.
type AccountChange struct {
	Name         string
	Grant        int64 // 0: none
	SetAllowance bool
	Allowance    *int64
	Period       string
}

// JobChangeList lists the newest limit recorded changes of the named job, newest first.
func (s *Store) JobChangeList(ctx context.Context, name string, limit int) ([]model.JobChange, error) {
	rows, err := s.pool.Query(ctx, `SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), actor, action, fields, source, hash
		FROM job_changes WHERE job_name = $1 ORDER BY id DESC LIMIT $2`, name, limit)
	if err != nil {
		return nil, fmt.Errorf("changes of job %s: %w", name, err)
	}
	changes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.JobChange, error) {
		var c model.JobChange
		return c, r.Scan(&c.At, &c.Actor, &c.Action, &c.Fields, &c.Source, &c.Hash)
	})
	if err != nil {
		return nil, fmt.Errorf("changes of job %s: %w", name, err)
	}
	return changes, nil
}

// JobLiveRun returns the named job's live run, if it has one.
func (s *Store) JobLiveRun(ctx context.Context, job string) (uuid.UUID, bool, error) {
	var id uuid.UUID
	err := s.pool.QueryRow(ctx, `SELECT r.id FROM runs r JOIN jobs j ON j.id = r.job_id
		WHERE j.name = $1 AND r.status IN ('queued', 'running') LIMIT 1`, job).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, false, nil
	}
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("live run of job %s: %w", job, err)
	}
	return id, true, nil
}
