package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/setting"
)

// fenced is the fence of a write about an attempt (of the table attempts, unaliased), with the
// writer's host, holder and generation as the statement's parameters $n, $n+1 and $n+2.
func fenced(n int) string {
	return fmt.Sprintf("holdfast_fence(host, lease_generation, $%d, $%d, $%d)", n, n+1, n+2)
}

// stamp is t as a statement's parameter: NULL for the zero time, which the statement replaces
// by the database's now().
func stamp(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// LeaseAcquireParams asks for a host's lease.
type LeaseAcquireParams struct {
	Host    string
	Holder  string // who asks: see reconcile.LeaseHolder
	Version string
	// ResticVersion is the release of the restic the daemon runs ("" if not known).
	ResticVersion string
	// Duration is how long the lease lasts unless renewed; Grace is how long after another
	// host's lease expired this daemon waits before taking over its any-host runs (recorded
	// for holdfast check).
	Duration, Grace time.Duration
	// HolderGone reports whether the process that holds an unexpired lease is certainly gone
	// (on this machine, this boot, its process dead): then the lease is taken at once.
	HolderGone func(holder string) bool
}

// LeaseHeldError means another live daemon holds the host's lease.
type LeaseHeldError struct {
	Host   string
	Holder string
	Until  time.Time
}

func (e *LeaseHeldError) Error() string {
	return setting.Sprintf("host %s is held by another daemon (%s) until %s: give each daemon its own {Reconcile.Host}",
		e.Host, e.Holder, e.Until.UTC().Format(time.RFC3339))
}

// ErrLeaseLost means the lease expired or another daemon took it: the daemon must take it again
// (LeaseAcquire) before it writes anything about its attempts.
var ErrLeaseLost = errors.New("host lease lost")

// LeaseAcquire takes the host's lease for req.Holder, creating the host's row if needed. It
// succeeds when the lease is free, expired, already req.Holder's, or held by a process
// req.HolderGone says is gone. The generation goes up, and the host's live attempts, those no
// other host took over meanwhile, are adopted under it in the same transaction.
func (s *Store) LeaseAcquire(ctx context.Context, req LeaseAcquireParams) (model.Lease, error) {
	if req.Holder == "" {
		return model.Lease{}, fmt.Errorf("take the lease of host %s: no holder named", req.Host)
	}
	l := model.Lease{Host: req.Host, Holder: req.Holder}
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		// No lease while holdfast recover rebuilds the database (LockRecovery): a daemon would
		// act on runs the recovery has not judged yet.
		var free bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock_shared($1::int, 0)`, recoveryLockClass).Scan(&free); err != nil {
			return err
		}
		if !free {
			return ErrRecovering
		}
		// A new host's row starts with an expired lease, so that daemons starting at once for
		// one name queue on its row lock instead of racing to insert it.
		_, err := tx.Exec(ctx, `INSERT INTO hosts (name, lease_until, generation) VALUES ($1, now(), 0) ON CONFLICT (name) DO NOTHING`,
			req.Host)
		if err != nil {
			return err
		}
		var holder string
		var until time.Time
		var current bool
		err = tx.QueryRow(ctx, `SELECT holder, lease_until, lease_until > now() FROM hosts WHERE name = $1 FOR UPDATE`,
			req.Host).Scan(&holder, &until, &current)
		if err != nil {
			return err
		}
		if current && holder != req.Holder && (req.HolderGone == nil || !req.HolderGone(holder)) {
			return &LeaseHeldError{Host: req.Host, Holder: holder, Until: until}
		}
		err = tx.QueryRow(ctx, `
			UPDATE hosts SET generation = generation + 1, holder = $2, version = $3,
				lease_until = now() + $4::interval, heartbeat_at = now(), takeover_grace = $5::interval, lease_since = now(),
				started_at = CASE WHEN holder = $2 THEN started_at ELSE now() END, restic_version = nullif($6, '')
			WHERE name = $1 RETURNING generation, lease_until`,
			req.Host, req.Holder, req.Version, req.Duration, req.Grace, req.ResticVersion).Scan(&l.Generation, &l.Until)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE attempts SET lease_generation = $2 WHERE host = $1 AND ended_at IS NULL`,
			req.Host, l.Generation)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			WITH back AS (
				UPDATE hosts SET down_noticed_at = NULL WHERE name = $1 AND down_noticed_at IS NOT NULL
				RETURNING name, down_noticed_at)
			INSERT INTO events (event, job_name, reason, host)
			SELECT 'host_back', '', 'host ' || name || ' is back: its daemon holds its lease again', name FROM back`, req.Host)
		return err
	})
	if err != nil {
		var held *LeaseHeldError
		if errors.As(err, &held) || errors.Is(err, ErrRecovering) {
			return model.Lease{}, err
		}
		return model.Lease{}, fmt.Errorf("take the lease of host %s: %w", req.Host, err)
	}
	return l, nil
}

// LeaseRenew extends a lease that has not expired for d; ErrLeaseLost if it expired, another
// daemon holds it now, or holdfast recover rebuilds the database (a lease a restored dump
// brings back is not renewed under it).
func (s *Store) LeaseRenew(ctx context.Context, l model.Lease, d time.Duration) (model.Lease, error) {
	err := s.pool.QueryRow(ctx, `
		UPDATE hosts SET lease_until = now() + $4::interval, heartbeat_at = now()
		WHERE name = $1 AND holder = $2 AND generation = $3 AND lease_until > now()
			AND pg_try_advisory_xact_lock_shared($5::int, 0)
		RETURNING lease_until`, l.Host, l.Holder, l.Generation, d, recoveryLockClass).Scan(&l.Until)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, fmt.Errorf("renew the lease of host %s: %w", l.Host, ErrLeaseLost)
	}
	if err != nil {
		return l, fmt.Errorf("renew the lease of host %s: %w", l.Host, err)
	}
	return l, nil
}

// LeaseRelease ends a lease at once (a daemon stopping cleanly): the host shows as down, and its
// any-host runs are taken over after the grace unless it comes back.
func (s *Store) LeaseRelease(ctx context.Context, l model.Lease) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE hosts SET lease_until = now()
		WHERE name = $1 AND holder = $2 AND generation = $3 AND lease_until > now()`, l.Host, l.Holder, l.Generation)
	if err != nil {
		return fmt.Errorf("release the lease of host %s: %w", l.Host, err)
	}
	return nil
}

const hostColumns = `h.name, h.version, coalesce(h.restic_version, ''), h.generation, h.holder, h.lease_until, h.heartbeat_at, h.started_at,
	h.takeover_grace, h.draining_since, h.lease_until > now(),
	(SELECT count(*) FROM attempts a WHERE a.host = h.name AND a.ended_at IS NULL AND a.unit IS NOT NULL),
	(SELECT count(*) FROM jobs j WHERE j.host = h.name), now()`

func hostDest(h *model.Host) []any {
	return []any{&h.Name, &h.Version, &h.ResticVersion, &h.Generation, &h.Holder, &h.LeaseUntil, &h.HeartbeatAt, &h.StartedAt,
		&h.TakeoverGrace, &h.DrainingSince, &h.Alive, &h.LiveRuns, &h.PinnedJobs, &h.ReadAt}
}

// HostList lists the hosts by name.
func (s *Store) HostList(ctx context.Context) ([]model.Host, error) {
	return s.hosts(ctx, "true")
}

// hosts lists the hosts that match filter, a condition on h with args as its parameters, by name.
func (s *Store) hosts(ctx context.Context, filter string, args ...any) ([]model.Host, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+hostColumns+` FROM hosts h WHERE `+filter+` ORDER BY h.name`, args...)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (model.Host, error) {
		var h model.Host
		err := row.Scan(hostDest(&h)...)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	return out, nil
}

// HostDrain sets (drain) or clears whether the host takes new runs. Runs it already holds go on.
func (s *Store) HostDrain(ctx context.Context, name string, drain bool) (model.Host, error) {
	var h model.Host
	err := s.pool.QueryRow(ctx, `
		UPDATE hosts h SET draining_since = CASE WHEN $2 THEN coalesce(draining_since, now()) END
		WHERE name = $1 RETURNING `+hostColumns, name, drain).Scan(hostDest(&h)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return model.Host{}, fmt.Errorf("host %q: %w: holdfast host list shows the hosts", name, ErrNotFound)
	}
	if err != nil {
		return model.Host{}, fmt.Errorf("drain host %s: %w", name, err)
	}
	return h, nil
}

// HostForget removes a host's row. It refuses while a daemon holds its lease, while it holds
// live runs or live runs are pinned to it, and while jobs are pinned to it or prune there.
func (s *Store) HostForget(ctx context.Context, name string) error {
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var h model.Host
		err := tx.QueryRow(ctx, `SELECT `+hostColumns+` FROM hosts h WHERE h.name = $1 FOR UPDATE`, name).Scan(hostDest(&h)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("host %q: %w: holdfast host list shows the hosts", name, ErrNotFound)
		}
		if err != nil {
			return err
		}
		var live, pruned int
		// Its live attempts, and the live runs pinned to it that it has not spawned yet (a
		// restore, a pruning host's forget or prune).
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM attempts WHERE host = $1 AND ended_at IS NULL)
				+ (SELECT count(*) FROM runs r WHERE r.host = $1 AND r.status IN ('queued', 'running')
					AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.run_id = r.id AND a.ended_at IS NULL AND a.host = $1)),
			(SELECT count(*) FROM jobs WHERE prune_host = $1)`, name).Scan(&live, &pruned); err != nil {
			return err
		}
		switch {
		case h.Alive:
			return &ConflictError{Msg: fmt.Sprintf("host %s has a live daemon (its lease runs until %s): stop holdfast there first",
				name, h.LeaseUntil.UTC().Format(time.RFC3339))}
		case live > 0:
			return &ConflictError{Msg: fmt.Sprintf("host %s still has %d live runs: wait for them, or stop them (holdfast run stop ID) and let its daemon end them", name, live)}
		case h.PinnedJobs > 0:
			return &ConflictError{Msg: setting.Sprintf("%d jobs are pinned to host %s: pin them elsewhere first (holdfast job edit NAME {Job.Host} OTHER, or {JobEdit.AnyHost})", h.PinnedJobs, name)}
		case pruned > 0:
			return &ConflictError{Msg: setting.Sprintf("%d jobs run their forgets and prunes on host %s: give them another pruning host first (holdfast job edit NAME {Job.Prune.Host} OTHER)", pruned, name)}
		}
		_, err = tx.Exec(ctx, `DELETE FROM hosts WHERE name = $1`, name)
		return err
	})
	return wrap(err, "forget host %s", name)
}

// JobRunnableParams names the job, and the host that must run it.
type JobRunnableParams struct {
	Job string
	// On is the host that must run the job (a restore's, whose target is that host's); ""
	// any host the job may run on.
	On string
	// Deletes says the run deletes from the job's repository (model.KindSpec.Deletes): a job
	// with a pruning host has it run there, and pinned there.
	Deletes bool
}

// JobRunnable reports which live host, not draining, may run the job now: p.On, the job's
// pinned host (its pruning host for a run that deletes, if it has one), or any host for an any-host job. When none may, Why says why and what to do.
// The answer is one read of the job's row and of one host's, or, for an any-host job, of the
// hosts with the latest leases until one is live (lease_mark's order): the fleet's size does
// not count. Only when no host may run it are the hosts read again, for the reason.
func (s *Store) JobRunnable(ctx context.Context, p JobRunnableParams) (model.Runnable, error) {
	var r model.Runnable
	var pinned, able *string
	var pruning bool
	err := s.pool.QueryRow(ctx, `
		SELECT j.host, CASE WHEN coalesce(j.host, nullif($2, '')) IS NULL
			THEN (SELECT h.name FROM hosts h WHERE h.lease_until > now() AND h.draining_since IS NULL
				ORDER BY h.lease_mark DESC LIMIT 1)
			ELSE (SELECT h.name FROM hosts h WHERE h.name = coalesce(j.host, $2) AND ($2 = '' OR h.name = $2)
				AND h.lease_until > now() AND h.draining_since IS NULL) END, j.pruning
		FROM (SELECT coalesce(CASE WHEN $3 THEN nullif(prune_host, '') END, host) AS host, $3 AND prune_host <> '' AS pruning
			FROM jobs WHERE name = $1) j`,
		p.Job, p.On, p.Deletes).Scan(&pinned, &able, &pruning)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("job %q: %w", p.Job, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("hosts for job %s: %w", p.Job, err)
	}
	if pinned != nil {
		r.Pinned = *pinned
	}
	if able != nil {
		r.Host = *able
		return r, nil
	}
	return s.whyNotRunnable(ctx, p, r, pruning)
}

// whyNotRunnable fills r.Why for a job no live host may run (JobRunnable), from the host that
// must run it, or from every host for an any-host job; or r.Host, if one became live meanwhile.
func (s *Store) whyNotRunnable(ctx context.Context, p JobRunnableParams, r model.Runnable, pruning bool) (model.Runnable, error) {
	job, want := p.Job, cmp.Or(r.Pinned, p.On)
	if r.Pinned != "" && p.On != "" && p.On != r.Pinned {
		r.Why = fmt.Sprintf("job %s is pinned to host %s, not %s", job, r.Pinned, p.On)
		return r, nil
	}
	var hosts []model.Host
	var err error
	if want != "" {
		hosts, err = s.hosts(ctx, "h.name = $1", want)
	} else {
		hosts, err = s.hosts(ctx, "true")
	}
	if err != nil {
		return r, err
	}
	var down []string // "host h1 is down since …", per host that cannot take the run
	var wantState string
	for _, h := range hosts {
		if h.Alive && h.DrainingSince == nil {
			r.Host = h.Name
			return r, nil
		}
		state := h.State()
		if h.Alive {
			state += " (holdfast host undrain " + h.Name + ")"
		}
		down = append(down, "host "+h.Name+" is "+state)
		wantState = state
	}
	switch {
	case pruning && wantState == "":
		r.Why = setting.Sprintf("job %s deletes on host %s, its pruning host, where no holdfast daemon has ever run: start it there (systemctl start holdfast), or give the job another pruning host (holdfast job edit %s {Job.Prune.Host} NAME)", job, r.Pinned, job)
	case pruning:
		r.Why = setting.Sprintf("job %s deletes on host %s, its pruning host, which is %s: start holdfast there (systemctl start holdfast), or give the job another pruning host (holdfast job edit %s {Job.Prune.Host} NAME)", job, r.Pinned, wantState, job)
	case r.Pinned != "" && wantState == "":
		r.Why = setting.Sprintf("job %s is pinned to host %s, where no holdfast daemon has ever run: start it there (systemctl start holdfast), or pin the job elsewhere (holdfast job edit %s {Job.Host} NAME, or {JobEdit.AnyHost})", job, r.Pinned, job)
	case r.Pinned != "":
		r.Why = setting.Sprintf("job %s is pinned to host %s, which is %s: start holdfast there (systemctl start holdfast), or pin the job elsewhere (holdfast job edit %s {Job.Host} NAME, or {JobEdit.AnyHost})", job, r.Pinned, wantState, job)
	case want != "" && wantState == "":
		r.Why = fmt.Sprintf("no holdfast daemon has ever run on host %s: start it there (systemctl start holdfast)", want)
	case want != "":
		r.Why = fmt.Sprintf("host %s is %s: start holdfast there (systemctl start holdfast)", want, wantState)
	case len(down) == 0:
		r.Why = "no holdfast daemon is running: start one (systemctl start holdfast, or holdfast daemon)"
	default:
		r.Why = "no live holdfast daemon can run job " + job + ": " + strings.Join(down, "; ") + ": start holdfast on one (systemctl start holdfast)"
	}
	return r, nil
}

// downFor is the condition that host h (hosts h) is down for the host named by parameter $me,
// with the grace as parameter $grace: h's lease expired more than grace ago, and me has held its
// own lease longer than that (or never held one). A daemon back after the database was away
// longer than a lease took its lease anew, so it waits a grace for the others to do the same.
// The hosts are found through lease_mark (never past lease_until; migration 00032).
func downFor(me, grace int) string {
	return fmt.Sprintf(`h.lease_mark < now() - $%[2]d::interval AND h.lease_until < now() - $%[2]d::interval AND h.name <> $%[1]d
		AND NOT EXISTS (SELECT 1 FROM hosts me WHERE me.name = $%[1]d AND me.lease_since >= now() - $%[2]d::interval)`, me, grace)
}

// HostListDown returns the other hosts down for me (downFor), by name: their lease expired more
// than grace ago, and me has held its own that long; and whether one of them is not noticed yet
// (HostNoticeDown), so that a pass writes only when an episode begins.
func (s *Store) HostListDown(ctx context.Context, me string, grace time.Duration) (down []string, unnoticed bool, err error) {
	rows, err := s.queryGeneric(ctx, `SELECT h.name, h.down_noticed_at IS NULL FROM hosts h WHERE `+downFor(1, 2)+` ORDER BY h.name`, me, grace)
	if err != nil {
		return nil, false, fmt.Errorf("down hosts: %w", err)
	}
	var name string
	var fresh bool
	if _, err := pgx.ForEachRow(rows, []any{&name, &fresh}, func() error {
		down, unnoticed = append(down, name), unnoticed || fresh
		return nil
	}); err != nil {
		return nil, false, fmt.Errorf("down hosts: %w", err)
	}
	return down, unnoticed, nil
}

// HostNextDown returns how long from now (the database's clock) another host that is not down
// for me yet may be at the earliest (downFor), or ok false when there is none: until its lease
// expires plus grace, or less. It is read through lease_mark, which trails lease_until by at
// most 15 seconds (so the moment may come early, never late), in the mark's index order: the
// first host not down ends the read, whatever the fleet's size. The sweep of an idle daemon
// sleeps until then.
func (s *Store) HostNextDown(ctx context.Context, me string, grace time.Duration) (in time.Duration, ok bool, err error) {
	var seconds float64
	err = s.pool.QueryRow(ctx, `
		SELECT extract(epoch FROM h.lease_mark + $2::interval - now())::float8 FROM hosts h
		WHERE h.lease_mark >= now() - $2::interval - interval '15 seconds' AND h.lease_until >= now() - $2::interval
			AND h.name <> $1
		ORDER BY h.lease_mark LIMIT 1`, me, grace).Scan(&seconds)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("next host down: %w", err)
	}
	return time.Duration(seconds * float64(time.Second)), true, nil
}

// HostNoticeDown records a host_down event, once per episode, for each other host whose lease
// expired more than grace ago, and returns their names.
func (s *Store) HostNoticeDown(ctx context.Context, by string, grace time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		WITH down AS (
			UPDATE hosts h SET down_noticed_at = now()
			WHERE h.down_noticed_at IS NULL AND `+downFor(1, 2)+`
			RETURNING h.name, h.lease_until,
				(SELECT count(*) FROM attempts a WHERE a.host = h.name AND a.ended_at IS NULL AND a.unit IS NOT NULL) AS live,
				(SELECT count(*) FROM jobs j WHERE j.host = h.name) AS pinned)
		INSERT INTO events (event, job_name, reason, host, details)
		SELECT 'host_down', '', 'host ' || name || ' is down since ' ||
				to_char(lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ': ' || live ||
				' live runs (those of any-host jobs are taken over), ' || pinned || ' pinned jobs wait for it',
			name, jsonb_build_object('lease_until', lease_until, 'live_runs', live, 'pinned_jobs', pinned, 'noticed_by', $1::text)
		FROM down RETURNING host`, by, grace)
	if err != nil {
		return nil, fmt.Errorf("notice down hosts: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("notice down hosts: %w", err)
	}
	return names, nil
}

// RunListOrphaned lists the live runs of any-host jobs (not pinned themselves, as a restore is) whose attempt is held by another host whose
// lease expired more than grace ago: those this host may take over. Only a host whose down episode
// is recorded (HostNoticeDown) has orphans, so that its host_down event always comes before a
// takeover of its runs, even when its grace ends between a pass's notice and its read of them.
func (s *Store) RunListOrphaned(ctx context.Context, host string, grace time.Duration) ([]model.LiveRun, error) {
	return s.liveRuns(ctx, liveRead{what: "orphans", candidates: `
		SELECT a.run_id FROM hosts h JOIN attempts a ON a.host = h.name AND a.ended_at IS NULL
		WHERE h.down_noticed_at IS NOT NULL AND ` + downFor(1, 2), filter: `
		AND a.host <> $1 AND a.host <> '' AND j.id IS NOT NULL AND j.host IS NULL AND r.host IS NULL
		AND EXISTS (SELECT 1 FROM hosts h WHERE h.name = a.host AND h.lease_until + $2::interval < now())`},
		host, grace)
}

// RunTakeOver supersedes the attempt and opens the next one with no unit, for any live host to
// spawn; with a stop intent the run ends stopped instead, and with GiveUp failed. w is the
// lease of the host taking over: only its current holder takes over (the fence, see Lease).
// The down host's row is locked first, so a daemon that takes its lease again either adopts
// the attempt before or finds it superseded. It reports false, changing nothing, when the
// host's lease is current again, the attempt is no longer live, or w is not current.
func (s *Store) RunTakeOver(ctx context.Context, w model.Lease, t model.TakeOver) (bool, error) {
	var done bool
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var since time.Time
		// Only a host under its own current lease takes over, so a daemon back from a partition
		// takes nothing before it holds its lease again, nor one whose lease another took.
		err := tx.QueryRow(ctx, `
			SELECT h.lease_until FROM hosts h WHERE h.name = $1 AND `+downFor(3, 2)+`
			  AND holdfast_fence('', NULL, $3, $4, $5)
			FOR UPDATE OF h`, t.From, t.Grace, w.Host, w.Holder, w.Generation).Scan(&since)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			UPDATE attempts SET ended_at = now(), superseded_at = now(), superseded_by = $4
			WHERE run_id = $1 AND attempt_no = $2 AND host = $3 AND ended_at IS NULL
			  AND EXISTS (SELECT 1 FROM runs r JOIN jobs j ON j.id = r.job_id WHERE r.id = $1 AND j.host IS NULL AND r.host IS NULL)`,
			t.RunID, t.Attempt, t.From, w.Host)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		done = true
		var stopRequested bool
		if err := tx.QueryRow(ctx, `SELECT stop_requested_at IS NOT NULL FROM runs WHERE id = $1 FOR UPDATE`, t.RunID).Scan(&stopRequested); err != nil {
			return err
		}
		if err := applySettlement(ctx, tx, t.RunID, t.Attempt, t.Settlement, "holdfast"); err != nil && !errors.Is(err, errHoldClosed) {
			return err
		}
		lost := fmt.Sprintf("host %s lost its lease at %s", t.From, since.UTC().Format(time.RFC3339))
		if stopRequested || t.GiveUp != "" {
			status, class, reason := model.StatusStopped, "", "stopped: "+lost+" while the run was there; its unit is stopped when that host comes back"
			if !stopRequested {
				status, class, reason = model.StatusFailed, "transient", t.GiveUp
			}
			if _, err := tx.Exec(ctx, `
				WITH r AS (
					UPDATE runs SET status = $2, reason = $3, failure_class = $4, finished_at = now(), waiting_reason = NULL
					WHERE id = $1 RETURNING id, job_id)
				UPDATE jobs SET last_outcome = $2 FROM r WHERE jobs.id = r.job_id AND jobs.last_run_id = r.id`,
				t.RunID, status, reason, class); err != nil {
				return err
			}
			// The run's events name the down host, whose daemon hears nothing: the taker's
			// delivery sends them.
			if err := notify(ctx, tx, DeliveriesChannel, hostPayload(w.Host)); err != nil {
				return err
			}
			return notifyEnded(ctx, tx, t.RunID)
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET waiting_reason = $2 WHERE id = $1`,
			t.RunID, fmt.Sprintf("taken over by host %s: %s", w.Host, lost)); err != nil {
			return err
		}
		_, err = openNextAttempt(ctx, tx, t.RunID, t.Attempt)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("take over run %s from host %s: %w", t.RunID, t.From, err)
	}
	return done, nil
}

// AttemptListSuperseded returns this host's attempts that another host took over in the last within: their
// units may still be running here, and are stopped.
func (s *Store) AttemptListSuperseded(ctx context.Context, host string, within time.Duration) ([]model.SupersededAttempt, error) {
	rows, err := s.queryGeneric(ctx, `
		SELECT `+attemptColumns+`, r.job_name FROM attempts a JOIN runs r ON r.id = a.run_id
		WHERE a.host = $1 AND a.superseded_at > now() - $2::interval
		ORDER BY a.superseded_at`, host, within)
	if err != nil {
		return nil, fmt.Errorf("superseded attempts of host %s: %w", host, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (model.SupersededAttempt, error) {
		var as attemptScan
		var job string
		err := row.Scan(append(as.dest(), &job)...)
		return model.SupersededAttempt{Attempt: as.attempt(), JobName: job}, err
	})
	if err != nil {
		return nil, fmt.Errorf("superseded attempts of host %s: %w", host, err)
	}
	return out, nil
}

// DutyClaimParams is the duty DutyClaim claims, and for whom.
type DutyClaimParams struct {
	Name  string
	Host  string
	Every time.Duration // how often the duty is due
}

// DutyClaim claims a duty of the fleet for p.Host, once per p.Every: true for the one daemon
// that claims it while it is due, false for every other until p.Every has passed. A daemon that
// claimed it and then failed leaves it to whoever claims it next.
func (s *Store) DutyClaim(ctx context.Context, p DutyClaimParams) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO duties (name, next_at, holder) VALUES ($1, now() + $2::interval, $3)
		ON CONFLICT (name) DO UPDATE SET next_at = excluded.next_at, holder = excluded.holder
		WHERE duties.next_at <= now()`, p.Name, p.Every, p.Host)
	if err != nil {
		return false, fmt.Errorf("claim duty %s: %w", p.Name, err)
	}
	return tag.RowsAffected() == 1, nil
}
