package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

// Several daemons start at once on a new database: the advisory lock makes their migrations
// queue, and all succeed.
func TestConcurrentMigrations(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { _, errs[i] = migrations.Apply(ctx, dsn) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
}

func TestAdmitOneLiveRunPerJob(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "a", Repository: "/r"})
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "a", Trigger: "manual", Kind: model.KindBackup})
	if err != nil || run.Status != model.StatusQueued {
		t.Fatalf("admit: %+v, %v", run, err)
	}
	var conflict *store.ConflictError
	if _, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "a", Trigger: "manual", Kind: model.KindBackup}); !errors.As(err, &conflict) {
		t.Fatalf("second admit while live: err = %v, want a ConflictError", err)
	}
	if _, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "nope", Trigger: "manual", Kind: model.KindBackup}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("admit of an unknown job: err = %v", err)
	}
	if err := st.JobDelete(ctx, "a"); !errors.As(err, &conflict) {
		t.Fatalf("remove with a live run: err = %v, want a ConflictError", err)
	}
}

// Guarded writes: a pass acting on an old snapshot changes nothing.
func TestGuardedWrites(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "g", Repository: "/r"})
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "g", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	// Two daemons claim the same spawn: exactly one wins.
	var wins int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ok, _, err := st.AttemptClaimSpawn(ctx, model.Lease{Host: "h"}, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: "holdfast-g-" + run.ID.String() + "-a1.service"})
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d claims won, want exactly 1", wins)
	}

	// The journal projection applies a batch once.
	to := journal.Cursor{Offset: 100, LastSeq: 3, LastHash: "abc"}
	d := model.JournalDelta{ItemErrors: 2, FirstItemError: "/x: denied"}
	for i, want := range []bool{true, false} {
		ok, err := st.AttemptApplyJournal(ctx, model.Lease{Host: "h"}, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, From: journal.Cursor{}, To: to, Delta: d})
		if err != nil || ok != want {
			t.Fatalf("apply #%d: ok=%v err=%v, want %v", i+1, ok, err, want)
		}
	}
	a, err := st.AttemptGet(ctx, model.AttemptRef{Run: run.ID, No: 1})
	if err != nil || a.ItemErrors != 2 || a.Cursor != to {
		t.Fatalf("after applying twice: %+v, %v; want 2 item errors and the new cursor", a, err)
	}

	end := model.Ending{RunID: run.ID, Attempt: 1, At: time.Now(), Status: model.StatusSucceeded, Reason: "ok",
		ServiceResult: "success", ExitCode: "exited", ExitStatus: "0"}
	for i, want := range []bool{true, false} {
		ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, end)
		if err != nil || ok != want {
			t.Fatalf("finish #%d: ok=%v err=%v, want %v", i+1, ok, err, want)
		}
	}
	// A restart of an attempt that already ended does nothing.
	moved, _, err := st.AttemptRestart(ctx, model.Lease{Host: "h"}, model.Restarting{RunID: run.ID, Attempt: 1, At: time.Now()})
	if err != nil || moved {
		t.Fatalf("restart of an ended attempt: moved=%v err=%v", moved, err)
	}
	got, err := st.RunGet(ctx, run.ID)
	if err != nil || got.Status != model.StatusSucceeded {
		t.Fatalf("run = %+v, %v", got, err)
	}
	jobs, err := st.JobList(ctx)
	if err != nil || jobs[0].LastOutcome != model.StatusSucceeded {
		t.Fatalf("job's last outcome: %+v, %v", jobs, err)
	}
}

func TestRestartOpensNextAttempt(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "r", Repository: "/r"})
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "r", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	moved, _, err := st.AttemptRestart(ctx, model.Lease{Host: "h"}, model.Restarting{RunID: run.ID, Attempt: 1, At: time.Now(), Settlement: &ledger.Settlement{Release: true, Source: "it never ran"}})
	if err != nil || !moved {
		t.Fatalf("restart: moved=%v err=%v", moved, err)
	}
	live, err := st.RunListLive(ctx, "")
	if err != nil || len(live) != 1 || live[0].Attempt.No != 2 || live[0].JobEngine != "restic" {
		t.Fatalf("live runs after restart: %+v, %v", live, err)
	}
	// Stop before the new attempt spawned: no claim is possible any more.
	if _, err := st.RunRequestStop(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	ok, _, err := st.AttemptClaimSpawn(ctx, model.Lease{Host: "h"}, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 2}, Unit: "u"})
	if err != nil || ok {
		t.Fatalf("claim after a stop request: ok=%v err=%v, want false", ok, err)
	}
}

func TestResolveRun(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "p", Repository: "/r"})
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "p", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{run.ID.String(), run.ID.String()[:8], run.ID.String()[:4]} {
		if id, err := st.RunResolve(ctx, arg); err != nil || id != run.ID {
			t.Fatalf("resolve %q: %v, %v", arg, id, err)
		}
	}
	for _, arg := range []string{"abc", "zzzzzzzz", "'; drop table runs; --", ""} {
		if _, err := st.RunResolve(ctx, arg); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("resolve %q: err = %v, want not found", arg, err)
		}
	}
}

// What PostgreSQL cannot store comes back as a *RefusedError that quotes no value, so the caller
// quarantines the journal instead of retrying the same batch on every pass.
func TestApplyJournalRefused(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "r", Repository: "/r"})
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "r", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	to := journal.Cursor{Offset: 10, LastSeq: 1, LastHash: strings.Repeat("a", 64)}
	tests := []struct {
		name string
		d    model.JournalDelta
		code string
	}{
		{"NUL in text", model.JournalDelta{Fatal: "secret\x00"}, "22021"},
		{"invalid UTF-8 in text", model.JournalDelta{FirstItemError: "secret\xff"}, "22021"},
		{"escaped NUL in jsonb", model.JournalDelta{Summary: json.RawMessage(`{"m":"secret\u0000"}`)}, "22P05"},
		{"number jsonb cannot hold", model.JournalDelta{Summary: json.RawMessage(`{"secret":1e1000000}`)}, "22003"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, err := st.AttemptApplyJournal(ctx, model.Lease{Host: "h"}, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, From: journal.Cursor{}, To: to, Delta: tt.d})
			var refused *store.RefusedError
			if ok || !errors.As(err, &refused) {
				t.Fatalf("ok=%v err=%v, want a *RefusedError", ok, err)
			}
			if refused.Code != tt.code || strings.Contains(err.Error(), "secret") {
				t.Errorf("err = %v, want SQLSTATE %s and no value quoted", err, tt.code)
			}
		})
	}
	a, err := st.AttemptGet(ctx, model.AttemptRef{Run: run.ID, No: 1})
	if err != nil || a.Cursor != (journal.Cursor{}) {
		t.Fatalf("attempt after refused batches: %+v, %v; want the cursor where it was", a, err)
	}
}

// RunListEndedBefore returns only runs that ended, finally, before the time given.
func TestEndedBefore(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "e", Repository: "/r"})
	storetest.Job(t, st, &storetest.JobOpts{Name: "l", Repository: "/r"})
	done, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "e", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	live, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "l", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour)
	if ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, model.Ending{RunID: done.ID, Attempt: 1, At: at, Status: model.StatusSucceeded, Reason: "ok"}); !ok || err != nil {
		t.Fatalf("finish: %v, %v", ok, err)
	}
	unknown := uuid.New()
	ids := []uuid.UUID{done.ID, live.ID, unknown}
	for _, tt := range []struct {
		before time.Time
		want   []uuid.UUID
	}{
		{at.Add(time.Minute), []uuid.UUID{done.ID}},
		{at.Add(-time.Minute), nil},
	} {
		got, err := st.RunListEndedBefore(ctx, ids, tt.before)
		if err != nil || len(got) != len(tt.want) || len(got) == 1 && got[0] != tt.want[0] {
			t.Errorf("EndedBefore(%s) = %v, %v; want %v", tt.before, got, err, tt.want)
		}
	}
}

// Restarts of runs that share an account run at once in a sweep: each settles the ended
// attempt's hold and takes the next one, and none may deadlock on the account's row.
func TestConcurrentRestartsShareAnAccount(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	var runs []model.Run
	for i := range 6 {
		name := fmt.Sprintf("c%d", i)
		storetest.Job(t, st, &storetest.JobOpts{Name: name, Repository: "/r"})
		run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: name, Trigger: "manual", Kind: model.KindBackup})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	for attempt := 1; attempt <= 4; attempt++ {
		var wg sync.WaitGroup
		errs := make([]error, len(runs))
		for i, run := range runs {
			wg.Go(func() {
				moved, _, err := st.AttemptRestart(ctx, model.Lease{Host: "h"}, model.Restarting{RunID: run.ID, Attempt: attempt, At: time.Now(),
					ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "130",
					Settlement: &ledger.Settlement{Bytes: 1 << 20, Source: "measured growth"}})
				if err == nil && !moved {
					err = fmt.Errorf("attempt %d was not moved on", attempt)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("restart run %d after attempt %d: %v", i, attempt, err)
			}
		}
	}
}

// Eight backups of jobs that may each add 10 MiB are admitted at once, on connections of their
// own, against an account whose quota covers four: four are queued, each holding its 10 MiB, and
// four are paused (quota_exhausted) with the numbers; the balance never goes below zero. After a
// grant, a paused run resumes.
func TestConcurrentAdmissionsShareAQuota(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	const runs = 8
	quota, most := int64(runs/2*10<<20), int64(10<<20)
	if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "team", Quota: &quota, Actor: "tester"}); err != nil {
		t.Fatal(err)
	}
	for i := range runs {
		storetest.Job(t, st, &storetest.JobOpts{Name: fmt.Sprintf("j%d", i), Repository: "/r", Account: "team", MaxAdded: &most})
	}
	// A second pool: the eight admissions run on eight connections at once, as eight `run start`s do.
	other, err := store.Open(ctx, b.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	pools := []*store.Store{st, other}
	admitted := make([]model.Run, runs)
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			admitted[i], errs[i] = pools[i%2].RunAdmit(ctx,
				store.RunAdmitParams{Job: fmt.Sprintf("j%d", i), Trigger: model.TriggerManual, Kind: model.KindBackup})
		})
	}
	wg.Wait()
	var queued, paused []model.Run
	for i, r := range admitted {
		switch {
		case errs[i] != nil:
			t.Fatalf("admit j%d: %v", i, errs[i])
		case r.Status == model.StatusQueued:
			queued = append(queued, r)
		case r.Status == model.StatusPaused && r.PausedReason == ledger.PausedQuotaExhausted && strings.Contains(r.Reason, "10 MiB"):
			paused = append(paused, r)
		default:
			t.Fatalf("admit j%d: %+v; want queued, or paused (quota_exhausted) naming the 10 MiB it needs", i, r)
		}
	}
	if len(queued) != runs/2 || len(paused) != runs/2 {
		t.Fatalf("%d queued and %d paused, want %d each", len(queued), len(paused), runs/2)
	}
	ledgers, err := st.LedgerList(ctx, "team", 100)
	if err != nil || len(ledgers) != 1 {
		t.Fatalf("LedgerList = %+v, %v", ledgers, err)
	}
	if l := ledgers[0]; l.Balance() != 0 || l.HeldBytes != quota || len(l.Held) != runs/2 {
		t.Fatalf("account team: balance %d, held %d in %d holds; want 0, %d in %d", l.Balance(), l.HeldBytes, len(l.Held), quota, runs/2)
	}
	if _, err := st.AccountGrant(ctx, store.AccountGrantParams{Name: "team", Bytes: most, Actor: "tester", Note: "test"}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.RunResume(ctx, paused[0].ID); err != nil || r.Status != model.StatusQueued {
		t.Fatalf("resume after the grant: %+v, %v; want queued", r, err)
	}
	violations, err := st.InvariantViolations(ctx)
	if err != nil || len(violations) > 0 {
		t.Fatalf("invariants: %v %v", violations, err)
	}
}

// A ledger tells the holds of running attempts from those of ended ones whose figure is unknown.
func TestLedgersTellDeferredHolds(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	quota, most := int64(1<<30), int64(1<<20)
	if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "team", Quota: &quota, Actor: "tester"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		storetest.Job(t, st, &storetest.JobOpts{Name: name, Repository: "/r/" + name, Account: "team", MaxAdded: &most})
	}
	running, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "a", Trigger: model.TriggerManual, Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	ended, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "b", Trigger: model.TriggerManual, Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	// Its figure unknown, the ended attempt's hold stays open and takes all of the run's budget.
	moved, paused, err := st.AttemptRestart(ctx, model.Lease{Host: "h"}, model.Restarting{RunID: ended.ID, Attempt: 1, At: time.Now(),
		Settlement: &ledger.Settlement{Deferred: "no figure"}})
	if err != nil || !moved || !strings.HasPrefix(paused, "paused (settlement_deferred)") {
		t.Fatalf("restart: moved=%v paused=%q err=%v", moved, paused, err)
	}
	ledgers, err := st.LedgerList(ctx, "team", 10)
	if err != nil || len(ledgers) != 1 {
		t.Fatalf("Ledgers = %+v, %v", ledgers, err)
	}
	l := ledgers[0]
	if len(l.Held) != 1 || l.Held[0].RunID == nil || *l.Held[0].RunID != running.ID || l.Held[0].Deferred != "" {
		t.Errorf("held: %+v", l.Held)
	}
	if len(l.Deferred) != 1 || *l.Deferred[0].RunID != ended.ID || l.Deferred[0].Deferred != "deferred: no figure" {
		t.Errorf("deferred: %+v", l.Deferred)
	}
	if len(l.Entries) != 3 || l.Account.HeldBytes != 2*most {
		t.Errorf("entries %+v, held %d; want the grant and two holds of %d", l.Entries, l.Account.HeldBytes, most)
	}
	if _, err := st.LedgerList(ctx, "nobody", 10); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Ledgers of an unknown account: %v", err)
	}
}

// A daemon reads the applied versions through its pool and migrates only when one is missing:
// on a current schema ApplyPending never connects (an address that cannot work proves it).
func TestAppliedMigrations(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.Postgres(t)
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got, err := st.MigrationListApplied(ctx); err != nil || len(got) != 0 {
		t.Fatalf("never migrated: %v, %v; want none", got, err)
	}
	res, err := migrations.ApplyPending(ctx, dsn, nil)
	if err != nil || len(res.Applied) == 0 {
		t.Fatalf("ApplyPending on an empty database: %+v, %v; want every migration applied", res, err)
	}
	applied, err := st.MigrationListApplied(ctx)
	if err != nil || fmt.Sprint(applied) != fmt.Sprint(res.Applied) {
		t.Fatalf("AppliedMigrations = %v, %v; want %v", applied, err, res.Applied)
	}
	const unreachable = "postgres:///none?host=/nonexistent"
	if cur, err := migrations.ApplyPending(ctx, unreachable, applied); err != nil || cur.Current != res.Current || len(cur.Applied) != 0 {
		t.Fatalf("ApplyPending on a current schema: %+v, %v; want version %d and nothing done", cur, err, res.Current)
	}
	if _, err := migrations.ApplyPending(ctx, unreachable, applied[1:]); err == nil {
		t.Fatal("ApplyPending with a version missing did not migrate")
	}
}

// The kinds the schema accepts (the CHECK runs_kind_check of the migrations) are model's kinds,
// so that a kind added to model without its migration, or the other way round, is caught here
// rather than by the first run of it a daemon admits.
func TestSchemaKindsAreModelKinds(t *testing.T) {
	b := storetest.Setup(t)
	var def string
	if err := b.DB.QueryRow(b.Ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'runs_kind_check'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	var schema []string
	for _, m := range regexp.MustCompile(`'([a-z_]+)'`).FindAllStringSubmatch(def, -1) {
		schema = append(schema, m[1])
	}
	var kinds []string
	for _, k := range model.Kinds() {
		kinds = append(kinds, string(k))
	}
	slices.Sort(schema)
	slices.Sort(kinds)
	if !slices.Equal(schema, kinds) {
		t.Fatalf("runs_kind_check %s accepts %v; model.Kinds() are %v", def, schema, kinds)
	}
}
