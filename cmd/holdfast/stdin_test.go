package main_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/testenv"
)

// database is a fresh database on the tests' PostgreSQL: its DSN, name and socket directory.
func database(t *testing.T) (dsn, name, host string) {
	t.Helper()
	dsn = testenv.Postgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return dsn, strings.TrimPrefix(u.Path, "/"), u.Query().Get("host")
}

// shopDigest is what the orders of a shop database are: their count and a digest of every row.
func shopDigest(t *testing.T, dsn string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var digest string
	if err := conn.QueryRow(ctx, `SELECT count(*) || ' ' || md5(string_agg(id || ':' || item, ',' ORDER BY id)) FROM orders`).Scan(&digest); err != nil {
		t.Fatal(err)
	}
	return digest
}

// A dump streamed into the backup by --stdin-from is restored whole: pg_dump -Fc of a real
// database, and sqlite3's .dump, each into a snapshot as one file, restored with holdfast restore
// and loaded into a new database with the same rows. A producer that writes half its stream and
// exits 3 fails the run, and the repository gains no snapshot.
func TestStreamedDumps(t *testing.T) {
	parallel(t)
	rw := newRestoreWorld(t, newWorld(t), 1, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shop, shopName, host := database(t)
	conn, err := pgx.Connect(ctx, shop)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL);
		INSERT INTO orders SELECT n, 'item ' || n || repeat('x', n % 50) FROM generate_series(1, 5000) n`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := shopDigest(t, shop)

	pgDump := filepath.Join(testenv.PGBinDir, "pg_dump")
	rw.mustRun("job", "add", "shop", "--repo", rw.repo, "--password-file", rw.pw, "--user", "nobody",
		"--stdin-from", pgDump+" -Fc -h "+host+" -U postgres "+shopName, "--stdin-filename", "shop.dump")
	notes := filepath.Join(rw.data, "notes.db")
	if out, err := exec.Command("sqlite3", notes, "CREATE TABLE notes (id integer primary key, body text); "+
		"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 300) INSERT INTO notes SELECT i, 'note ' || i FROM n;").CombinedOutput(); err != nil {
		t.Fatalf("sqlite3: %v: %s", err, out)
	}
	rw.mustRun("job", "add", "notes", "--repo", rw.repo, "--password-file", rw.pw, "--user", "nobody",
		"--stdin-from", "/usr/bin/sqlite3 -readonly "+notes+" .dump", "--stdin-filename", "notes.sql")
	rw.mustRun("job", "add", "half", "--repo", rw.repo, "--password-file", rw.pw, "--user", "nobody",
		"--stdin-from", "/bin/sh -c 'head -c 2000000 /dev/urandom; exit 3'", "--stdin-filename", "half.dump")
	rw.startDaemon()

	restored := func(job, file string) string {
		t.Helper()
		var r runJSON
		if err := json.Unmarshal([]byte(rw.mustRun("run", "start", job, "--wait", "--json")), &r); err != nil || r.Status != "succeeded" || r.SnapshotID == "" {
			t.Fatalf("backup of %s: %+v (%v)", job, r, err)
		}
		target := filepath.Join(rw.restores, job)
		res := rw.run("restore", job, "--target", target, "--wait", "--json")
		if res.code != 0 {
			t.Fatalf("restore %s: exit %d: %s %s", job, res.code, res.stdout, res.stderr)
		}
		return filepath.Join(target, file)
	}
	dump := restored("shop", "shop.dump")
	copyDB, copyName, _ := database(t)
	if out, err := exec.Command(filepath.Join(testenv.PGBinDir, "pg_restore"), "-h", host, "-U", "postgres", "-d", copyName, "--no-owner", dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore of the restored dump: %v: %s", err, out)
	}
	if got := shopDigest(t, copyDB); got != want {
		t.Fatalf("the database restored from the snapshot holds %q, the original %q", got, want)
	}

	sql, err := os.Open(restored("notes", "notes.sql"))
	if err != nil {
		t.Fatal(err)
	}
	defer sql.Close()
	load := exec.Command("sqlite3", filepath.Join(t.TempDir(), "copy.db"), ".read /dev/stdin", "SELECT count(*), sum(id) FROM notes;")
	load.Stdin = sql
	if out, err := load.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "300|45150" {
		t.Fatalf("the notes loaded from the restored dump: %q (%v), want 300 rows", out, err)
	}

	before := rw.restic(rw.repo, rw.pw, "snapshots", "--json")
	// restic 0.18 and later wait on their input after SIGINT: killed after engine.StopGrace, the
	// run still ends in seconds (logged, not asserted).
	began := time.Now()
	res := rw.run("run", "start", "half", "--wait", "--json")
	t.Logf("the run whose producer failed ended %v after run start", time.Since(began).Round(time.Millisecond))
	var r runJSON
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatal(err)
	}
	if res.code != 4 || r.Status != "failed" || r.SnapshotID != "" ||
		!strings.Contains(r.Reason, "stdin producer /bin/sh -c 'head -c 2000000 /dev/urandom; exit 3' exited 3") {
		t.Fatalf("a producer that exits 3 half way: exit %d, %+v; want failed, naming it, no snapshot", res.code, r)
	}
	if after := rw.restic(rw.repo, rw.pw, "snapshots", "--json"); after != before {
		t.Fatalf("the failed stream changed the repository's snapshots:\n%s\n---\n%s", before, after)
	}
	if strings.Contains(rw.mustRun("snapshot", "list", "--json"), "half.dump") {
		t.Fatal("the inventory lists a snapshot of the failed stream")
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stdin-filename", "x.dump"}, "give --stdin-from CMD too"},
		{[]string{"--stdin-from", "/bin/echo x", "--stdin-filename", "../x"}, "give a plain file name"},
		{[]string{"--stdin-from", "/bin/echo x"}, "--stdin-filename"},
		{[]string{"--stdin-from", "pg_dump shop", "--stdin-filename", "x"}, "absolute path"},
		{[]string{"--stdin-from", "/bin/echo x", "--stdin-filename", "x", "--path", rw.data}, "not --path"},
		{[]string{"--stdin-from", notes + " x", "--stdin-filename", "x"}, "--stdin-from program " + notes + " cannot be read by user nobody: it cannot be executed"},
	} {
		args := append([]string{"job", "add", "bad", "--repo", rw.repo, "--password-file", rw.pw, "--user", "nobody"}, tc.args...)
		if res := rw.run(args...); res.code != 2 || !strings.Contains(res.stderr, tc.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") > 0 {
			t.Errorf("job add %v: exit %d %q, want one line saying %q", tc.args, res.code, res.stderr, tc.want)
		}
	}
	if res := rw.run("job", "show", "bad"); res.code == 0 {
		t.Fatal("a refused job was stored")
	}
}
