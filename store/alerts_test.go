package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// An overdue episode is recorded once, with one event, however many daemons mark it at once; so
// is its end. A run's start and end are events too, written by the statement that changed it.
func TestOverdueEpisodeAndEvents(t *testing.T) {
	t.Parallel()
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	if _, err := st.JobCreate(ctx, model.Job{Name: "late", Engine: "command", Command: []string{"/bin/true"}, AlertFailures: 2}); err != nil {
		t.Fatal(err)
	}
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "late", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Minute).Truncate(time.Microsecond)

	race := func(fn func() (bool, error)) int {
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := fn()
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					won++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return won
	}
	if won := race(func() (bool, error) {
		return st.JobMarkOverdue(ctx, store.JobMarkOverdueParams{Job: "late", Since: since, Reason: "no success", Host: "h"})
	}); won != 1 {
		t.Fatalf("%d daemons marked the job overdue, want 1", won)
	}
	facts, err := st.JobWatchFacts(ctx, model.WatchScope{Host: "h"})
	if err != nil || len(facts) != 1 {
		t.Fatalf("watch facts: %+v, %v", facts, err)
	}
	if j := facts[0].Job; j.OverdueSince == nil || !j.OverdueSince.Equal(since) || j.OverdueReason != "no success" {
		t.Fatalf("job after marking: overdue since %v (%q)", j.OverdueSince, j.OverdueReason)
	}
	if won := race(func() (bool, error) {
		return st.JobClearOverdue(ctx, store.JobClearOverdueParams{Job: "late", Reason: "a run succeeded", Host: "h"})
	}); won != 1 {
		t.Fatalf("%d daemons cleared the episode, want 1", won)
	}

	if ok, _, err := st.AttemptClaimSpawn(ctx, model.Lease{Host: "h"}, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: "u"}); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if err := st.AttemptMarkStarted(ctx, model.Lease{Host: "h"}, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, model.Ending{RunID: run.ID, Attempt: 1, At: time.Now(), Status: model.StatusFailed,
		Reason: "exit 1", ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "1"}); !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	events, err := st.EventList(ctx, store.EventListParams{Job: "late", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, e.Event)
	}
	if want := []string{"overdue", "recovered", "started", "failed"}; !equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	failed := events[3]
	if failed.Run == nil || *failed.Run != run.ID || failed.Attempt == nil || *failed.Attempt != 1 || failed.Host != "h" || failed.Reason != "exit 1" {
		t.Fatalf("the failed event: %+v", failed)
	}
	facts, err = st.JobWatchFacts(ctx, model.WatchScope{Host: "h"})
	if err != nil || len(facts[0].Recent) != 1 || facts[0].Recent[0] != model.StatusFailed || facts[0].LastSuccess != nil {
		t.Fatalf("watch facts after a failure: %+v, %v", facts, err)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The stall clock restarts when the progress figures move, and only then: status lines with the
// same figures leave a hung run stalled. Standing still past stall_after is made by dating the
// last change back, never by waiting.
func TestStallClock(t *testing.T) {
	t.Parallel()
	b := storetest.Setup(t)
	st, ctx, db := b.Store, b.Ctx, b.DB
	if _, err := st.JobCreate(ctx, model.Job{Name: "slow", Engine: "command", Command: []string{"/bin/true"}, StallAfter: time.Hour}); err != nil {
		t.Fatal(err)
	}
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "slow", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := st.AttemptClaimSpawn(ctx, model.Lease{Host: "h"}, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: "u"}); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if err := st.AttemptMarkStarted(ctx, model.Lease{Host: "h"}, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, At: time.Now().Add(-2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	stalled := func() bool {
		t.Helper()
		stalls, err := st.AttemptListStalled(ctx, "h")
		if err != nil {
			t.Fatal(err)
		}
		return len(stalls) == 1 && stalls[0].Run == run.ID
	}
	var seq int64
	progress := func(percent float64) {
		t.Helper()
		from := journal.Cursor{Offset: seq * 10, LastSeq: seq}
		seq++
		to := journal.Cursor{Offset: seq * 10, LastSeq: seq}
		now := time.Now()
		p := model.Progress{PercentDone: percent, BytesDone: int64(percent * 1000)}
		if ok, err := st.AttemptApplyJournal(ctx, model.Lease{Host: "h"}, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, From: from, To: to, Delta: model.JournalDelta{LastEventAt: &now, Progress: &p}}); !ok || err != nil {
			t.Fatalf("apply journal: %v %v", ok, err)
		}
	}
	if !stalled() {
		t.Fatal("started two hours ago with no progress: not stalled")
	}
	progress(0.1)
	if stalled() {
		t.Fatal("stalled right after its figures moved")
	}
	// The figures last moved two hours ago.
	if tag, err := db.Exec(ctx, `UPDATE attempts SET progress_changed_at = progress_changed_at - interval '2 hours'
		WHERE run_id = $1 AND attempt_no = 1`, run.ID); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("date the last change back: %v %v", tag, err)
	}
	if !stalled() {
		t.Fatal("not stalled although its figures stood still past stall_after")
	}
	progress(0.1) // a status line, the same figures
	if !stalled() {
		t.Fatal("a status line with the same figures restarted the stall clock")
	}
	progress(0.2)
	if stalled() {
		t.Fatal("stalled right after its figures moved again")
	}
}
