package store

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/holdfast-backup/holdfast/setting"
	"github.com/jackc/pgx/v5"
)

// Provisioned is what ProvisionDatabase found and did on the server.
type Provisioned struct {
	CreatedRole     bool
	CreatedDatabase bool
	// RoleFound: the role was there already. Without rotate nothing was changed, its password
	// (which this host does not know) included; with rotate it has the new one (RotatedPassword).
	RoleFound       bool
	RotatedPassword bool
}

// scramVerifier is the form of a SCRAM-SHA-256 verifier as PostgreSQL stores one:
// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>, each part base64.
var scramVerifier = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^SCRAM-SHA-256\$[1-9][0-9]{0,9}:[A-Za-z0-9+/]+={0,2}\$[A-Za-z0-9+/]{43}=:[A-Za-z0-9+/]{43}=$`)
})

// reservedRoles are names PostgreSQL keeps for itself (besides the pg_ prefix).
var reservedRoles = []string{"public", "none", "current_user", "current_role", "session_user"}

// CheckRoleName refuses a role name holdfast's daemon must not log in as whatever the server
// says: PostgreSQL's reserved names (pg_*, public, ...) and the server's superuser (postgres,
// or the superuser given).
func CheckRoleName(role, superuser string) error {
	l := strings.ToLower(role)
	switch {
	case role == "":
		return fmt.Errorf("an empty role name")
	case strings.HasPrefix(l, "pg_") || strings.Contains(","+strings.Join(reservedRoles, ",")+",", ","+l+","):
		return fmt.Errorf("role %q is a name PostgreSQL reserves: choose a role of holdfast's own", role)
	case l == "postgres" || role == superuser:
		return fmt.Errorf("role %q is the server's superuser: holdfast's daemon gets a role of its own, with no power beyond its database", role)
	}
	return nil
}

// ProvisionDatabase makes role a login role with the SCRAM-SHA-256 verifier given as its
// password, and database a database it owns, on the server adminDSN reaches as a superuser (the
// local postgres user through its socket): what `holdfast setup` needs once. Only the verifier
// reaches the server (its statement log included), never the password it was made from.
//
// An existing role keeps its password unless rotate (other hosts may log in with it), and then
// nothing is changed at all: the caller, who cannot name the role's password, says what to do.
// A superuser, a role that may create roles, replicate or bypass row security, or a reserved
// name is refused, and so is an existing database another role owns. An existing database of
// the role is left as it is. Names are quoted by the server (format %I), the verifier as a
// literal (%L).
func ProvisionDatabase(ctx context.Context, adminDSN, role, database, verifier string, rotate bool) (Provisioned, error) {
	var p Provisioned
	if err := CheckRoleName(role, ""); err != nil {
		return p, err
	}
	if !scramVerifier().MatchString(verifier) {
		return p, fmt.Errorf("role %s: the password given is not a SCRAM-SHA-256 verifier; a password itself is never sent to the server", role)
	}
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return p, fmt.Errorf("connect to the local server as its superuser: %w", err)
	}
	defer conn.Close(ctx)
	var privileged bool
	var dbOwner *string
	err = conn.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1),
			EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1
				AND (rolsuper OR rolcreaterole OR rolreplication OR rolbypassrls OR rolname = current_user)),
			(SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $2)`,
		role, database).Scan(&p.RoleFound, &privileged, &dbOwner)
	if err != nil {
		return p, fmt.Errorf("read roles and databases: %w", err)
	}
	if privileged {
		return p, setting.Errorf("role %s may do more than own its database (a superuser, or it may create roles, replicate or bypass row security): holdfast's daemon gets a role of its own; choose another {Setup.Role}", role)
	}
	if dbOwner != nil && *dbOwner != role {
		return p, setting.Errorf("database %s exists and belongs to %s, not to %s: choose another {Setup.Database}, or give it to the role (ALTER DATABASE ... OWNER TO ...)", database, *dbOwner, role)
	}
	if p.RoleFound && !rotate {
		return p, nil
	}
	// Utility statements take no parameters: the server builds them with format(), which quotes.
	roleSQL := `SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', $1::text, $2::text)`
	if p.RoleFound {
		roleSQL = `SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', $1::text, $2::text)`
	}
	if err := execFormatted(ctx, conn, roleSQL, role, verifier); err != nil {
		return p, fmt.Errorf("role %s: %w", role, err)
	}
	p.CreatedRole, p.RotatedPassword = !p.RoleFound, p.RoleFound
	if dbOwner == nil {
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
