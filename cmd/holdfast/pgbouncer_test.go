package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

// Behind PgBouncer in transaction mode, as docs/ARCHITECTURE.md documents it (HOLDFAST_DSN the
// pooler, HOLDFAST_SESSION_DSN the server for LISTEN and migrations), the daemon and the CLI
// work: the daemon's statements go through the pooler, LISTEN wakes it for a run started and for
// a stop asked (its sweep, every 10 minutes, could not have), `run start --wait` hears the run
// end, and the daemon says which statement bounds the database lacks. The whole suite runs
// this way with HOLDFAST_TEST_PGBOUNCER=1 (make test-pgbouncer).
func TestBehindPgBouncer(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	w.addr.DSN, w.addr.SessionDSN = testenv.ThroughPgBouncer(t, w.dsn), w.dsn
	w.binaryCLI = true
	repo, pw := w.resticRepo("repo")
	w.mustRun("job", "add", "small", "--repo", repo, "--password-file", pw, "--path", w.sampleData("small", 2, 64<<10))
	w.mustRun("job", "add", "big", "--repo", repo, "--password-file", pw, "--path", w.sampleData("big", 8, slowData))
	w.slowBackups()
	w.backupRate(0)
	d := w.startDaemon("--sweep-interval", "10m")

	out := w.mustRun("run", "start", "small", "--wait")
	if !strings.Contains(out, "succeeded") {
		t.Fatalf("run start --wait printed %q, want the run succeeded", out)
	}
	w.backupRate(stuckKiBps)
	id := w.startRun("big")
	// Progress is the sweep's to read: running is what the spawn records.
	w.waitRun(id, "the unit to run", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	w.mustRun("run", "stop", id[:8])
	if r := w.waitEnd(id); r.Status != "stopped" {
		t.Fatalf("run = %+v, want stopped", r)
	}
	w.checkInvariants()

	// The daemon is one of the pooler's clients (its process id is the client's on the unix
	// socket): its statements went through PgBouncer, not to the server.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients, err := testenv.PgBouncerShow(ctx, w.addr.DSN, "SHOW CLIENTS")
	if err != nil {
		t.Fatal(err)
	}
	pooled := false
	for _, c := range clients {
		if c["remote_pid"] == int64(d.cmd.Process.Pid) || c["remote_pid"] == int32(d.cmd.Process.Pid) {
			pooled = true
		}
	}
	if !pooled {
		t.Fatalf("the daemon (pid %d) is not among PgBouncer's clients %v", d.cmd.Process.Pid, clients)
	}
	if log := d.log.String(); !strings.Contains(log, "unset=statement_timeout,lock_timeout,idle_in_transaction_session_timeout") {
		t.Fatalf("the daemon did not warn of the bounds the database lacks:\n%s", log)
	}
}
