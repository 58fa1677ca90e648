package store_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/setup"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/testenv"
)

// dropRoleAndDatabase drops what a test made on the server admin reaches, at its cleanup.
func dropRoleAndDatabase(t *testing.T, admin, role, database string) {
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
}

func verifier(t *testing.T, password string) string {
	t.Helper()
	v, err := setup.ScramVerifier(password)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ProvisionDatabase makes a login role and a database it owns; run again it makes nothing and
// leaves the role's password alone unless asked to rotate it. Odd names are quoted by the
// server, not spliced.
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
	dropRoleAndDatabase(t, admin, role, database)
	stored := func() string {
		var v string
		if err := conn.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", role).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	first := verifier(t, "pass'word-"+suffix)
	for i, run := range []struct {
		rotate bool
		want   store.Provisioned
		stored string // the verifier the role has after the run; "" the one before
	}{
		{false, store.Provisioned{CreatedRole: true, CreatedDatabase: true}, first},
		{false, store.Provisioned{RoleFound: true}, ""},
		{true, store.Provisioned{RoleFound: true, RotatedPassword: true}, "new"},
	} {
		before := ""
		if i > 0 {
			before = stored()
		}
		v := first
		if i > 0 {
			v = verifier(t, fmt.Sprintf("pass-%d-%s", i, suffix))
		}
		got, err := store.ProvisionDatabase(ctx, admin, role, database, v, run.rotate)
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		if got != run.want {
			t.Fatalf("run %d: %+v, want %+v", i+1, got, run.want)
		}
		switch after := stored(); {
		case run.stored == "" && after != before:
			t.Fatalf("run %d without --rotate-password changed the existing role's password", i+1)
		case run.stored == "new" && after != v:
			t.Fatalf("run %d rotating: the role has %s, want the verifier given %s", i+1, after, v)
		case run.stored == first && after != first:
			t.Fatalf("run %d: the role has %s, want the verifier given %s", i+1, after, first)
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

// ProvisionDatabase refuses a role that may do more than own its database, reserved names, a
// database another role owns, and a password that is not a verifier; refused, it changes
// nothing.
func TestProvisionDatabaseRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testenv.Postgres(t)
	suffix := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	mk := func(name, attrs string) string {
		role := "hf_" + name + "_" + suffix
		dropRoleAndDatabase(t, admin, role, "hf_db_"+name+"_"+suffix)
		if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN "+attrs); err != nil {
			t.Fatal(err)
		}
		return role
	}
	plain := mk("plain", "")
	v := verifier(t, "Secret-"+suffix)
	for _, tc := range []struct {
		name, role, database, verifier, want string
	}{
		{"the server's superuser", "postgres", "hf_db_" + suffix, v, "the server's superuser"},
		{"an existing superuser", mk("su", "SUPERUSER"), "hf_db_su_" + suffix, v, "may do more than own its database"},
		{"a role that creates roles", mk("cr", "CREATEROLE"), "hf_db_cr_" + suffix, v, "may do more than own its database"},
		{"a replication role", mk("repl", "REPLICATION"), "hf_db_repl_" + suffix, v, "may do more than own its database"},
		{"a role past row security", mk("rls", "BYPASSRLS"), "hf_db_rls_" + suffix, v, "may do more than own its database"},
		{"pg_monitor", "pg_monitor", "hf_db_" + suffix, v, "PostgreSQL reserves"},
		{"pg_ anything", "pg_hf_" + suffix, "hf_db_" + suffix, v, "PostgreSQL reserves"},
		{"public", "public", "hf_db_" + suffix, v, "PostgreSQL reserves"},
		{"another role's database", plain, "postgres", v, "belongs to postgres"},
		{"a password, not a verifier", plain, "hf_db_plain_" + suffix, "Secret-" + suffix, "not a SCRAM-SHA-256 verifier"},
		{"md5", plain, "hf_db_plain_" + suffix, "md5" + strings.Repeat("0", 32), "not a SCRAM-SHA-256 verifier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before string
			conn.QueryRow(ctx, "SELECT coalesce(string_agg(rolname || rolpassword, ','), '') FROM pg_authid WHERE rolname = $1", tc.role).Scan(&before)
			p, err := store.ProvisionDatabase(ctx, admin, tc.role, tc.database, tc.verifier, true)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%+v, %v; want an error saying %q", p, err, tc.want)
			}
			if strings.Contains(err.Error(), "Secret-") {
				t.Fatalf("the error quotes the password: %v", err)
			}
			var after string
			conn.QueryRow(ctx, "SELECT coalesce(string_agg(rolname || rolpassword, ','), '') FROM pg_authid WHERE rolname = $1", tc.role).Scan(&after)
			var dbs int
			conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1 AND datname <> 'postgres'", tc.database).Scan(&dbs)
			if after != before || dbs != 0 {
				t.Fatalf("refused, yet the role changed (%v) or the database was made (%d)", after != before, dbs)
			}
		})
	}
}

// With every statement logged (log_statement=all), making the role and rotating its password
// leave neither password in the server's log, only their verifiers; and the verifiers work: with
// scram-sha-256 required of the role, the current password logs in and the rotated one does not.
func TestProvisionDatabaseSendsNoPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := testenv.PrivatePostgres(t)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, stmt := range []string{"ALTER SYSTEM SET log_statement = 'all'", "ALTER SYSTEM SET log_min_error_statement = 'error'", "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	// A new session reads the reloaded settings once the server has taken them in.
	testenv.WaitFor(t, "log_statement=all in a new session", func() bool {
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return false
		}
		defer c.Close(ctx)
		var v string
		return c.QueryRow(ctx, "SHOW log_statement").Scan(&v) == nil && v == "all"
	})

	const role, database = "hf_scram", "hf_scram_db"
	first, second := "First-"+uuid.NewString(), "Second-"+uuid.NewString()
	v1, v2 := verifier(t, first), verifier(t, second)
	if p, err := store.ProvisionDatabase(ctx, admin, role, database, v1, false); err != nil || !p.CreatedRole {
		t.Fatalf("%+v, %v", p, err)
	}
	if p, err := store.ProvisionDatabase(ctx, admin, role, database, v2, true); err != nil || !p.RotatedPassword {
		t.Fatalf("%+v, %v", p, err)
	}

	// Only this role must log in with a password, through the socket.
	hba := filepath.Join(srv.Dir, "data", "pg_hba.conf")
	rules, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hba, append([]byte("local all "+role+" scram-sha-256\n"), rules...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	login := func(password string) error {
		u := &url.URL{Scheme: "postgres", User: url.UserPassword(role, password), Path: "/" + database,
			RawQuery: url.Values{"host": {srv.Dir}, "sslmode": {"disable"}}.Encode()}
		c, err := pgx.Connect(ctx, u.String())
		if err == nil {
			c.Close(ctx)
		}
		return err
	}
	testenv.WaitFor(t, "a wrong password refused", func() bool { return login("wrong") != nil })
	if err := login(second); err != nil {
		t.Fatalf("the rotated password does not log in: %v", err)
	}
	if err := login(first); err == nil {
		t.Fatal("the password before the rotation still logs in")
	}

	log, err := os.ReadFile(filepath.Join(srv.Dir, "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CREATE ROLE", "ALTER ROLE", v1, v2} {
		if !strings.Contains(string(log), want) {
			t.Fatalf("the server's log lacks %q: statements were not logged, so it proves nothing", want)
		}
	}
	for _, password := range []string{first, second} {
		if strings.Contains(string(log), password) {
			t.Fatalf("the server's log holds a password: %s", password)
		}
	}
}
