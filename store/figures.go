package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/model"
)

// FiguresGet reads the figures.
func (s *Store) FiguresGet(ctx context.Context) (model.Figures, error) {
	f := model.Figures{Live: map[string]int64{model.StatusQueued: 0, model.StatusRunning: 0}}
	// One read of the jobs: their figures are kept as their runs end and their inventories
	// change (migration 00029), so a scrape costs the fleet's jobs, not their history.
	rows, err := s.pool.Query(ctx, `
		SELECT j.name, j.last_success_at, j.last_end_at, j.last_bytes_added, j.overdue_since IS NOT NULL,
			coalesce(c.live, 0), j.last_verified_at, j.last_verify_ok, j.last_restored_at
		FROM jobs j LEFT JOIN (SELECT job_name, sum(live)::bigint AS live FROM snapshot_counts GROUP BY job_name) c
			ON c.job_name = j.name
		ORDER BY j.name`)
	if err != nil {
		return f, fmt.Errorf("read job figures: %w", err)
	}
	f.Jobs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (model.JobFigures, error) {
		var j model.JobFigures
		err := row.Scan(&j.Name, &j.LastSuccess, &j.LastRunEnd, &j.LastBytesAdded, &j.Overdue, &j.Snapshots,
			&j.LastVerifySuccess, &j.LastVerifyOK, &j.LastRestoreSuccess)
		return j, err
	})
	if err != nil {
		return f, fmt.Errorf("read job figures: %w", err)
	}
	rows, err = s.pool.Query(ctx, `SELECT status, count(*) FROM runs WHERE status IN ('queued', 'running') GROUP BY status`)
	if err != nil {
		return f, fmt.Errorf("count live runs: %w", err)
	}
	var status string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { f.Live[status] = n; return nil }); err != nil {
		return f, fmt.Errorf("count live runs: %w", err)
	}
	if f.Accounts, err = s.AccountList(ctx, ""); err != nil {
		return f, err
	}
	if f.DeliveriesPending, f.DeliveriesFailed, err = s.DeliveryCount(ctx); err != nil {
		return f, err
	}
	return f, nil
}
