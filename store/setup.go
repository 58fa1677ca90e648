package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Provisioned is what ProvisionDatabase found and did on the server.
type Provisioned struct {
	CreatedRole     bool
	CreatedDatabase bool
}

// ProvisionDatabase makes role a login role with password and database a database it owns, on
// the server adminDSN reaches as a superuser (the local postgres user through its socket): what
// `holdfast setup` needs once. An existing role gets the new password; an existing database is
// left as it is. Names are quoted by the server (format %I), the password as a literal (%L).
func ProvisionDatabase(ctx context.Context, adminDSN, role, database, password string) (Provisioned, error) {
	var p Provisioned
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return p, fmt.Errorf("connect to the local server as its superuser: %w", err)
	}
	defer conn.Close(ctx)
	var roleExists, dbExists bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1),
		EXISTS (SELECT 1 FROM pg_database WHERE datname = $2)`, role, database).Scan(&roleExists, &dbExists)
	if err != nil {
		return p, fmt.Errorf("read roles and databases: %w", err)
	}
	// Utility statements take no parameters: the server builds them with format(), which quotes.
	roleSQL := `SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', $1::text, $2::text)`
	if !roleExists {
		roleSQL = `SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', $1::text, $2::text)`
	}
	if err := execFormatted(ctx, conn, roleSQL, role, password); err != nil {
		return p, fmt.Errorf("role %s: %w", role, err)
	}
	p.CreatedRole = !roleExists
	if !dbExists {
		if err := execFormatted(ctx, conn, `SELECT format('CREATE DATABASE %I OWNER %I', $1::text, $2::text)`, database, role); err != nil {
			return p, fmt.Errorf("database %s: %w", database, err)
		}
		p.CreatedDatabase = true
	}
	return p, nil
}

// execFormatted runs the statement that query, given args, returns.
func execFormatted(ctx context.Context, conn *pgx.Conn, query string, args ...any) error {
	var stmt string
	if err := conn.QueryRow(ctx, query, args...).Scan(&stmt); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, stmt)
	return err
}
