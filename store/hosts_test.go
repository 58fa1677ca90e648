package store_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/testenv"
)

// A host whose lease lapsed can write nothing about its attempt; another host takes the run of
// an any-host job over, and the first, holding its lease again, still cannot touch the superseded
// attempt, which it finds among those whose units it must stop.
func TestLeaseFenceAndTakeOver(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "p1"})
	h2 := storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h2", Holder: "p2"})

	// A second daemon of the same name is refused while the lease is current, unless the holder
	// is known to be gone.
	req := store.LeaseAcquireParams{Host: "h1", Holder: "p9", Duration: time.Second}
	var held *store.LeaseHeldError
	if _, err := st.LeaseAcquire(ctx, req); !errors.As(err, &held) || held.Holder != "p1" {
		t.Fatalf("second holder: %v, want a LeaseHeldError naming p1", err)
	}
	req.HolderGone = func(holder string) bool { return holder == "p1" }
	if l, err := st.LeaseAcquire(ctx, req); err != nil || l.Holder != "p9" {
		t.Fatalf("lease of a holder that is gone: %+v %v", l, err)
	}
	h1 := storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "p1"}) // p1 back, once p9 is gone

	storetest.Job(t, st, &storetest.JobOpts{Name: "any", Repository: "/r"}) // no host: any host may run it
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "any", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	unit := "holdfast-any-" + run.ID.String() + "-a1.service"
	if ok, _, err := st.AttemptClaimSpawn(ctx, h1, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit}); err != nil || !ok {
		t.Fatalf("claim on h1: %v %v", ok, err)
	}
	if live, err := st.RunListLive(ctx, "h2"); err != nil || len(live) != 0 {
		t.Fatalf("h2 lists h1's run: %+v %v", live, err)
	}
	if err := st.AttemptMarkStarted(ctx, h1, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, At: time.Now()}); err != nil {
		t.Fatal(err)
	}

	// Taken again on a short lease (the attempt is adopted under the new generation), which lapses.
	h1 = storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "p1", Duration: 300 * time.Millisecond})
	time.Sleep(500 * time.Millisecond)
	to := journal.Cursor{Offset: 10, LastSeq: 1, LastHash: "x"}
	if ok, err := st.AttemptApplyJournal(ctx, h1, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, From: journal.Cursor{}, To: to, Delta: model.JournalDelta{ItemErrors: 1}}); err != nil || ok {
		t.Fatalf("journal applied under a lapsed lease: %v %v", ok, err)
	}
	if ok, err := st.AttemptFinish(ctx, h1, model.Ending{RunID: run.ID, Attempt: 1, At: time.Now(), Status: model.StatusSucceeded}); err != nil || ok {
		t.Fatalf("finished under a lapsed lease: %v %v", ok, err)
	}
	if _, err := st.LeaseRenew(ctx, h1, time.Second); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("renew of a lapsed lease: %v, want ErrLeaseLost", err)
	}
	if got, err := st.RunGet(ctx, run.ID); err != nil || !strings.Contains(got.WaitingReason, "host h1 is down since") {
		t.Fatalf("waiting reason of a run on a down host: %q %v", got.WaitingReason, err)
	}

	if down, unnoticed, err := st.HostListDown(ctx, "h2", 0); err != nil || len(down) != 1 || down[0] != "h1" || !unnoticed {
		t.Fatalf("down hosts seen by h2: %v (unnoticed %v) %v, want h1 not noticed yet", down, unnoticed, err)
	}
	if noticed, err := st.HostNoticeDown(ctx, "h2", 0); err != nil || len(noticed) != 1 {
		t.Fatalf("h1 noticed down by h2: %v %v", noticed, err)
	}
	if down, unnoticed, err := st.HostListDown(ctx, "h2", 0); err != nil || len(down) != 1 || unnoticed {
		t.Fatalf("down hosts seen by h2 once h1 was noticed: %v (unnoticed %v) %v, want h1, noticed", down, unnoticed, err)
	}
	orphans, err := st.RunListOrphaned(ctx, "h2", 0)
	if err != nil || len(orphans) != 1 || orphans[0].Run.ID != run.ID {
		t.Fatalf("orphans seen by h2: %+v %v", orphans, err)
	}
	take := model.TakeOver{RunID: run.ID, Attempt: 1, From: "h1",
		Settlement: &ledger.Settlement{Bytes: 1, Source: "measured growth of the local repository, an upper bound"}}
	// Only under the taker's current lease: not as a holder of h2 that is not p2.
	if done, err := st.RunTakeOver(ctx, model.Lease{Host: "h2", Holder: "p9", Generation: h2.Generation}, take); err != nil || done {
		t.Fatalf("take over by a holder of h2 that is not its lease's: %v %v", done, err)
	}
	for i, want := range []bool{true, false} {
		if done, err := st.RunTakeOver(ctx, h2, take); err != nil || done != want {
			t.Fatalf("take over #%d: %v %v, want %v", i+1, done, err, want)
		}
	}
	attempts, err := st.AttemptList(ctx, run.ID)
	if err != nil || len(attempts) != 2 || attempts[0].EndedAt == nil || attempts[1].Unit != "" {
		t.Fatalf("attempts after the takeover: %+v %v", attempts, err)
	}
	if live, err := st.RunListLive(ctx, "h2"); err != nil || len(live) != 1 || live[0].Attempt.No != 2 {
		t.Fatalf("h2's live runs after the takeover: %+v %v", live, err)
	}

	// h1 comes back: it takes its lease again, and still cannot finish the superseded attempt.
	h1 = storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "p1"})
	if ok, err := st.AttemptFinish(ctx, h1, model.Ending{RunID: run.ID, Attempt: 1, At: time.Now(), Status: model.StatusSucceeded}); err != nil || ok {
		t.Fatalf("superseded attempt finished: %v %v", ok, err)
	}
	sup, err := st.AttemptListSuperseded(ctx, "h1", time.Hour)
	if err != nil || len(sup) != 1 || sup[0].Unit != unit {
		t.Fatalf("superseded attempts of h1: %+v %v", sup, err)
	}
	if v, err := st.InvariantViolations(ctx); err != nil || len(v) != 0 {
		t.Fatalf("violations: %v %v", v, err)
	}
}

// A spawn claim given back before systemd was asked goes to any host; one given back after a
// failed start stays its host's, since only that host's systemd may have the unit. If that host
// goes down, the attempt is taken over, and the host back finds it among those to stop.
func TestReleasedSpawnClaim(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	leases := map[string]model.Lease{
		"h1": storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "p1"}),
		"h2": storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h2", Holder: "p2"}),
	}
	storetest.Job(t, st, &storetest.JobOpts{Name: "any", Repository: "/r"})
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "any", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	unit := "holdfast-any-" + run.ID.String() + "-a1.service"
	claim := func(host string, want bool) {
		t.Helper()
		if ok, _, err := st.AttemptClaimSpawn(ctx, leases[host], model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit}); err != nil || ok != want {
			t.Fatalf("claim on %s: %v %v, want %v", host, ok, err, want)
		}
	}
	lists := func(host string, want bool) {
		t.Helper()
		live, err := st.RunListLive(ctx, host)
		if err != nil || (len(live) == 1) != want {
			t.Fatalf("live runs of %s: %+v %v, want the run listed: %v", host, live, err, want)
		}
	}
	claim("h1", true)
	if err := st.AttemptReleaseSpawnClaim(ctx, leases["h1"], store.AttemptReleaseSpawnClaimParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit, MayExist: false}); err != nil {
		t.Fatal(err)
	}
	lists("h2", true)
	claim("h2", true)
	if err := st.AttemptReleaseSpawnClaim(ctx, leases["h2"], store.AttemptReleaseSpawnClaimParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit, MayExist: true}); err != nil {
		t.Fatal(err)
	}
	lists("h1", false)
	claim("h1", false)
	lists("h2", true)
	claim("h2", true)
	if err := st.AttemptReleaseSpawnClaim(ctx, leases["h2"], store.AttemptReleaseSpawnClaimParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit, MayExist: true}); err != nil {
		t.Fatal(err)
	}

	storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h2", Holder: "p2", Duration: 300 * time.Millisecond})
	time.Sleep(500 * time.Millisecond)
	if got, err := st.RunGet(ctx, run.ID); err != nil || !strings.Contains(got.WaitingReason, "host h2 is down since") {
		t.Fatalf("waiting reason of the run kept by a down host: %q %v", got.WaitingReason, err)
	}
	// No orphan of a host down before its episode is recorded.
	if orphans, err := st.RunListOrphaned(ctx, "h1", 0); err != nil || len(orphans) != 0 {
		t.Fatalf("orphans seen by h1 before h2 was noticed down: %+v %v", orphans, err)
	}
	if noticed, err := st.HostNoticeDown(ctx, "h1", 0); err != nil || len(noticed) != 1 {
		t.Fatalf("h2 noticed down by h1: %v %v", noticed, err)
	}
	orphans, err := st.RunListOrphaned(ctx, "h1", 0)
	if err != nil || len(orphans) != 1 || orphans[0].Run.ID != run.ID {
		t.Fatalf("orphans seen by h1: %+v %v", orphans, err)
	}
	if done, err := st.RunTakeOver(ctx, leases["h1"], model.TakeOver{RunID: run.ID, Attempt: 1, From: "h2",
		Settlement: &ledger.Settlement{Release: true, Source: "it never ran"}}); err != nil || !done {
		t.Fatalf("take over: %v %v", done, err)
	}
	storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h2", Holder: "p2"})
	if sup, err := st.AttemptListSuperseded(ctx, "h2", time.Hour); err != nil || len(sup) != 1 || sup[0].Unit != "" || sup[0].No != 1 {
		t.Fatalf("superseded attempts of h2: %+v %v, want attempt 1 with no unit recorded", sup, err)
	}
	if v, err := st.InvariantViolations(ctx); err != nil || len(v) != 0 {
		t.Fatalf("violations: %v %v", v, err)
	}
}

// A pinned job runs only on its host, and a draining host claims nothing new.
func TestPinnedJobsAndDrain(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	h1 := storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "p1"})
	h2 := storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h2", Holder: "p2"})
	storetest.Job(t, st, &storetest.JobOpts{Name: "pinned", Repository: "/r", Host: "h1"})
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "pinned", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	unit := "holdfast-pinned-" + run.ID.String() + "-a1.service"
	if live, err := st.RunListLive(ctx, "h2"); err != nil || len(live) != 0 {
		t.Fatalf("h2 lists a run pinned to h1: %+v %v", live, err)
	}
	if ok, _, err := st.AttemptClaimSpawn(ctx, h2, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit}); err != nil || ok {
		t.Fatalf("h2 claimed a run pinned to h1: %v %v", ok, err)
	}
	if _, err := st.HostDrain(ctx, "h1", true); err != nil {
		t.Fatal(err)
	}
	if live, err := st.RunListLive(ctx, "h1"); err != nil || len(live) != 0 {
		t.Fatalf("a draining host lists a run to spawn: %+v %v", live, err)
	}
	// A run it was asked to stop is its to end.
	storetest.Job(t, st, &storetest.JobOpts{Name: "stopped", Repository: "/r2", Host: "h1"})
	stopped, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "stopped", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.RunRequestStop(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	if live, err := st.RunListLive(ctx, "h1"); err != nil || len(live) != 1 || live[0].Run.ID != stopped.ID {
		t.Fatalf("a draining host lists %+v (%v), want only the run asked to stop", live, err)
	}
	if live, err := st.RunListLive(ctx, "h2"); err != nil || len(live) != 0 {
		t.Fatalf("h2 lists runs pinned to h1: %+v %v", live, err)
	}
	if ok, _, err := st.AttemptClaimSpawn(ctx, h1, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit}); err != nil || ok {
		t.Fatalf("a draining host claimed: %v %v", ok, err)
	}
	if got, err := st.RunGet(ctx, run.ID); err != nil || got.WaitingReason != "waiting: host h1 is draining" {
		t.Fatalf("waiting reason: %q %v", got.WaitingReason, err)
	}
	if able, err := st.JobRunnable(ctx, store.JobRunnableParams{Job: "pinned"}); err != nil || able.Host != "" || !strings.Contains(able.Why, "draining") {
		t.Fatalf("runnable: %+v %v", able, err)
	}
	if _, err := st.HostDrain(ctx, "h1", false); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := st.AttemptClaimSpawn(ctx, h1, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit}); err != nil || !ok {
		t.Fatalf("h1 could not claim its pinned run: %v %v", ok, err)
	}
	var conflict *store.ConflictError
	if err := st.HostForget(ctx, "h1"); !errors.As(err, &conflict) {
		t.Fatalf("forget a live host: %v, want a conflict", err)
	}
	if err := st.HostForget(ctx, "nowhere"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("forget an unknown host: %v", err)
	}
	// A host whose daemon is gone, with no run or job on it, is forgotten, once its lease lapsed.
	storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h3", Holder: "p3", Duration: time.Millisecond})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		err := st.HostForget(ctx, "h3")
		if err == nil {
			break
		}
		if !errors.As(err, &conflict) || time.Now().After(deadline) {
			t.Fatalf("forget a host whose lease lapsed: %v", err)
		}
	}
	if hosts, err := st.HostList(ctx); err != nil || slices.ContainsFunc(hosts, func(h model.Host) bool { return h.Name == "h3" }) {
		t.Fatalf("hosts after forgetting h3: %+v %v", hosts, err)
	}
}

// The daemon's pool refuses a server that does not accept writes (a standby, or a primary
// demoted by a failover), so that with several hosts in its DSN it goes on to the primary;
// a DSN that says otherwise is followed.
func TestNewWantsAWritableServer(t *testing.T) {
	dsn := testenv.Postgres(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	readOnly := dsn + sep + "options=-c%20default_transaction_read_only%3Don"
	ctx := context.Background()
	if st, err := store.New(ctx, store.Config{Address: store.Address{DSN: readOnly}}); err == nil {
		st.Close()
		t.Fatal("the daemon's pool connected to a read-only server")
	}
	st, err := store.New(ctx, store.Config{Address: store.Address{DSN: readOnly + "&target_session_attrs=any"}})
	if err != nil {
		t.Fatalf("target_session_attrs=any in the DSN: %v", err)
	}
	st.Close()
	if st, err = store.New(ctx, store.Config{Address: store.Address{DSN: dsn}}); err != nil {
		t.Fatalf("a writable server: %v", err)
	}
	st.Close()
}

// --max-running-host holds on each host, --max-running across all of them.
func TestLimitsAcrossHosts(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	leases := map[string]model.Lease{
		"h1": storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "p1"}),
		"h2": storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h2", Holder: "p2"}),
	}
	limits := model.RunningLimits{MaxRunning: 2, MaxRunningHost: 1}
	claim := func(job, host string) (bool, string) {
		t.Helper()
		storetest.Job(t, st, &storetest.JobOpts{Name: job, Repository: "/r"})
		run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: job, Trigger: "manual", Kind: model.KindBackup})
		if err != nil {
			t.Fatal(err)
		}
		ok, blocked, err := st.AttemptClaimSpawn(ctx, leases[host], model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: "holdfast-" + job + "-" + run.ID.String() + "-a1.service", Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		return ok, blocked
	}
	for _, c := range []struct {
		job, host string
		ok        bool
		blocked   string
	}{
		{"a", "h1", true, ""},
		{"b", "h1", false, "on h1, the host limit is 1"},
		{"c", "h2", true, ""},
		{"d", "h2", false, "the global limit is 2"},
	} {
		if ok, blocked := claim(c.job, c.host); ok != c.ok || !strings.Contains(blocked, c.blocked) {
			t.Fatalf("claim of %s on %s: %v %q, want %v %q", c.job, c.host, ok, blocked, c.ok, c.blocked)
		}
	}
}

// The fence names its writer (issue 25): holder A claims a spawn under generation 1, its lease
// lapses, and holder B of the same host name takes generation 2, which adopts the attempt. A's
// start, journal, finish, restart and release are refused, and so is its claim of another run,
// though the attempt now carries the host's current generation; B's writes apply.
func TestStaleHolderIsFenced(t *testing.T) {
	bundle := storetest.Setup(t)
	st, ctx := bundle.Store, bundle.Ctx
	// Long enough for the claim on a loaded machine; the lapse is the sleep past it.
	a := storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h", Holder: "A", Duration: 2 * time.Second})
	storetest.Job(t, st, &storetest.JobOpts{Name: "j", Repository: "/r"})
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "j", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	unit := "holdfast-j-" + run.ID.String() + "-a1.service"
	if ok, _, err := st.AttemptClaimSpawn(ctx, a, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit}); err != nil || !ok {
		t.Fatalf("A's claim: %v %v", ok, err)
	}
	time.Sleep(2500 * time.Millisecond) // A's lease lapses
	b := storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h", Holder: "B"})
	if b.Generation != a.Generation+1 {
		t.Fatalf("generations: A %d, B %d", a.Generation, b.Generation)
	}
	if got, err := st.AttemptGet(ctx, model.AttemptRef{Run: run.ID, No: 1}); err != nil || got.Host != "h" {
		t.Fatalf("attempt after B took the lease: %+v %v", got, err)
	}

	// A, and writers that name no lease or a lease that is not B's, change nothing.
	for _, w := range []model.Lease{a, {Host: "h"}, {Host: "h", Holder: "A", Generation: b.Generation}} {
		if err := st.AttemptMarkStarted(ctx, w, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, At: time.Time{}}); err != nil {
			t.Fatal(err)
		}
		if err := st.AttemptSetRepoBaseline(ctx, w, store.AttemptSetRepoBaselineParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, Bytes: 1}); err != nil {
			t.Fatal(err)
		}
		to := journal.Cursor{Offset: 10, LastSeq: 1, LastHash: "x"}
		if ok, err := st.AttemptApplyJournal(ctx, w, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, From: journal.Cursor{}, To: to, Delta: model.JournalDelta{ItemErrors: 1}}); err != nil || ok {
			t.Fatalf("journal applied by %+v: %v %v", w, ok, err)
		}
		if err := st.AttemptQuarantine(ctx, w, store.AttemptQuarantineParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, Reason: "by a stale writer"}); err != nil {
			t.Fatal(err)
		}
		if ok, err := st.AttemptFinish(ctx, w, model.Ending{RunID: run.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "stale"}); err != nil || ok {
			t.Fatalf("finished by %+v: %v %v", w, ok, err)
		}
		if moved, _, err := st.AttemptRestart(ctx, w, model.Restarting{RunID: run.ID, Attempt: 1}); err != nil || moved {
			t.Fatalf("restarted by %+v: %v %v", w, moved, err)
		}
		if err := st.AttemptReleaseSpawnClaim(ctx, w, store.AttemptReleaseSpawnClaimParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit, MayExist: false}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.RunGet(ctx, run.ID)
	if err != nil || got.Status != model.StatusQueued || got.StartedAt != nil {
		t.Fatalf("run after the stale writes: %s started %v (%v), want queued, never started", got.Status, got.StartedAt, err)
	}
	attempt, err := st.AttemptGet(ctx, model.AttemptRef{Run: run.ID, No: 1})
	if err != nil || attempt.StartedAt != nil || attempt.EndedAt != nil || attempt.Unit != unit || attempt.ItemErrors != 0 ||
		attempt.QuarantinedAt != nil || attempt.RepoBytesBefore != nil {
		t.Fatalf("attempt after the stale writes: %+v %v", attempt, err)
	}
	storetest.Job(t, st, &storetest.JobOpts{Name: "k", Repository: "/r"})
	next, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "k", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	nextUnit := "holdfast-k-" + next.ID.String() + "-a1.service"
	if ok, blocked, err := st.AttemptClaimSpawn(ctx, a, model.SpawnClaim{Attempt: model.AttemptRef{Run: next.ID, No: 1}, Unit: nextUnit}); err != nil || ok || blocked != "" {
		t.Fatalf("A's claim of another run: %v %q %v", ok, blocked, err)
	}
	if got, err := st.AttemptGet(ctx, model.AttemptRef{Run: next.ID, No: 1}); err != nil || got.Unit != "" || got.Host != "" {
		t.Fatalf("attempt A claimed under a lease it lost: %+v %v", got, err)
	}

	// B holds the lease: its writes apply.
	if err := st.AttemptMarkStarted(ctx, b, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, At: time.Time{}}); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.AttemptFinish(ctx, b, model.Ending{RunID: run.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "ok"}); err != nil || !ok {
		t.Fatalf("B's finish: %v %v", ok, err)
	}
	if ok, _, err := st.AttemptClaimSpawn(ctx, b, model.SpawnClaim{Attempt: model.AttemptRef{Run: next.ID, No: 1}, Unit: nextUnit}); err != nil || !ok {
		t.Fatalf("B's claim: %v %v", ok, err)
	}
	if got, err := st.RunGet(ctx, run.ID); err != nil || got.Status != model.StatusSucceeded || got.Reason != "ok" {
		t.Fatalf("run after B's writes: %s %q %v", got.Status, got.Reason, err)
	}
	if v, err := st.InvariantViolations(ctx); err != nil || len(v) != 0 {
		t.Fatalf("violations: %v %v", v, err)
	}
}

// A host's lease mark trails its lease by at most 15 seconds and never passes it, whoever
// writes the lease: it moves at one renewal in several (the others leave every index alone),
// and a lease set back into the past takes the mark with it, so the host is seen down.
func TestLeaseMark(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx, conn := b.Store, b.Ctx, b.DB
	storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h1", Holder: "p1"})
	read := func() (until, mark time.Time) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT lease_until, lease_mark FROM hosts WHERE name = 'h1'`).Scan(&until, &mark); err != nil {
			t.Fatal(err)
		}
		if mark.After(until) || until.Sub(mark) > 15*time.Second {
			t.Fatalf("lease until %s, mark %s: the mark passes the lease or trails it by more than 15s", until, mark)
		}
		return until, mark
	}
	_, mark := read()
	moves := 0
	for range 10 { // renewals that each move the lease 4s on: 40s in all
		if _, err := conn.Exec(ctx, `UPDATE hosts SET lease_until = lease_until + interval '4 seconds' WHERE name = 'h1'`); err != nil {
			t.Fatal(err)
		}
		_, m := read()
		if !m.Equal(mark) {
			moves++
			mark = m
		}
	}
	if moves < 2 || moves > 3 {
		t.Fatalf("the mark moved at %d of 10 renewals of 4s, want at one in four (2 or 3)", moves)
	}
	if down, _, err := st.HostListDown(ctx, "h2", 0); err != nil || len(down) != 0 {
		t.Fatalf("down hosts while h1 holds its lease: %v %v", down, err)
	}
	if _, err := conn.Exec(ctx, `UPDATE hosts SET lease_until = now() - interval '1 hour' WHERE name = 'h1'`); err != nil {
		t.Fatal(err)
	}
	read()
	if down, _, err := st.HostListDown(ctx, "h2", 0); err != nil || !slices.Equal(down, []string{"h1"}) {
		t.Fatalf("down hosts once h1's lease was set an hour back: %v %v, want h1", down, err)
	}
}

// HostNextDown says how long until another host may be down, at the earliest of them: never
// later than it is (the moment comes early at most), nothing for a host already down, and
// never me.
func TestHostNextDown(t *testing.T) {
	b := storetest.Setup(t) // h1 holds its lease for an hour
	st, ctx := b.Store, b.Ctx
	const grace = time.Second
	if in, ok, err := st.HostNextDown(ctx, "h1", grace); err != nil || ok {
		t.Fatalf("no other host: %s %v %v, want none", in, ok, err)
	}
	storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h2", Holder: "p2"})
	if in, ok, err := st.HostNextDown(ctx, "h2", grace); err != nil || !ok || in > time.Hour+grace || in < 59*time.Minute {
		t.Fatalf("h1 holds a lease of an hour: %s %v %v, want about an hour", in, ok, err)
	}
	storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h3", Holder: "p3", Duration: 2 * time.Second})
	asked := time.Now()
	in, ok, err := st.HostNextDown(ctx, "h2", grace)
	if err != nil || !ok || in <= 0 || in > 2*time.Second+grace {
		t.Fatalf("h3 holds a lease of 2s: %s %v %v, want within its lease and the grace", in, ok, err)
	}
	// h3 is not renewed: its lease runs out, and the grace after it.
	for {
		down, _, err := st.HostListDown(ctx, "h2", grace)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(down, "h3") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if seen := time.Since(asked); seen < in {
		t.Fatalf("h3 seen down %s after the read that said %s: the moment came late", seen, in)
	}
	if in, ok, err := st.HostNextDown(ctx, "h2", grace); err != nil || !ok || in < 59*time.Minute {
		t.Fatalf("h3 down: %s %v %v, want h1's, about an hour", in, ok, err)
	}
}

// JobRunnable names a live host, not draining, that may run the job (the one asked for, the
// job's own, or any), and otherwise says why none may: each host's state, in the words every
// listing uses, with what to do. A host is down because its lease ran out, not by a write.
func TestJobRunnable(t *testing.T) {
	b := storetest.Setup(t) // h1 holds its lease for an hour
	st, ctx := b.Store, b.Ctx
	storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h2", Holder: "p2"})
	if _, err := st.HostDrain(ctx, "h2", true); err != nil {
		t.Fatal(err)
	}
	storetest.Lease(t, st, &storetest.LeaseOpts{Host: "h3", Holder: "p3", Duration: time.Second})
	for _, h := range []string{"", "h1", "h2", "h3", "h9"} {
		storetest.Job(t, st, &storetest.JobOpts{Name: "on-" + cmp.Or(h, "any"), Host: h})
	}
	// h3 is not renewed: its lease runs out.
	for {
		able, err := st.JobRunnable(ctx, store.JobRunnableParams{Job: "on-h3"})
		if err != nil {
			t.Fatal(err)
		}
		if able.Host == "" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, tt := range []struct {
		job, on    string
		host, why  string // Host, or a part of Why
		pinnedHost string
	}{
		{job: "on-any", host: "h1"},
		{job: "on-any", on: "h1", host: "h1"},
		{job: "on-any", on: "h2", why: "host h2 is draining (holdfast host undrain h2): start holdfast there"},
		{job: "on-any", on: "h3", why: "host h3 is down since "},
		{job: "on-any", on: "h9", why: "no holdfast daemon has ever run on host h9: start it there"},
		{job: "on-h1", host: "h1", pinnedHost: "h1"},
		{job: "on-h1", on: "h1", host: "h1", pinnedHost: "h1"},
		{job: "on-h1", on: "h2", why: "job on-h1 is pinned to host h1, not h2", pinnedHost: "h1"},
		{job: "on-h2", why: "job on-h2 is pinned to host h2, which is draining (holdfast host undrain h2)", pinnedHost: "h2"},
		{job: "on-h3", why: "job on-h3 is pinned to host h3, which is down since ", pinnedHost: "h3"},
		{job: "on-h9", why: "job on-h9 is pinned to host h9, where no holdfast daemon has ever run", pinnedHost: "h9"},
	} {
		able, err := st.JobRunnable(ctx, store.JobRunnableParams{Job: tt.job, On: tt.on})
		if err != nil || able.Host != tt.host || able.Pinned != tt.pinnedHost || !strings.Contains(able.Why, tt.why) || (tt.host == "") != (able.Why != "") {
			t.Errorf("%s on %q: %+v %v, want host %q pinned %q, why with %q", tt.job, tt.on, able, err, tt.host, tt.pinnedHost, tt.why)
		}
	}
	if _, err := st.JobRunnable(ctx, store.JobRunnableParams{Job: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown job: %v, want ErrNotFound", err)
	}
	if _, err := st.HostDrain(ctx, "h1", true); err != nil {
		t.Fatal(err)
	}
	able, err := st.JobRunnable(ctx, store.JobRunnableParams{Job: "on-any"})
	if err != nil || able.Host != "" {
		t.Fatalf("every host drained or down: %+v %v", able, err)
	}
	for _, part := range []string{"no live holdfast daemon can run job on-any: ", "host h1 is draining (holdfast host undrain h1)",
		"host h2 is draining", "host h3 is down since ", "start holdfast on one"} {
		if !strings.Contains(able.Why, part) {
			t.Errorf("every host drained or down: %q, want %q in it", able.Why, part)
		}
	}
}
