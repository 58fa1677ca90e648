// Package migrations holds holdfast's schema as embedded SQL files and applies them with goose.
//
// Apply is safe to call from several processes at once (every daemon whose schema is behind calls
// it at start, through ApplyPending): it holds a PostgreSQL session advisory lock with holdfast's
// own id while goose runs, so concurrent callers queue instead of racing, and a migration already
// applied is skipped.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// VersionTable is the table in which goose records the versions applied.
const VersionTable = "holdfast_schema_version"

// LockID is the advisory lock id taken while migrating: "holdfast" in ASCII, so it cannot collide
// with goose's default id or another application's migrations in a shared database.
const LockID int64 = 0x686f6c6466617374

// Result reports what Apply did.
type Result struct {
	Applied []int64 // versions applied by this call
	Current int64   // schema version after the call
}

// Apply brings the schema at dsn up to date.
func Apply(ctx context.Context, dsn string) (Result, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return Result{}, fmt.Errorf("open database: %w", err)
	}
	defer db.Close()
	// A blocking pg_advisory_lock hands over the moment the holder is done; goose's own
	// locker polls every few seconds, which made every concurrent daemon start wait.
	conn, err := db.Conn(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("open database: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", LockID); err != nil {
		return Result{}, fmt.Errorf("take migration lock: %w", err)
	}
	defer conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock($1)", LockID) //nolint:errcheck // the session ends right after
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fs.FS(files), goose.WithTableName(VersionTable))
	if err != nil {
		return Result{}, fmt.Errorf("load migrations: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("apply migrations: %w", err)
	}
	var res Result
	for _, r := range results {
		res.Applied = append(res.Applied, r.Source.Version)
	}
	if res.Current, err = provider.GetDBVersion(ctx); err != nil {
		return res, fmt.Errorf("read schema version: %w", err)
	}
	return res, nil
}

// ApplyPending applies the migrations as Apply does, unless applied (the versions the database
// records, as store.MigrationListApplied reads them through a pool already open) holds every one
// embedded here: Apply opens connections of its own, which a daemon start paid for nothing.
func ApplyPending(ctx context.Context, dsn string, applied []int64) (Result, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return Result{}, fmt.Errorf("load migrations: %w", err)
	}
	done := make(map[int64]bool, len(applied))
	for _, v := range applied {
		done[v] = true
	}
	var latest int64
	for _, e := range entries {
		v, err := goose.NumericComponent(e.Name())
		if err != nil {
			return Result{}, fmt.Errorf("load migrations: %w", err)
		}
		if !done[v] {
			return Apply(ctx, dsn)
		}
		latest = max(latest, v)
	}
	return Result{Current: latest}, nil
}
