package store_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/watch"
)

// A compaction of history with live runs, by two daemons at once, leaves every account's
// balance, holdfast check and status as they were, and removes the runs, ledger entries, events
// and deliveries it may; the ledger refuses any other delete.
func TestCompactHistory(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx, conn := b.Store, b.Ctx, b.DB
	if err := storetest.SeedFleet(ctx, conn, 0, 3); err != nil {
		t.Fatal(err)
	}
	// An account with a quota, granted long ago and since, charged by one host's runs.
	if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", Quota: ptr(int64(1 << 30)), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`INSERT INTO ledger_entries (account, kind, bytes, actor, created_at) VALUES ('acme', 'grant', 5000000000, 'test', now() - interval '20 hours')`,
		`ALTER TABLE ledger_entries DISABLE TRIGGER ledger_entries_append_only`,
		`UPDATE ledger_entries SET account = 'acme' WHERE run_id IN (SELECT r.id FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.host = 'h00001')`,
		`ALTER TABLE ledger_entries ENABLE TRIGGER ledger_entries_append_only`,
		// History moved between accounts, as no writer moves it: their kept sums say so too.
		`SELECT account_sums_recount()`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if _, err := conn.Exec(ctx, `DELETE FROM ledger_entries WHERE kind = 'grant'`); err == nil {
		t.Fatal("a delete of ledger entries outside a compaction was accepted")
	}

	type view struct {
		accounts   []model.Account
		violations []string
		jobs       []watch.JobStatus
		live       []watch.LiveStatus
	}
	read := func() view {
		t.Helper()
		var v view
		var err error
		if v.accounts, err = st.AccountList(ctx, ""); err != nil {
			t.Fatal(err)
		}
		if v.violations, err = st.InvariantViolations(ctx); err != nil {
			t.Fatal(err)
		}
		report, err := watch.Status(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		v.jobs, v.live = report.Jobs, report.Live
		for i := range v.jobs {
			v.jobs[i].NextRun = nil // read against the clock
		}
		return v
	}
	was := read()
	if len(was.violations) > 0 {
		t.Fatalf("violations before the compaction: %v", was.violations)
	}
	rows := func(table string) int64 {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	runsBefore := rows("runs")

	// Two daemons compacting at once (a compaction longer than its duty's interval) fold each
	// row once between them.
	var c model.Compacted
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			got, err := st.HistoryCompact(ctx, time.Now().Add(-10*time.Hour), 50)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			c.Runs, c.LedgerEntries, c.Events, c.Deliveries = c.Runs+got.Runs, c.LedgerEntries+got.LedgerEntries, c.Events+got.Events, c.Deliveries+got.Deliveries
		})
	}
	wg.Wait()
	t.Logf("compacted: %+v", c)
	// Of each job's 30 hourly runs, those of the last 10 hours stay, and so does the newest.
	if c.Runs == 0 || c.LedgerEntries == 0 || c.Events == 0 || c.Deliveries == 0 || rows("runs") != runsBefore-c.Runs {
		t.Fatalf("compaction removed %+v of %d runs, %d left", c, runsBefore, rows("runs"))
	}
	now := read()
	if len(now.violations) > 0 {
		t.Fatalf("violations after the compaction: %v", now.violations)
	}
	for i, a := range was.accounts {
		b := now.accounts[i]
		if a.Name != b.Name || a.GrantedBytes != b.GrantedBytes || a.SettledBytes != b.SettledBytes || a.HeldBytes != b.HeldBytes {
			t.Errorf("account %s: %+v before the compaction, %+v after", a.Name, a, b)
		}
	}
	if !slices.EqualFunc(was.jobs, now.jobs, func(a, b watch.JobStatus) bool { return jobStatusEqual(a, b) }) {
		t.Errorf("status of the jobs changed:\n%+v\n%+v", was.jobs, now.jobs)
	}
	if len(was.live) != len(now.live) || len(now.live) == 0 {
		t.Errorf("live runs: %d before, %d after", len(was.live), len(now.live))
	}
	if again, err := st.HistoryCompact(ctx, time.Now().Add(-10*time.Hour), 50); err != nil || again.Total() != 0 {
		t.Fatalf("a second compaction removed %+v (%v)", again, err)
	}
}

func ptr[T any](v T) *T { return &v }

func jobStatusEqual(a, b watch.JobStatus) bool {
	same := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	return a.Name == b.Name && a.State == b.State && a.LastOutcome == b.LastOutcome && same(a.LastSuccess, b.LastSuccess) &&
		same(a.LastVerified, b.LastVerified) && a.LastVerify == b.LastVerify && same(a.LastDrilled, b.LastDrilled) &&
		a.LastDrill == b.LastDrill && same(a.OverdueSince, b.OverdueSince) && a.Note == b.Note
}
