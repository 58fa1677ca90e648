package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// A run recorded from a job's newest snapshot becomes the job's last success, its figures its
// snapshot's, and the job's creation moves back to its oldest snapshot; a second record of the
// same run, or of an older snapshot than a success the database knows, writes nothing.
func TestRunRecord(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	job := storetest.Job(t, st, &storetest.JobOpts{Name: "web"})
	now := b.Now(t).Truncate(time.Microsecond)
	added := int64(4096)
	rec := func(id uuid.UUID, end time.Time) bool {
		t.Helper()
		ok, err := st.RunRecord(ctx, store.RunRecordParams{Job: "web", ID: id, SnapshotID: strings.Repeat("ab", 32),
			StartedAt: end.Add(-time.Minute), FinishedAt: end, BytesAdded: &added, Reason: "recovered", Oldest: now.Add(-7 * 24 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	first := uuid.New()
	if !rec(first, now.Add(-2*time.Hour)) {
		t.Fatal("the first record wrote nothing")
	}
	r, err := st.RunGet(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != model.StatusSucceeded || r.Trigger != model.TriggerRecovered || r.Kind != model.KindBackup ||
		r.BytesAdded == nil || *r.BytesAdded != added || r.FinishedAt == nil || !r.FinishedAt.Equal(now.Add(-2*time.Hour)) {
		t.Fatalf("recorded run: %+v", r)
	}
	got, err := st.JobGet(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if got.LastOutcome != model.StatusSucceeded || got.LastRunID == nil || *got.LastRunID != first ||
		!got.CreatedAt.Equal(now.Add(-7*24*time.Hour)) || !got.CreatedAt.Before(job.CreatedAt) {
		t.Fatalf("job after the record: last %v %q, created %s (was %s)", got.LastRunID, got.LastOutcome, got.CreatedAt, job.CreatedAt)
	}
	for _, c := range []struct {
		name string
		id   uuid.UUID
		end  time.Time
	}{
		{"the same run again", first, now.Add(-time.Hour)},
		{"an older success", uuid.New(), now.Add(-3 * time.Hour)},
		{"a success as old", uuid.New(), now.Add(-2 * time.Hour)},
	} {
		if rec(c.id, c.end) {
			t.Errorf("%s: recorded", c.name)
		}
	}
	requireNoViolations(t, b)
}

// RunClose ends a live run and its live attempt with no lease, releases its hold, and makes the
// job's last outcome the run's; a run no longer live is left as it is.
func TestRunClose(t *testing.T) {
	for _, c := range []struct {
		name   string
		status string
		snap   string
	}{
		{"by its snapshot", model.StatusSucceeded, strings.Repeat("cd", 32)},
		{"without evidence", model.StatusFailed, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := storetest.Setup(t)
			st, ctx := b.Store, b.Ctx
			run := storetest.Run(t, st, &storetest.RunOpts{Claim: &b.Lease, Started: true})
			p := store.RunCloseParams{ID: run.ID, Status: c.status, Reason: "closed by holdfast recover", SnapshotID: c.snap}
			closed, err := st.RunClose(ctx, p)
			if err != nil || !closed {
				t.Fatalf("close: %v %v", closed, err)
			}
			r, err := st.RunGet(ctx, run.ID)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != c.status || r.Reason != p.Reason || r.FinishedAt == nil || r.SnapshotID != c.snap {
				t.Fatalf("closed run: %+v", r)
			}
			holds, err := st.HoldListOpen(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(holds) != 0 {
				t.Fatalf("open holds after the close: %+v", holds)
			}
			if again, err := st.RunClose(ctx, store.RunCloseParams{ID: run.ID, Status: model.StatusFailed, Reason: "again"}); err != nil || again {
				t.Fatalf("a second close: %v %v", again, err)
			}
			if _, err := st.RunClose(ctx, store.RunCloseParams{ID: run.ID, Status: model.StatusRunning}); err == nil {
				t.Fatal("a close to a live status was taken")
			}
			j, err := st.JobGet(ctx, run.JobName)
			if err != nil {
				t.Fatal(err)
			}
			if j.LastOutcome != c.status {
				t.Fatalf("job's last outcome %q, want %q", j.LastOutcome, c.status)
			}
			requireNoViolations(t, b)
		})
	}
}

// AccountRebase charges what was measured beyond what the account charged and holds, in one
// recovered entry that says so; an account with a quota is charged up to its balance, and the
// entry says by how much the repositories exceed it.
func TestAccountRebase(t *testing.T) {
	for _, c := range []struct {
		name     string
		quota    *int64
		measured int64
		want     int64
		note     string
	}{
		{"no quota", nil, 5 << 20, 5 << 20, "5.0 MiB measured, 0 B charged before"},
		{"within the quota", new(int64(10 << 20)), 5 << 20, 5 << 20, "5.0 MiB measured"},
		{"over the quota", new(int64(2 << 20)), 5 << 20, 2 << 20, "3.0 MiB over the quota, not charged: grant more with holdfast account grant acct"},
		{"nothing measured", nil, 0, 0, "0 B measured"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := storetest.Setup(t)
			st, ctx := b.Store, b.Ctx
			if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "acct", Quota: c.quota, Actor: "tester"}); err != nil {
				t.Fatal(err)
			}
			e, err := st.AccountRebase(ctx, store.AccountRebaseParams{Account: "acct", Measured: c.measured, Note: "repositories /srv/r", Actor: "tester"})
			if err != nil {
				t.Fatal(err)
			}
			if e.Kind != model.EntryRecovered || e.Bytes != c.want || !strings.Contains(e.Note, c.note) || !strings.Contains(e.Note, "/srv/r") {
				t.Fatalf("entry %+v; want %d bytes, a note with %q", e, c.want, c.note)
			}
			accounts, err := st.AccountList(ctx, "acct")
			if err != nil {
				t.Fatal(err)
			}
			if accounts[0].SettledBytes != c.want {
				t.Fatalf("the account has %d settled, want %d", accounts[0].SettledBytes, c.want)
			}
			// Again: nothing more is missing.
			if e, err := st.AccountRebase(ctx, store.AccountRebaseParams{Account: "acct", Measured: c.measured, Actor: "tester"}); err != nil ||
				e.Bytes != 0 && c.quota == nil {
				t.Fatalf("a second re-basing: %+v %v", e, err)
			}
			requireNoViolations(t, b)
		})
	}
	b := storetest.Setup(t)
	if _, err := b.Store.AccountRebase(b.Ctx, store.AccountRebaseParams{Account: "none", Measured: 1}); err == nil {
		t.Fatal("a re-basing of no account was taken")
	}
}
