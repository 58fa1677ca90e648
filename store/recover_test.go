package store_test

import (
	"errors"
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
	own := uuid.New()
	rec := func(job string, id uuid.UUID, end time.Time) *uuid.UUID {
		t.Helper()
		got, err := st.RunRecord(ctx, store.RunRecordParams{Job: job, ID: id, OwnID: own, SnapshotID: strings.Repeat("ab", 32),
			StartedAt: end.Add(-time.Minute), FinishedAt: end, BytesAdded: &added, Reason: "recovered", Oldest: now.Add(-7 * 24 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := uuid.New()
	if got := rec("web", first, now.Add(-2*time.Hour)); got == nil || *got != first {
		t.Fatalf("the first record recorded %v, want run %s", got, first)
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
		if got := rec("web", c.id, c.end); got != nil {
			t.Errorf("%s: recorded %s", c.name, got)
		}
	}
	// A snapshot of another job whose tag names web's run is recorded under its own id.
	storetest.Job(t, st, &storetest.JobOpts{Name: "mallory"})
	if got := rec("mallory", first, now.Add(-time.Hour)); got == nil || *got != own {
		t.Fatalf("another job's snapshot with web's run tag recorded %v, want its own id %s", got, own)
	}
	if r, err := st.RunGet(ctx, first); err != nil || r.JobName != "web" {
		t.Fatalf("web's run after: %+v %v", r, err)
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
			e, err := st.AccountRebase(ctx, store.AccountRebaseParams{Account: "acct", Measured: map[string]int64{"/srv/r": c.measured}, Actor: "tester"})
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
			if e, err := st.AccountRebase(ctx, store.AccountRebaseParams{Account: "acct", Measured: map[string]int64{"/srv/r": c.measured}, Actor: "tester"}); err != nil ||
				e.Bytes != 0 && c.quota == nil {
				t.Fatalf("a second re-basing: %+v %v", e, err)
			}
			requireNoViolations(t, b)
		})
	}
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	if _, err := st.AccountRebase(ctx, store.AccountRebaseParams{Account: "none", Measured: map[string]int64{"/srv/r": 1}}); err == nil {
		t.Fatal("a re-basing of no account was taken")
	}
	// Two hosts, each with a local repository of the default account: the second adds its own
	// to what the first measured, and neither is charged twice.
	storetest.Job(t, st, &storetest.JobOpts{Repository: "/srv/a"})
	storetest.Job(t, st, &storetest.JobOpts{Repository: "/srv/b"})
	for _, c := range []struct {
		host     string
		measured map[string]int64
		want     int64
		note     string
	}{
		{"a", map[string]int64{"/srv/a": 10 << 20}, 10 << 20, "/srv/a 10 MiB)"},
		{"b", map[string]int64{"/srv/b": 3 << 20}, 3 << 20, "/srv/a 10 MiB (measured before), /srv/b 3.0 MiB"},
		{"a again", map[string]int64{"/srv/a": 10 << 20}, 0, "13 MiB measured, 13 MiB charged before"},
	} {
		e, err := st.AccountRebase(ctx, store.AccountRebaseParams{Account: store.DefaultAccount, Measured: c.measured, Unmeasured: []string{"s3:x"}, Actor: "tester"})
		if err != nil {
			t.Fatal(err)
		}
		if e.Bytes != c.want || !strings.Contains(e.Note, c.note) || !strings.Contains(e.Note, "not measured, not local: s3:x") {
			t.Fatalf("host %s: %d bytes, %q; want %d, a note with %q", c.host, e.Bytes, e.Note, c.want, c.note)
		}
	}
	requireNoViolations(t, b)
}

// While holdfast recover holds its lock no daemon takes its lease, and a second recovery is
// refused; once it is released the lease is taken.
func TestLockRecovery(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	release, err := store.LockRecovery(ctx, store.Address{DSN: b.DSN})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.LockRecovery(ctx, store.Address{DSN: b.DSN}); err == nil || !strings.Contains(err.Error(), "another holdfast recover") {
		t.Fatalf("a second recovery's lock: %v", err)
	}
	req := store.LeaseAcquireParams{Host: "h2", Holder: "holder-2", Duration: time.Minute, Grace: time.Second}
	if _, err := st.LeaseAcquire(ctx, req); !errors.Is(err, store.ErrRecovering) {
		t.Fatalf("a lease taken during a recovery: %v", err)
	}
	release()
	if _, err := st.LeaseAcquire(ctx, req); err != nil {
		t.Fatalf("the lease after the recovery: %v", err)
	}
}
