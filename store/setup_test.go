package store_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/testenv"
)

// ProvisionDatabase makes a login role and a database it owns; run again it makes nothing and
// gives the role the new password. Odd names are quoted by the server, not spliced.
func TestProvisionDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testenv.Postgres(t)
	suffix := uuid.NewString()[:8]
	role, database := `hf "role" `+suffix, "hf-db; "+suffix
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	t.Cleanup(func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(ctx)
		for _, stmt := range []string{"DROP DATABASE IF EXISTS " + pgx.Identifier{database}.Sanitize(), "DROP ROLE IF EXISTS " + pgx.Identifier{role}.Sanitize()} {
			if _, err := c.Exec(ctx, stmt); err != nil {
				t.Error(err)
			}
		}
	})

	for i, want := range []store.Provisioned{{CreatedRole: true, CreatedDatabase: true}, {}} {
		got, err := store.ProvisionDatabase(ctx, admin, role, database, "pass'word "+suffix)
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		if got != want {
			t.Fatalf("run %d: %+v, want %+v", i+1, got, want)
		}
	}
	var canLogin bool
	var owner string
	err = conn.QueryRow(ctx, `SELECT r.rolcanlogin, pg_get_userbyid(d.datdba) FROM pg_roles r, pg_database d
		WHERE r.rolname = $1 AND d.datname = $2`, role, database).Scan(&canLogin, &owner)
	if err != nil || !canLogin || owner != role {
		t.Fatalf("role can log in %v, database owner %q (%v); want a login role owning the database", canLogin, owner, err)
	}
}
