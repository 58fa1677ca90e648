package storetest

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs a statement: a connection (*pgx.Conn) or a pool (*pgxpool.Pool, a bundle's DB).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// The shape of a seeded fleet's hosts.
const (
	FleetJobsPerHost   = 10
	FleetHistoryPerJob = 30
)

// SeedFleet adds hosts from to to-1 (named h00000 on) to a migrated database, as the one
// PostgreSQL of a fleet holds them: each host's lease held for a day, FleetJobsPerHost hourly
// restic jobs pinned to it and none due within half an hour, FleetHistoryPerJob hourly runs of
// each that succeeded (with its attempt, its started and succeeded events, a hold and its
// settlement, and its delivery to a webhook), and a live run, claimed by its host, in one job
// of six. It analyzes nothing.
func SeedFleet(ctx context.Context, conn Execer, from, to int) error {
	stmts := []string{
		`INSERT INTO hosts (name, holder, generation, lease_until, heartbeat_at, takeover_grace)
		 SELECT 'h' || lpad(i::text, 5, '0'), 'sim', 1, now() + interval '1 day', now(), interval '30s'
		 FROM generate_series($1::int, $2::int - 1) i`,
		`INSERT INTO jobs (name, engine, repository, password_file, paths, host, schedule, time_zone, next_run_at)
		 SELECT 'h' || lpad(i::text, 5, '0') || '.j' || k, 'restic', '/srv/restic/h' || lpad(i::text, 5, '0') || '.j' || k,
			'/etc/holdfast/pw', '{/srv/data}', 'h' || lpad(i::text, 5, '0'), '0 * * * *', 'UTC',
			now() + interval '40 minutes' + k * interval '1 minute'
		 FROM generate_series($1::int, $2::int - 1) i, generate_series(0, ` + fmt.Sprint(FleetJobsPerHost-1) + `) k`,
		// The history's row triggers are off while it is written, and its jobs' figures are
		// applied once after: a call of job_figures_run per run and of the deliveries' trigger
		// per event were three quarters of a seed's time. The deliveries are written below.
		`ALTER TABLE runs DISABLE TRIGGER job_figures_inserted`,
		`ALTER TABLE events DISABLE TRIGGER events_deliveries`,
		// Likewise the accounts' kept sums, counted once when the ledger's history is written.
		`ALTER TABLE ledger_entries DISABLE TRIGGER ledger_balance`,
		// History: hourly runs that succeeded, each with its attempt, its hold and settlement,
		// and its started and succeeded events.
		`WITH j AS (SELECT id, name, host FROM jobs WHERE host >= 'h' || lpad($1::int::text, 5, '0') AND host < 'h' || lpad($2::int::text, 5, '0')),
		 r AS (INSERT INTO runs (id, job_id, job_name, trigger, status, created_at, started_at, finished_at, reason, planned_at, kind,
				bytes_added, bytes_processed, files_processed, snapshot_id)
			SELECT gen_random_uuid(), j.id, j.name, 'schedule', 'succeeded', t, t + interval '1 second', t + interval '1 minute',
				'succeeded: snapshot made', t, 'backup', 1000000, 50000000, 1000, substr(md5(j.name || n), 1, 8)
			FROM j, generate_series(1, ` + fmt.Sprint(FleetHistoryPerJob) + `) n, LATERAL (SELECT date_trunc('hour', now()) - n * interval '1 hour' AS t) x
			RETURNING id, job_id, job_name, created_at, finished_at),
		 a AS (INSERT INTO attempts (run_id, attempt_no, unit, host, created_at, spawn_claimed_at, started_at, ended_at,
				service_result, exit_code, exit_status, lease_generation)
			SELECT r.id, 1, 'holdfast-' || j.name || '-' || r.id || '-a1.service', j.host, r.created_at, r.created_at, r.created_at, r.finished_at,
				'success', 'exited', '0', 1
			FROM r JOIN j ON j.id = r.job_id RETURNING run_id),
		 e AS (INSERT INTO events (event, job_name, run_id, attempt, status, reason, host, at)
			SELECT ev, r.job_name, r.id, 1, st, '', j.host, CASE WHEN ev = 'started' THEN r.created_at ELSE r.finished_at END
			FROM r JOIN j ON j.id = r.job_id, (VALUES ('started', 'running'), ('succeeded', 'succeeded')) v(ev, st))
		 INSERT INTO ledger_entries (account, kind, bytes, run_id, attempt_no, created_at)
			SELECT 'default', 'hold', 2000000, r.id, 1, r.created_at FROM r`,
		`ALTER TABLE runs ENABLE TRIGGER job_figures_inserted`,
		`ALTER TABLE events ENABLE TRIGGER events_deliveries`,
		`SELECT job_figures_ended(ARRAY(
			SELECT r FROM runs r JOIN jobs j ON j.id = r.job_id
			WHERE j.host >= 'h' || lpad($1::int::text, 5, '0') AND j.host < 'h' || lpad($2::int::text, 5, '0') AND r.finished_at IS NOT NULL))`,
		`INSERT INTO ledger_entries (account, kind, bytes, run_id, attempt_no, hold_id, created_at)
		 SELECT h.account, 'settle', 1000000, h.run_id, h.attempt_no, h.id, h.created_at + interval '1 minute'
		 FROM ledger_entries h WHERE h.kind = 'hold' AND h.id > coalesce((SELECT max(hold_id) FROM ledger_entries), 0)`,
		// A webhook that heard of every success, each delivered.
		`INSERT INTO notify_targets (name, kind, url, events) VALUES ('ops', 'webhook', 'https://hooks.example.com/holdfast', '{succeeded}')
		 ON CONFLICT (name) DO NOTHING`,
		`INSERT INTO deliveries (event_id, target, state, tries, next_at, delivered_at)
		 SELECT e.id, 'ops', 'delivered', 1, e.at, e.at FROM events e
		 WHERE e.event = 'succeeded' AND e.host >= 'h' || lpad($1::int::text, 5, '0') AND e.host < 'h' || lpad($2::int::text, 5, '0')
		 -- The events of a fleet seeded after the webhook was added made their deliveries already.
		 ON CONFLICT (event_id, target) DO UPDATE SET state = 'delivered', tries = 1, delivered_at = excluded.delivered_at`,
		`UPDATE jobs j SET last_outcome = 'succeeded', last_run_id = (SELECT r.id FROM runs r WHERE r.job_id = j.id ORDER BY r.finished_at DESC LIMIT 1)
		 WHERE host >= 'h' || lpad($1::int::text, 5, '0') AND host < 'h' || lpad($2::int::text, 5, '0')`,
		// A live run in one job of six, running on its host under the host's lease.
		`WITH j AS (SELECT id, name, host FROM jobs WHERE host >= 'h' || lpad($1::int::text, 5, '0') AND host < 'h' || lpad($2::int::text, 5, '0') AND id % 6 = 0),
		 r AS (INSERT INTO runs (id, job_id, job_name, trigger, status, created_at, started_at, planned_at, kind)
			SELECT gen_random_uuid(), j.id, j.name, 'schedule', 'running', now() - interval '5 minutes', now() - interval '5 minutes',
				date_trunc('hour', now()), 'backup' FROM j
			RETURNING id, job_id, created_at),
		 a AS (INSERT INTO attempts (run_id, attempt_no, unit, host, created_at, spawn_claimed_at, started_at, lease_generation, boot_id,
				last_event_at, percent_done, progress_changed_at)
			SELECT r.id, 1, 'holdfast-' || j.name || '-' || r.id || '-a1.service', j.host, r.created_at, r.created_at, r.created_at, 1, 'boot',
				now(), 0.5, now() FROM r JOIN j ON j.id = r.job_id)
		 INSERT INTO ledger_entries (account, kind, bytes, run_id, attempt_no, created_at)
			SELECT 'default', 'hold', 2000000, r.id, 1, r.created_at FROM r`,
		`ALTER TABLE ledger_entries ENABLE TRIGGER ledger_balance`,
		`SELECT account_sums_recount()`,
	}
	for _, stmt := range stmts {
		args := []any{}
		if strings.Contains(stmt, "$1") {
			args = append(args, from, to)
		}
		if _, err := conn.Exec(ctx, stmt, args...); err != nil {
			return fmt.Errorf("seed hosts %d to %d: %w", from, to, err)
		}
	}
	return nil
}
