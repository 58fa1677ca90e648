package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PrivatePostgres starts a PostgreSQL server of the test's own, which the test may restart or
// freeze without disturbing other tests, and returns it with the DSN of a fresh database on
// it. The server is stopped at t.Cleanup. settings are StartPostgresServer's.
func PrivatePostgres(t testing.TB, settings ...string) (*PostgresServer, string) {
	t.Helper()
	srv, err := startTestServer(filepath.Join(SharedDir(t), "postgres"), settings...)
	var u *unavailableError
	switch {
	case errors.As(err, &u):
		unavailable(t, "%s", u.msg)
	case err != nil:
		t.Fatalf("testenv: start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("testenv: stop PostgreSQL: %v", err)
		}
	})
	return srv, srv.DSN("postgres")
}

// Shutdown modes of Restart, as pg_ctl -m names them.
const (
	// Fast ends open sessions, writes a checkpoint and exits (SIGINT).
	Fast = "fast"
	// Immediate exits at once, as a crash would; the server recovers from its WAL when it
	// starts again (SIGQUIT).
	Immediate = "immediate"
)

// Restart stops the server with the given shutdown mode (Fast or Immediate), waits until it
// has exited, and starts it again on the same data directory and socket.
func (s *PostgresServer) Restart(mode string) error { return s.RestartAfter(mode, 0) }

// RestartAfter is Restart with the server down for at least down: an outage.
func (s *PostgresServer) RestartAfter(mode string, down time.Duration) error {
	sig := syscall.SIGINT
	switch mode {
	case Fast:
	case Immediate:
		sig = syscall.SIGQUIT
	default:
		return fmt.Errorf("restart postgres: mode %q: want %q or %q", mode, Fast, Immediate)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return errors.New("restart postgres: the server is stopped")
	}
	s.proc.cmd.Process.Signal(sig)
	if !s.proc.wait(30 * time.Second) {
		s.proc.cmd.Process.Kill()
		s.proc.wait(5 * time.Second)
		return fmt.Errorf("restart postgres: no exit within 30s of a %s shutdown; killed", mode)
	}
	s.proc = nil
	// An immediate shutdown leaves backends to notice it on their own.
	if err := waitNoPostmaster(s.Dir, 10*time.Second); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	time.Sleep(down)
	cred, err := postgresCredential()
	if err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	proc, err := runPostgres(s.Dir, cred, s.settings)
	if err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	s.proc = proc
	return waitPooled(s.Dir)
}

// Freeze stops every process of the server (SIGSTOP): connections stay open, and nothing on
// them is answered, as with a server whose host hangs. Thaw undoes it.
func (s *PostgresServer) Freeze() error { return s.signalAll(syscall.SIGSTOP) }

// Thaw resumes a server that Freeze stopped.
func (s *PostgresServer) Thaw() error { return s.signalAll(syscall.SIGCONT) }

// signalAll signals the postmaster first, so that it forks no new backend meanwhile, then each
// of its processes: every backend is a process group of its own (setsid), so a signal to the
// postmaster's group would reach only the postmaster.
func (s *PostgresServer) signalAll(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return errors.New("postgres: the server is stopped")
	}
	if err := syscall.Kill(s.proc.pid(), sig); err != nil {
		return fmt.Errorf("postgres: %v: %w", sig, err)
	}
	pids, err := descendants(s.proc.pid())
	if err != nil {
		return fmt.Errorf("postgres: %v: %w", sig, err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("postgres: %v to %d: %w", sig, pid, err)
		}
	}
	return nil
}

// waitNoPostmaster waits until no postmaster.pid is left in dir's data directory, or its
// process has gone.
func waitNoPostmaster(dir string, d time.Duration) error {
	pidFile := filepath.Join(dir, "data", "postmaster.pid")
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile(pidFile)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err == nil {
			var pid int
			if _, serr := fmt.Sscan(string(b), &pid); serr == nil && !ProcessAlive(pid) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still names a live server after %s", pidFile, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// postgresCredential is the identity the server runs as: the postgres user when running as
// root (initdb refuses root), the caller otherwise.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("no postgres user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// ReplicationSettings are the server settings a primary needs for StartReplica; give them to
// PrivatePostgres or StartPostgresServer.
var ReplicationSettings = []string{"wal_level=replica", "max_wal_senders=4", "hot_standby=on"}

// StartReplica makes a streaming replica of the server in dir (pg_basebackup over the server's
// socket, which the test server trusts for replication) and starts it as a hot standby on a
// socket of its own. It is stopped at t.Cleanup; Promote makes it the primary.
func (s *PostgresServer) StartReplica(t testing.TB, dir string) *PostgresServer {
	t.Helper()
	cred, err := postgresCredential()
	if err != nil {
		t.Fatalf("testenv: replica: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(PGBinDir, "pg_basebackup"), "-D", filepath.Join(dir, "data"), "-h", s.Dir, "-U", "postgres",
		"-X", "stream", "-R", "-c", "fast")
	cmd.Env = serverEnv(dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: pg_basebackup: %v\n%s", err, out)
	}
	proc, err := runPostgres(dir, cred, s.settings)
	if err != nil {
		t.Fatalf("testenv: start the replica: %v", err)
	}
	replica := &PostgresServer{Dir: dir, proc: proc, settings: s.settings}
	t.Cleanup(func() {
		if err := replica.Stop(); err != nil {
			t.Errorf("testenv: stop the replica: %v", err)
		}
	})
	return replica
}

// Promote makes a replica the primary (pg_promote, waiting until it is done).
func (s *PostgresServer) Promote() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return pgExec(ctx, s.DSN("postgres"), "SELECT pg_promote(true, 60)")
}

// Kill stops the server at once, as a crash or a power loss would (SIGKILL to the postmaster
// and to each of its processes), and waits until it is gone. Stop afterwards does nothing.
func (s *PostgresServer) Kill() error {
	if err := s.signalAll(syscall.SIGKILL); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.proc.wait(30 * time.Second) {
		return errors.New("postgres: still running 30s after SIGKILL")
	}
	s.proc = nil
	return waitNoPostmaster(s.Dir, 10*time.Second)
}

// WaitReplayed waits until replica has replayed all the WAL the server wrote so far (commits
// made without waiting for their flush, synchronous_commit=off, included).
func (s *PostgresServer) WaitReplayed(replica *PostgresServer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var lsn string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return err
	}
	r, err := pgx.Connect(ctx, replica.DSN("postgres"))
	if err != nil {
		return err
	}
	defer r.Close(context.Background())
	for {
		var done bool
		if err := r.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica has not replayed %s: %w", lsn, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
