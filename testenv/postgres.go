package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"
)

// PGBinDir is where the PostgreSQL 15 server binaries are expected.
const PGBinDir = "/usr/lib/postgresql/15/bin"

const pgReadyTimeout = 30 * time.Second

// pgServer is the private server shared by the tests of one test binary.
var pgServer struct {
	once        sync.Once
	srv         *PostgresServer
	unavailable string // why there is no server to start
	err         error
}

// Postgres returns the DSN of a fresh, empty database on a real PostgreSQL
// server; the database is dropped at t.Cleanup.
//
// If HOLDFAST_TEST_DSN is set, the database is created on the server it
// names. Otherwise the test binary starts one private PostgreSQL 15 server
// (see StartPostgresServer), which RunMain stops.
//
// The DSN is a URL with the socket directory as host, e.g.
// postgres://postgres@/holdfast_test_1a2b...?host=%2Ftmp%2F...&sslmode=disable
func Postgres(t testing.TB) string {
	t.Helper()
	return newDatabase(t, adminDSN(t), "")
}

// adminDSN is the DSN of the maintenance database of the server Postgres uses.
func adminDSN(t testing.TB) string {
	t.Helper()
	if admin := os.Getenv("HOLDFAST_TEST_DSN"); admin != "" {
		return admin
	}
	srv, err := privatePostgres(t)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return srv.DSN("postgres")
}

// templates are the prepared databases of PostgresFrom, by key, made once per test binary.
var templates struct {
	mu    sync.Mutex
	names map[string]string
	admin string // the server they are on, for their removal at shutdown
}

// PostgresFrom is Postgres, with the database a copy of one that prepare made once per test
// binary under key: a schema every test needs is laid out once, and each test's copy costs the
// server a file copy instead of the statements. A failed prepare fails the test and is tried
// again by the next one.
func PostgresFrom(t testing.TB, key string, prepare func(ctx context.Context, dsn string) error) string {
	t.Helper()
	admin := adminDSN(t)
	templates.mu.Lock()
	name, ok := templates.names[key]
	if !ok {
		name = "holdfast_template_" + randomHex(8)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := createDatabase(ctx, adminExec, admin, name, "")
		if err == nil {
			var dsn string
			if dsn, err = withDatabase(admin, name); err == nil {
				err = prepare(ctx, dsn)
			}
			if err != nil {
				err = errors.Join(err, dropDatabase(ctx, admin, name))
			}
		}
		cancel()
		if err != nil {
			templates.mu.Unlock()
			t.Fatalf("testenv: template database %s: %v", key, err)
		}
		if templates.names == nil {
			templates.names = map[string]string{}
		}
		templates.names[key], templates.admin = name, admin
	}
	templates.mu.Unlock()
	return newDatabase(t, admin, name)
}

// dropTemplates removes PostgresFrom's templates from a server the test binary did not start.
func dropTemplates() error {
	templates.mu.Lock()
	defer templates.mu.Unlock()
	if len(templates.names) == 0 || os.Getenv("HOLDFAST_TEST_DSN") == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, name := range templates.names {
		errs = append(errs, dropDatabase(ctx, templates.admin, name))
	}
	return errors.Join(errs...)
}

// newDatabase creates a database on the server admin names, a copy of template unless that is
// empty, dropped at t.Cleanup, and returns its DSN.
func newDatabase(t testing.TB, admin, template string) string {
	t.Helper()
	name := "holdfast_test_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := createDatabase(ctx, adminExec, admin, name, template); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropDatabase(ctx, admin, name); err != nil {
			t.Errorf("testenv: drop database: %v", err)
		}
	})
	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dsn
}

// privatePostgres starts the test binary's own PostgreSQL server once and returns it; a machine
// that cannot run one skips the test (fails it under CI=true).
func privatePostgres(t testing.TB) (*PostgresServer, error) {
	requireRunMain(t, "Postgres's private server")
	pgServer.once.Do(startPostgres)
	if pgServer.unavailable != "" {
		unavailable(t, "%s (or set HOLDFAST_TEST_DSN)", pgServer.unavailable)
	}
	if pgServer.err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", pgServer.err)
	}
	return pgServer.srv, nil
}

func pgExec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// adminPools hold one small connection pool per server for creating and dropping the tests'
// databases: a connection per statement would cost the server a backend start each time.
var adminPools struct {
	mu    sync.Mutex
	pools map[string]*pgxpool.Pool
}

// adminExec runs sql on a pooled connection to the server admin names.
func adminExec(ctx context.Context, admin, sql string) error {
	adminPools.mu.Lock()
	pool, ok := adminPools.pools[admin]
	if !ok {
		cfg, err := pgxpool.ParseConfig(admin)
		if err != nil {
			adminPools.mu.Unlock()
			return err
		}
		cfg.MaxConns = 2
		if pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
			adminPools.mu.Unlock()
			return err
		}
		if adminPools.pools == nil {
			adminPools.pools = map[string]*pgxpool.Pool{}
		}
		adminPools.pools[admin] = pool
	}
	adminPools.mu.Unlock()
	_, err := pool.Exec(ctx, sql)
	return err
}

// closeAdminPools closes adminExec's pools.
func closeAdminPools() {
	adminPools.mu.Lock()
	defer adminPools.mu.Unlock()
	for admin, pool := range adminPools.pools {
		pool.Close()
		delete(adminPools.pools, admin)
	}
}

// createDatabase creates database name through exec (adminExec for the tests' databases,
// pgExec for a server's one) on the server admin connects to, a copy of template if one is given.
func createDatabase(ctx context.Context, exec func(ctx context.Context, dsn, sql string) error, admin, name, template string) error {
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		// FILE_COPY copies the template's files instead of writing each block through the WAL:
		// half the CPU for a database of a few megabytes.
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize() + " STRATEGY FILE_COPY"
	}
	if err := exec(ctx, admin, sql); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// dropDatabase drops database name on the server admin connects to. FORCE: a test that leaked a
// connection must not keep its database.
func dropDatabase(ctx context.Context, admin, name string) error {
	return adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// withDatabase returns dsn (URL or keyword/value form) naming database db.
func withDatabase(dsn, db string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse DSN: %w", err)
		}
		u.Path = "/" + db
		u.RawPath = ""
		return u.String(), nil
	}
	// In keyword/value form the last setting wins.
	return dsn + " dbname=" + db, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func startPostgres() {
	pdir, err := processDir()
	if err != nil {
		pgServer.err = err
		return
	}
	srv, err := startTestServer(filepath.Join(pdir, "postgres"))
	var u *unavailableError
	switch {
	case errors.As(err, &u):
		pgServer.unavailable = u.msg
	case err != nil:
		pgServer.err = err
	}
	pgServer.srv = srv
}

// PostgresServer is a private PostgreSQL server started by
// StartPostgresServer.
type PostgresServer struct {
	Dir string // holds the data directory (a test server's: a link to it), the server's log and its unix socket

	settings []string // NAME=VALUE, given to every start
	scratch  string   // a test server's: what holds its data directory, removed by Stop

	mu   sync.Mutex
	proc *child // nil once stopped
}

// StartPostgresServer starts a private PostgreSQL 15 server in dir and waits
// until it accepts connections. dir is created if it does not exist; it
// holds the data directory (data, made with initdb unless it exists), the
// server's log (postgres.log) and its unix socket. The server listens on no
// TCP port, trusts every local connection and runs with fsync off: it is for
// tests and demos, never for data that matters.
//
// Run as root, the server runs as the postgres OS user (initdb refuses
// root), so dir's parents must be traversable by that user. If the calling
// process dies without Stop, the server gets SIGQUIT and exits.
//
// Each of settings is a server setting as NAME=VALUE (postgres -c), kept across Restart, e.g.
// "shared_preload_libraries=pg_stat_statements".
func StartPostgresServer(dir string, settings ...string) (*PostgresServer, error) {
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	return startServer(dir, cred, settings)
}

// startTestServer is StartPostgresServer for a test's own server, whose data only lives as long
// as it: dir/data is a link to a copy of the initdb template under scratchParent, which Stop removes.
func startTestServer(dir string, settings ...string) (*PostgresServer, error) {
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	scratch, err := mkdirShared(scratchParent(), "holdfast-postgres-*")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(scratch, "data")
	err = initData(data, serverEnv(dir), cred)
	if err == nil {
		err = os.Symlink(data, filepath.Join(dir, "data"))
	}
	var srv *PostgresServer
	if err == nil {
		srv, err = startServer(dir, cred, settings)
	}
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(scratch))
	}
	srv.scratch = scratch
	return srv, nil
}

// serverCredential is the OS user a server runs as (nil: this process's), or an unavailableError
// saying what this machine lacks to run one.
func serverCredential() (*syscall.Credential, error) {
	if _, err := os.Stat(filepath.Join(PGBinDir, "initdb")); err != nil {
		return nil, &unavailableError{fmt.Sprintf("initdb not found at %s: apt-get install postgresql-15", PGBinDir)}
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, &unavailableError{"running as root, but there is " + err.Error()}
	}
	return cred, nil
}

// startServer starts a server in dir as cred, laying out its data directory if it has none.
func startServer(dir string, cred *syscall.Credential, settings []string) (*PostgresServer, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	proc, err := runPostgres(dir, cred, settings)
	if err != nil {
		return nil, err
	}
	return &PostgresServer{Dir: dir, proc: proc, settings: settings}, nil
}

// serverEnv is the environment of PostgreSQL's programs for a server in dir.
func serverEnv(dir string) []string {
	return []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=" + dir}
}

func runPostgres(dir string, cred *syscall.Credential, settings []string) (*child, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := checkTraversable(filepath.Dir(dir)); err != nil {
			return nil, fmt.Errorf("the postgres user cannot reach %s: %w", dir, err)
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	env := serverEnv(dir)

	if !exists(filepath.Join(data, "PG_VERSION")) {
		if err := initData(data, env, cred); err != nil {
			return nil, err
		}
	}

	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// Run the server itself rather than pg_ctl: it stays our child, so it
	// can be stopped by signal and dies with the test binary.
	args := []string{"-D", data,
		"-k", dir,
		"-c", "listen_addresses=",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300",
		// Test databases live for seconds: vacuuming them only costs every test CPU.
		"-c", "autovacuum=off",
	}
	for _, setting := range settings {
		args = append(args, "-c", setting)
	}
	cmd := exec.Command(filepath.Join(PGBinDir, "postgres"), args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	proc, err := startChild(cmd, syscall.SIGQUIT)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}

	if err := awaitAccepting(proc, serverDSN(dir, "postgres"), logPath, "postgres", func() { stopServer(proc) }); err != nil {
		return nil, err
	}
	return proc, nil
}

// awaitAccepting waits until dsn answers a query, the process proc serving it (what) exits, or
// pgReadyTimeout passes, when it calls stop; an error carries the process's log at logPath.
func awaitAccepting(proc *child, dsn, logPath, what string, stop func()) error {
	deadline := time.Now().Add(pgReadyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := pgExec(ctx, dsn, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-proc.done:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s exited: %v\n%s", what, proc.err, log)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s not accepting connections after %v: %v\n%s", what, pgReadyTimeout, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serverDSN is the URL of database db on the server whose socket is in dir.
func serverDSN(dir, db string) string {
	return (&url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Path:     "/" + db,
		RawQuery: url.Values{"host": {dir}, "sslmode": {"disable"}}.Encode(),
	}).String()
}

// DSN returns the connection URL of database db on the server, as the
// postgres superuser through the unix socket, e.g.
// postgres://postgres@/db?host=%2Ftmp%2F...&sslmode=disable
func (s *PostgresServer) DSN(db string) string {
	return serverDSN(s.Dir, db)
}

// CreateDatabase creates an empty database called name.
func (s *PostgresServer) CreateDatabase(ctx context.Context, name string) error {
	// Once per server: a connection of its own, not a pool left open on a server that may stop.
	return createDatabase(ctx, pgExec, s.DSN("postgres"), name, "")
}

// Stop stops the server with a fast shutdown (open connections are ended)
// and waits for it to exit; a test server's data directory is removed with it. Stopping a
// stopped server does nothing.
func (s *PostgresServer) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if proc := s.proc; proc != nil {
		s.proc = nil
		err = stopServer(proc)
	}
	if s.scratch != "" {
		err = errors.Join(err, os.RemoveAll(s.scratch))
		s.scratch = ""
	}
	return err
}

// stopServer stops a postgres process with a fast shutdown.
func stopServer(proc *child) error {
	proc.cmd.Process.Signal(syscall.SIGINT)
	if !proc.wait(20 * time.Second) {
		proc.cmd.Process.Kill()
		proc.wait(5 * time.Second)
		return errors.New("postgres did not stop on SIGINT; killed")
	}
	if proc.err != nil {
		return fmt.Errorf("postgres: %w", proc.err)
	}
	return nil
}

// stopPostgres stops the test binary's private server.
func stopPostgres() error {
	if pgServer.srv == nil {
		return nil
	}
	return pgServer.srv.Stop()
}

// scratchParent is where test servers keep their data directories: /dev/shm when it is a tmpfs
// with room (minScratchRoom), the temporary directory otherwise. Tests create and drop a
// database, a thousand files, several times a second; on ext4 allocating their inodes cost more
// CPU than the tests' queries. Only the server reaches these files: its socket and log stay in
// its own directory, which booted hosts bind and whose services have no /dev/shm of the machine's.
var scratchParent = sync.OnceValue(func() string {
	const shm = "/dev/shm"
	var fs unix.Statfs_t
	if err := unix.Statfs(shm, &fs); err != nil || fs.Type != unix.TMPFS_MAGIC ||
		fs.Bavail*uint64(fs.Bsize) < minScratchRoom || unix.Access(shm, unix.W_OK) != nil {
		return os.TempDir()
	}
	return shm
})

// minScratchRoom is the free space scratchParent wants of a tmpfs: the initdb template and a few
// test binaries' servers with their WAL and their tests' databases (a whole make test peaked
// under 800 MiB).
const minScratchRoom = 4 << 30

// initData lays out a new data directory at data: a copy of one that initdb made once for every
// test binary on the machine, as initdb costs over a second of CPU and a copy milliseconds.
func initData(data string, env []string, cred *syscall.Credential) error {
	tmpl, err := initdbTemplate(env, cred)
	if err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", "--", tmpl, data).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the initdb template %s: %v\n%s", tmpl, err, out)
	}
	return nil
}

// initdbTemplate returns the shared data directory initdb made, making it first if there is none
// for this initdb and owner. It is made aside and renamed into place, so a test binary never
// copies one half made; of two made at once, the first renamed is kept.
func initdbTemplate(env []string, cred *syscall.Credential) (string, error) {
	fi, err := os.Stat(filepath.Join(PGBinDir, "initdb"))
	if err != nil {
		return "", err
	}
	uid := os.Geteuid()
	if cred != nil {
		uid = int(cred.Uid)
	}
	tmpl := filepath.Join(scratchParent(), fmt.Sprintf("holdfast-initdb-%d-%d-%d", fi.Size(), fi.ModTime().UnixNano(), uid))
	if ok, err := ownedDir(tmpl, uid); ok || err != nil {
		return tmpl, err
	}
	work, err := os.MkdirTemp(scratchParent(), "holdfast-initdb-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(work, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", err
		}
	}
	data := filepath.Join(work, "data")
	initdb := exec.Command(filepath.Join(PGBinDir, "initdb"),
		"--pgdata", data, "--username", "postgres", "--auth", "trust",
		"--encoding", "UTF8", "--no-locale", "--no-sync")
	initdb.Dir = work
	initdb.Env = env
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := os.Rename(data, tmpl); err != nil {
		if ok, _ := ownedDir(tmpl, uid); !ok {
			return "", fmt.Errorf("initdb template: %w", err)
		}
	}
	return tmpl, nil
}

// ownedDir reports whether path is a data directory made by initdb for uid: a directory, not a
// link, owned by uid and closed to everyone else (as initdb leaves it), so that no other user
// of a shared temporary directory can have planted it.
func ownedDir(path string, uid int) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != uid || fi.Mode().Perm()&0o077 != 0 {
		return false, fmt.Errorf("%s is not a data directory initdb made for uid %d: remove it", path, uid)
	}
	return exists(filepath.Join(path, "PG_VERSION")), nil
}

// RecreateDatabase drops the database dsn names, whoever is connected to it, and creates it
// again empty: the loss of holdfast's database, for a test of its recovery.
func RecreateDatabase(t testing.TB, dsn string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	admin, err := withDatabase(dsn, "postgres")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dropDatabase(ctx, admin, cfg.Database); err != nil {
		t.Fatalf("testenv: drop database %s: %v", cfg.Database, err)
	}
	if err := createDatabase(ctx, adminExec, admin, cfg.Database, ""); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}
