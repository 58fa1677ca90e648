package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SQL that queryGeneric sends around a read, in the one round trip and transaction of a batch:
// a failure anywhere rolls the setting back with the rest.
const (
	genericPlans = `SET plan_cache_mode = force_generic_plan`
	defaultPlans = `RESET plan_cache_mode`
	// genericTx begins a transaction whose statements all run with their generic plans, in the
	// BEGIN's own round trip (a simple query may hold two statements); SET LOCAL ends with it.
	genericTx = `BEGIN; SET LOCAL plan_cache_mode = force_generic_plan`
)

// inTxGeneric is inTx for a transaction on a run's way from its admission to its end, whose
// statements are each a lookup by key: planned anew at every execution, as the server chose
// for most of them, their planning took longer than their execution (0.2 to 0.7 ms each in
// the admission of `run start`), and it is paid again by every run.
func inTxGeneric(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{BeginQuery: genericTx}, fn)
}

// queryGeneric is pool.Query for a read that every daemon makes at every pass and whose planning
// costs far more than its execution: the server plans it once per connection (its generic plan)
// instead of at every execution, as it chose to. In the simulated fleet at 600 hosts, planning
// was two thirds of a daemon's database time; AttemptListSuperseded's read planned in 0.7 ms and ran in
// 0.01. Not every read gains: the sweep's read of live runs took twice as long with its generic
// plan as it did planned anew each time. Only reads whose generic plan keeps to the indexes go
// through it, as TestDaemonReadsUseIndexes checks by executing them with it. Closing the rows
// ends the batch.
func (s *Store) queryGeneric(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(genericPlans)
	b.Queue(sql, args...)
	b.Queue(defaultPlans)
	results := s.pool.SendBatch(ctx, b)
	if _, err := results.Exec(); err != nil {
		results.Close()
		return nil, err
	}
	rows, err := results.Query()
	if err != nil {
		results.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, results: results}, nil
}

// queryRowGeneric is pool.QueryRow through queryGeneric.
func (s *Store) queryRowGeneric(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := s.queryGeneric(ctx, sql, args...)
	return genericRow{rows: rows, err: err}
}

// genericRow is the first row of a read through queryGeneric, as pgx.Row reads it: no row is
// pgx.ErrNoRows.
type genericRow struct {
	rows pgx.Rows
	err  error
}

func (r genericRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// batchRows are the rows of the read in a batch, whose last results Close reads. Both closes
// may be called again: pgx makes them no-ops.
type batchRows struct {
	pgx.Rows
	results pgx.BatchResults
}

func (r *batchRows) Close() {
	r.Rows.Close()
	// The setting's reset: had it failed, the batch's transaction would have undone the setting.
	_ = r.results.Close()
}
