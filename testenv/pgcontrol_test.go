package testenv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/testenv"
)

// A private server keeps its data across a fast and an immediate restart on the same socket;
// frozen, it answers nothing until thawed.
func TestPrivatePostgresRestartAndFreeze(t *testing.T) {
	srv, dsn := testenv.PrivatePostgres(t)
	query := func(timeout time.Duration, sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := query(10*time.Second, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	for _, mode := range []string{testenv.Fast, testenv.Immediate} {
		if err := srv.Restart(mode); err != nil {
			t.Fatalf("%s restart: %v", mode, err)
		}
		if err := held.Ping(ctx); err == nil {
			t.Fatalf("a connection from before the %s restart still answers", mode)
		}
		if err := query(10*time.Second, "SELECT x FROM kept"); err != nil {
			t.Fatalf("after the %s restart: %v", mode, err)
		}
	}
	if err := srv.Restart("smart"); err == nil {
		t.Fatal("an unknown mode was accepted")
	}

	before, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close(ctx)
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	// A session opened before the freeze (its backend is a process group of its own) is
	// frozen too.
	shortCtx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = before.Exec(shortCtx, "SELECT 1")
	cancel()
	if err == nil {
		srv.Thaw()
		t.Fatal("a session of a frozen server answered")
	}
	// It gives up by its own deadline: the server does not answer at all, not with an error.
	if err := query(time.Second, "SELECT 1"); !errors.Is(err, context.DeadlineExceeded) {
		srv.Thaw()
		t.Fatalf("a query on a frozen server: %v, want its deadline exceeded", err)
	}
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := query(10*time.Second, "SELECT x FROM kept"); err != nil {
		t.Fatalf("after thawing: %v", err)
	}
}
