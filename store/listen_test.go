package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// listenEnds collects the run ends announced on store.EndedChannel, once listening.
func listenEnds(t *testing.T, st *store.Store) <-chan uuid.UUID {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ends := make(chan uuid.UUID, 16)
	listening := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = st.RunListenEnds(ctx, func(run uuid.UUID) {
			if run == uuid.Nil {
				close(listening)
				return
			}
			ends <- run
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-listening:
	case <-time.After(time.Minute):
		t.Fatal("not listening")
	}
	return ends
}

func expectEnd(t *testing.T, ends <-chan uuid.UUID, want uuid.UUID, what string) {
	t.Helper()
	select {
	case got := <-ends:
		if got != want {
			t.Fatalf("%s: announced %s, want %s", what, got, want)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s: no end announced", what)
	}
}

// expectNoEnd shows that what was done before it announced no end: a fence run of a job of its
// own is ended after it, and the next end announced must be the fence's, since notifications
// are delivered in the order their transactions committed.
func expectNoEnd(t *testing.T, st *store.Store, ends <-chan uuid.UUID, what string) {
	t.Helper()
	ctx := context.Background()
	fence := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Engine: "command"}})
	if ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, model.Ending{RunID: fence.ID, Attempt: 1, At: time.Now(), Status: model.StatusFailed,
		Reason: "the fence"}); err != nil || !ok {
		t.Fatalf("%s: finish the fence: %v %v", what, ok, err)
	}
	select {
	case got := <-ends:
		if got != fence.ID {
			t.Fatalf("%s: announced %s as ended", what, got)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s: the fence's end was not announced", what)
	}
}

// A run's end is announced when it is recorded (AttemptFinish, or a restart that pauses the run), and
// only then: a restart that queues the next attempt, or a finish that changed nothing, is not one.
func TestRunEndsAnnounced(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	ends := listenEnds(t, st)
	wakes := make(chan struct{}, 16)
	listenCtx, cancel := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		_ = st.Listen(listenCtx, store.Wakes{Host: "h", Deliveries: func() {}, Runs: func() {
			select {
			case wakes <- struct{}{}:
			default: // the fences' wakes are not waited for
			}
		}})
	}()
	defer func() { cancel(); <-listened }()
	woken := func(what string) {
		t.Helper()
		select {
		case <-wakes:
		case <-time.After(time.Minute):
			t.Fatalf("%s: the daemons were not woken", what)
		}
	}
	woken("listening")

	storetest.Job(t, st, &storetest.JobOpts{Name: "fin", Repository: "/r"})
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "fin", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	woken("admission")
	moved, _, err := st.AttemptRestart(ctx, model.Lease{Host: "h"}, model.Restarting{RunID: run.ID, Attempt: 1, At: time.Now(),
		Settlement: &ledger.Settlement{Release: true, Source: "it never ran"}})
	if err != nil || !moved {
		t.Fatalf("restart: moved=%v err=%v", moved, err)
	}
	woken("restart") // the daemons spawn the next attempt at once (before a fence's admission wakes them)
	expectNoEnd(t, st, ends, "restart")
	finish := model.Ending{RunID: run.ID, Attempt: 2, At: time.Now(), Status: model.StatusFailed, Reason: "test",
		Settlement: &ledger.Settlement{Release: true, Source: "test"}}
	if ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, finish); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	expectEnd(t, ends, run.ID, "finish")
	if ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, finish); err != nil || ok {
		t.Fatalf("second finish: %v %v, want nothing changed", ok, err)
	}
	expectNoEnd(t, st, ends, "second finish")

	// A job's ceiling used up by the first attempt: the restart pauses the run.
	limit := int64(1 << 20)
	storetest.Job(t, st, &storetest.JobOpts{Name: "ceiling", Repository: "/r", MaxAdded: &limit})
	run, err = st.RunAdmit(ctx, store.RunAdmitParams{Job: "ceiling", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	moved, paused, err := st.AttemptRestart(ctx, model.Lease{Host: "h"}, model.Restarting{RunID: run.ID, Attempt: 1, At: time.Now(),
		ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "130",
		Settlement: &ledger.Settlement{Bytes: 2 * limit, Source: "measured growth"}})
	if err != nil || !moved || paused == "" {
		t.Fatalf("restart past the ceiling: moved=%v paused=%q err=%v, want paused", moved, paused, err)
	}
	expectEnd(t, ends, run.ID, "restart that paused")
}

// A notification about a run names it, for the daemon it concerns alone: the run admitted, or
// asked to stop, comes to Run before Runs wakes. A payload of an older version, which names no
// run, or one whose run cannot be read, still wakes every daemon and names nothing.
func TestNotificationsNameTheirRun(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	type wake struct {
		run uuid.UUID // uuid.Nil: Runs without a run
	}
	wakes := make(chan wake, 16)
	listenCtx, cancel := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		var named uuid.UUID
		_ = st.Listen(listenCtx, store.Wakes{Host: "h1", Deliveries: func() {},
			Run:  func(run uuid.UUID) { named = run },
			Runs: func() { wakes <- wake{named}; named = uuid.Nil }})
	}()
	defer func() { cancel(); <-listened }()
	// next waits for the next wake; a named run is waited for past the wakes that name none
	// (a job created wakes the daemons too).
	next := func(what string, want uuid.UUID) {
		t.Helper()
		for {
			select {
			case got := <-wakes:
				if got.run == uuid.Nil && want != uuid.Nil {
					continue
				}
				if got.run != want {
					t.Fatalf("%s: woken naming run %s, want %s", what, got.run, want)
				}
				return
			case <-time.After(time.Minute):
				t.Fatalf("%s: not woken", what)
			}
		}
	}
	next("listening", uuid.Nil)

	anyHost := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Engine: "command"}})
	next("an any-host run admitted", anyHost.ID)
	storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Engine: "command", Host: "h2"}})
	pinned := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Engine: "command", Host: "h1"}})
	next("a run of h1 admitted after one of h2", pinned.ID)
	if _, err := st.RunRequestStop(ctx, anyHost.ID); err != nil {
		t.Fatal(err)
	}
	next("a stop asked for", anyHost.ID)
	for _, payload := range []string{"host:h1", "host:", "run:not-an-id host:h1", "run:" + uuid.NewString()} {
		if _, err := b.DB.Exec(ctx, `SELECT pg_notify($1, $2)`, store.NotifyChannel, payload); err != nil {
			t.Fatal(err)
		}
		next("payload "+payload, uuid.Nil)
	}
	if _, err := b.DB.Exec(ctx, `SELECT pg_notify($1, $2)`, store.NotifyChannel, "run:"+anyHost.ID.String()+" host:h2"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DB.Exec(ctx, `SELECT pg_notify($1, $2)`, store.NotifyChannel, "run:"+pinned.ID.String()+" host:h1"); err != nil {
		t.Fatal(err)
	}
	next("a run of h1 named after one of h2", pinned.ID)
}
