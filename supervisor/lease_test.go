package supervisor_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/supervisor"
)

// syncBuffer is a log destination two goroutines may write and the test read.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Two daemons under one --host (a cloned machine): A holds the lease and runs a job; B takes
// the lease (it finds A's holder gone, as a daemon does whose lease A let lapse). A stops
// acting: it hands no run to its spawner again, and reports ErrLeaseTaken, naming B, for the
// daemon to exit with; B runs what is admitted next, under its generation. A's stop leaves
// B's lease alone.
func TestLeaseTakenByAnotherDaemon(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cfg.Reconcile.Host = "shared"
	// A notices within a third of it; shorter, a loaded machine let A's own lease lapse and
	// A take it again before B came (a generation more than the test looks for).
	e.cfg.Lease = 5 * time.Second
	e.cfg.SweepInterval = 100 * time.Millisecond
	e.job(t, "before", "/bin/true")
	e.job(t, "after", "/bin/true")

	var mu sync.Mutex
	handed := map[string][]uuid.UUID{} // runs each daemon's sweep handed to its spawner
	build := func(name string, gone func(string) bool, log *syncBuffer) *supervisor.Supervisor {
		cfg := e.cfg
		cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
		supervisor.SetLeaseHolder(&cfg, name, gone)
		supervisor.SetSpawnHook(&cfg, func(_ context.Context, run uuid.UUID) {
			mu.Lock()
			defer mu.Unlock()
			handed[name] = append(handed[name], run)
		})
		sup, err := supervisor.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := sup.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sup.Stop)
		return sup
	}
	spawnedBy := func(name string, run uuid.UUID) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range handed[name] {
			if id == run {
				return true
			}
		}
		return false
	}
	generation := func() int64 {
		t.Helper()
		hosts, err := e.st.HostList(ctx)
		if err != nil || len(hosts) != 1 {
			t.Fatalf("hosts: %+v %v", hosts, err)
		}
		return hosts[0].Generation
	}

	var logA, logB syncBuffer
	a := build("A", func(string) bool { return false }, &logA)
	genA := generation()
	before := e.admit(t, "before")
	if r := e.waitEnded(t, before.ID.String(), time.Minute); r.Status != model.StatusSucceeded || !spawnedBy("A", before.ID) {
		t.Fatalf("A's run: %s (%s), spawned by A: %v", r.Status, r.Reason, spawnedBy("A", before.ID))
	}

	build("B", func(holder string) bool { return holder == "A" }, &logB)
	genB := generation()
	if genB != genA+1 {
		t.Fatalf("generation after B took the lease: %d, want %d", genB, genA+1)
	}
	var err error
	select {
	case err = <-a.Failed():
	case <-time.After(time.Minute):
		t.Fatalf("A did not report the lease taken; its log:\n%s", logA.String())
	}
	if !errors.Is(err, supervisor.ErrLeaseTaken) || !strings.Contains(err.Error(), "(B)") || !strings.Contains(err.Error(), "Reconcile.Host") {
		t.Fatalf("A's error: %v; want ErrLeaseTaken naming holder B and Reconcile.Host", err)
	}
	if !strings.Contains(logA.String(), "host lease taken by another daemon: this daemon stops") {
		t.Fatalf("A's log does not say why it stops:\n%s", logA.String())
	}

	// A is still running (its caller has not stopped it yet): it stands by, and B runs the next run.
	after := e.admit(t, "after")
	if r := e.waitEnded(t, after.ID.String(), time.Minute); r.Status != model.StatusSucceeded {
		t.Fatalf("B's run: %s (%s)", r.Status, r.Reason)
	}
	if spawnedBy("A", after.ID) || !spawnedBy("B", after.ID) {
		t.Fatalf("the run admitted after B took the lease was handed over by A: %v, by B: %v", spawnedBy("A", after.ID), spawnedBy("B", after.ID))
	}
	db, err := pgx.Connect(ctx, e.cfg.Database.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	var claimedUnder int64
	if err := db.QueryRow(ctx, `SELECT lease_generation FROM attempts WHERE run_id = $1 AND attempt_no = 1`, after.ID).Scan(&claimedUnder); err != nil || claimedUnder != genB {
		t.Fatalf("the run was claimed under generation %d (%v), want B's %d", claimedUnder, err, genB)
	}

	// A's stop does not release B's lease.
	a.Stop()
	if hosts, err := e.st.HostList(ctx); err != nil || len(hosts) != 1 || !hosts[0].Alive || hosts[0].Holder != "B" {
		t.Fatalf("hosts after A stopped: %+v %v, want B's lease alive", hosts, err)
	}
	e.checkInvariants(t)
}
