package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/model"
)

// HistoryCompact removes the history that ended before before, each kind in transactions of at
// most batch rows, so that no lock is held long: retention plans; ended runs with their
// attempts and ledger entries; grants; events with their delivered deliveries. What the removed
// ledger entries granted and settled is added to their account's checkpoint in the same
// transaction, so every balance stays exact (the ledger refuses any other delete).
//
// It keeps what is still read: a job's last run, its newest ended runs of each kind (and of its
// drills), as many as its --alert-failures, and its five newest that succeeded, a paused run
// (it may be resumed), a run whose retry or retention plan is kept, a run with an open hold or
// a ledger entry newer than before, and an event whose delivery is pending or failed. Two
// compactions at once each take other rows (SKIP LOCKED) and add to the checkpoint in turn.
func (s *Store) HistoryCompact(ctx context.Context, before time.Time, batch int) (model.Compacted, error) {
	var c model.Compacted
	if batch <= 0 {
		return c, fmt.Errorf("compact history: batch %d: want at least 1", batch)
	}
	steps := []struct {
		what string
		do   func(pgx.Tx) (int64, error)
	}{
		{"retention plans", func(tx pgx.Tx) (int64, error) {
			tag, err := tx.Exec(ctx, `
				DELETE FROM retention_plans WHERE id IN (
					SELECT p.id FROM retention_plans p WHERE p.created_at < $1
					  AND (p.run_id IS NULL OR EXISTS (SELECT 1 FROM runs r WHERE r.id = p.run_id AND r.finished_at < $1))
					ORDER BY p.created_at LIMIT $2)`, before, batch)
			c.Plans += tag.RowsAffected()
			return tag.RowsAffected(), err
		}},
		{"runs", func(tx pgx.Tx) (int64, error) { return compactRuns(ctx, tx, before, batch, &c) }},
		{"grants", func(tx pgx.Tx) (int64, error) { return compactGrants(ctx, tx, before, batch, &c) }},
		{"events", func(tx pgx.Tx) (int64, error) {
			var events, deliveries int64
			err := tx.QueryRow(ctx, `
				WITH e AS (
					SELECT id FROM events WHERE at < $1
					  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.state <> 'delivered')
					ORDER BY at LIMIT $2),
				d AS (DELETE FROM deliveries WHERE event_id IN (SELECT id FROM e) RETURNING 1),
				gone AS (DELETE FROM events WHERE id IN (SELECT id FROM e) RETURNING 1)
				SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM d)`, before, batch).Scan(&events, &deliveries)
			c.Events += events
			c.Deliveries += deliveries
			return events, err
		}},
	}
	for _, step := range steps {
		for {
			var n int64
			err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
				var err error
				n, err = step.do(tx)
				return err
			})
			if err != nil {
				return c, fmt.Errorf("compact history: %s: %w", step.what, err)
			}
			if n < int64(batch) {
				break
			}
		}
	}
	return c, nil
}

// compactRuns removes up to batch runs that may go, their attempts and ledger entries, and
// adds what their entries settled to the accounts' checkpoints.
func compactRuns(ctx context.Context, tx pgx.Tx, before time.Time, batch int, c *model.Compacted) (int64, error) {
	rows, err := tx.Query(ctx, `
		SELECT r.id FROM runs r
		WHERE r.status NOT IN ('queued', 'running', 'paused') AND r.finished_at < $1
		  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.last_run_id = r.id)
		  -- A retry goes first (it ended later): the run it retried goes in a later batch.
		  AND NOT EXISTS (SELECT 1 FROM runs n WHERE n.retry_of = r.id)
		  AND NOT EXISTS (SELECT 1 FROM retention_plans p WHERE p.run_id = r.id)
		  AND NOT EXISTS (SELECT 1 FROM ledger_entries e WHERE e.run_id = r.id AND (e.created_at >= $1
			OR e.kind = 'hold' AND NOT EXISTS (SELECT 1 FROM ledger_entries x WHERE x.hold_id = e.id)))
		  -- What the watch, status, metrics and the budget estimate read of a job: its newest
		  -- ended runs of each kind (and of its drills), as many as its --alert-failures, and its
		  -- five newest that succeeded. Fewer than that: none goes.
		  AND (r.job_id IS NULL OR r.finished_at < (
				SELECT n.finished_at FROM runs n
				WHERE n.job_id = r.job_id AND n.kind = r.kind AND (n.drill_files > 0) = (r.drill_files > 0)
				  AND n.finished_at IS NOT NULL AND n.status NOT IN ('paused', 'skipped')
				ORDER BY n.finished_at DESC
				OFFSET (SELECT greatest(j.alert_failures, 1) - 1 FROM jobs j WHERE j.id = r.job_id) LIMIT 1)
			AND (r.status <> 'succeeded' OR r.finished_at < (
				SELECT n.finished_at FROM runs n
				WHERE n.job_id = r.job_id AND n.kind = r.kind AND (n.drill_files > 0) = (r.drill_files > 0)
				  AND n.status = 'succeeded'
				ORDER BY n.finished_at DESC OFFSET 4 LIMIT 1)))
		ORDER BY r.finished_at LIMIT $2
		FOR UPDATE OF r SKIP LOCKED`, before, batch)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	n, err := foldEntries(ctx, tx, "run_id = ANY($1)", ids, before)
	if err != nil {
		return 0, err
	}
	c.LedgerEntries += n
	tag, err := tx.Exec(ctx, `DELETE FROM runs WHERE id = ANY($1)`, ids)
	if err != nil {
		return 0, err
	}
	c.Runs += tag.RowsAffected()
	return int64(len(ids)), nil
}

// compactGrants removes up to batch grants older than before, adding them to the accounts'
// checkpoints.
func compactGrants(ctx context.Context, tx pgx.Tx, before time.Time, batch int, c *model.Compacted) (int64, error) {
	// Locked, so that two compactions never fold one grant twice.
	rows, err := tx.Query(ctx, `SELECT id FROM ledger_entries WHERE kind = 'grant' AND created_at < $1 ORDER BY id LIMIT $2
		FOR UPDATE SKIP LOCKED`, before, batch)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	n, err := foldEntries(ctx, tx, "id = ANY($1)", ids, before)
	c.LedgerEntries += n
	return int64(len(ids)), err
}

// foldEntries adds what the ledger entries that match where (a condition on $1, which is arg)
// granted and settled to their accounts' checkpoints as of before, then removes them, as the
// ledger's guard lets only a compaction do. It returns how many it removed.
func foldEntries(ctx context.Context, tx pgx.Tx, where string, arg any, before time.Time) (int64, error) {
	if _, err := tx.Exec(ctx, `SELECT set_config('holdfast.compaction', 'on', true)`); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO ledger_checkpoints (account, as_of, granted_bytes, settled_bytes, entries)
		SELECT account, $2, coalesce(sum(bytes) FILTER (WHERE kind = 'grant'), 0),
			coalesce(sum(bytes) FILTER (WHERE kind IN ('settle', 'recovered')), 0), count(*)
		FROM ledger_entries WHERE `+where+` GROUP BY account
		ON CONFLICT (account) DO UPDATE SET as_of = greatest(ledger_checkpoints.as_of, excluded.as_of),
			granted_bytes = ledger_checkpoints.granted_bytes + excluded.granted_bytes,
			settled_bytes = ledger_checkpoints.settled_bytes + excluded.settled_bytes,
			entries = ledger_checkpoints.entries + excluded.entries`, arg, before); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, `DELETE FROM ledger_entries WHERE `+where, arg)
	return tag.RowsAffected(), err
}

// Now is the database's clock: history is compacted against it, not a host's.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return now, fmt.Errorf("read the database's clock: %w", err)
	}
	return now, nil
}
