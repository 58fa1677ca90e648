package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// An account's sums kept on its row follow every entry its writers make, as each commits: a
// grant, a hold at admission, a settlement and a release at an end or a restart, a grant to
// an account that had no quota; a compaction that folds entries into the checkpoint changes
// none of them. AccountList reads them, and holdfast check finds a kept sum that drifted.
func TestAccountKeptSums(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	const quota, most = int64(1 << 30), int64(1 << 20)
	want := func(step string, granted, settled, held int64) {
		t.Helper()
		accounts, err := st.AccountList(ctx, "team")
		if err != nil {
			t.Fatal(err)
		}
		if a := accounts[0]; a.GrantedBytes != granted || a.SettledBytes != settled || a.HeldBytes != held {
			t.Fatalf("after %s: team keeps %d granted, %d settled, %d held; want %d, %d, %d",
				step, a.GrantedBytes, a.SettledBytes, a.HeldBytes, granted, settled, held)
		}
		requireNoViolations(t, b) // the kept sums are the entries' (invariant 18), and the rest
	}

	if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "team", Quota: new(quota), Actor: "tester"}); err != nil {
		t.Fatal(err)
	}
	want("the account's creation", quota, 0, 0)

	first := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: "a", Account: "team", MaxAdded: new(most)},
		Claim: &b.Lease, Started: true})
	want("an admission", quota, 0, most)

	finished, err := st.AttemptFinish(ctx, b.Lease, model.Ending{RunID: first.ID, Attempt: 1, Status: model.StatusSucceeded,
		Reason: "backed up", Settlement: &ledger.Settlement{Bytes: 1000, Source: "restic's summary"}})
	if err != nil || !finished {
		t.Fatalf("finish: %v %v", finished, err)
	}
	want("a settlement", quota, 1000, 0)

	second := storetest.Run(t, st, &storetest.RunOpts{Job: "a", Claim: &b.Lease, Started: true})
	moved, paused, err := st.AttemptRestart(ctx, b.Lease, model.Restarting{RunID: second.ID, Attempt: 1,
		Settlement: &ledger.Settlement{Release: true, Source: "added nothing"}})
	if err != nil || !moved || paused != "" {
		t.Fatalf("restart: moved=%v paused=%q err=%v", moved, paused, err)
	}
	want("a release and the next attempt's hold", quota, 1000, most)

	if _, err := st.AccountGrant(ctx, store.AccountGrantParams{Name: "team", Bytes: 5, Actor: "tester", Note: "test"}); err != nil {
		t.Fatal(err)
	}
	want("a grant", quota+5, 1000, most)

	// The grants go into the account's checkpoint (the runs stay: a job's newest successes are
	// kept); the live attempt's hold stays open.
	c, err := st.HistoryCompact(ctx, b.Now(t).Add(time.Hour), 100)
	if err != nil || c.LedgerEntries == 0 {
		t.Fatalf("compact: %+v, %v; want ledger entries removed", c, err)
	}
	want("a compaction", quota+5, 1000, most)

	// The default account has no quota: what it used before its first grant is granted with it.
	other := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: "b", MaxAdded: new(most)}, Claim: &b.Lease, Started: true})
	if _, err := st.AttemptFinish(ctx, b.Lease, model.Ending{RunID: other.ID, Attempt: 1, Status: model.StatusSucceeded,
		Reason: "backed up", Settlement: &ledger.Settlement{Bytes: 300, Source: "restic's summary"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AccountGrant(ctx, store.AccountGrantParams{Name: store.DefaultAccount, Bytes: 7, Actor: "tester", Note: "test"}); err != nil {
		t.Fatal(err)
	}
	def, err := st.AccountList(ctx, store.DefaultAccount)
	if err != nil || def[0].GrantedBytes != 307 || def[0].SettledBytes != 300 || def[0].HeldBytes != 0 || def[0].Balance() != 7 {
		t.Fatalf("default account after its first grant: %+v, %v; want 307 granted, 300 settled, a balance of 7", def, err)
	}
	requireNoViolations(t, b)

	// A kept sum that no longer matches the entries is a violation.
	if _, err := b.DB.Exec(ctx, `UPDATE accounts SET held_bytes = held_bytes + 1 WHERE name = 'team'`); err != nil {
		t.Fatal(err)
	}
	v, err := st.InvariantViolations(ctx)
	if err != nil || len(v) != 1 || !strings.Contains(v[0], "account team keeps") {
		t.Fatalf("violations after the held sum drifted: %q, %v; want the account named", v, err)
	}
}
