package store

import (
	"slices"
	"strings"
	"testing"
)

// The address as pg_restore and psql take it: libpq's keywords only, the password apart.
func TestAddressLibpq(t *testing.T) {
	for _, c := range []struct {
		dsn, conninfo, password string
	}{
		{"postgres://holdfast:s%20cret@db.example:5433/holdfast?sslmode=verify-full&sslrootcert=/etc/ca.pem&pool_max_conns=4&search_path=x",
			"postgres://holdfast@db.example:5433/holdfast?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem", "s cret"},
		{"postgresql:///holdfast?host=/var/run/postgresql&password=pw", "postgresql:///holdfast?host=%2Fvar%2Frun%2Fpostgresql", "pw"},
		{"host=/var/run/postgresql dbname=holdfast user=holdfast password='it\\'s' default_query_exec_mode=exec",
			"host='/var/run/postgresql' dbname='holdfast' user='holdfast'", "it's"},
		{`host = db1,db2 password = 'a b\'c' target_session_attrs=read-write`, `host='db1,db2' target_session_attrs='read-write'`, "a b'c"},
		{"dbname=holdfast", "dbname='holdfast'", ""},
	} {
		conninfo, password, err := Address{DSN: c.dsn}.Libpq()
		if err != nil || conninfo != c.conninfo || password != c.password {
			t.Errorf("%s: %q %q %v; want %q %q", c.dsn, conninfo, password, err, c.conninfo, c.password)
		}
	}
	for _, bad := range []string{"host", "dbname='holdfast", "= x", "postgres://%zz"} {
		if _, _, err := (Address{DSN: bad}).Libpq(); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzAddressLibpq: a keyword = value address that parses gives a connection string that
// parses again into its libpq pairs, in order, with no password among them.
func FuzzAddressLibpq(f *testing.F) {
	f.Add("host=/var/run/postgresql dbname=holdfast user=holdfast password=secret")
	f.Add(`password = 'a b\'c' sslmode=require pool_max_conns=2`)
	f.Add("host='' port=5432")
	f.Fuzz(func(t *testing.T, dsn string) {
		if strings.HasPrefix(dsn, "postgres") {
			return
		}
		pairs, err := parseKeywordValues(dsn)
		if err != nil {
			return
		}
		conninfo, password, err := Address{DSN: dsn}.Libpq()
		if err != nil {
			t.Fatalf("parsed, then refused: %v", err)
		}
		var want [][2]string
		wantPassword := ""
		for _, p := range pairs {
			if p[0] == "password" {
				wantPassword = p[1]
			} else if libpqKeywords[p[0]] {
				want = append(want, p)
			}
		}
		got, err := parseKeywordValues(conninfo)
		if err != nil || !slices.Equal(got, want) || password != wantPassword {
			t.Fatalf("%q gave %q (%v), password %q; want pairs %q, password %q", dsn, conninfo, err, password, want, wantPassword)
		}
	})
}
