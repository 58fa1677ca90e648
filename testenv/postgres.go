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
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PGBinDir is where the PostgreSQL 15 server binaries are expected.
const PGBinDir = "/usr/lib/postgresql/15/bin"

const pgReadyTimeout = 30 * time.Second

// pgServer is the private server shared by the tests of one test binary.
var pgServer struct {
	once        sync.Once
	adminDSN    string // DSN of its "postgres" database
	unavailable string // why there is no server to start
	err         error
	proc        *child
}

// Postgres returns the DSN of a fresh, empty database on a real PostgreSQL
// server; the database is dropped at t.Cleanup.
//
// If HOLDFAST_TEST_DSN is set, the database is created on the server it
// names. Otherwise the test binary starts one private PostgreSQL 15 server
// (as the postgres OS user when run as root, reachable only through a unix
// socket, with fsync off), which RunMain stops.
//
// The DSN is a URL with the socket directory as host, e.g.
// postgres://postgres@/holdfast_test_1a2b...?host=%2Ftmp%2F...&sslmode=disable
func Postgres(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("HOLDFAST_TEST_DSN")
	if admin == "" {
		requireRunMain(t, "Postgres's private server")
		pgServer.once.Do(startPostgres)
		if pgServer.unavailable != "" {
			unavailable(t, "%s", pgServer.unavailable)
		}
		if pgServer.err != nil {
			t.Fatalf("testenv: start PostgreSQL: %v", pgServer.err)
		}
		admin = pgServer.adminDSN
	}

	name := "holdfast_test_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgExec(ctx, admin, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE: a test that leaked a connection must not keep its database.
		if err := pgExec(ctx, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database: %v", err)
		}
	})
	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dsn
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
	initdb := filepath.Join(PGBinDir, "initdb")
	if _, err := os.Stat(initdb); err != nil {
		pgServer.unavailable = fmt.Sprintf("initdb not found at %s: apt-get install postgresql-15 (or set HOLDFAST_TEST_DSN)", PGBinDir)
		return
	}
	// initdb refuses to run as root.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			pgServer.unavailable = fmt.Sprintf("running as root, but there is no postgres user to run PostgreSQL as: %v", err)
			return
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	pgServer.err = runPostgres(cred)
}

func runPostgres(cred *syscall.Credential) error {
	pdir, err := processDir()
	if err != nil {
		return err
	}
	dir := filepath.Join(pdir, "postgres")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(dir, "data")
	env := []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=" + dir}

	initdb := exec.Command(filepath.Join(PGBinDir, "initdb"),
		"--pgdata", data, "--username", "postgres", "--auth", "trust",
		"--encoding", "UTF8", "--no-locale", "--no-sync")
	initdb.Dir = dir
	initdb.Env = env
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}

	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Run the server itself rather than pg_ctl: it stays our child, so it
	// can be stopped by signal and dies with the test binary.
	cmd := exec.Command(filepath.Join(PGBinDir, "postgres"),
		"-D", data,
		"-k", dir,
		"-c", "listen_addresses=",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300",
	)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	proc, err := startChild(cmd, syscall.SIGQUIT)
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	pgServer.proc = proc

	pgServer.adminDSN = (&url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Path:     "/postgres",
		RawQuery: url.Values{"host": {dir}, "sslmode": {"disable"}}.Encode(),
	}).String()
	deadline := time.Now().Add(pgReadyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := pgExec(ctx, pgServer.adminDSN, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-proc.done:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited: %v\n%s", proc.err, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres not accepting connections after %v: %v\n%s", pgReadyTimeout, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopPostgres stops the private server with a fast shutdown.
func stopPostgres() error {
	proc := pgServer.proc
	if proc == nil {
		return nil
	}
	pgServer.proc = nil
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
