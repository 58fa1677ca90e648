package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// statementLog records the statements a store runs, with their arguments.
type statementLog struct {
	mu    sync.Mutex
	calls []loggedStatement
	// inGenericTx: the connections in a transaction begun with store.GenericTx.
	inGenericTx map[*pgx.Conn]bool
}

type loggedStatement struct {
	sql  string
	args []any
	// generic: the store ran it with its generic plan (store.queryGeneric: it came in a batch
	// right after the setting that asks for one; or in a transaction begun with store.GenericTx).
	generic bool
}

func (l *statementLog) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inGenericTx == nil {
		l.inGenericTx = map[*pgx.Conn]bool{}
	}
	switch d.SQL {
	case store.GenericTx:
		l.inGenericTx[conn] = true
	case "commit", "rollback":
		delete(l.inGenericTx, conn)
	}
	l.calls = append(l.calls, loggedStatement{sql: d.SQL, args: d.Args, generic: l.inGenericTx[conn]})
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (l *statementLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.mu.Lock()
	defer l.mu.Unlock()
	generic := len(l.calls) > 0 && l.calls[len(l.calls)-1].sql == store.GenericPlans
	l.calls = append(l.calls, loggedStatement{sql: d.SQL, args: d.Args, generic: generic})
}

func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (l *statementLog) take() []loggedStatement {
	l.mu.Lock()
	defer l.mu.Unlock()
	calls := l.calls
	l.calls = nil
	return calls
}

// rowsRead sums, over the scans of a plan (EXPLAIN ANALYZE's JSON) on the tables in tables,
// the rows they read: those they returned and those their filters removed, in every loop.
func rowsRead(plan any, tables []string) float64 {
	var n float64
	switch v := plan.(type) {
	case map[string]any:
		if name, ok := v["Relation Name"].(string); ok && slices.Contains(tables, name) {
			loops, _ := v["Actual Loops"].(float64)
			rows, _ := v["Actual Rows"].(float64)
			removed, _ := v["Rows Removed by Filter"].(float64)
			n += (rows + removed) * loops
		}
		for _, child := range v {
			n += rowsRead(child, tables)
		}
	case []any:
		for _, child := range v {
			n += rowsRead(child, tables)
		}
	}
	return n
}

// The reads a daemon makes at every pass, and the claims it tries, cost what its host has,
// not what the fleet has: on a database seeded as a fleet's (hosts with their jobs, history,
// deliveries and live runs, one host down), each statement they run, executed with the
// arguments it ran with (EXPLAIN ANALYZE, rolled back) and the plan it ran with (a generic one
// for the reads the store plans once per connection), reads as many rows of the tables that
// grow with the fleet or with history at 200 hosts as at 50. The hosts table (a row per host,
// read whole by the planner while it is this small) is left to the fleet benchmark.
func TestDaemonReadsUseIndexes(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds a fleet")
	}
	ctx := context.Background()
	// A store of its own, traced, opened on the database once it is seeded.
	dsn := storetest.Migrated(t)
	conn := dial(t, dsn)
	seed := func(from, to int) {
		t.Helper()
		if err := storetest.SeedFleet(ctx, conn, from, to); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `ANALYZE`); err != nil {
			t.Fatal(err)
		}
	}
	seed(0, 50)
	// One host down, with its live runs: the takeover's reads have something to find.
	if _, err := conn.Exec(ctx, `UPDATE hosts SET lease_until = now() - interval '1 hour' WHERE name = 'h00003'`); err != nil {
		t.Fatal(err)
	}
	log := &statementLog{}
	st, err := store.OpenTraced(ctx, dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const host = "h00007"
	lease, err := st.LeaseAcquire(ctx, store.LeaseAcquireParams{Host: host, Holder: "test", Duration: time.Hour, Grace: time.Second,
		HolderGone: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	// A run of one of the host's jobs with none live, admitted as run start does: the spawn's
	// reads (the runs named, the claim) have one to find.
	idleJob, err := idleJobOf(ctx, conn, host)
	if err != nil {
		t.Fatal(err)
	}
	admitted, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: idleJob, Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	// A live run of the host whose unit the seed started: the end's reads have one to find.
	var spawned model.AttemptRef
	if err := conn.QueryRow(ctx, `SELECT a.run_id, a.attempt_no FROM attempts a WHERE a.host = $1 AND a.ended_at IS NULL
		AND a.unit IS NOT NULL ORDER BY a.run_id LIMIT 1`, host).Scan(&spawned.Run, &spawned.No); err != nil {
		t.Fatal(err)
	}
	log.take()

	passes := []struct {
		what string
		do   func() error
		// fleet says the read is the fleet's, made by one daemon per interval (a duty): it
		// may grow with the fleet.
		fleet bool
		// generic says the store runs its read with the read's generic plan.
		generic bool
	}{
		{what: "renew the lease", do: func() error { _, err := st.LeaseRenew(ctx, lease, time.Hour); return err }},
		{what: "live runs", do: func() error { _, err := st.RunListLive(ctx, host); return err }},
		{what: "jobs to spawn", do: func() error { _, err := st.JobListForHost(ctx, host); return err }},
		{what: "runs named", generic: true, do: func() error { _, err := st.RunListSpawnable(ctx, host, []uuid.UUID{admitted.ID}); return err }},
		{what: "runs ended", generic: true, do: func() error { _, err := st.RunListSpawned(ctx, host, []uuid.UUID{spawned.Run}); return err }},
		{what: "other writer", generic: true, do: func() error { _, err := st.AttemptOtherWriter(ctx, spawned); return err }},
		// Claimed by the first measure; the second asks again, as a pass that lost the race does.
		{what: "claim a spawn", generic: true, do: func() error {
			_, _, err := st.AttemptClaimSpawn(ctx, lease, model.SpawnClaim{Attempt: model.AttemptRef{Run: admitted.ID, No: 1},
				Unit: "holdfast-" + idleJob + "-" + admitted.ID.String() + "-a1.service"})
			return err
		}},
		// A run's way from `run start` to its end, which every run takes (inTxGeneric), and the
		// reads of one run that the daemon and `run start --wait` make.
		{what: "admit a run", generic: true, do: func() error {
			job, err := idleJobOf(ctx, conn, host)
			if err == nil {
				_, err = st.RunAdmit(ctx, store.RunAdmitParams{Job: job, Trigger: "manual", Kind: model.KindBackup})
			}
			return err
		}},
		{what: "finish a run", generic: true, do: func() error {
			var ref model.AttemptRef
			if err := conn.QueryRow(ctx, `SELECT a.run_id, a.attempt_no FROM attempts a WHERE a.host = $1 AND a.ended_at IS NULL
				AND a.unit IS NOT NULL ORDER BY a.run_id LIMIT 1`, host).Scan(&ref.Run, &ref.No); err != nil {
				return err
			}
			done, err := st.AttemptFinish(ctx, lease, model.Ending{RunID: ref.Run, Attempt: ref.No, Status: model.StatusSucceeded, Reason: "test"})
			if err == nil && !done {
				err = fmt.Errorf("run %s attempt %d not finished", ref.Run, ref.No)
			}
			return err
		}},
		{what: "a run", generic: true, do: func() error { _, err := st.RunGet(ctx, admitted.ID); return err }},
		{what: "an attempt", generic: true, do: func() error { _, err := st.AttemptGet(ctx, spawned); return err }},
		{what: "a run's attempts", generic: true, do: func() error { _, err := st.AttemptList(ctx, admitted.ID); return err }},
		{what: "run start's host", do: func() error { _, err := st.JobRunnable(ctx, store.JobRunnableParams{Job: idleJob}); return err }},
		{what: "restore's host", do: func() error {
			_, err := st.JobRunnable(ctx, store.JobRunnableParams{Job: idleJob, On: host})
			return err
		}},
		{what: "next due", generic: true, do: func() error { _, err := st.JobNextDue(ctx, host, 10*time.Second); return err }},
		{what: "admission", do: func() error {
			_, err := st.JobAdmitDue(ctx, store.JobAdmitDueParams{Now: time.Now(), Horizon: time.Now().Add(10 * time.Second), Limit: 10, SetAside: time.Minute})
			return err
		}},
		{what: "down hosts", generic: true, do: func() error { _, _, err := st.HostListDown(ctx, host, time.Second); return err }},
		{what: "next down host", do: func() error { _, _, err := st.HostNextDown(ctx, host, time.Second); return err }},
		{what: "notice down hosts", do: func() error { _, err := st.HostNoticeDown(ctx, host, time.Second); return err }},
		{what: "orphans", do: func() error { _, err := st.RunListOrphaned(ctx, host, time.Second); return err }},
		{what: "superseded", generic: true, do: func() error { _, err := st.AttemptListSuperseded(ctx, host, 24*time.Hour); return err }},
		{what: "deferred settlements", generic: true, do: func() error { _, err := st.AttemptListDeferred(ctx, host); return err }},
		{what: "watch", do: func() error { _, err := st.JobWatchFacts(ctx, model.WatchScope{Host: host}); return err }},
		{what: "watch the unattended", fleet: true, do: func() error {
			_, err := st.JobWatchFacts(ctx, model.WatchScope{Unattended: true})
			return err
		}},
		{what: "stalls", do: func() error { _, err := st.AttemptListStalled(ctx, host); return err }},
		{what: "claim a duty", do: func() error {
			_, err := st.DutyClaim(ctx, store.DutyClaimParams{Name: "test", Host: host, Every: time.Minute})
			return err
		}},
		{what: "deliveries", do: func() error { _, err := st.DeliveryClaim(ctx, 10, time.Minute); return err }},
	}
	grows := []string{"jobs", "runs", "attempts", "events", "ledger_entries", "deliveries", "snapshots"}
	// measure runs each pass and returns the rows its statements read.
	measure := func() map[string]float64 {
		t.Helper()
		read := map[string]float64{}
		for _, p := range passes {
			if err := p.do(); err != nil {
				t.Fatalf("%s: %v", p.what, err)
			}
			calls := log.take()
			if len(calls) == 0 {
				t.Fatalf("%s ran no statement", p.what)
			}
			generic := false
			for _, c := range calls {
				verb := strings.ToUpper(strings.Fields(c.sql)[0])
				if !slices.Contains([]string{"SELECT", "WITH", "UPDATE", "INSERT"}, verb) {
					continue // begin, commit, savepoints, the plans' setting
				}
				read[p.what] += rowsReadBy(t, conn, c, grows)
				generic = generic || c.generic
			}
			if generic != p.generic {
				t.Fatalf("%s: ran with a generic plan %v, want %v", p.what, generic, p.generic)
			}
		}
		return read
	}
	small := measure()
	seed(50, 200)
	large := measure()
	for _, p := range passes {
		t.Logf("%s: %.0f rows read at 50 hosts, %.0f at 200", p.what, small[p.what], large[p.what])
		if !p.fleet && large[p.what] > small[p.what]+10 {
			t.Errorf("%s reads %.0f rows at 200 hosts, %.0f at 50: its cost grows with the fleet", p.what, large[p.what], small[p.what])
		}
	}
}

// idleJobOf is a job of host with no live run.
func idleJobOf(ctx context.Context, conn *pgx.Conn, host string) (string, error) {
	var job string
	err := conn.QueryRow(ctx, `SELECT j.name FROM jobs j WHERE j.host = $1 AND NOT EXISTS
		(SELECT 1 FROM runs r WHERE r.job_id = j.id AND r.status IN ('queued', 'running')) ORDER BY j.name LIMIT 1`, host).Scan(&job)
	return job, err
}

// errRollBack ends a transaction that only measured.
var errRollBack = errors.New("roll back")

// rowsReadBy executes the statement c ran, with its arguments, under EXPLAIN ANALYZE in a
// transaction rolled back, and returns the rows its scans of tables read (rowsRead): with its
// generic plan, made without the arguments, if the store ran it so (c.generic), else with a plan
// made for them.
func rowsReadBy(t *testing.T, conn *pgx.Conn, c loggedStatement, tables []string) float64 {
	t.Helper()
	ctx := context.Background()
	const probe = "rows_read_probe"
	var raw []byte
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if !c.generic {
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+c.sql, c.args...).Scan(&raw); err != nil {
				return err
			}
			return errRollBack
		}
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
			return err
		}
		sd, err := tx.Prepare(ctx, probe, c.sql)
		if err != nil {
			return err
		}
		// EXECUTE's arguments are typed here and sent as literals: the server describes no
		// parameter of a utility statement.
		params := make([]string, len(sd.ParamOIDs))
		for i, oid := range sd.ParamOIDs {
			var typ string
			if err := tx.QueryRow(ctx, "SELECT format_type($1, NULL)", oid).Scan(&typ); err != nil {
				return err
			}
			params[i] = fmt.Sprintf("$%d::%s", i+1, typ)
		}
		execute := "EXECUTE " + probe
		if len(params) > 0 {
			execute += "(" + strings.Join(params, ", ") + ")"
		}
		args := []any{pgx.QueryExecModeSimpleProtocol}
		for _, a := range c.args {
			if ids, ok := a.([]uuid.UUID); ok { // as text: pgx encodes no uuid[] for an unknown type
				texts := make([]string, len(ids))
				for i, id := range ids {
					texts[i] = id.String()
				}
				a = texts
			}
			args = append(args, a)
		}
		if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+execute, args...).Scan(&raw); err != nil {
			return err
		}
		return errRollBack
	})
	if c.generic {
		_ = conn.Deallocate(ctx, probe)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && strings.HasPrefix(strings.ToUpper(strings.TrimSpace(c.sql)), "INSERT") {
		// The row the store inserted is there now: inserted again, it conflicts, having read
		// no table, as the store's insert read none.
		return 0
	}
	if !errors.Is(err, errRollBack) {
		t.Fatalf("explain %s: %v", c.sql, err)
	}
	var plan []any
	if err := json.Unmarshal(raw, &plan); err != nil {
		t.Fatal(err)
	}
	return rowsRead(plan, tables)
}

// dial is a connection of the test's own to dsn, closed when the test ends.
func dial(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// The reads that go over many live runs (a pass over a host's, a list of runs) read each run and
// its attempt a few times, not once per other live run, even before the planner has statistics of
// the tables (a burst of admissions into a new database, before autovacuum's first analyze): on
// 300 live runs of one host, never analyzed, the rows each read scans stay a few per run.
func TestLiveRunsLinearWithoutStatistics(t *testing.T) {
	ctx := context.Background()
	// A store of its own, traced, opened on the database once it is seeded.
	dsn := storetest.Migrated(t)
	conn := dial(t, dsn)
	const runs = 300
	// Scheduled runs admitted ahead of their slot, half of them armed (a unit), as a burst of
	// due jobs leaves them.
	if _, err := conn.Exec(ctx, `
		WITH j AS (INSERT INTO jobs (name, engine, repository, password_file, paths, command, schedule, next_run_at)
			SELECT 'j' || i, 'command', '-', '-', '{/}', '{/bin/true}', '@every 1h', now() + interval '1 hour'
			FROM generate_series(1, $1::int) i RETURNING id, name),
		r AS (INSERT INTO runs (id, job_id, job_name, trigger, status, not_before)
			SELECT gen_random_uuid(), id, name, 'schedule', 'queued', now() + interval '1 minute' FROM j RETURNING id)
		INSERT INTO attempts (run_id, attempt_no, unit, host, spawn_claimed_at)
		SELECT id, 1, CASE WHEN row_number() OVER () % 2 = 0 THEN 'u-' || id END, 'h', now() FROM r`, runs); err != nil {
		t.Fatal(err)
	}
	log := &statementLog{}
	st, err := store.OpenTraced(ctx, dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, tt := range []struct {
		what   string
		do     func() error
		tables []string
	}{
		{"the sweep's live runs", func() error {
			live, err := st.RunListLive(ctx, "h")
			if err == nil && len(live) != runs {
				err = fmt.Errorf("%d live runs, want %d", len(live), runs)
			}
			return err
		}, []string{"attempts"}},
		{"the runs listed", func() error {
			listed, err := st.RunList(ctx, "", 2*runs)
			if err == nil && len(listed) != runs {
				err = fmt.Errorf("%d runs listed, want %d", len(listed), runs)
			}
			return err
		}, []string{"attempts"}},
		{"admission's next due time", func() error {
			due, err := st.JobNextDue(ctx, "h", 10*time.Second)
			if err == nil && due == nil {
				err = errors.New("nothing due, want the runs' start lead")
			}
			return err
		}, []string{"runs", "attempts"}},
	} {
		if err := tt.do(); err != nil {
			t.Fatalf("%s: %v", tt.what, err)
		}
		read := 0.0
		for _, c := range log.take() {
			if verb := strings.ToUpper(strings.Fields(c.sql)[0]); verb == "SELECT" || verb == "WITH" {
				read += rowsReadBy(t, conn, c, tt.tables)
			}
		}
		// A few rows per run (JobNextDue reads four: its job's live run, the run, the host's
		// live runs, the attempt); the quadratic plans read hundreds.
		if read > 10*runs {
			t.Errorf("%s over %d live runs read %.0f rows of %v: more than a few per run", tt.what, runs, read, tt.tables)
		}
	}
}
