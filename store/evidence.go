package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/model"
)

// AttemptEndingsSinceLastStart returns the attempts of jobs on repository (of an engine that keeps one) that ended after the
// last start of any attempt on it, oldest first: the endings no unit on that repository has run
// after. Attempts that never had a unit are left out: they ran nothing.
func (s *Store) AttemptEndingsSinceLastStart(ctx context.Context, repository string) ([]model.AttemptEnd, error) {
	rows, err := s.pool.Query(ctx, `
		WITH on_repo AS (
			SELECT a.run_id, a.attempt_no, a.started_at, a.ended_at, a.service_result, a.exit_code, a.exit_status
			FROM jobs j JOIN runs r ON r.job_id = j.id JOIN attempts a ON a.run_id = r.id
			WHERE j.engine = ANY($2) AND (j.repository = $1 OR j.copy_to = $1) AND $1 = ANY(`+runRepositories("r", "j")+`)
			  AND a.unit IS NOT NULL)
		SELECT run_id, attempt_no, ended_at, coalesce(service_result, ''), coalesce(exit_code, ''), coalesce(exit_status, '')
		FROM on_repo
		WHERE ended_at IS NOT NULL
		  AND ended_at >= coalesce((SELECT max(started_at) FROM on_repo), '-infinity')
		ORDER BY ended_at`, repository, model.RepositoryEngines())
	if err != nil {
		return nil, fmt.Errorf("endings on repository %s: %w", repository, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (model.AttemptEnd, error) {
		var e model.AttemptEnd
		err := row.Scan(&e.RunID, &e.Attempt, &e.EndedAt, &e.ServiceResult, &e.ExitCode, &e.ExitStatus)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("endings on repository %s: %w", repository, err)
	}
	return out, nil
}
