package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/testenv"
)

// fleet is a database seeded as the one PostgreSQL of a fleet (storetest.SeedFleet). Its
// server loads pg_stat_statements, so a daemon's database time is read by its role.
type fleet struct {
	srv   *testenv.PostgresServer
	dsn   string // the seeder's (the superuser)
	hosts int
	conn  *pgx.Conn
}

const (
	jobsPerHost = storetest.FleetJobsPerHost
	// daemonRole is the role the measured daemons connect as: pg_stat_statements and
	// pg_stat_activity count what they do apart from the seeding.
	daemonRole = "hfdaemon"
)

// newFleet starts the fleet's PostgreSQL, accepting maxConnections sessions.
func newFleet(b *testing.B, maxConnections int) *fleet {
	ctx := context.Background()
	// autovacuum as a fleet's server runs it: the leases' renewals leave dead rows at every host's
	// renewal, which the test servers' setting (off) would let pile up for the whole bench.
	srv, dsn := testenv.PrivatePostgres(b, "shared_preload_libraries=pg_stat_statements", fmt.Sprintf("max_connections=%d", maxConnections),
		"autovacuum=on", "pg_stat_statements.track_planning=on")
	if _, err := migrations.Apply(ctx, dsn); err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	for _, stmt := range []string{
		`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`,
		`CREATE ROLE ` + daemonRole + ` LOGIN SUPERUSER`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			b.Fatalf("%s: %v", stmt, err)
		}
	}
	return &fleet{srv: srv, dsn: dsn, conn: conn}
}

// daemonDSN is the address a measured daemon connects with: the daemon's role, and
// application_name host, so that pg_stat_activity tells its connections apart.
func (f *fleet) daemonDSN(b *testing.B, host string) string { return f.roleDSN(b, daemonRole, host) }

// roleDSN is the address of a session as role with application_name app.
func (f *fleet) roleDSN(b *testing.B, role, app string) string {
	u, err := url.Parse(f.dsn)
	if err != nil {
		b.Fatal(err)
	}
	u.User = url.User(role)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// grow seeds hosts until the fleet has n of them (storetest.SeedFleet), then vacuums and
// analyzes the tables as autovacuum would have.
func (f *fleet) grow(b *testing.B, n int) {
	ctx := context.Background()
	if n <= f.hosts {
		return
	}
	from, to := f.hosts, n
	if err := storetest.SeedFleet(ctx, f.conn, from, to); err != nil {
		b.Fatal(err)
	}
	if _, err := f.conn.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	f.hosts = n
}

// statementCost is what one statement of the daemon's cost in a measurement.
type statementCost struct {
	// ID is its queryid: one statement's text may be stored normalized for one role and as
	// sent for another (pg_stat_statements keeps the text of the call that made the entry).
	ID     int64
	Query  string
	Calls  int64
	MS     float64 // planning and executing it
	PlanMS float64 // planning it
	Blocks int64   // shared buffers hit or read: its work, however loaded the server
}

// daemonCost reads what the daemon's role spent since the last reset, by statement, apart
// from the fleet's duties (statements marked /* fleet duty */, see store.DutyClaim): one
// daemon of the fleet does each per interval, so in a fleet they are a daemon's cost once in
// as many intervals as there are daemons.
func (f *fleet) daemonCost(b *testing.B) (own, duties float64, calls int64, top []statementCost) {
	all := f.statements(b, daemonRole)
	for _, s := range all {
		if strings.Contains(s.Query, "/* fleet duty */") {
			duties += s.MS
		} else {
			own += s.MS
		}
		calls += s.Calls
	}
	sort.Slice(all, func(i, j int) bool { return all[i].MS > all[j].MS })
	return own, duties, calls, all[:min(len(all), 8)]
}

// statements reads what role spent since the last reset, by statement.
func (f *fleet) statements(b *testing.B, role string) []statementCost {
	rows, err := f.conn.Query(context.Background(), `
		SELECT queryid, query, calls, total_exec_time + total_plan_time, total_plan_time, shared_blks_hit + shared_blks_read
		FROM pg_stat_statements
		WHERE userid = (SELECT oid FROM pg_roles WHERE rolname = $1)`, role)
	if err != nil {
		b.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (statementCost, error) {
		var s statementCost
		return s, r.Scan(&s.ID, &s.Query, &s.Calls, &s.MS, &s.PlanMS, &s.Blocks)
	})
	if err != nil {
		b.Fatal(err)
	}
	return all
}

func (f *fleet) resetStatements(b *testing.B) {
	if _, err := f.conn.Exec(context.Background(), `SELECT pg_stat_statements_reset()`); err != nil {
		b.Fatal(err)
	}
}

// connections counts the daemon's sessions (its application_name is its host).
func (f *fleet) connections(b *testing.B, host string) int {
	var n int
	if err := f.conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND application_name = $2`,
		daemonRole, host).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// idleJobs adds jobsPerHost jobs pinned to host, none of which is due within half an hour.
func (f *fleet) idleJobs(b *testing.B, host string) {
	ctx := context.Background()
	for k := range jobsPerHost {
		if _, err := f.conn.Exec(ctx, `INSERT INTO jobs (name, engine, repository, password_file, paths, host, schedule, time_zone, next_run_at)
			VALUES ($1, 'restic', $2, '/etc/holdfast/pw', '{/srv/data}', $3, '0 * * * *', 'UTC', now() + interval '40 minutes')
			ON CONFLICT (name) DO NOTHING`, fmt.Sprintf("%s-j%d", host, k), "/srv/restic/"+host, host); err != nil {
			b.Fatal(err)
		}
	}
}

// idleDaemon starts a real daemon for host, with jobsPerHost jobs of its own none of which is
// due, against the fleet; it is killed when the benchmark ends or kill is called.
func (f *fleet) idleDaemon(b *testing.B, e *benchEnv, host string) (kill func()) {
	f.idleJobs(b, host)
	cmd := exec.Command(e.bin, "daemon", "--host", host)
	cmd.Env = append(os.Environ(), "HOLDFAST_DSN="+f.daemonDSN(b, host), "HOLDFAST_SYSTEMD_ADDRESS="+e.mgr.Address,
		"HOLDFAST_STATE_DIR="+e.state)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := false
	kill = func() {
		if done {
			return
		}
		done = true
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if b.Failed() {
			b.Logf("daemon log:\n%s", log.String())
		}
	}
	b.Cleanup(kill)
	return kill
}

// fleetWindow is how long each measurement of a fleet lasts: HOLDFAST_FLEET_WINDOW, 30s by default.
func fleetWindow(b *testing.B) time.Duration {
	s := os.Getenv("HOLDFAST_FLEET_WINDOW")
	if s == "" {
		return 30 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkFleetIdleDaemon measures one real idle daemon's database time beside fleets of 10,
// 100 and 1,000 hosts (pg_stat_statements, by the daemon's role, over HOLDFAST_FLEET_WINDOW
// of its life, 30s by default), and its connections. Its growth from 10 to 1,000 hosts is the
// figure that says whether a daemon's cost depends on the fleet: 1 means not at all. The
// fleet's duties, which this daemon, alone in the fleet, claims at each interval, are
// reported apart (duty-ms/s): in a fleet of N daemons a daemon does them once in N intervals.
func BenchmarkFleetIdleDaemon(b *testing.B) {
	e := newBenchEnv(b)
	f := newFleet(b, 400)
	window := fleetWindow(b)
	perSecond := map[int]float64{}
	sizes := []int{10, 100, 1000}
	for _, size := range sizes {
		f.grow(b, size)
		host := fmt.Sprintf("idle%d", size)
		kill := f.idleDaemon(b, e, host)
		// Started, its lease taken and its first passes made, and the connections its start
		// opened at once closed again (store.DefaultMaxConnIdleTime); and its lease held past
		// the takeover grace, by which it notices the hosts that the smaller fleets' daemons
		// left down: a write once per episode, which would otherwise fall in the window.
		time.Sleep(max(20*time.Second, reconcile.DefaultTakeoverGrace+5*time.Second))
		f.resetStatements(b)
		maxConns := 0
		start := time.Now()
		for time.Since(start) < window {
			time.Sleep(time.Second)
			maxConns = max(maxConns, f.connections(b, host))
		}
		ms, duties, calls, top := f.daemonCost(b)
		kill()
		elapsed := time.Since(start).Seconds()
		perSecond[size] = ms / elapsed
		b.ReportMetric(ms/elapsed, fmt.Sprintf("db-ms/s-%d-hosts", size))
		b.ReportMetric(duties/elapsed, fmt.Sprintf("duty-ms/s-%d-hosts", size))
		b.ReportMetric(float64(calls)/elapsed, fmt.Sprintf("statements/s-%d-hosts", size))
		b.ReportMetric(float64(maxConns), fmt.Sprintf("connections-%d-hosts", size))
		// The costliest statements, for whoever looks for the next one to make cheaper.
		for _, s := range top {
			q := strings.Join(strings.Fields(s.Query), " ")
			fmt.Printf("fleet of %d hosts: %8.1f ms in %4d calls: %s\n", size, s.MS, s.Calls, q[:min(len(q), 140)])
		}
	}
	b.ReportMetric(perSecond[1000]/perSecond[10], "growth-10-to-1000")
	b.ReportMetric(0, "ns/op")
}
