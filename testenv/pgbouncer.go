package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PgBouncerPort is the port a private PgBouncer listens on, on its unix socket only.
const PgBouncerPort = 6432

// PgBouncer is a private PgBouncer in transaction pooling mode in front of one PostgreSQL
// server (StartPgBouncer), as holdfast's documented mode behind a pooler has it.
type PgBouncer struct {
	Dir   string // holds its configuration, its log and its unix socket
	owner string // the user it lets in, and its console's
	proc  *child
}

// StartPgBouncer starts a PgBouncer in dir that pools, in transaction mode, every database of
// the server that serverDSN (a URL with the socket directory as host, as PostgresServer.DSN
// gives) names, for the user that DSN names, and waits until it accepts connections. Run as
// root, it runs as the postgres OS user (PgBouncer refuses root).
func StartPgBouncer(dir, serverDSN string) (*PgBouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		return nil, &unavailableError{"pgbouncer not found: apt-get install pgbouncer"}
	}
	u, err := url.Parse(serverDSN)
	if err != nil {
		return nil, fmt.Errorf("parse server DSN: %w", err)
	}
	socket, port := u.Query().Get("host"), cmp.Or(u.Port(), "5432")
	if !strings.HasPrefix(socket, "/") {
		return nil, fmt.Errorf("server DSN %s: want a unix socket directory as host", serverDSN)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cred, err := postgresCredential() // PgBouncer refuses root
	if err != nil {
		return nil, &unavailableError{"running as root, but there is " + err.Error()}
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	// Trust, as the server trusts its local connections; PgBouncer still wants each user in
	// its auth_file.
	owner := cmp.Or(u.User.Username(), "postgres")
	users := fmt.Sprintf("%q \"\"\n", owner)
	config := strings.Join([]string{
		"[databases]",
		fmt.Sprintf("* = host=%s port=%s", socket, port),
		"[pgbouncer]",
		"listen_addr =",
		"unix_socket_dir = " + dir,
		fmt.Sprintf("listen_port = %d", PgBouncerPort),
		"auth_type = trust",
		"auth_file = " + filepath.Join(dir, "users.txt"),
		"pool_mode = transaction",
		"admin_users = " + owner, // its console (database pgbouncer): SHOW CLIENTS, SHOW POOLS
		"max_client_conn = 2000",
		"default_pool_size = 10",
		// After a failed login to a restarting server, try again at the next client's turn
		// rather than refusing every client for 15s: a test's first read after a restart.
		"server_login_retry = 0",
		"logfile = " + filepath.Join(dir, "pgbouncer.log"),
		"",
	}, "\n")
	for name, content := range map[string]string{"users.txt": users, "pgbouncer.ini": config} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	proc, err := startChild(cmd, syscall.SIGINT)
	if err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	p := &PgBouncer{Dir: dir, owner: owner, proc: proc}
	probe := p.DSN(u.Path[1:], u.User.Username()) + "&default_query_exec_mode=simple_protocol"
	if err := awaitAccepting(proc, probe, filepath.Join(dir, "pgbouncer.log"), "pgbouncer", p.Stop); err != nil {
		return nil, err
	}
	return p, nil
}

// DSN is the URL of database db through the pooler, as user.
func (p *PgBouncer) DSN(db, user string) string {
	return (&url.URL{
		Scheme:   "postgres",
		User:     url.User(cmp.Or(user, "postgres")),
		Path:     "/" + db,
		RawQuery: url.Values{"host": {p.Dir}, "port": {strconv.Itoa(PgBouncerPort)}, "sslmode": {"disable"}}.Encode(),
	}).String()
}

// Stop stops PgBouncer at once (SIGINT) and waits for it to exit.
func (p *PgBouncer) Stop() {
	_ = p.proc.cmd.Process.Signal(syscall.SIGINT)
	if !p.proc.wait(10 * time.Second) {
		_ = p.proc.cmd.Process.Kill()
		<-p.proc.done
	}
}

// pgBouncers are the test binary's poolers, by the socket directory of the server each fronts.
var pgBouncers struct {
	mu   sync.Mutex
	byOf map[string]*PgBouncer
}

// PooledEnv is the environment variable that runs a test binary's stores and daemons behind a
// private PgBouncer in transaction mode (Pooled).
const PooledEnv = "HOLDFAST_TEST_PGBOUNCER"

// Pooled returns how a test reaches the database at dsn (a DSN Postgres or PostgresFrom gave):
// through a transaction pooler when HOLDFAST_TEST_PGBOUNCER=1, as holdfast's documented mode
// has it: the pooled DSN, and dsn itself as the session DSN (store.Address). Otherwise it
// returns dsn and "".
func Pooled(t testing.TB, dsn string) (pooled, session string) {
	t.Helper()
	if os.Getenv(PooledEnv) != "1" {
		return dsn, ""
	}
	return ThroughPgBouncer(t, dsn), dsn
}

// ThroughPgBouncer returns the DSN of dsn's database through the test binary's PgBouncer in
// front of dsn's server, which it starts on first use and RunMain stops.
func ThroughPgBouncer(t testing.TB, dsn string) string {
	t.Helper()
	requireRunMain(t, "a private PgBouncer")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testenv: parse DSN: %v", err)
	}
	socket := u.Query().Get("host")
	pgBouncers.mu.Lock()
	defer pgBouncers.mu.Unlock()
	p, ok := pgBouncers.byOf[socket]
	if !ok {
		// Beside the server's socket: a booted host that reaches the server (HostConfig.Postgres)
		// reaches the pooler too.
		p, err = StartPgBouncer(filepath.Join(socket, fmt.Sprintf("pgbouncer-%d", os.Getpid())), dsn)
		var missing *unavailableError
		if errors.As(err, &missing) {
			unavailable(t, "%s", missing.msg)
		}
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if pgBouncers.byOf == nil {
			pgBouncers.byOf = map[string]*PgBouncer{}
		}
		pgBouncers.byOf[socket] = p
	}
	pooled, err := url.Parse(p.DSN(u.Path[1:], u.User.Username()))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	// The DSN's other settings (application_name, ...) go through; its host and port do not.
	q := pooled.Query()
	for k, v := range u.Query() {
		if k != "host" && k != "port" {
			q[k] = v
		}
	}
	pooled.RawQuery = q.Encode()
	return pooled.String()
}

// waitPooled waits, after the server whose socket is in dir restarted, until the test binary's
// PgBouncer in front of it (if any) serves each of its pools again: a login that failed while
// the server was down fails the pool's clients ("server login has been failing") until one
// succeeds, and a test's first read after a restart must not be that client.
func waitPooled(dir string) error {
	pgBouncers.mu.Lock()
	p := pgBouncers.byOf[dir]
	pgBouncers.mu.Unlock()
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pools, err := p.pools(ctx)
	if err != nil {
		return fmt.Errorf("pgbouncer pools: %w", err)
	}
	for _, pool := range pools {
		for {
			err := pgExec(ctx, p.DSN(pool.db, pool.user)+"&default_query_exec_mode=simple_protocol", "SELECT 1")
			var pgErr *pgconn.PgError
			if err == nil || errors.As(err, &pgErr) && pgErr.Code == "3D000" { // a test's database, dropped since
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("pgbouncer pool %s after the restart: %w", pool.db, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

type pgBouncerPool struct{ db, user string }

// pools lists the pooler's pools of databases (SHOW POOLS on its console).
func (p *PgBouncer) pools(ctx context.Context) ([]pgBouncerPool, error) {
	all, err := PgBouncerShow(ctx, p.DSN("", p.owner), "SHOW POOLS")
	if err != nil {
		return nil, err
	}
	var pools []pgBouncerPool
	for _, r := range all {
		db, _ := r["database"].(string)
		user, _ := r["user"].(string)
		if db != "pgbouncer" && db != "" {
			pools = append(pools, pgBouncerPool{db, user})
		}
	}
	return pools, nil
}

// PgBouncerShow runs show (SHOW CLIENTS, SHOW POOLS...) on the console of the PgBouncer that
// dsn, a URL, goes through, as dsn's user (one of its admin_users), and returns the rows.
func PgBouncerShow(ctx context.Context, dsn, show string) ([]map[string]any, error) {
	console, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	console.Path = "/pgbouncer"
	q := console.Query()
	q.Set("default_query_exec_mode", "simple_protocol") // the console has no extended protocol
	console.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, console.String())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, show)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToMap)
}

// stopPgBouncers stops the test binary's poolers (RunMain).
func stopPgBouncers() {
	pgBouncers.mu.Lock()
	defer pgBouncers.mu.Unlock()
	for _, p := range pgBouncers.byOf {
		p.Stop()
		_ = os.RemoveAll(p.Dir)
	}
	pgBouncers.byOf = nil
}
