package store

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The address as pg_restore and psql take it: libpq's keywords, a URI read as libpq reads one.
func TestAddressLibpqParams(t *testing.T) {
	for _, c := range []struct {
		dsn  string
		want [][2]string
	}{
		{"postgres://holdfast:s%20c+ret@db.example:5433/holdfast?sslmode=verify-full&sslrootcert=/etc/ca.pem&pool_max_conns=4&search_path=x",
			[][2]string{{"user", "holdfast"}, {"password", "s c+ret"}, {"host", "db.example"}, {"port", "5433"}, {"dbname", "holdfast"},
				{"sslmode", "verify-full"}, {"sslrootcert", "/etc/ca.pem"}}},
		{"postgresql:///holdfast?host=/var/run/postgresql&password=pw&ssl=true",
			[][2]string{{"dbname", "holdfast"}, {"host", "/var/run/postgresql"}, {"password", "pw"}, {"sslmode", "require"}}},
		{"postgres://u:pa?ss#w@[::1]:5432,db2/x%2Fy", [][2]string{{"user", "u"}, {"password", "pa?ss#w"}, {"host", "::1,db2"}, {"port", "5432,"}, {"dbname", "x/y"}}},
		{"host=/var/run/postgresql database=holdfast user=holdfast password='it\\'s' default_query_exec_mode=exec sslpassword=k",
			[][2]string{{"host", "/var/run/postgresql"}, {"dbname", "holdfast"}, {"user", "holdfast"}, {"password", "it's"}, {"sslpassword", "k"}}},
		{`host = db1,db2 password = 'a b\'c' target_session_attrs=read-write x=y\`,
			[][2]string{{"host", "db1,db2"}, {"password", "a b'c"}, {"target_session_attrs", "read-write"}}},
		{"dbname=holdfast", [][2]string{{"dbname", "holdfast"}}},
	} {
		got, err := Address{DSN: c.dsn}.LibpqParams()
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %q %v; want %q", c.dsn, got, err, c.want)
		}
	}
	for _, bad := range []string{"host", "dbname='holdfast", "= x", "postgres://u:p%zz@h/db", "postgres://h:port/db", "postgres://[::1/db"} {
		_, err := (Address{DSN: bad}).LibpqParams()
		if err == nil {
			t.Errorf("%q: no error", bad)
		} else if strings.Contains(err.Error(), "zz") || strings.Contains(err.Error(), "postgres://") {
			t.Errorf("%q: the error quotes the address: %v", bad, err)
		}
	}
}

// FuzzAddressLibpqParams: a keyword = value address gives its libpq pairs, written out and read
// again unchanged; a URI that pgx also reads gives the user, password and database pgx reads.
func FuzzAddressLibpqParams(f *testing.F) {
	f.Add("host=/var/run/postgresql dbname=holdfast user=holdfast password=secret")
	f.Add(`password = 'a b\'c' sslmode=require pool_max_conns=2`)
	f.Add("postgres://u:p%40ss@h:5432/db?sslmode=disable")
	f.Add("postgresql://u@h1,h2/db?password=x&application_name=a+b")
	f.Fuzz(func(t *testing.T, dsn string) {
		pairs, err := Address{DSN: dsn}.LibpqParams()
		if err != nil {
			if strings.Contains(dsn, "://") && len(dsn) > 12 && strings.Contains(err.Error(), dsn) {
				t.Fatalf("the error quotes the address: %v", err)
			}
			return
		}
		if _, uri := cutURIScheme(dsn); !uri {
			var b strings.Builder
			for _, p := range pairs {
				b.WriteString(" " + p[0] + "='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(p[1]) + "'")
			}
			again, err := parseKeywordValues(b.String())
			if err != nil || !slices.Equal(again, pairs) {
				t.Fatalf("%q: pairs %q written as %q read again as %q (%v)", dsn, pairs, b.String(), again, err)
			}
			return
		}
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			return
		}
		// pgx reads a URI with Go's net/url, not always as libpq: the user part and a plain
		// database name are where the two agree.
		for _, p := range pairs {
			if strings.ContainsFunc(p[1], func(r rune) bool { return r <= ' ' || r == '+' || r >= 0x7f }) {
				continue // white space, '+' and the rest net/url and libpq read each their way
			}
			var pgx string
			switch {
			case p[0] == "user" && !strings.Contains(dsn, "user="):
				pgx = cfg.User
			case p[0] == "password" && !strings.Contains(dsn, "password="):
				pgx = cfg.Password
			case p[0] == "dbname" && !strings.Contains(dsn, "dbname=") && !strings.Contains(dsn, "database="):
				pgx = cfg.Database
			default:
				continue
			}
			if pgx != p[1] {
				t.Fatalf("%q: %s %q, pgx reads %q", dsn, p[0], p[1], pgx)
			}
		}
	})
}
