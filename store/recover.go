package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
)

// recoveryLockClass is the first key of the advisory lock holdfast recover holds while it
// rebuilds the database ("hfrc"); LeaseAcquire and LeaseRenew take it shared, so that no
// daemon takes or renews its lease meanwhile.
const recoveryLockClass int32 = 0x68667263

// ErrRecovering means holdfast recover is rebuilding the database: no daemon takes its lease
// until it ends.
var ErrRecovering = errors.New("holdfast recover is rebuilding the database: no daemon takes its lease until it ends")

// LockRecovery takes the recovery's lock on a session of its own at addr (its Session), held
// until release: while it is held no daemon takes or renews its lease (LeaseAcquire,
// LeaseRenew). It fails if another recovery holds it.
func LockRecovery(ctx context.Context, addr Address) (release func(), err error) {
	conn, err := pgx.Connect(ctx, addr.Session())
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::int, 0)`, recoveryLockClass).Scan(&got); err != nil || !got {
		conn.Close(context.Background())
		if err == nil {
			err = errors.New("another holdfast recover is rebuilding the database")
		}
		return nil, fmt.Errorf("take the recovery's lock: %w", err)
	}
	// Unlocked before the session closes: a closing session's locks go when its server process
	// has ended, a moment after the client has left.
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock($1::int, 0)`, recoveryLockClass)
		conn.Close(ctx)
	}, nil
}

// RunRecordParams is a backup holdfast recover found in a repository: the newest snapshot of
// a job, with the run its tag names.
type RunRecordParams struct {
	Job string
	// ID is the run the snapshot's holdfast-run tag names, or OwnID for a snapshot without
	// one; OwnID, made from the snapshot, is taken instead when ID is a run of another job.
	ID, OwnID  uuid.UUID
	SnapshotID string
	// StartedAt and FinishedAt are the backup's start and end as restic recorded them in the
	// snapshot (its time for both when restic recorded no summary).
	StartedAt, FinishedAt time.Time
	BytesAdded            *int64
	BytesProcessed        *int64
	FilesProcessed        *int64
	Reason                string
	// Oldest is the time of the job's oldest snapshot: the job existed then, and a job's
	// creation is where the watch starts to expect its runs.
	Oldest time.Time
}

// RunRecord records a backup of p.Job that succeeded, as its snapshot shows, in a database
// holdfast recover rebuilds: a run with the trigger model.TriggerRecovered and no attempt (no
// unit of it is known), which becomes the job's last run unless a run of the job is live or
// ended later. It returns the run's id, or nil, writing no run, when the job knows the run
// already or a backup of the job succeeded at or after p.FinishedAt: what the database knows is
// never replaced. The job's creation is moved back to p.Oldest if that is earlier.
func (s *Store) RunRecord(ctx context.Context, p RunRecordParams) (*uuid.UUID, error) {
	var recorded *uuid.UUID
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var jobID int64
		if err := tx.QueryRow(ctx, `UPDATE jobs SET created_at = least(created_at, coalesce($2, created_at)) WHERE name = $1 RETURNING id`,
			p.Job, stamp(p.Oldest)).Scan(&jobID); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("job %s: %w", p.Job, ErrNotFound)
			}
			return err
		}
		id := p.ID
		for _, candidate := range []uuid.UUID{p.ID, p.OwnID} {
			var owner *int64
			err := tx.QueryRow(ctx, `SELECT job_id FROM runs WHERE id = $1`, candidate).Scan(&owner)
			if errors.Is(err, pgx.ErrNoRows) {
				id = candidate
				break
			}
			if err != nil {
				return err
			}
			if owner != nil && *owner == jobID || candidate == p.OwnID {
				return nil // known already
			}
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO runs (id, job_id, job_name, kind, trigger, status, created_at, started_at, finished_at, reason,
				snapshot_id, bytes_added, bytes_processed, files_processed)
			SELECT $1, $2, $3, 'backup', 'recovered', 'succeeded', $4, $4, $5, $6, $7, $8, $9, $10
			WHERE NOT EXISTS (SELECT 1 FROM runs WHERE job_id = $2 AND kind = 'backup' AND status = 'succeeded' AND finished_at >= $5)`,
			id, jobID, p.Job, p.StartedAt, p.FinishedAt, p.Reason, p.SnapshotID, p.BytesAdded, p.BytesProcessed,
			p.FilesProcessed)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		recorded = &id
		// The job's last run, unless one of its runs is live or ended later.
		_, err = tx.Exec(ctx, `
			UPDATE jobs j SET last_run_id = $2, last_outcome = 'succeeded'
			WHERE j.id = $1 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = j.last_run_id
				AND (r.finished_at IS NULL OR r.finished_at > $3))`, jobID, id, p.FinishedAt)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("record run %s of job %s: %w", p.ID, p.Job, err)
	}
	return recorded, nil
}

// RunCloseParams is how holdfast recover ends a run that was live in a database restored from
// a dump.
type RunCloseParams struct {
	ID     uuid.UUID
	Status string // a final status: succeeded (its snapshot is in the repository) or failed
	Reason string
	// SnapshotID and the figures are those of the run's snapshot, if one was found.
	SnapshotID     string
	FinishedAt     *time.Time // the snapshot's end; nil: now
	BytesAdded     *int64
	BytesProcessed *int64
	FilesProcessed *int64
}

// RunClose ends a live run, and its live attempt if it has one, as holdfast recover decided
// from what it found, with no lease: it runs while no daemon does. The run's open holds are
// released (recover re-bases the accounts on the repositories' measured size afterwards). It
// reports false, changing nothing, if the run is no longer live.
func (s *Store) RunClose(ctx context.Context, p RunCloseParams) (bool, error) {
	if model.Live(p.Status) {
		return false, fmt.Errorf("close run %s: %q is not a final status", p.ID, p.Status)
	}
	class := ""
	if p.Status == model.StatusFailed {
		class = "permanent"
	}
	var closed bool
	err := inTxGeneric(ctx, s.pool, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `
			WITH r AS (
				UPDATE runs SET status = $2, reason = $3, failure_class = $4, finished_at = coalesce($5, now()),
					snapshot_id = nullif($6, ''), bytes_added = $7, bytes_processed = $8, files_processed = $9,
					waiting_reason = NULL
				WHERE id = $1 AND status IN ('queued', 'running')
				RETURNING id, job_id),
			a AS (UPDATE attempts SET ended_at = now() WHERE run_id IN (SELECT id FROM r) AND ended_at IS NULL),
			j AS (UPDATE jobs SET last_outcome = $2 FROM r WHERE jobs.id = r.job_id AND jobs.last_run_id = r.id)
			SELECT count(*) FROM r`,
			p.ID, p.Status, p.Reason, class, p.FinishedAt, p.SnapshotID, p.BytesAdded, p.BytesProcessed,
			p.FilesProcessed).Scan(&n); err != nil || n == 0 {
			return err
		}
		closed = true
		// A backup that made its snapshot has its copy, as at any ending.
		if err := admitCopy(ctx, tx, model.Ending{RunID: p.ID, Status: p.Status, SnapshotID: p.SnapshotID}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO ledger_entries (account, kind, bytes, run_id, attempt_no, hold_id, actor, note)
			SELECT account, 'release', bytes, run_id, attempt_no, id, 'holdfast recover', 'the run was closed by holdfast recover'
			FROM open_holds WHERE run_id = $1`, p.ID); err != nil {
			return err
		}
		return notifyEnded(ctx, tx, p.ID)
	})
	if err != nil {
		return false, fmt.Errorf("close run %s: %w", p.ID, err)
	}
	return closed, nil
}

// AccountRebaseParams is what an account's repositories were measured to hold.
type AccountRebaseParams struct {
	Account string
	// Measured is each repository measured now, with its size.
	Measured map[string]int64
	// Unmeasured are the account's repositories that could not be measured (not local).
	Unmeasured []string
	Actor      string
}

// AccountRebase charges p.Account with what its repositories hold beyond what its entries
// charge (settled) and hold: one model.EntryRecovered entry, of 0 bytes when nothing is
// missing, so that the ledger says it was re-based. What the account's repositories hold is
// their latest measure: the ones measured now, and those an earlier re-basing measured of
// repositories a job of the account still writes (on another host, whose local repositories
// this one cannot measure), which the entry keeps. An
// account with a quota is charged at most its balance, and the entry's note says by how much
// the repositories exceed it.
func (s *Store) AccountRebase(ctx context.Context, p AccountRebaseParams) (model.LedgerEntry, error) {
	var e model.LedgerEntry
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		a, err := scanAccount(tx.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts a WHERE a.name = $1 FOR UPDATE`, p.Account))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("account %s: %w", p.Account, ErrNotFound)
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT measured FROM ledger_entries WHERE account = $1 AND kind = 'recovered' AND measured IS NOT NULL ORDER BY id`, p.Account)
		if err != nil {
			return err
		}
		earlier, err := pgx.CollectRows(rows, pgx.RowTo[map[string]int64])
		if err != nil {
			return err
		}
		// An earlier measure counts while a job of the account still writes its repository.
		rows, err = tx.Query(ctx, `SELECT DISTINCT repository FROM jobs WHERE account = $1`, p.Account)
		if err != nil {
			return err
		}
		current, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		measured := map[string]int64{}
		for _, m := range earlier {
			maps.Copy(measured, m)
		}
		maps.DeleteFunc(measured, func(repo string, _ int64) bool { return !slices.Contains(current, repo) })
		maps.Copy(measured, p.Measured)
		var total int64
		var parts []string
		for _, repo := range slices.Sorted(maps.Keys(measured)) {
			total += measured[repo]
			part := repo + " " + ledger.FormatSize(measured[repo])
			if _, fresh := p.Measured[repo]; !fresh {
				part += " (measured before)"
			}
			parts = append(parts, part)
		}
		charged := a.SettledBytes + a.HeldBytes
		bytes := max(0, total-charged)
		note := fmt.Sprintf("re-based by holdfast recover: %s measured, %s charged before", ledger.FormatSize(total), ledger.FormatSize(charged))
		if len(parts) > 0 {
			note += " (" + strings.Join(parts, ", ") + ")"
		}
		if len(p.Unmeasured) > 0 {
			note += "; not measured, not local: " + strings.Join(p.Unmeasured, ", ")
		}
		if !a.Unlimited && bytes > a.Balance() {
			note += fmt.Sprintf("; %s over the quota, not charged: grant more with holdfast account grant %s",
				ledger.FormatSize(bytes-max(0, a.Balance())), a.Name)
			bytes = max(0, a.Balance())
		}
		return tx.QueryRow(ctx, `INSERT INTO ledger_entries AS e (account, kind, bytes, actor, note, measured)
			VALUES ($1, 'recovered', $2, $3, $4, $5) RETURNING `+entryColumns,
			p.Account, bytes, p.Actor, note, measured).Scan(entryDest(&e)...)
	})
	if err != nil {
		return model.LedgerEntry{}, fmt.Errorf("re-base account %s: %w", p.Account, err)
	}
	return e, nil
}
