package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PrivatePostgres starts a PostgreSQL server of the test's own, which the test may restart or
// freeze without disturbing other tests, and returns it with the DSN of a fresh database on
// it. The server is stopped at t.Cleanup. settings are StartPostgresServer's.
func PrivatePostgres(t testing.TB, settings ...string) (*PostgresServer, string) {
	t.Helper()
	srv, err := StartPostgresServer(filepath.Join(SharedDir(t), "postgres"), settings...)
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
func (s *PostgresServer) Restart(mode string) error {
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
	cred, err := postgresCredential()
	if err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	proc, err := runPostgres(s.Dir, cred, s.settings)
	if err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	s.proc = proc
	return nil
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
