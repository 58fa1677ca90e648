// Package storetest gives tests a store on a fresh database of the private PostgreSQL that
// testenv starts. It is apart from testenv because testenv is imported by the tests of packages
// that store itself imports.
package storetest

import (
	"context"
	"testing"

	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/testenv"
)

// Open opens a store on a fresh database with every migration applied, closed when the test
// ends, and returns the database's DSN too (the server's own, even when the store is behind
// PgBouncer: testenv.Pooled).
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

// ManualRun adds a command job (/bin/true) named name and admits a manual backup run of it, as
// `holdfast run start` does.
func ManualRun(t testing.TB, st *store.Store, name string) model.Run {
	t.Helper()
	ctx := context.Background()
	if _, err := st.CreateJob(ctx, model.Job{Name: name, Engine: "command", Command: []string{"/bin/true"}}); err != nil {
		t.Fatal(err)
	}
	run, err := st.Admit(ctx, name, "manual", model.KindBackup)
	if err != nil {
		t.Fatal(err)
	}
	return run
}
