// Package store is holdfast's only door to PostgreSQL: every statement the project runs lives
// here, parameterized, and every multi-row change is one transaction or one guarded statement.
//
// Writes that end or advance an attempt are guarded by "this attempt is still the live one"
// (ended_at IS NULL) or by the journal cursor they started from, and report whether they changed
// anything: a caller acting on an old snapshot does nothing instead of overwriting newer facts.
//
// The records its calls return and write are package model's. The store exports only the Store,
// its configuration (Address, Config, Bounds), what its setup and LISTEN take and report
// (Provisioned, Wakes), its errors, and the params structs its calls take, named for the call
// (JobAdmitDueParams), with their parts (JobEdit, AccountChange): a call with more than two
// arguments besides the context and the writer's lease takes one.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/setting"
)

// NotifyChannel is the LISTEN/NOTIFY channel that wakes daemons when a run is admitted or asked to stop.
const NotifyChannel = "holdfast_runs"

var (
	ErrNotFound  = errors.New("not found")
	ErrJobExists = errors.New("job already exists")
	ErrAmbiguous = errors.New("ambiguous id prefix")
)

// RefusedError means PostgreSQL refused the values of a write (a data exception such as a NUL
// in text, invalid UTF-8 or JSON, or a value too large): writing them again fails again. It
// names the SQLSTATE only: PostgreSQL's message and detail may quote the values, which can be
// hostile.
type RefusedError struct{ Code string }

func (e *RefusedError) Error() string {
	return "the database cannot store the values (SQLSTATE " + e.Code + ")"
}

// refused turns a data exception into a *RefusedError; other errors pass unchanged.
func refused(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || pgErr.Code == "54000") {
		return &RefusedError{Code: pgErr.Code}
	}
	return err
}

// ConflictError says an operation does not apply to an object in its current state.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// Store holds a connection pool, and what LISTEN connects with.
type Store struct {
	pool    *pgxpool.Pool
	session *pgx.ConnConfig
	// liveRunsRead is how many runs the last RunListLive read: the next read's capacity, so that
	// a sweep's thousand runs of a kilobyte each are not copied over ten times as they come.
	liveRunsRead atomic.Int64
}

// Address is where a process finds the database.
type Address struct {
	// DSN is what the pool connects to: the server, or a pooler in front of it.
	DSN string
	// SessionDSN, when set, says that DSN is a transaction pooler (PgBouncer with
	// pool_mode = transaction) and is what needs a session of its own connects to instead:
	// LISTEN and the migrations' lock (Session). The pool then sends no named prepared
	// statement (pgx's cache_describe mode) and no startup parameters, which such a pooler
	// cannot keep (see docs/ARCHITECTURE.md, Behind PgBouncer).
	SessionDSN string
}

// Pooled reports whether DSN is a transaction pooler.
func (a Address) Pooled() bool { return a.SessionDSN != "" }

// Session is the address of a session of its own: SessionDSN, else DSN.
func (a Address) Session() string {
	if a.SessionDSN != "" {
		return a.SessionDSN
	}
	return a.DSN
}

// Config configures the pool of a long-lived process (the daemon): besides the database, the
// bounds PostgreSQL puts on each of its statements, so a lock held by another session or a
// stalled query cannot hold it forever. A server that does not answer at all cannot enforce
// them: callers bound their own calls with contexts too.
type Config struct {
	Address
	// StatementTimeout aborts a statement that runs longer (statement_timeout). Default
	// DefaultStatementTimeout.
	StatementTimeout time.Duration
	// LockTimeout aborts a statement that waits longer for a lock (lock_timeout). Default
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// IdleInTransactionTimeout ends a session that stays idle this long inside a transaction
	// (idle_in_transaction_session_timeout), releasing its locks. Default
	// DefaultIdleInTransactionTimeout.
	IdleInTransactionTimeout time.Duration
	// ConnectTimeout bounds opening one connection. Default DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// Config defaults. Settings given in the DSN itself win over them. Behind a transaction pooler
// (Address.Pooled) the timeouts are the role's or the database's (ALTER ROLE ... SET) and
// these are not sent: the pooler would refuse them, or drop them with ignore_startup_parameters.
const (
	// DefaultMaxConns bounds a process's pool (pool_max_conns in the DSN changes it).
	DefaultMaxConns = 4
	// DefaultMaxConnIdleTime closes a pool's connection unused this long, so that an idle
	// daemon keeps one beside its listener (pool_max_conn_idle_time in the DSN changes it).
	DefaultMaxConnIdleTime          = 10 * time.Second
	DefaultStatementTimeout         = 30 * time.Second
	DefaultLockTimeout              = 10 * time.Second
	DefaultIdleInTransactionTimeout = time.Minute
	DefaultConnectTimeout           = 10 * time.Second
)

// Validate fills in defaults and checks the config.
func (c *Config) Validate() error {
	if c.DSN == "" {
		return errors.New("no database address")
	}
	for _, f := range []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"statement timeout", &c.StatementTimeout, DefaultStatementTimeout},
		{"lock timeout", &c.LockTimeout, DefaultLockTimeout},
		{"idle-in-transaction timeout", &c.IdleInTransactionTimeout, DefaultIdleInTransactionTimeout},
		{"connect timeout", &c.ConnectTimeout, DefaultConnectTimeout},
	} {
		switch {
		case *f.d == 0:
			*f.d = f.def
		case *f.d < time.Millisecond:
			return fmt.Errorf("database %s %s: want at least 1ms", f.name, *f.d)
		}
	}
	return nil
}

// New validates cfg and connects with its bounds on every connection of the pool, to a server
// that accepts writes (target_session_attrs=read-write, unless the DSN says otherwise).
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return open(ctx, cfg.Address, func(pc *pgxpool.Config) {
		params := pc.ConnConfig.RuntimeParams
		for name, d := range map[string]time.Duration{
			"statement_timeout":                   cfg.StatementTimeout,
			"lock_timeout":                        cfg.LockTimeout,
			"idle_in_transaction_session_timeout": cfg.IdleInTransactionTimeout,
		} {
			if _, set := params[name]; !set && !cfg.Pooled() {
				params[name] = strconv.FormatInt(d.Milliseconds(), 10) + "ms"
			}
		}
		if pc.ConnConfig.ConnectTimeout == 0 {
			pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
		}
		// The daemon writes: a server that is (or became, after a failover) a read-only standby
		// is refused, and with several hosts in the DSN the next one is tried.
		if !strings.Contains(cfg.DSN, "target_session_attrs") {
			pc.ConnConfig.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
		}
	})
}

// Open connects to the database at dsn and checks that it answers, with the server's own
// statement bounds (for short-lived commands; the daemon uses New).
func Open(ctx context.Context, dsn string) (*Store, error) {
	return open(ctx, Address{DSN: dsn}, nil)
}

// Connect is Open at an address that may be a transaction pooler.
func Connect(ctx context.Context, addr Address) (*Store, error) {
	return open(ctx, addr, nil)
}

// cancelWait is how long a query whose context ended may still take to end on the server once
// asked to cancel; then its connection is closed (a server that does not answer at all).
const cancelWait = 2 * time.Second

func open(ctx context.Context, addr Address, configure func(*pgxpool.Config)) (*Store, error) {
	dsn := addr.DSN
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse database address: %w", err)
	}
	var session *pgx.ConnConfig // LISTEN's: the pool's own unless the DSN is a pooler
	if addr.Pooled() {
		if session, err = pgx.ParseConfig(addr.SessionDSN); err != nil {
			return nil, fmt.Errorf("parse session database address: %w", err)
		}
		// A named prepared statement lives on one server connection, and the pooler hands the
		// next transaction another: statements go out unnamed, parsed and run in one round
		// trip, with the parameter types described once and cached (they do not depend on
		// the server connection).
		if !strings.Contains(dsn, "default_query_exec_mode") {
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
	}
	// A daemon's budget on a database that a fleet shares: a few connections, opened as work
	// needs them and closed once idle (LISTEN has its own, see listen). The
	// sweep's workers queue for them; pool_max_conns and pool_max_conn_idle_time in the DSN win.
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	if !strings.Contains(dsn, "pool_max_conn_idle_time") {
		cfg.MaxConnIdleTime = DefaultMaxConnIdleTime
	}
	if !strings.Contains(dsn, "pool_health_check_period") {
		cfg.HealthCheckPeriod = DefaultMaxConnIdleTime / 2
	}
	if configure != nil {
		configure(cfg)
	}
	if session == nil {
		session = cfg.ConnConfig.Copy()
	} else {
		if session.ConnectTimeout == 0 {
			session.ConnectTimeout = cfg.ConnConfig.ConnectTimeout
		}
		if !strings.Contains(addr.SessionDSN, "target_session_attrs") {
			session.ValidateConnect = cfg.ConnConfig.ValidateConnect
		}
	}
	// A query whose context ends is cancelled on the server and its connection kept. Closing
	// the connection instead has the next query open a new one, a cold server process: on a
	// loaded server that makes the next query late too, and a fleet's daemons then reconnect
	// without end. The listener keeps closing its own: it runs nothing to cancel. Behind a
	// pooler a closed client connection costs no server process, and PgBouncer 1.18 was seen
	// to exit while it passed on cancel requests to a frozen server.
	if !addr.Pooled() {
		cfg.ConnConfig.BuildContextWatcherHandler = func(conn *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: conn, DeadlineDelay: cancelWait}
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return &Store{pool: pool, session: session}, nil
}

// MigrationListApplied returns the schema versions recorded as applied (migrations.VersionTable);
// none when the table does not exist yet.
func (s *Store) MigrationListApplied(ctx context.Context) ([]int64, error) {
	rows, err := s.pool.Query(ctx, "SELECT version_id FROM "+pgx.Identifier{migrations.VersionTable}.Sanitize()+
		" WHERE is_applied AND version_id > 0")
	var versions []int64
	if err == nil {
		versions, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: never migrated
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read schema versions: %w", err)
	}
	return versions, nil
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// unknownAccount turns the violation of a job's account reference into a message that says
// what to do; other errors pass unchanged.
func unknownAccount(err error, account string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" && pgErr.ConstraintName == "jobs_account_fkey" {
		return setting.Errorf("account %q: %w: add it first (holdfast account add %s {Account.GrantedBytes} SIZE)", account, ErrNotFound, account)
	}
	return err
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

func inTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, fn)
}

// wrap adds context to err, except to the answers callers act on as they are: a conflict with
// the current state, or something not found (those already name what they are about).
func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var conflict *ConflictError
	if errors.As(err, &conflict) || errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// notifyHost wakes, when tx commits, the daemon of host ("" every daemon: the work is any
// host's).
func notifyHost(ctx context.Context, tx pgx.Tx, host string) error {
	return notify(ctx, tx, NotifyChannel, hostPayload(host))
}

// notify sends payload on channel, when q's transaction commits.
func notify(ctx context.Context, q execer, channel, payload string) error {
	_, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return err
}

// notifyRun wakes, when tx commits, the daemons that may act on the run: its live attempt's
// host once claimed, else the host its run or job is pinned to, else every daemon.
func notifyRun(ctx context.Context, q execer, run uuid.UUID) error {
	return notifyRunExcept(ctx, q, run, "")
}

// notifyRunExcept is notifyRun, silent where the daemon of host except ("" none) is the one to
// act and wakes itself: the run is its host's or any host's. Every notification costs the
// server a wake of each listening session, whatever it is about.
func notifyRunExcept(ctx context.Context, q execer, run uuid.UUID, except string) error {
	_, err := q.Exec(ctx, `
		SELECT pg_notify($1, 'run:' || r.id || ' ' || $3 || coalesce(nullif(a.host, ''), r.host, j.host, ''))
		FROM runs r LEFT JOIN jobs j ON j.id = r.job_id LEFT JOIN attempts a ON a.run_id = r.id AND a.ended_at IS NULL
		WHERE r.id = $2 AND ($4 = '' OR coalesce(nullif(a.host, ''), r.host, j.host, '') NOT IN ('', $4))`,
		NotifyChannel, run, hostPayload(""), except)
	return err
}

// liveRunOf returns the job's live run, if it has one. Callers hold the job's row lock, which
// serializes them with every other admission of the job.
func liveRunOf(ctx context.Context, tx pgx.Tx, jobID int64) (uuid.UUID, bool, error) {
	var live uuid.UUID
	err := tx.QueryRow(ctx, `SELECT id FROM runs WHERE job_id = $1 AND status IN ('queued', 'running') LIMIT 1`, jobID).Scan(&live)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, false, nil
	}
	return live, err == nil, err
}

func durationToInterval(d time.Duration) *time.Duration {
	if d <= 0 {
		return nil
	}
	return &d
}

// Bounds are the bounds a pool's connection puts on its statements (0 is none).
type Bounds struct {
	Statement, Lock, IdleInTransaction time.Duration
}

// Bounds returns the bounds the pool's connections have: behind a transaction pooler those of
// holdfast's role and database (ALTER ROLE ... SET), which New cannot send.
func (s *Store) Bounds(ctx context.Context) (Bounds, error) {
	var b Bounds
	err := s.pool.QueryRow(ctx, `SELECT current_setting('statement_timeout')::interval, current_setting('lock_timeout')::interval,
		current_setting('idle_in_transaction_session_timeout')::interval`).Scan(&b.Statement, &b.Lock, &b.IdleInTransaction)
	if err != nil {
		return Bounds{}, fmt.Errorf("read statement bounds: %w", err)
	}
	return b, nil
}
