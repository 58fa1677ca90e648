// Package storetest is the harness of store and reconcile tests, in the manner of River's
// riverdbtest: Setup gives a test its bundle (a store on a fresh database of the private
// PostgreSQL that testenv starts, and a host holding its lease), and the factory (factory.go:
// Job, Run, Lease, each with an opts struct whose zero value is the common case) makes the rows
// a test starts from, through the store as a daemon would. Tests that open a store of their own
// (a traced one, one behind PgBouncer, or none) start from Migrated. It is apart from testenv
// because testenv is imported by the tests of packages that store itself imports.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/testenv"
)

// Bundle is what a store or reconcile test starts from: a store on a fresh database, and a host
// whose daemon holds the host's current lease.
type Bundle struct {
	Ctx   context.Context
	Store *store.Store
	DSN   string
	// DB is a pool of its own on the same database, for what the store does not read back (the
	// database's clock) and what a test sets behind the store's back.
	DB *pgxpool.Pool
	// Host is the bundle's host, h1, and Lease its current lease, for holder-1, held for an
	// hour (Lease's defaults).
	Host  string
	Lease model.Lease
}

// Setup opens a store on a fresh database (Open), with a pool of its own on it, and takes the
// lease of host h1 for holder-1; all of it is closed and dropped when the test ends.
func Setup(t testing.TB) *Bundle {
	t.Helper()
	st, dsn := Open(t)
	ctx := context.Background()
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	l := Lease(t, st, nil)
	return &Bundle{Ctx: ctx, Store: st, DSN: dsn, DB: db, Host: l.Host, Lease: l}
}

// Now is the database's clock, the one the store stamps with.
func (b *Bundle) Now(t testing.TB) time.Time {
	t.Helper()
	var now time.Time
	if err := b.DB.QueryRow(b.Ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// Open opens a store on a fresh database with every migration applied, closed when the test
// ends, and returns the database's DSN too (the server's own, even when the store is behind
// PgBouncer: testenv.Pooled). Store and reconcile tests start from Setup, which is built on it.
func Open(t testing.TB) (*store.Store, string) {
	t.Helper()
	dsn := Migrated(t)
	pooled, session := testenv.Pooled(t, dsn)
	st, err := store.Connect(context.Background(), store.Address{DSN: pooled, SessionDSN: session})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st, dsn
}

// Migrated returns the DSN of a fresh database with every migration applied, dropped when the
// test ends: a copy of one the test binary migrated once.
func Migrated(t testing.TB) string {
	t.Helper()
	return testenv.PostgresFrom(t, "migrated", func(ctx context.Context, dsn string) error {
		_, err := migrations.Apply(ctx, dsn)
		return err
	})
}
