package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/setting"
)

// jobColumns reads a job aliased as j.
const jobColumns = `j.id, j.name, j.engine, j.repository, j.password_file, j.paths, j.excludes, j.run_as_user,
	j.run_as_group, j.nice, j.io_scheduling_class, j.runtime_max, j.created_at, coalesce(j.last_outcome, ''), j.last_run_id,
	j.command, j.schedule, j.time_zone, j.catch_up, j.next_run_at, j.missed_slots, j.overlap_skips, j.last_skip_at,
	coalesce(j.last_skip_why, ''), j.retry_max, j.retry_backoff, j.windows, j.priority, coalesce(j.depends_on, ''),
	j.retention, j.retention_max_delete, j.retention_min_keep, j.prune_schedule, j.next_prune_at, j.account, j.max_added,
	coalesce(j.admission_error, ''), j.admission_retry_at, j.env_file, j.limit_upload_kib,
	j.alert_after, j.alert_failures, j.expect_every, j.overdue_since, coalesce(j.overdue_reason, ''), j.stall_after, j.stall_action,
	coalesce(j.host, ''), j.verify_schedule, j.next_verify_at, j.verify_read_data, j.verify_alert_after, j.verify_since,
	j.drill_schedule, j.next_drill_at, j.drill_files, j.before_hooks, j.hook_skips, j.after_hooks, j.stdin_from, j.stdin_filename, j.copy_to, j.copy_password_file, j.copy_env_file, j.catalog, j.fs_snapshot,
	j.append_only, j.prune_host, j.prune_repository, j.prune_env_file`

func scanJob(row pgx.Row) (model.Job, error) {
	var j model.Job
	var runtimeMax, alertAfter, expectEvery, verifyAlertAfter *time.Duration
	err := row.Scan(&j.ID, &j.Name, &j.Engine, &j.Repository, &j.PasswordFile, &j.Paths, &j.Excludes,
		&j.User, &j.Group, &j.Nice, &j.IOSchedulingClass, &runtimeMax, &j.CreatedAt, &j.LastOutcome, &j.LastRunID,
		&j.Command, &j.Schedule, &j.TimeZone, &j.CatchUp, &j.NextRunAt, &j.MissedSlots, &j.OverlapSkips, &j.LastSkipAt,
		&j.LastSkipWhy, &j.RetryMax, &j.RetryBackoff, &j.Windows, &j.Priority, &j.DependsOn,
		&j.Retention.Policy, &j.Retention.MaxDelete, &j.Retention.MinKeep, &j.Prune.Schedule, &j.Prune.NextAt, &j.Account, &j.MaxAdded,
		&j.AdmissionError, &j.AdmissionRetryAt, &j.EnvFile, &j.LimitUploadKiB,
		&alertAfter, &j.AlertFailures, &expectEvery, &j.OverdueSince, &j.OverdueReason, &j.StallAfter, &j.StallAction,
		&j.Host, &j.Verify.Schedule, &j.Verify.NextAt, &j.Verify.ReadData, &verifyAlertAfter, &j.Verify.Since,
		&j.Drill.Schedule, &j.Drill.NextAt, &j.Drill.Files, &j.Backup.BeforeHooks, &j.Backup.HookSkips, &j.Backup.AfterHooks, &j.Backup.StdinFrom, &j.Backup.StdinFilename, &j.Copy.To, &j.Copy.PasswordFile, &j.Copy.EnvFile, &j.Backup.Catalog, &j.Backup.FSSnapshot,
		&j.Prune.AppendOnly, &j.Prune.Host, &j.Prune.Repository, &j.Prune.EnvFile)
	for _, d := range []struct {
		to   *time.Duration
		from *time.Duration
	}{{&j.RuntimeMax, runtimeMax}, {&j.AlertAfter, alertAfter}, {&j.ExpectEvery, expectEvery}, {&j.Verify.AlertAfter, verifyAlertAfter}} {
		if d.from != nil {
			*d.to = *d.from
		}
	}
	return j, err
}

// jobSettings are the columns an operator sets, in the order of settingValues.
const jobSettings = `engine, repository, password_file, paths, excludes, run_as_user, run_as_group,
	nice, io_scheduling_class, runtime_max, command, schedule, time_zone, catch_up, next_run_at, retry_max,
	retry_backoff, windows, priority, depends_on, retention, retention_max_delete, retention_min_keep,
	prune_schedule, next_prune_at, account, max_added, env_file, limit_upload_kib,
	alert_after, alert_failures, expect_every, stall_after, stall_action, host,
	verify_schedule, next_verify_at, verify_read_data, verify_alert_after, verify_since,
	drill_schedule, next_drill_at, drill_files, before_hooks, after_hooks, stdin_from, stdin_filename, copy_to, copy_password_file, copy_env_file, catalog, fs_snapshot,
	append_only, prune_host, prune_repository, prune_env_file`

func settingValues(j model.Job) []any {
	return []any{j.Engine, j.Repository, j.PasswordFile, nonNil(j.Paths), nonNil(j.Excludes), j.User, j.Group,
		j.Nice, j.IOSchedulingClass, durationToInterval(j.RuntimeMax), nonNil(j.Command), j.Schedule, j.TimeZone,
		j.CatchUp, j.NextRunAt, j.RetryMax, j.RetryBackoff, nonNil(j.Windows), j.Priority, nullIfEmpty(j.DependsOn),
		nilIfEmpty(j.Retention.Policy), cmp.Or(j.Retention.MaxDelete, retention.DefaultMaxDeleteShare), j.Retention.MinKeep,
		j.Prune.Schedule, j.Prune.NextAt, cmp.Or(j.Account, DefaultAccount), j.MaxAdded, j.EnvFile, j.LimitUploadKiB,
		durationToInterval(j.AlertAfter), j.AlertFailures, durationToInterval(j.ExpectEvery),
		cmp.Or(j.StallAfter, model.DefaultStallAfter), cmp.Or(j.StallAction, model.StallAlert), nullIfEmpty(j.Host),
		j.Verify.Schedule, j.Verify.NextAt, j.Verify.ReadData, durationToInterval(j.Verify.AlertAfter), j.Verify.Since,
		j.Drill.Schedule, j.Drill.NextAt, j.Drill.Files, nonNil(j.Backup.BeforeHooks), nonNil(j.Backup.AfterHooks), j.Backup.StdinFrom, j.Backup.StdinFilename, j.Copy.To, j.Copy.PasswordFile, j.Copy.EnvFile, j.Backup.Catalog, j.Backup.FSSnapshot,
		j.Prune.AppendOnly, j.Prune.Host, j.Prune.Repository, j.Prune.EnvFile}
}

// settingParams returns n placeholders "$from, ..." for the settings.
func settingParams(from int) string {
	n := len(settingValues(model.Job{}))
	params := make([]string, n)
	for i := range params {
		params[i] = "$" + strconv.Itoa(from+i)
	}
	return strings.Join(params, ", ")
}

func nilIfEmpty(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return raw
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// JobCreate inserts a job; the caller has validated it. The daemons that may run it are told,
// so that its first slot is admitted ahead as any other.
func (s *Store) JobCreate(ctx context.Context, j model.Job) (model.Job, error) {
	var created model.Job
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if created, err = createJob(ctx, tx, j); err != nil {
			return err
		}
		return notifyHost(ctx, tx, created.Host)
	})
	return created, err
}

// querier is what runs one statement: the pool, or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func createJob(ctx context.Context, q querier, j model.Job) (model.Job, error) {
	row := q.QueryRow(ctx, `
		INSERT INTO jobs AS j (name, `+jobSettings+`)
		VALUES ($1, `+settingParams(2)+`)
		RETURNING `+jobColumns, append([]any{j.Name}, settingValues(j)...)...)
	created, err := scanJob(row)
	if isUniqueViolation(err) {
		return model.Job{}, fmt.Errorf("job %q: %w", j.Name, ErrJobExists)
	}
	if err = unknownAccount(err, j.Account); errors.Is(err, ErrNotFound) {
		return model.Job{}, err
	}
	if err != nil {
		return model.Job{}, fmt.Errorf("create job %s: %w", j.Name, err)
	}
	return created, nil
}

// JobUpdate changes a job's settings: edit receives the stored job and changes it in place;
// validate checks the result. Both run inside the transaction that holds the job's row lock,
// and the daemons are woken to pick up a new schedule.
func (s *Store) JobUpdate(ctx context.Context, name string, edit func(*model.Job) error) (model.Job, error) {
	var updated model.Job
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		updated, err = updateJob(ctx, tx, name, edit)
		return err
	})
	if err != nil {
		return model.Job{}, wrap(err, "update job %s", name)
	}
	return updated, nil
}

func updateJob(ctx context.Context, tx pgx.Tx, name string, edit func(*model.Job) error) (model.Job, error) {
	j, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs j WHERE j.name = $1 FOR UPDATE`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return model.Job{}, fmt.Errorf("job %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return model.Job{}, err
	}
	copyTo := j.Copy.To
	if err := edit(&j); err != nil {
		return model.Job{}, err
	}
	if j.Copy.To != copyTo {
		// A queued copy, or a forget of the copy's plan, works on the copy repository it was admitted for.
		var live uuid.UUID
		err := tx.QueryRow(ctx, `SELECT id FROM runs WHERE job_id = $1 AND on_copy AND status IN ('queued', 'running') LIMIT 1`, j.ID).Scan(&live)
		if err == nil {
			return model.Job{}, &ConflictError{Msg: setting.Sprintf("job %s has a live run %s on its copy repository: wait for it, or stop it (holdfast run stop %s), before {Job.Copy.To} changes", j.Name, live, live)}
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return model.Job{}, err
		}
	}
	updated, err := scanJob(tx.QueryRow(ctx, `
		UPDATE jobs AS j SET (`+jobSettings+`) = (`+settingParams(2)+`)
		WHERE j.id = $1
		RETURNING `+jobColumns, append([]any{j.ID}, settingValues(j)...)...))
	if err != nil {
		return model.Job{}, unknownAccount(err, j.Account)
	}
	crashpoint.At("job-edit-before-commit")
	return updated, notifyHost(ctx, tx, updated.Host)
}

// JobGet returns the named job or ErrNotFound.
func (s *Store) JobGet(ctx context.Context, name string) (model.Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs j WHERE j.name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return model.Job{}, fmt.Errorf("job %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return model.Job{}, fmt.Errorf("read job %s: %w", name, err)
	}
	return j, nil
}

// JobList lists all jobs by name.
func (s *Store) JobList(ctx context.Context) ([]model.Job, error) {
	return s.jobs(ctx, "")
}

// JobListForHost lists by name the jobs the daemon of host may run: those pinned to it and the
// any-host ones (through jobs_host, not a read of the fleet's).
func (s *Store) JobListForHost(ctx context.Context, host string) ([]model.Job, error) {
	return s.jobs(ctx, "WHERE "+hostMayRun(1), host)
}

// hostMayRun is the condition that job j (jobs j) is one the host named by parameter $n may
// run: pinned to it, or any-host. Every read of a host's jobs uses it, through jobs_host.
func hostMayRun(n int) string { return fmt.Sprintf("(j.host = $%d OR j.host IS NULL)", n) }

func (s *Store) jobs(ctx context.Context, where string, args ...any) ([]model.Job, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs j `+where+` ORDER BY j.name`, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Job, error) { return scanJob(r) })
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// JobDelete deletes a job that has no live run; its runs stay as history under the job's name.
func (s *Store) JobDelete(ctx context.Context, name string) error {
	return inTx(ctx, s.pool, func(tx pgx.Tx) error { return removeJob(ctx, tx, name) })
}

func removeJob(ctx context.Context, tx pgx.Tx, name string) error {
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
	crashpoint.At("job-remove-before-commit")
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
