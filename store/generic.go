package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SQL that queryGeneric sends around a read, in the one round trip and transaction of a batch:
// a failure anywhere rolls the setting back with the rest.
const (
	genericPlans = `SET plan_cache_mode = force_generic_plan`
	defaultPlans = `RESET plan_cache_mode`
)

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
