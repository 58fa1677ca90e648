package store

import (
	"context"
	"fmt"
)

// invariants are statements that must return no rows (see docs/ARCHITECTURE.md, Invariants).
// Each row found is a violation, described by the query's single text column.
var invariants = []struct{ name, query string }{
	{"a run never has two live attempts", `
		SELECT 'run ' || run_id || ' has ' || count(*) || ' live attempts'
		FROM attempts WHERE ended_at IS NULL GROUP BY run_id HAVING count(*) > 1`},
	{"a live run has its live attempt", `
		SELECT 'run ' || r.id || ' is ' || r.status || ' without a live attempt'
		FROM runs r WHERE r.status IN ('queued', 'running')
		AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.run_id = r.id AND a.ended_at IS NULL)`},
	{"a finished run has no live attempt", `
		SELECT 'run ' || r.id || ' is ' || r.status || ' but attempt ' || a.attempt_no || ' is live'
		FROM runs r JOIN attempts a ON a.run_id = r.id AND a.ended_at IS NULL
		WHERE r.status NOT IN ('queued', 'running')`},
	{"an attempt's unit is the one derived from it", `
		SELECT 'attempt ' || run_id || '/' || attempt_no || ' has unit ' || unit
		FROM attempts WHERE unit IS NOT NULL AND unit NOT LIKE '%' || run_id::text || '-a' || attempt_no || '.service'`},
	{"attempts are numbered 1..n", `
		SELECT 'run ' || run_id || ' has attempts up to ' || max(attempt_no) || ' but ' || count(*) || ' rows'
		FROM attempts GROUP BY run_id HAVING max(attempt_no) <> count(*)`},
	{"a run the operator stopped is never restarted", `
		SELECT 'run ' || r.id || ' got attempt ' || a.attempt_no || ' after its stop request'
		FROM runs r JOIN attempts a ON a.run_id = r.id
		WHERE r.stop_requested_at IS NOT NULL AND a.created_at > r.stop_requested_at`},
	{"a job's last outcome is its last finished run's status (a partial run is never counted as success)", `
		SELECT 'job ' || j.name || ' says ' || coalesce(j.last_outcome, 'nothing') || ' but its last run ' || r.id || ' is ' || r.status
		FROM jobs j JOIN runs r ON r.id = j.last_run_id
		WHERE r.status NOT IN ('queued', 'running') AND j.last_outcome IS DISTINCT FROM r.status`},
	{"retention never deletes a protected snapshot", `
		SELECT 'plan ' || p.id || ' deletes snapshot ' || (d->>'snapshot_id') || ', which it called protected'
		FROM retention_plans p, jsonb_array_elements(p.decisions) AS x(d)
		WHERE (d->>'protected')::boolean AND d->>'snapshot_id' = ANY(p.delete_ids)
		UNION ALL
		SELECT 'forget run ' || r.id || ' deletes snapshot ' || s.id || ', under legal hold since ' || s.legal_hold_at
		FROM runs r JOIN snapshots s ON s.id = ANY(r.forget_ids) AND s.legal_hold_at < r.created_at
		WHERE r.kind = 'forget' AND r.status <> 'failed'`},
	{"retention never deletes the newest snapshot of a job, nor one outside its scope", `
		SELECT 'plan ' || p.id || ' deletes snapshot ' || (d->>'snapshot_id') || ' (' ||
			CASE WHEN (d->>'outside_scope')::boolean THEN 'outside its scope' ELSE 'the newest of job ' || p.job_name END || ')'
		FROM retention_plans p, jsonb_array_elements(p.decisions) WITH ORDINALITY AS x(d, n)
		WHERE d->>'snapshot_id' = ANY(p.delete_ids)
		  AND (coalesce((d->>'outside_scope')::boolean, false)
		       OR n = (SELECT min(m) FROM jsonb_array_elements(p.decisions) WITH ORDINALITY AS y(e, m)
		               WHERE NOT coalesce((e->>'outside_scope')::boolean, false)))`},
	{"an account's balance is its grants less what was settled and is held, and never negative", `
		SELECT 'account ' || a.name || ' has ' || (g.b - st.b - h.b) || ' bytes left'
		FROM accounts a,
			LATERAL (SELECT ` + accountGranted + ` AS b) g,
			LATERAL (SELECT ` + accountSettled + ` AS b) st,
			LATERAL (SELECT ` + accountHeld + ` AS b) h
		WHERE NOT a.unlimited AND g.b - st.b - h.b < 0`},
	{"an account's kept sums are its entries': granted and settled with its checkpoint's, held its open holds", `
		SELECT 'account ' || a.name || ' keeps ' || a.granted_bytes || ' granted, ' || a.settled_bytes || ' settled and ' ||
			a.held_bytes || ' held, but its entries say ' || g.b || ', ' || st.b || ' and ' || h.b
		FROM accounts a,
			LATERAL (SELECT ` + accountGranted + ` AS b) g,
			LATERAL (SELECT ` + accountSettled + ` AS b) st,
			LATERAL (SELECT ` + accountHeld + ` AS b) h
		WHERE (a.granted_bytes, a.settled_bytes, a.held_bytes) <> (g.b, st.b, h.b)`},
	{"a hold is settled or released at most once, by an entry of its own account, run and attempt, for at most what it held", `
		SELECT 'hold ' || h.id || ' is closed ' || count(*) || ' times'
		FROM ledger_entries h JOIN ledger_entries c ON c.hold_id = h.id GROUP BY h.id HAVING count(*) > 1
		UNION ALL
		SELECT 'entry ' || c.id || ' (' || c.kind || ' of ' || c.bytes || ') closes hold ' || h.id || ' of ' || h.bytes || ' bytes'
		FROM ledger_entries c JOIN ledger_entries h ON h.id = c.hold_id
		WHERE h.kind <> 'hold' OR c.account <> h.account OR c.run_id <> h.run_id OR c.attempt_no <> h.attempt_no
		   OR c.bytes > h.bytes OR (c.kind = 'release' AND c.bytes <> h.bytes)`},
	{"no open hold on an ended attempt without a visible reason", `
		SELECT 'run ' || a.run_id || ' attempt ' || a.attempt_no || ' ended with hold ' || h.id || ' open and no reason'
		FROM ledger_entries h JOIN attempts a ON a.run_id = h.run_id AND a.attempt_no = h.attempt_no
		WHERE h.kind = 'hold' AND a.ended_at IS NOT NULL AND a.settle_deferred IS NULL
		  AND NOT EXISTS (SELECT 1 FROM ledger_entries c WHERE c.hold_id = h.id)`},
	{"a run never holds or is charged more than its budget, and a live backup holds for its live attempt (a first one from when it starts)", `
		SELECT 'run ' || r.id || ' has held and been charged ' || sum(CASE WHEN c.kind = 'settle' THEN c.bytes
			WHEN c.id IS NULL THEN h.bytes ELSE 0 END) || ' of a budget of ' || r.budget_bytes
		FROM runs r JOIN ledger_entries h ON h.run_id = r.id AND h.kind = 'hold'
		LEFT JOIN ledger_entries c ON c.hold_id = h.id
		GROUP BY r.id, r.budget_bytes
		HAVING sum(CASE WHEN c.kind = 'settle' THEN c.bytes WHEN c.id IS NULL THEN h.bytes ELSE 0 END) > r.budget_bytes
		UNION ALL
		SELECT 'live backup run ' || r.id || ' attempt ' || a.attempt_no || ' has no hold'
		FROM runs r JOIN attempts a ON a.run_id = r.id AND a.ended_at IS NULL JOIN jobs j ON j.id = r.job_id
		WHERE r.kind = 'backup' AND j.engine = 'restic' AND r.status IN ('queued', 'running')
		  AND NOT (r.budget_bytes IS NULL AND a.started_at IS NULL) -- sized from its paths as it starts
		  AND NOT EXISTS (SELECT 1 FROM ledger_entries h WHERE h.kind = 'hold' AND h.run_id = r.id AND h.attempt_no = a.attempt_no)`},
	{"a forget run deletes exactly what its plan decided", `
		SELECT 'forget run ' || r.id || ' deletes other snapshots than plan ' || p.id
		FROM runs r JOIN retention_plans p ON p.id = r.plan_id
		WHERE r.kind = 'forget' AND (r.forget_ids <> p.delete_ids OR p.run_id IS DISTINCT FROM r.id)`},
	// A pinned job's run waits for its host (its waiting reason says so); an any-host job's run
	// is taken over once a live host's grace has passed, with a pass's worth of slack.
	{"every live attempt's host is alive, or its run waits for that host, or it is taken over", `
		SELECT 'run ' || a.run_id || ' attempt ' || a.attempt_no || ' of any-host job ' || j.name || ' is live on host ' ||
			h.name || ', down since ' || h.lease_until || ', and live host ' || min(o.name) || ' has not taken it over'
		FROM attempts a JOIN runs r ON r.id = a.run_id JOIN jobs j ON j.id = r.job_id JOIN hosts h ON h.name = a.host
		JOIN hosts o ON o.name <> h.name AND o.lease_until > now()
			AND greatest(h.lease_until, o.lease_since) + o.takeover_grace + interval '30 seconds' < now()
		WHERE a.ended_at IS NULL AND j.host IS NULL AND r.host IS NULL AND h.lease_until <= now()
		GROUP BY a.run_id, a.attempt_no, j.name, h.name, h.lease_until
		UNION ALL
		SELECT 'run ' || run_id || ' attempt ' || attempt_no || ' was superseded by host ' || superseded_by || ' but is live'
		FROM attempts WHERE superseded_at IS NOT NULL AND ended_at IS NULL`},
	// A compaction removes runs, never a figure: a figure may be older than no run it keeps.
	{"a job's figures are never behind its runs, and its snapshot count is its inventory's", `
		SELECT 'job ' || j.name || ' says ' || concat_ws(', ',
			CASE WHEN r.success > coalesce(j.last_success_at, '-infinity') THEN 'last success ' || coalesce(j.last_success_at::text, 'never') || ', its runs ' || r.success END,
			CASE WHEN r.ended > coalesce(j.last_end_at, '-infinity') THEN 'last end ' || coalesce(j.last_end_at::text, 'never') || ', its runs ' || r.ended END,
			CASE WHEN r.verified > coalesce(j.last_verified_at, '-infinity') THEN 'last verified ' || coalesce(j.last_verified_at::text, 'never') || ', its runs ' || r.verified END,
			CASE WHEN r.verify > coalesce(j.last_verify_at, '-infinity') OR r.verify = j.last_verify_at AND r.verify_ok <> j.last_verify_ok
				THEN 'last verification ' || coalesce(j.last_verify_at::text, 'never') || ' ok ' || coalesce(j.last_verify_ok::text, '-') || ', its runs ' || r.verify || ' ok ' || r.verify_ok END,
			CASE WHEN r.restored > coalesce(j.last_restored_at, '-infinity') THEN 'last restore ' || coalesce(j.last_restored_at::text, 'never') || ', its runs ' || r.restored END)
		FROM jobs j, LATERAL (SELECT
			(SELECT max(finished_at) FROM runs WHERE job_id = j.id AND kind = 'backup' AND status = 'succeeded') AS success,
			(SELECT max(finished_at) FROM runs WHERE job_id = j.id AND kind = 'backup') AS ended,
			(SELECT max(finished_at) FROM runs WHERE job_id = j.id AND kind = 'verify' AND status = 'succeeded') AS verified,
			(SELECT max(finished_at) FROM runs WHERE job_id = j.id AND kind = 'restore' AND status = 'succeeded') AS restored,
			v.finished_at AS verify, v.ok AS verify_ok
			FROM (SELECT) one LEFT JOIN LATERAL (SELECT finished_at, status = 'succeeded' AS ok FROM runs
				WHERE job_id = j.id AND kind = 'verify' AND status IN ('succeeded', 'failed', 'partial')
				ORDER BY finished_at DESC LIMIT 1) v ON true) r
		WHERE r.success > coalesce(j.last_success_at, '-infinity') OR r.ended > coalesce(j.last_end_at, '-infinity')
		   OR r.verified > coalesce(j.last_verified_at, '-infinity') OR r.restored > coalesce(j.last_restored_at, '-infinity')
		   OR r.verify > coalesce(j.last_verify_at, '-infinity') OR r.verify = j.last_verify_at AND r.verify_ok <> j.last_verify_ok
		UNION ALL
		SELECT 'job ' || job_name || ' has ' || coalesce(c.live, 0) || ' snapshots counted in ' || repository || ', ' || coalesce(s.n, 0) || ' in its inventory'
		FROM (SELECT repository, job_name, count(*) AS n FROM snapshots WHERE forgotten_at IS NULL AND job_name IS NOT NULL
			GROUP BY repository, job_name) s
		FULL JOIN snapshot_counts c USING (repository, job_name)
		WHERE coalesce(c.live, 0) <> coalesce(s.n, 0)`},
}

// InvariantViolations checks the invariants and describes every violation found; none is the answer.
func (s *Store) InvariantViolations(ctx context.Context) ([]string, error) {
	var found []string
	for _, inv := range invariants {
		rows, err := s.pool.Query(ctx, inv.query)
		if err != nil {
			return nil, fmt.Errorf("check %q: %w", inv.name, err)
		}
		for rows.Next() {
			var what string
			if err := rows.Scan(&what); err != nil {
				rows.Close()
				return nil, fmt.Errorf("check %q: %w", inv.name, err)
			}
			found = append(found, inv.name+": "+what)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("check %q: %w", inv.name, err)
		}
	}
	return found, nil
}
