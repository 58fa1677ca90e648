package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/setting"
)

const runColumns = runHead + `coalesce(` + hostNote + `, r.waiting_reason, '')` + runTail + `,
	coalesce((SELECT sum(bytes) FROM open_holds WHERE run_id = r.id), 0)::bigint,
	coalesce((SELECT sum(e.bytes) FROM ledger_entries e WHERE e.run_id = r.id AND e.kind = 'settle'), 0)::bigint`

// liveRunColumns are runColumns as the sweep reads them, once per live run and pass: without
// the three subqueries per run (the host's note and the run's ledger sums, which no decision
// reads) that made a sweep of 1,000 live runs read 60 ms in the database instead of 1 ms. See
// model.LiveRun.
const liveRunColumns = runHead + `coalesce(r.waiting_reason, '')` + runTail + `, 0::bigint, 0::bigint`

const runHead = `r.id, r.job_name, r.trigger, r.status, coalesce(r.paused_reason, ''), r.stop_requested_at, coalesce(r.stop_reason, ''),
	r.created_at, r.started_at, r.finished_at, r.reason, r.failure_class, coalesce(r.snapshot_id, ''),
	r.bytes_added, r.bytes_processed, r.files_processed, r.files_skipped,
	r.planned_at, r.not_before, `

const runTail = `, r.retry_of, r.retry_number, r.retried_by, r.kind,
	r.forget_ids, r.plan_id, r.budget_bytes, coalesce(r.host, ''), coalesce(r.restore_target, ''), coalesce(r.restore_snapshot, ''),
	r.restore_includes, r.restore_total_bytes, r.restore_total_files, r.restore_target_id, r.restore_to_original, r.restore_overwrite,
	r.verify_subset, r.drill_files, coalesce(r.copy_snapshot, ''), r.on_copy`

// hostNote says why a live run waits on its host, which outranks any other waiting reason: the
// host that holds its attempt, or the host its job is pinned to, is down or draining. The live
// attempt is reached by the primary key, with the live test liveRuns uses: by "ended_at IS NULL",
// statistics from before a burst of admissions had the planner scan every live attempt per run.
const hostNote = `(SELECT CASE
		WHEN h.name IS NULL THEN 'waiting: host ' || coalesce(r.host, j.host) || ' has never run a holdfast daemon'
		WHEN h.lease_until <= now() THEN 'waiting: host ' || h.name || ' is down since ' ||
			to_char(h.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
		ELSE 'waiting: host ' || h.name || ' is draining' END
	FROM (SELECT la.host, la.unit FROM attempts la
		WHERE la.run_id = r.id AND coalesce(la.ended_at, 'infinity') = 'infinity' OFFSET 0) la
	LEFT JOIN jobs j ON j.id = r.job_id
	LEFT JOIN hosts h ON h.name = coalesce(nullif(la.host, ''), r.host, j.host)
	WHERE r.status IN ('queued', 'running')
	  AND coalesce(nullif(la.host, ''), r.host, j.host) IS NOT NULL
	  AND ((h.name IS NULL AND la.host = '') OR h.lease_until <= now() OR (la.unit IS NULL AND h.draining_since IS NOT NULL)))`

func runDest(r *model.Run) []any {
	return []any{&r.ID, &r.JobName, &r.Trigger, &r.Status, &r.PausedReason, &r.StopRequestedAt, &r.StopReason,
		&r.CreatedAt, &r.StartedAt, &r.FinishedAt, &r.Reason, &r.FailureClass, &r.SnapshotID,
		&r.BytesAdded, &r.BytesProcessed, &r.FilesProcessed, &r.FilesSkipped,
		&r.PlannedAt, &r.NotBefore, &r.WaitingReason, &r.RetryOf, &r.RetryNumber, &r.RetriedBy, &r.Kind,
		&r.ForgetIDs, &r.PlanID, &r.BudgetBytes, &r.Host, &r.Restore.Target, &r.Restore.Snapshot,
		&r.Restore.Includes, &r.Restore.TotalBytes, &r.Restore.TotalFiles, &r.Restore.TargetID, &r.Restore.ToOriginal, &r.Restore.Overwrite,
		&r.Verify.ReadDataSubset, &r.Verify.DrillFiles,
		&r.CopySnapshot, &r.OnCopy,
		&r.HeldBytes, &r.SettledBytes}
}

const attemptColumns = `a.run_id, a.attempt_no, coalesce(a.unit, ''), a.host, coalesce(a.boot_id, ''), a.created_at, a.spawn_claimed_at, a.armed_for,
	a.started_at, a.ended_at, coalesce(a.service_result, ''), coalesce(a.exit_code, ''), coalesce(a.exit_status, ''),
	a.journal_offset, a.journal_last_seq, a.journal_last_hash, a.quarantined_at, coalesce(a.quarantine_reason, ''),
	a.last_event_at, a.percent_done, a.files_done, a.total_files, a.bytes_done, a.total_bytes,
	a.item_errors, coalesce(a.first_item_error, ''), coalesce(a.fatal, ''), a.summary,
	a.repo_bytes_before, coalesce(a.settle_deferred, ''), a.stalled_at,
	(SELECT h.bytes FROM ledger_entries h WHERE h.kind = 'hold' AND h.run_id = a.run_id AND h.attempt_no = a.attempt_no),
	` + attemptHoldNote + `, ` + attemptSettlement + `,
	a.superseded_at, coalesce(a.superseded_by, ''), coalesce(a.hook_error, ''), coalesce(a.restic_version, '')`

// attemptHoldNote is the note of the attempt's hold: how it was sized.
const attemptHoldNote = `coalesce((SELECT h.note FROM ledger_entries h
		WHERE h.kind = 'hold' AND h.run_id = a.run_id AND h.attempt_no = a.attempt_no), '')`

// attemptSettlement is the note of what closed the attempt's hold.
const attemptSettlement = `coalesce((SELECT c.note FROM ledger_entries c
		WHERE c.kind IN ('settle', 'release') AND c.run_id = a.run_id AND c.attempt_no = a.attempt_no), '')`

// liveAttemptColumns are attemptColumns for a live attempt, whose settlement is read as empty
// without looking (a hold is closed as its attempt ends), and its hold's note too: no decision
// reads it.
var liveAttemptColumns = strings.NewReplacer(attemptSettlement, "''", attemptHoldNote, "''").Replace(attemptColumns)

type attemptScan struct {
	a                                         model.Attempt
	percent                                   *float64
	filesDone, totalFiles, bytesDone, totalBy *int64
}

func (s *attemptScan) dest() []any {
	a := &s.a
	return []any{&a.RunID, &a.No, &a.Unit, &a.Host, &a.BootID, &a.CreatedAt, &a.SpawnClaimedAt, &a.ArmedFor,
		&a.StartedAt, &a.EndedAt, &a.ServiceResult, &a.ExitCode, &a.ExitStatus,
		&a.Cursor.Offset, &a.Cursor.LastSeq, &a.Cursor.LastHash, &a.QuarantinedAt, &a.QuarantineReason,
		&a.LastEventAt, &s.percent, &s.filesDone, &s.totalFiles, &s.bytesDone, &s.totalBy,
		&a.ItemErrors, &a.FirstItemError, &a.Fatal, &a.Summary,
		&a.RepoBytesBefore, &a.SettleDeferred, &a.StalledAt, &a.HoldBytes, &a.HoldNote, &a.Settlement, &a.SupersededAt, &a.SupersededBy, &a.HookError, &a.ResticVersion}
}

func (s *attemptScan) attempt() model.Attempt {
	a := s.a
	if s.percent != nil {
		a.Progress = &model.Progress{PercentDone: *s.percent, FilesDone: deref(s.filesDone), TotalFiles: deref(s.totalFiles),
			BytesDone: deref(s.bytesDone), TotalBytes: deref(s.totalBy)}
	}
	return a
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// RunAdmitParams is a run of a job to admit, as the schedule, a retry or an operator asks for it.
type RunAdmitParams struct {
	Job     string
	Trigger string
	Kind    model.Kind    // "" is KindBackup
	Host    string        // the host the run must run on, whatever its job says; a restore must name it
	Restore model.Restore // a restore's target and snapshot
	Verify  model.Verify
	// AdmittedBy is the host whose daemon admits the run and spawns it itself: no daemon is
	// notified of it, unless it is pinned to another host ("" notifies them).
	AdmittedBy string
	// RequestedBy names who asked for a restore through the dashboard (its credential's label):
	// the admission then writes a restore_requested event naming them, in its transaction.
	RequestedBy string
}

// RunAdmit creates a queued run of the job with its first attempt, in one transaction, and notifies
// the daemons. A job that already has a live run is refused: two backups of one job would race
// for the same files and repository lock. A restore, a prune and a verify run need a job with a
// repository, and a restore its target, snapshot and host.
func (s *Store) RunAdmit(ctx context.Context, r RunAdmitParams) (model.Run, error) {
	var run model.Run
	kind := cmp.Or(r.Kind, model.KindBackup)
	if _, err := model.ParseKind(string(kind)); err != nil {
		return model.Run{}, fmt.Errorf("admit run of %s: %w", r.Job, err)
	}
	if kind == model.KindRestore && (r.Restore.Target == "" || r.Restore.Snapshot == "" || r.Host == "") {
		return model.Run{}, fmt.Errorf("admit restore of %s: no target, snapshot or host", r.Job)
	}
	err := inTxGeneric(ctx, s.pool, func(tx pgx.Tx) error {
		var jobID int64
		var jobEngine string
		err := tx.QueryRow(ctx, `SELECT id, engine FROM jobs WHERE name = $1 FOR UPDATE`, r.Job).Scan(&jobID, &jobEngine)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %q: %w", r.Job, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if kind.Spec().NeedsRepository && !model.HasRepository(jobEngine) {
			return &ConflictError{Msg: fmt.Sprintf("job %s uses the %s engine: only a restic repository can be %s", r.Job, jobEngine, kind.Spec().Verb)}
		}
		live, found, err := liveRunOf(ctx, tx, jobID)
		if err != nil {
			return err
		}
		if found {
			return &ConflictError{Msg: fmt.Sprintf("job %s already has a live run %s: wait for it, or stop it with holdfast run stop", r.Job, live)}
		}
		id, err := uuid.NewRandom()
		if err != nil {
			return err
		}
		if _, err := insertRun(ctx, tx, id, newRun{jobID: jobID, jobName: r.Job, trigger: r.Trigger, kind: kind,
			host: r.Host, restore: r.Restore, verify: r.Verify, admittedBy: r.AdmittedBy}); err != nil {
			return err
		}
		if r.RequestedBy != "" {
			if _, err := tx.Exec(ctx, `INSERT INTO events (event, job_name, run_id, status, reason, host, details)
				VALUES ('restore_requested', $1, $2, 'queued', $3, $4,
					jsonb_build_object('requested_by', $5::text, 'restore_target', $6::text, 'snapshot_id', $7::text))`,
				r.Job, id, "restore asked for from the dashboard by "+r.RequestedBy, r.Host, r.RequestedBy, r.Restore.Target, r.Restore.Snapshot); err != nil {
				return err
			}
		}
		crashpoint.At("run-start-before-commit")
		return tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs r WHERE r.id = $1`, id).Scan(runDest(&run)...)
	})
	if err != nil {
		return model.Run{}, wrap(err, "admit run of %s", r.Job)
	}
	crashpoint.At("run-start-after")
	return run, nil
}

// newRun is a run to admit.
type newRun struct {
	jobID         int64
	jobName       string
	trigger       string
	kind          model.Kind // "" is KindBackup
	plannedAt     *time.Time
	retryOf       *uuid.UUID
	retryNumber   int
	notBefore     *time.Time
	waitingReason string
	forgetIDs     []string
	planID        *uuid.UUID
	host          string
	restore       model.Restore
	verify        model.Verify
	copySnapshot  string // a copy run's snapshot
	onCopy        bool   // the run works on the job's copy repository
	// admittedBy is the host whose daemon admitted the run and wakes its own sweep: the
	// daemons are then notified only of a run pinned to another host.
	admittedBy string
}

// insertRun admits a run inside tx: the run with its first attempt and, for a backup, its place
// as the job's last run and its hold, or a pause at once if it may not have one (reported). The
// daemons are notified when tx commits (see newRun.admittedBy).
func insertRun(ctx context.Context, tx pgx.Tx, id uuid.UUID, n newRun) (paused bool, err error) {
	kind := cmp.Or(n.kind, model.KindBackup)
	rs := n.restore
	host, err := runHost(ctx, tx, kind, n)
	if err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO runs (id, job_id, job_name, trigger, kind, planned_at, retry_of, retry_number,
			not_before, waiting_reason, forget_ids, plan_id, host, restore_target, restore_snapshot, restore_includes,
			restore_total_bytes, restore_total_files, verify_subset, drill_files, copy_snapshot, on_copy, restore_target_id,
			restore_to_original, restore_overwrite)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, ''), $11, $12, nullif($13, ''), nullif($14, ''), nullif($15, ''),
			$16, $17, $18, $19, $20, nullif($21, ''), $22, $23, $24, $25)`, id, n.jobID, n.jobName, n.trigger, kind,
		n.plannedAt, n.retryOf, n.retryNumber, n.notBefore, n.waitingReason, nonNil(n.forgetIDs), n.planID,
		host, rs.Target, rs.Snapshot, nonNil(rs.Includes), rs.TotalBytes, rs.TotalFiles,
		n.verify.ReadDataSubset, n.verify.DrillFiles, n.copySnapshot, n.onCopy, rs.TargetID, rs.ToOriginal, rs.Overwrite); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO attempts (run_id, attempt_no) VALUES ($1, 1)`, id); err != nil {
		return false, err
	}
	// A job's last run is its last backup, which dependencies read; a prune or a forget is not
	// one. It is the last run before its hold is decided: a run paused at once is that too.
	if kind.Spec().LastRun {
		if _, err := tx.Exec(ctx, `UPDATE jobs SET last_run_id = $2 WHERE id = $1`, n.jobID, id); err != nil {
			return false, err
		}
	}
	if kind.Spec().Adds { // planHold asks the engine too
		if paused, err = holdOrPause(ctx, tx, id, 1); err != nil {
			return false, err
		}
	}
	return paused, notifyRunExcept(ctx, tx, id, n.admittedBy)
}

// runHost is the host a run to admit is pinned to: the one asked for, or for a run that deletes
// from the job's own repository the job's pruning host. A run that would delete through a
// repository the job's host writes append-only, with no pruning host, is refused here, before it
// exists: the server would refuse each deletion, after restic's retries.
func runHost(ctx context.Context, tx pgx.Tx, kind model.Kind, n newRun) (string, error) {
	if !kind.Spec().Deletes || n.onCopy {
		return n.host, nil
	}
	var appendOnly bool
	var pruneHost string
	if err := tx.QueryRow(ctx, `SELECT append_only, prune_host FROM jobs WHERE id = $1`, n.jobID).Scan(&appendOnly, &pruneHost); err != nil {
		return "", fmt.Errorf("read where job %s deletes: %w", n.jobName, err)
	}
	switch {
	case pruneHost != "":
		return pruneHost, nil
	case appendOnly:
		return "", &ConflictError{Msg: setting.Sprintf("job %s writes its repository append-only ({Job.Prune.AppendOnly}), which deletes nothing: run its forgets and prunes from a pruning host that reaches the repository with the right to delete (holdfast job edit %s {Job.Prune.Host} HOST {Job.Prune.Repository} REPO)",
			n.jobName, n.jobName)}
	}
	return n.host, nil
}

// RunListLive lists the runs in a live status with their live attempt that the daemon of host
// reconciles: higher job priority first, then oldest first. Those are the runs whose attempt
// host holds, and those not spawned yet that host may run: its job is any-host or pinned to
// host (or removed), and host is not draining. host "" lists every live run.
func (s *Store) RunListLive(ctx context.Context, host string) ([]model.LiveRun, error) {
	if host == "" {
		return s.liveRuns(ctx, liveRead{what: "live runs"})
	}
	// The candidates come through indexes, each a disjoint way a live run can be this host's,
	// so that the read costs what the host has, not what the fleet has; the filter decides.
	live, err := s.liveRuns(ctx, liveRead{what: "live runs", sizeHint: s.liveRunsRead.Load(), filter: liveOfHost, candidates: `
		SELECT a.run_id FROM attempts a WHERE a.host = $1 AND a.ended_at IS NULL
		UNION ALL
		SELECT r.id FROM runs r WHERE r.host = $1 AND r.status IN ('queued', 'running')
		UNION ALL
		SELECT r.id FROM jobs j JOIN runs r ON r.job_id = j.id
		WHERE ` + hostMayRun(1) + ` AND r.status IN ('queued', 'running') AND r.host IS NULL
		UNION ALL
		SELECT r.id FROM runs r WHERE r.job_id IS NULL AND r.status IN ('queued', 'running') AND r.host IS NULL`},
		host)
	if err == nil {
		s.liveRunsRead.Store(int64(len(live)))
	}
	return live, err
}

// liveOfHost is the filter of the live runs the daemon of the host $1 reconciles (RunListLive).
const liveOfHost = `
		AND (a.host = $1 OR (a.host = '' AND a.unit IS NULL AND coalesce(r.host, j.host, $1) = $1
			-- A draining host spawns nothing, but still ends the runs it was asked to stop.
			AND (r.stop_requested_at IS NOT NULL
				OR NOT EXISTS (SELECT 1 FROM hosts h WHERE h.name = $1 AND h.draining_since IS NOT NULL))))`

// RunListSpawnable lists, among the runs ids, those the daemon of host reconciles (as
// RunListLive reads them) whose live attempt has no unit yet: the runs it may spawn.
func (s *Store) RunListSpawnable(ctx context.Context, host string, ids []uuid.UUID) ([]model.LiveRun, error) {
	return s.liveRuns(ctx, named("runs to spawn", ids, liveOfHost+` AND a.unit IS NULL`), host, ids)
}

// RunListSpawned lists, among the runs ids, those the daemon of host reconciles (as RunListLive
// reads them) whose live attempt has a unit: the runs whose unit may have ended.
func (s *Store) RunListSpawned(ctx context.Context, host string, ids []uuid.UUID) ([]model.LiveRun, error) {
	return s.liveRuns(ctx, named("runs spawned", ids, liveOfHost+` AND a.unit IS NOT NULL`), host, ids)
}

// liveRead is what liveRuns reads: the live runs that match filter, a constant condition on r,
// a and j with liveRuns' args as its parameters, in a slice with room for about sizeHint.
// candidates, if not "", is a query of run ids (the args its parameters too) that holds every
// run filter may match: the runs are read from it instead of from every live run. generic reads
// them with the read's generic plan (queryGeneric).
type liveRead struct {
	what               string
	sizeHint           int64
	candidates, filter string
	generic            bool
}

// named is the read of the runs ids ($2) that match filter, with its generic plan: planned
// anew, the read of one run took longer to plan than to run, and a notification naming it is
// waited for by an operator's command.
func named(what string, ids []uuid.UUID, filter string) liveRead {
	return liveRead{what: what, sizeHint: int64(len(ids)), candidates: `SELECT unnest($2::uuid[])`, filter: filter, generic: true}
}

// liveRuns lists the live runs q says.
func (s *Store) liveRuns(ctx context.Context, q liveRead, args ...any) ([]model.LiveRun, error) {
	what, sizeHint, candidates, filter := q.what, q.sizeHint, q.candidates, q.filter
	from := "runs r"
	if candidates != "" {
		from = "(SELECT DISTINCT id FROM (" + candidates + ") c(id)) c JOIN runs r ON r.id = c.id"
	}
	query := s.pool.Query
	if q.generic {
		query = s.queryGeneric
	}
	asked := time.Now()
	rows, err := query(ctx, `
		SELECT `+liveRunColumns+`, `+liveAttemptColumns+`, coalesce(j.engine, ''), coalesce(j.repository, ''),
			coalesce(j.run_as_user, ''), now(), coalesce(j.priority, 0)
		FROM `+from+`
		-- A lateral subquery that cannot be flattened (OFFSET 0) stays one index lookup per run:
		-- with statistics that lag behind a burst of admissions, a plain join went quadratic.
		-- Its live test is one no partial index's predicate follows from, so the lookup is the
		-- primary key's: without statistics the planner took attempts_live_host, read whole per run.
		CROSS JOIN LATERAL (SELECT * FROM attempts WHERE run_id = r.id AND coalesce(ended_at, 'infinity') = 'infinity' OFFSET 0) a
		LEFT JOIN jobs j ON j.id = r.job_id
		WHERE r.status IN ('queued', 'running') `+filter, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	defer rows.Close()
	// The rows come unsorted, so that they are decoded here while the server still reads the
	// rest; they are put in priority order below, by their keys alone.
	type place struct {
		priority int
		created  time.Time
		row      int
	}
	var read []model.LiveRun
	var order []place
	if sizeHint > 0 {
		read = make([]model.LiveRun, 0, sizeHint+sizeHint/8)
		order = make([]place, 0, sizeHint+sizeHint/8)
	}
	// One row at a time is scanned into l and as, through one list of their fields.
	var l model.LiveRun
	var as attemptScan
	var priority int
	dest := append(runDest(&l.Run), as.dest()...)
	dest = append(dest, &l.JobEngine, &l.JobRepository, &l.JobUser, &l.ReadAt, &priority)
	for rows.Next() {
		// Cleared first, so that nothing the last row read (a slice it was given) is reused.
		l, as = model.LiveRun{}, attemptScan{}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("list %s: %w", what, err)
		}
		l.Attempt = as.attempt()
		l.ReadHere = asked
		order = append(order, place{priority, l.Run.CreatedAt, len(read)})
		read = append(read, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	// Higher priority first, then the oldest.
	slices.SortStableFunc(order, func(a, b place) int {
		return cmp.Or(cmp.Compare(b.priority, a.priority), a.created.Compare(b.created))
	})
	// Each run moved once, in place, along the cycles of the order: a second slice of them
	// would be a large allocation at every pass.
	for i := range order {
		if order[i].row == i {
			continue
		}
		moving := read[i]
		j := i
		for order[j].row != i {
			from := order[j].row
			read[j], order[j].row = read[from], j
			j = from
		}
		read[j], order[j].row = moving, j
	}
	return read, nil
}

// runRepositories is the SQL array of the repositories run r of job j uses: the job's, or its copy
// repository for a run on it, and for a copy both (NULL elements match nothing).
func runRepositories(r, j string) string {
	return fmt.Sprintf(`ARRAY[CASE WHEN %[1]s.on_copy THEN %[2]s.copy_to ELSE %[2]s.repository END,
		CASE WHEN %[1]s.kind = 'copy' THEN %[2]s.repository END]`, r, j)
}

// spawnLockClass is the first key of the advisory locks that serialize spawn claims ("hfsp").
const spawnLockClass int32 = 0x68667370

// AttemptClaimSpawn records the unit name and the spawn claim c on a live attempt that has none, before
// systemd is asked, for w's host under w (the fence: see Lease). It reports claimed=false if
// the attempt was claimed, ended, or its run was asked to stop meanwhile, or if w is not its
// host's current lease, and a reason when a limit or a busy repository holds it back.
func (s *Store) AttemptClaimSpawn(ctx context.Context, w model.Lease, c model.SpawnClaim) (claimed bool, blocked string, err error) {
	ref, limits := c.Attempt, c.Limits
	host := w.Host
	// Claims that decide on what other claims hold are serialized, so that two of them never
	// both see the last free place: all claims when limits are set, else the claims on one
	// repository (a prune, forget or check needs it to itself; a backup or a restore waits for it).
	// A copy uses two repositories, locked in one order.
	lock := `SELECT pg_advisory_xact_lock($1::int, l.h) FROM (SELECT DISTINCT hashtext(x.repo) AS h
		FROM runs r JOIN jobs j ON j.id = r.job_id, unnest(` + runRepositories("r", "j") + `) x(repo)
		WHERE r.id = $2 AND j.engine = ANY($3) AND x.repo IS NOT NULL) l ORDER BY l.h`
	limited := limits.Set()
	if limited {
		lock = `SELECT pg_advisory_xact_lock($1::int, 0) WHERE $2::uuid IS NOT NULL AND $3::text[] IS NOT NULL`
	}
	// Both statements go in one round trip, as one implicit transaction: the lock holds until
	// it ends, and the claim, a statement of its own, sees every claim committed before the lock.
	// The claim runs with its generic plan (see queryGeneric): planned anew, it took 1.5 to 5 ms
	// to plan and 0.4 to 3.7 to run, at every spawn.
	batch := &pgx.Batch{}
	repositoryEngines := model.RepositoryEngines()
	batch.Queue(lock, spawnLockClass, ref.Run, repositoryEngines)
	batch.Queue(genericPlans)
	var busyRun *uuid.UUID
	var busyKind *string
	var all, onHost int
	var claimable bool
	batch.Queue(`
		WITH busy AS (
			-- Through the jobs that name one of the run's repositories (jobs_repository,
			-- jobs_copy_to), their live runs (runs_live_job) and those runs' live attempts:
			-- never every live attempt of the fleet, nor the runs' history.
			-- Lateral subqueries that cannot be flattened (OFFSET 0) keep that order: joined
			-- plainly, the planner read every live run first.
			SELECT o.id, o.kind FROM runs me JOIN jobs mj ON mj.id = me.job_id,
				unnest(`+runRepositories("me", "mj")+`) mine(repo),
				LATERAL (SELECT j.id, j.repository, j.copy_to FROM jobs j WHERE j.repository = mine.repo
					UNION ALL
					SELECT j.id, j.repository, j.copy_to FROM jobs j WHERE j.copy_to = mine.repo AND j.copy_to <> '' OFFSET 0) oj,
				LATERAL (SELECT r.id, r.kind, r.on_copy FROM runs r WHERE r.job_id = oj.id AND r.status IN ('queued', 'running') OFFSET 0) o
			WHERE me.id = $1 AND mj.engine = ANY($12) AND mine.repo IS NOT NULL
			  AND o.id <> me.id AND `+runRepositories("o", "oj")+` && `+runRepositories("me", "mj")+`
			  AND (me.kind = ANY($13) OR o.kind = ANY($13))
			  AND EXISTS (SELECT 1 FROM attempts oa WHERE oa.run_id = o.id AND oa.ended_at IS NULL AND oa.unit IS NOT NULL)
			LIMIT 1),
		holding AS (
			SELECT count(*) AS all_hosts, count(*) FILTER (WHERE host = $4) AS on_host
			FROM attempts WHERE $5 AND unit IS NOT NULL AND ended_at IS NULL),
		-- The attempt if this host may claim it, whatever the repository and the limits say:
		-- only then is a busy repository or a full limit what holds it back.
		claimable AS (
			SELECT a.run_id, a.attempt_no FROM attempts a JOIN runs r ON r.id = a.run_id
			WHERE a.run_id = $1 AND a.attempt_no = $2 AND a.unit IS NULL AND a.ended_at IS NULL
			  AND r.stop_requested_at IS NULL
			  -- An attempt kept by the host whose start failed is that host's (ReleaseSpawnClaim).
			  AND a.host IN ('', $4)
			  -- A job pinned elsewhere is not this host's to run, nor a run pinned elsewhere (a restore).
			  AND coalesce(r.host, (SELECT j.host FROM jobs j WHERE j.id = r.job_id), $4) = $4
			  -- The fence: only the holder of the host's current lease claims.
			  AND holdfast_fence(a.host, a.lease_generation, $4, $10, $11)
			  -- Not while the host drains.
			  AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.name = $4 AND h.draining_since IS NOT NULL)
			FOR UPDATE OF a SKIP LOCKED),
		-- The claim's time is when it is made (clock_timestamp), not when its transaction began
		-- (now()): that may be before the wait for the repository's lock, while the run that
		-- held the repository was still ending.
		claim AS (
			UPDATE attempts SET unit = $3, host = $4, spawn_claimed_at = clock_timestamp(), armed_for = $8, boot_id = nullif($9, ''),
				lease_generation = nullif($11::bigint, 0), restic_version = nullif($14, '')
			WHERE (run_id, attempt_no) IN (SELECT run_id, attempt_no FROM claimable)
			  AND NOT EXISTS (SELECT 1 FROM busy)
			  AND ($6 = 0 OR (SELECT all_hosts FROM holding) < $6)
			  AND ($7 = 0 OR (SELECT on_host FROM holding) < $7)
			RETURNING run_id),
		cleared AS (
			UPDATE runs SET waiting_reason = NULL
			WHERE id IN (SELECT run_id FROM claim) AND waiting_reason IS NOT NULL)
		SELECT (SELECT id FROM busy), (SELECT kind FROM busy),
			(SELECT all_hosts FROM holding), (SELECT on_host FROM holding), EXISTS (SELECT 1 FROM claim),
			EXISTS (SELECT 1 FROM claimable)`,
		ref.Run, ref.No, c.Unit, host, limited, limits.MaxRunning, limits.MaxRunningHost, c.ArmedFor, c.Boot, w.Holder, w.Generation,
		repositoryEngines, model.ExclusiveKinds(), c.ResticVersion)
	batch.Queue(defaultPlans)
	results := s.pool.SendBatch(ctx, batch)
	_, err = results.Exec()
	if err == nil {
		_, err = results.Exec()
	}
	if err == nil {
		err = results.QueryRow().Scan(&busyRun, &busyKind, &all, &onHost, &claimed, &claimable)
	}
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, "", fmt.Errorf("claim spawn of run %s attempt %d: %w", ref.Run, ref.No, err)
	}
	switch {
	case claimed, !claimable:
	case busyRun != nil:
		blocked = fmt.Sprintf("waiting: repository busy: %s run %s holds it", *busyKind, *busyRun)
	case limits.MaxRunning > 0 && all >= limits.MaxRunning:
		blocked = fmt.Sprintf("waiting: %d runs hold a unit, the global limit is %d", all, limits.MaxRunning)
	case limits.MaxRunningHost > 0 && onHost >= limits.MaxRunningHost:
		blocked = fmt.Sprintf("waiting: %d runs hold a unit on %s, the host limit is %d", onHost, host, limits.MaxRunningHost)
	}
	return claimed, blocked, nil
}

// AttemptMarkStartedParams is an attempt whose unit systemd has, and when it started.
type AttemptMarkStartedParams struct {
	Ref model.AttemptRef
	At  time.Time // zero: the database's clock
}

// AttemptMarkStarted records that systemd has the attempt's unit: the run becomes running. p.At
// is when it started; zero, what a daemon gives, stamps the database's clock, the one stalls are
// judged on (a host's clock may be off). Fenced by w.
func (s *Store) AttemptMarkStarted(ctx context.Context, w model.Lease, p AttemptMarkStartedParams) error {
	_, err := s.pool.Exec(ctx, `
		WITH a AS (
			UPDATE attempts SET started_at = coalesce(started_at, $3, now())
			WHERE run_id = $1 AND attempt_no = $2 AND ended_at IS NULL AND `+fenced(4)+` RETURNING run_id)
		UPDATE runs SET status = 'running', started_at = coalesce(started_at, $3, now())
		WHERE id IN (SELECT run_id FROM a) AND status = 'queued'`, p.Ref.Run, p.Ref.No, stamp(p.At), w.Host, w.Holder, w.Generation)
	if err != nil {
		return fmt.Errorf("mark run %s attempt %d started: %w", p.Ref.Run, p.Ref.No, err)
	}
	return nil
}

// AttemptApplyJournalParams is one drained batch of an attempt's journal: the cursor before and
// after it, and what it adds.
type AttemptApplyJournalParams struct {
	Ref   model.AttemptRef
	From  journal.Cursor
	To    journal.Cursor
	Delta model.JournalDelta
}

// AttemptApplyJournal moves the attempt's cursor from p.From to p.To and applies p.Delta, in one
// statement that only matches while the cursor still stands at p.From: applying the same batch
// twice is a no-op. An error wrapping *RefusedError means PostgreSQL cannot store what the batch
// holds: applying it again fails again. A p.To behind p.From is refused with a plain error (the
// caller's mistake, not the batch's) before anything is written. Fenced by w.
func (s *Store) AttemptApplyJournal(ctx context.Context, w model.Lease, p AttemptApplyJournalParams) (bool, error) {
	// A cursor only moves forward: a batch that would move it back would read lines twice.
	if p.To.Offset < p.From.Offset || p.To.LastSeq < p.From.LastSeq {
		return false, fmt.Errorf("apply journal of run %s attempt %d: the cursor would move back from offset %d seq %d to offset %d seq %d",
			p.Ref.Run, p.Ref.No, p.From.Offset, p.From.LastSeq, p.To.Offset, p.To.LastSeq)
	}
	var percent *float64
	var filesDone, totalFiles, bytesDone, totalBytes *int64
	if pr := p.Delta.Progress; pr != nil {
		percent, filesDone, totalFiles, bytesDone, totalBytes = &pr.PercentDone, &pr.FilesDone, &pr.TotalFiles, &pr.BytesDone, &pr.TotalBytes
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE attempts SET
			journal_offset = $4, journal_last_seq = $5, journal_last_hash = $6,
			last_event_at = coalesce($7, last_event_at),
			-- The stall clock: it restarts only when the figures move, not at every status line.
			progress_changed_at = CASE WHEN $8::float8 IS NOT NULL AND (percent_done, files_done, bytes_done)
				IS DISTINCT FROM ($8::float8, $9::bigint, $11::bigint) THEN now() ELSE progress_changed_at END,
			percent_done = coalesce($8, percent_done), files_done = coalesce($9, files_done),
			total_files = coalesce($10, total_files), bytes_done = coalesce($11, bytes_done),
			total_bytes = coalesce($12, total_bytes),
			item_errors = item_errors + $13,
			first_item_error = coalesce(first_item_error, nullif($14, '')),
			fatal = coalesce(fatal, nullif($15, '')),
			summary = coalesce($16, summary),
			hook_error = coalesce(hook_error, nullif($20, ''))
		WHERE run_id = $1 AND attempt_no = $2 AND journal_offset = $3 AND quarantined_at IS NULL
		  AND ended_at IS NULL AND `+fenced(17),
		p.Ref.Run, p.Ref.No, p.From.Offset, p.To.Offset, p.To.LastSeq, p.To.LastHash, p.Delta.LastEventAt,
		percent, filesDone, totalFiles, bytesDone, totalBytes,
		p.Delta.ItemErrors, p.Delta.FirstItemError, p.Delta.Fatal, nullJSON(p.Delta.Summary),
		w.Host, w.Holder, w.Generation, p.Delta.HookError)
	if err != nil {
		return false, fmt.Errorf("apply journal of run %s attempt %d: %w", p.Ref.Run, p.Ref.No, refused(err))
	}
	return tag.RowsAffected() == 1, nil
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// AttemptQuarantineParams is an attempt whose journal is no longer projected, and why.
type AttemptQuarantineParams struct {
	Ref    model.AttemptRef
	Reason string
}

// AttemptQuarantine stops the projection of an attempt's journal, recording why. The run goes on.
// Fenced by w.
func (s *Store) AttemptQuarantine(ctx context.Context, w model.Lease, p AttemptQuarantineParams) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE attempts SET quarantined_at = now(), quarantine_reason = $3
		WHERE run_id = $1 AND attempt_no = $2 AND quarantined_at IS NULL AND `+fenced(4), p.Ref.Run, p.Ref.No, p.Reason,
		w.Host, w.Holder, w.Generation)
	if err != nil {
		return fmt.Errorf("quarantine journal of run %s attempt %d: %w", p.Ref.Run, p.Ref.No, err)
	}
	return nil
}

// AttemptFinish ends the attempt and its run in one statement guarded by "this attempt is still live"
// and fenced by w; it reports false (and changes nothing) if another pass already moved the run
// on, or w is not the current lease of the attempt's host. The settlement, the run's snapshot
// and the retry are written in the same transaction, only if the ending applied; with a retry,
// the run's reason names it and when it is due.
func (s *Store) AttemptFinish(ctx context.Context, w model.Lease, e model.Ending) (bool, error) {
	if model.Live(e.Status) {
		return false, fmt.Errorf("finish run %s: %q is not a final status", e.RunID, e.Status)
	}
	var finished int
	var stamped *time.Time
	err := inTxGeneric(ctx, s.pool, func(tx pgx.Tx) error {
		// The ending as recorded: the transaction's now(), unless the caller gave a time. A retry
		// is due from it, so it is read first; else the ending's statement stamps it.
		at := e.At
		if at.IsZero() && e.Retry != nil {
			if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&at); err != nil {
				return err
			}
		}
		reason := e.Reason
		var due string
		if rt := e.Retry; rt != nil {
			// From the ending on the database's clock, so the retry is due on that clock.
			rt.NotBefore = at.Add(rt.Delay)
			due = rt.NotBefore.UTC().Format(time.RFC3339)
			reason += fmt.Sprintf("; retry %d as run %s at %s", rt.Number, rt.ID, due)
		}
		err := tx.QueryRow(ctx, `
			WITH a AS (
				UPDATE attempts SET ended_at = coalesce($3, now()), service_result = nullif($8, ''), exit_code = nullif($9, ''),
					exit_status = nullif($10, '')
				WHERE run_id = $1 AND attempt_no = $2 AND ended_at IS NULL AND `+fenced(16)+`
				RETURNING run_id),
			r AS (
				UPDATE runs SET status = $4, reason = $5, failure_class = $6, paused_reason = nullif($7, ''),
					finished_at = coalesce($3, now()), snapshot_id = nullif($11, ''), bytes_added = $12, bytes_processed = $13,
					files_processed = $14, files_skipped = $15, waiting_reason = NULL
				WHERE id IN (SELECT run_id FROM a)
				RETURNING id, job_id, finished_at),
			j AS (
				-- A backup a hook skipped is counted beside the slots skipped, with why.
				UPDATE jobs SET last_outcome = $4,
					hook_skips = hook_skips + CASE WHEN $4 = 'skipped' THEN 1 ELSE 0 END,
					last_skip_at = CASE WHEN $4 = 'skipped' THEN r.finished_at ELSE last_skip_at END,
					last_skip_why = CASE WHEN $4 = 'skipped' THEN $5 ELSE last_skip_why END
				FROM r WHERE jobs.id = r.job_id AND jobs.last_run_id = r.id)
			SELECT count(*), max(finished_at) FROM r`,
			e.RunID, e.Attempt, stamp(at), e.Status, reason, e.FailureClass, e.PausedReason,
			e.ServiceResult, e.ExitCode, e.ExitStatus, e.SnapshotID, e.BytesAdded, e.BytesProcessed,
			e.FilesProcessed, e.FilesSkipped, w.Host, w.Holder, w.Generation).Scan(&finished, &stamped)
		if err != nil || finished != 1 {
			return err
		}
		if stamped != nil {
			at = *stamped
		}
		if err := notifyEnded(ctx, tx, e.RunID); err != nil {
			return err
		}
		if err := applySettlement(ctx, tx, e.RunID, e.Attempt, e.Settlement, "holdfast"); err != nil && !errors.Is(err, errHoldClosed) {
			return err
		}
		if err := recordSnapshot(ctx, tx, e.Snapshot, at); err != nil {
			return err
		}
		if err := admitCopy(ctx, tx, e); err != nil {
			return err
		}
		if e.Retry == nil {
			return nil
		}
		rt := e.Retry
		n := newRun{trigger: model.TriggerRetry, retryOf: &e.RunID, retryNumber: rt.Number, notBefore: &rt.NotBefore,
			waitingReason: rt.Why + ", due at " + due}
		// A retry repeats the run: a copy's retry copies the same snapshot.
		if err := tx.QueryRow(ctx, `SELECT job_id, job_name, kind, coalesce(copy_snapshot, ''), on_copy FROM runs WHERE id = $1`, e.RunID).Scan(
			&n.jobID, &n.jobName, &n.kind, &n.copySnapshot, &n.onCopy); err != nil {
			return err
		}
		if _, err := insertRun(ctx, tx, rt.ID, n); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET retried_by = $2 WHERE id = $1`, e.RunID, rt.ID); err != nil {
			return err
		}
		crashpoint.At("retry-before-commit")
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("finish run %s attempt %d: %w", e.RunID, e.Attempt, err)
	}
	return finished == 1, nil
}

// admitCopy admits, in the ending's transaction, the copy run of a backup that made a snapshot
// (succeeded or partial) when its job has a copy repository: the copy is then due exactly once
// per snapshot, whatever crashes after the commit.
func admitCopy(ctx context.Context, tx pgx.Tx, e model.Ending) error {
	if e.SnapshotID == "" || e.Status != model.StatusSucceeded && e.Status != model.StatusPartial {
		return nil
	}
	n := newRun{kind: model.KindCopy, trigger: model.TriggerBackup, copySnapshot: e.SnapshotID, onCopy: true}
	err := tx.QueryRow(ctx, `SELECT j.id, j.name FROM runs r JOIN jobs j ON j.id = r.job_id
		WHERE r.id = $1 AND r.kind = 'backup' AND j.copy_to <> '' FOR UPDATE OF j`, e.RunID).Scan(&n.jobID, &n.jobName)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return err
	}
	_, err = insertRun(ctx, tx, id, n)
	return err
}

// AttemptRestart ends the live attempt (guarded, and fenced by w) with the marker fields it left, if any, settles its
// hold, and opens the next one with no unit yet and a hold of what is left of the run's budget;
// the run goes back to queued. If the run may not hold more, it ends paused instead, with the
// reason in paused. It reports false, changing nothing, if the attempt was no longer live or a
// stop was requested meanwhile.
func (s *Store) AttemptRestart(ctx context.Context, w model.Lease, r model.Restarting) (moved bool, paused string, err error) {
	runID, attempt := r.RunID, r.Attempt
	err = inTx(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE attempts SET ended_at = coalesce($3, now()), service_result = nullif($4, ''), exit_code = nullif($5, ''), exit_status = nullif($6, '')
			WHERE run_id = $1 AND attempt_no = $2 AND ended_at IS NULL AND `+fenced(7), runID, attempt, stamp(r.At),
			r.ServiceResult, r.ExitCode, r.ExitStatus, w.Host, w.Holder, w.Generation)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		// The decision to restart was taken on facts read before this transaction: a stop asked
		// for since then wins, and the next pass decides again with it in view.
		var stopRequested bool
		if err := tx.QueryRow(ctx, `SELECT stop_requested_at IS NOT NULL FROM runs WHERE id = $1 FOR UPDATE`, runID).Scan(&stopRequested); err != nil {
			return err
		}
		if stopRequested {
			return errStopRequested
		}
		moved = true
		if err := applySettlement(ctx, tx, runID, attempt, r.Settlement, "holdfast"); err != nil && !errors.Is(err, errHoldClosed) {
			return err
		}
		paused, err = openNextAttempt(ctx, tx, runID, attempt)
		return err
	})
	if errors.Is(err, errStopRequested) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("restart run %s after attempt %d: %w", runID, attempt, err)
	}
	return moved, paused, nil
}

// openNextAttempt opens attempt+1 of the run, with no unit yet and a hold of what is left of its
// budget, and queues the run again; if the run may not hold more, it ends paused instead, and
// paused is the reason. The caller ended attempt in tx.
func openNextAttempt(ctx context.Context, tx pgx.Tx, runID uuid.UUID, attempt int) (paused string, err error) {
	// The job's row before the account's, in the order admission takes them.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = (SELECT job_id FROM runs WHERE id = $1) FOR UPDATE`, runID); err != nil {
		return "", err
	}
	p, err := planHold(ctx, tx, runID, nil)
	if err != nil {
		return "", err
	}
	if p.Paused != "" {
		paused = p.Reason
		if err := notifyEnded(ctx, tx, runID); err != nil {
			return "", err
		}
		return paused, pauseNow(ctx, tx, runID, attempt, p.Paused, p.Reason)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO attempts (run_id, attempt_no) VALUES ($1, $2)`, runID, attempt+1); err != nil {
		return "", err
	}
	if err := insertHold(ctx, tx, p, runID, attempt+1); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `UPDATE runs SET status = 'queued' WHERE id = $1`, runID); err != nil {
		return "", err
	}
	// Queued again: the daemons spawn the next attempt now, not at their next interval.
	return "", notifyRun(ctx, tx, runID)
}

// errStopRequested rolls back a restart that a stop request overtook.
var errStopRequested = errors.New("a stop was requested")

// RunRequestStop records the operator's stop intent on a live run (idempotent) and notifies the
// daemons. A finished run gets a ConflictError naming its status.
func (s *Store) RunRequestStop(ctx context.Context, runID uuid.UUID) (model.Run, error) {
	var run model.Run
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		// The row first, then the time: the request's time is when it is recorded, after any
		// wait for the row, not when its transaction began. A restart that held the row and
		// committed meanwhile came before the stop.
		var status string
		if err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE id = $1 FOR UPDATE`, runID).Scan(&status); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("run %s: %w", runID, ErrNotFound)
			}
			return err
		}
		if !model.Live(status) {
			return &ConflictError{Msg: fmt.Sprintf("run %s is already %s; only a queued or running run can be stopped", runID, status)}
		}
		if err := tx.QueryRow(ctx, `
			UPDATE runs r SET stop_requested_at = coalesce(stop_requested_at, clock_timestamp())
			WHERE id = $1 RETURNING `+runColumns, runID).Scan(runDest(&run)...); err != nil {
			return err
		}
		return notifyRun(ctx, tx, runID)
	})
	if err != nil {
		return model.Run{}, wrap(err, "stop run %s", runID)
	}
	return run, nil
}

// RunIDRange is the range of the ids that start with prefix as `run list` prints them (lower or
// upper case, with the dashes where an id has them): the lowest and the highest such id. A
// prefix of fewer than 4 characters, or one no id's text starts with, has none.
func RunIDRange(prefix string) (lo, hi uuid.UUID, ok bool) {
	const layout = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
	prefix = strings.ToLower(prefix)
	if len(prefix) < 4 || len(prefix) > len(layout) {
		return uuid.Nil, uuid.Nil, false
	}
	low, high := []byte(layout), []byte(layout)
	for i := range layout {
		switch {
		case layout[i] == '-':
			if i < len(prefix) && prefix[i] != '-' {
				return uuid.Nil, uuid.Nil, false
			}
		case i < len(prefix):
			if c := prefix[i]; c >= '0' && c <= '9' || c >= 'a' && c <= 'f' {
				low[i], high[i] = c, c
			} else {
				return uuid.Nil, uuid.Nil, false
			}
		default:
			low[i], high[i] = '0', 'f'
		}
	}
	return uuid.MustParse(string(low)), uuid.MustParse(string(high)), true
}

// RunResolve finds a run by its full id or a unique prefix of it (as `run list` prints).
func (s *Store) RunResolve(ctx context.Context, idOrPrefix string) (uuid.UUID, error) {
	if id, err := uuid.Parse(idOrPrefix); err == nil {
		return id, nil
	}
	lo, hi, ok := RunIDRange(idOrPrefix)
	if !ok {
		return uuid.Nil, fmt.Errorf("run %q: %w", idOrPrefix, ErrNotFound)
	}
	// A range of the primary key's index, not a LIKE over every id's text.
	rows, err := s.pool.Query(ctx, `SELECT id FROM runs WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT 2`, lo, hi)
	if err != nil {
		return uuid.Nil, fmt.Errorf("find run %s: %w", idOrPrefix, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return uuid.Nil, fmt.Errorf("find run %s: %w", idOrPrefix, err)
	}
	switch len(ids) {
	case 0:
		return uuid.Nil, fmt.Errorf("run %q: %w", idOrPrefix, ErrNotFound)
	case 1:
		return ids[0], nil
	}
	return uuid.Nil, fmt.Errorf("run %q: %w: give more characters", idOrPrefix, ErrAmbiguous)
}

// RunGet returns a run or ErrNotFound.
func (s *Store) RunGet(ctx context.Context, id uuid.UUID) (model.Run, error) {
	var run model.Run
	err := s.queryRowGeneric(ctx, `SELECT `+runColumns+` FROM runs r WHERE r.id = $1`, id).Scan(runDest(&run)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return model.Run{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return model.Run{}, fmt.Errorf("read run %s: %w", id, err)
	}
	return run, nil
}

// RunList lists runs, newest first, optionally of one job.
func (s *Store) RunList(ctx context.Context, jobName string, limit int) ([]model.Run, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+runColumns+` FROM runs r
		WHERE $1 = '' OR r.job_name = $1
		ORDER BY r.created_at DESC LIMIT $2`, jobName, limit)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (model.Run, error) {
		var r model.Run
		err := row.Scan(runDest(&r)...)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return runs, nil
}

// AttemptList lists a run's attempts in order.
func (s *Store) AttemptList(ctx context.Context, runID uuid.UUID) ([]model.Attempt, error) {
	rows, err := s.queryGeneric(ctx, `SELECT `+attemptColumns+` FROM attempts a WHERE a.run_id = $1 ORDER BY a.attempt_no`, runID)
	if err != nil {
		return nil, fmt.Errorf("list attempts of run %s: %w", runID, err)
	}
	defer rows.Close()
	var out []model.Attempt
	for rows.Next() {
		var as attemptScan
		if err := rows.Scan(as.dest()...); err != nil {
			return nil, fmt.Errorf("list attempts of run %s: %w", runID, err)
		}
		out = append(out, as.attempt())
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list attempts of run %s: %w", runID, err)
	}
	return out, nil
}

// AttemptGet returns one attempt of a run.
func (s *Store) AttemptGet(ctx context.Context, ref model.AttemptRef) (model.Attempt, error) {
	var as attemptScan
	err := s.queryRowGeneric(ctx, `SELECT `+attemptColumns+` FROM attempts a WHERE a.run_id = $1 AND a.attempt_no = $2`,
		ref.Run, ref.No).Scan(as.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return model.Attempt{}, fmt.Errorf("run %s attempt %d: %w", ref.Run, ref.No, ErrNotFound)
	}
	if err != nil {
		return model.Attempt{}, fmt.Errorf("read run %s attempt %d: %w", ref.Run, ref.No, err)
	}
	return as.attempt(), nil
}

// RunResume continues a stopped or paused run as a new attempt: the run goes back to queued with
// its stop intent and paused reason cleared. Any other status gets a ConflictError naming it.
func (s *Store) RunResume(ctx context.Context, runID uuid.UUID) (model.Run, error) {
	var run model.Run
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var status string
		var jobID *int64
		err := tx.QueryRow(ctx, `SELECT status, job_id FROM runs WHERE id = $1 FOR UPDATE`, runID).Scan(&status, &jobID)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("run %s: %w", runID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if status != model.StatusStopped && status != model.StatusPaused {
			return &ConflictError{Msg: fmt.Sprintf("run %s is %s; only a stopped or paused run can be resumed", runID, status)}
		}
		if jobID == nil {
			return &ConflictError{Msg: fmt.Sprintf("run %s cannot be resumed: its job was removed", runID)}
		}
		// The job row lock serializes this with RunAdmit's check for a live run.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, *jobID); err != nil {
			return err
		}
		live, found, err := liveRunOf(ctx, tx, *jobID)
		if err != nil {
			return err
		}
		if found {
			return &ConflictError{Msg: fmt.Sprintf("run %s cannot be resumed while the job has a live run %s", runID, live)}
		}
		var next int
		if err := tx.QueryRow(ctx, `
			INSERT INTO attempts (run_id, attempt_no)
			SELECT $1, max(attempt_no) + 1 FROM attempts WHERE run_id = $1 RETURNING attempt_no`, runID).Scan(&next); err != nil {
			return err
		}
		p, err := planHold(ctx, tx, runID, nil)
		if err != nil {
			return err
		}
		if p.Paused != "" {
			return &ConflictError{Msg: fmt.Sprintf("run %s cannot resume yet: %s", runID, strings.TrimPrefix(p.Reason, "paused ("+p.Paused+"): "))}
		}
		if err := insertHold(ctx, tx, p, runID, next); err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `
			UPDATE runs r SET status = 'queued', stop_requested_at = NULL, stop_reason = NULL, paused_reason = NULL,
				finished_at = NULL, reason = '', failure_class = ''
			WHERE id = $1
			RETURNING `+runColumns, runID).Scan(runDest(&run)...)
		if err != nil {
			return err
		}
		crashpoint.At("resume-before-commit")
		return notifyRun(ctx, tx, runID)
	})
	if err != nil {
		return model.Run{}, wrap(err, "resume run %s", runID)
	}
	crashpoint.At("resume-after")
	return run, nil
}

// AttemptReleaseSpawnClaimParams is a spawn claim to give back.
type AttemptReleaseSpawnClaimParams struct {
	Ref      model.AttemptRef
	Unit     string // the claim's unit: a claim of another unit is left alone
	MayExist bool   // the start may have reached systemd
}

// AttemptReleaseSpawnClaim gives back a spawn claim whose unit systemd was not asked for, or whose
// start failed, so that the next pass claims the same attempt again. The unit name is derived
// from the attempt, so if a failed call did reach systemd, the next start finds the unit instead
// of a twin. For that, with p.MayExist the attempt stays the claiming host's: another host's
// systemd would not have the unit, and would start a twin. Fenced by w.
func (s *Store) AttemptReleaseSpawnClaim(ctx context.Context, w model.Lease, p AttemptReleaseSpawnClaimParams) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE attempts SET unit = NULL, spawn_claimed_at = NULL, armed_for = NULL, boot_id = NULL,
			host = CASE WHEN $4 THEN host ELSE '' END,
			lease_generation = CASE WHEN $4 THEN lease_generation END
		WHERE run_id = $1 AND attempt_no = $2 AND unit = $3 AND ended_at IS NULL AND started_at IS NULL
		  AND `+fenced(5),
		p.Ref.Run, p.Ref.No, p.Unit, p.MayExist, w.Host, w.Holder, w.Generation)
	if err != nil {
		return fmt.Errorf("release spawn claim of run %s attempt %d: %w", p.Ref.Run, p.Ref.No, err)
	}
	return nil
}

// RunListEndedBefore returns those of ids whose runs ended (succeeded, partial, failed or stopped; a
// paused run may resume) before t. Runs the database does not know are not returned.
func (s *Store) RunListEndedBefore(ctx context.Context, ids []uuid.UUID, t time.Time) ([]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id FROM runs
		WHERE id = ANY($1) AND finished_at < $2 AND status IN ('succeeded', 'partial', 'failed', 'stopped')`, ids, t)
	if err != nil {
		return nil, fmt.Errorf("runs ended before %s: %w", t.Format(time.RFC3339), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("runs ended before %s: %w", t.Format(time.RFC3339), err)
	}
	return out, nil
}
