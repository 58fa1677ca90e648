package ledger

import (
	"strings"
	"testing"
)

func ptr(n int64) *int64 { return &n }

func TestDecideHold(t *testing.T) {
	const run = "0b8c2a6e-0000-4000-8000-000000000001"
	for _, c := range []struct {
		name          string
		f             HoldFacts
		budget        int64
		budgetChanged bool
		bytes         int64
		paused        string
		sized         bool
		why           []string // each in Why, or in Reason when paused
	}{
		{name: "no ceiling, no history, paths to measure: nothing held nor recorded until the attempt starts",
			f:     HoldFacts{Account: "team", Sizable: true, Balance: 0},
			sized: true, why: []string{"sized from the job's paths as the attempt starts"}},
		{name: "no ceiling, no history: the source measured as the attempt starts, with room for metadata",
			f:      HoldFacts{Unlimited: true, Sizable: true, Source: &Source{Bytes: 3 << 30, Entries: 1000}},
			budget: 6<<30 + 1000<<10, budgetChanged: true, bytes: 6<<30 + 1000<<10,
			why: []string{"twice what the job's paths hold, 3.0 GiB in 1000 entries (measured by holdfast as the attempt started)"}},
		{name: "a small source: room for an attempt cut short",
			f:      HoldFacts{Unlimited: true, Sizable: true, Source: &Source{Bytes: 1 << 20, Entries: 3}},
			budget: 64 << 20, budgetChanged: true, bytes: 64 << 20},
		{name: "a source the walk could not finish: the space used on its filesystems",
			f:      HoldFacts{Unlimited: true, Sizable: true, Source: &Source{Bytes: 50 << 30, Bound: "a walk of the paths did not finish in time"}},
			budget: 100 << 30, budgetChanged: true, bytes: 100 << 30,
			why: []string{"twice the space used on the filesystems of the job's paths (50 GiB), since a walk of the paths did not finish in time"}},
		{name: "a source that could not be measured at all: the default estimate",
			f:      HoldFacts{Unlimited: true, Sizable: true, Source: &Source{Unmeasured: "statfs /x: no such file"}},
			budget: DefaultEstimate, budgetChanged: true, bytes: DefaultEstimate,
			why: []string{"could not be measured (statfs /x: no such file): the default estimate"}},
		{name: "a first backup larger than its account's quota pauses, naming the quota",
			f: HoldFacts{Run: run, Account: "team", Sizable: true, Source: &Source{Bytes: 3 << 30, Entries: 10},
				Balance: 2 << 30, Quota: 2 << 30},
			budget: 6<<30 + 10<<10, budgetChanged: true, paused: PausedQuotaExhausted,
			why: []string{"account team has 2.0 GiB left of its quota of 2.0 GiB and the run needs 6.0 GiB", "twice what the job's paths hold, 3.0 GiB"}},
		{name: "history outranks the source",
			f:      HoldFacts{Unlimited: true, Sizable: true, Recent: []int64{10 << 20}, Source: &Source{Bytes: 3 << 30}},
			budget: 20 << 20, budgetChanged: true, bytes: 20 << 20},
		{name: "no ceiling, no history, nothing to measure (a command's output): the default estimate, recorded",
			f:      HoldFacts{Unlimited: true},
			budget: DefaultEstimate, budgetChanged: true, bytes: DefaultEstimate,
			why: []string{"1.0 GiB left of a budget of 1.0 GiB", "the default estimate"}},
		{name: "no ceiling: twice the most recent runs added",
			f:      HoldFacts{Unlimited: true, Recent: []int64{10 << 20, 40 << 20}},
			budget: 80 << 20, budgetChanged: true, bytes: 80 << 20,
			why: []string{"twice the most the last 2 run(s) added"}},
		{name: "the run's recorded budget, less what it was charged and holds",
			f:      HoldFacts{Unlimited: true, Budget: ptr(100 << 20), Charged: 30 << 20, Open: 20 << 20},
			budget: 100 << 20, bytes: 50 << 20,
			why: []string{"50 MiB left of a budget of 100 MiB (the run's budget)"}},
		{name: "the job's ceiling becomes the budget",
			f:      HoldFacts{Unlimited: true, MaxAdded: ptr(64 << 20)},
			budget: 64 << 20, budgetChanged: true, bytes: 64 << 20,
			why: []string{"the job's ceiling (Job.MaxAdded)"}},
		{name: "an unchanged ceiling is not recorded again",
			f:      HoldFacts{Unlimited: true, MaxAdded: ptr(64 << 20), Budget: ptr(64 << 20)},
			budget: 64 << 20, bytes: 64 << 20},
		{name: "a lowered ceiling never takes back what was charged or held",
			f:      HoldFacts{Unlimited: true, MaxAdded: ptr(10 << 20), Budget: ptr(64 << 20), Charged: 20 << 20, Open: 0},
			budget: 20 << 20, budgetChanged: true, paused: PausedRunCeiling,
			why: []string{"paused (run_ceiling): the run has used its budget of 20 MiB (the job's ceiling (Job.MaxAdded)); raise the job's Job.MaxAdded"}},
		{name: "the budget used up",
			f:      HoldFacts{Unlimited: true, Budget: ptr(10 << 20), Charged: 10 << 20},
			budget: 10 << 20, paused: PausedRunCeiling,
			why: []string{"(the run's budget)"}},
		{name: "an earlier attempt's open hold takes the rest",
			f:      HoldFacts{Run: run, Unlimited: true, Budget: ptr(10 << 20), Charged: 4 << 20, Open: 6 << 20},
			budget: 10 << 20, paused: PausedSettlementDeferred,
			why: []string{"paused (settlement_deferred): 6.0 MiB of the run's budget of 10 MiB", "holdfast ledger settle " + run}},
		{name: "the account's balance is enough",
			f:      HoldFacts{Account: "team", Budget: ptr(10 << 20), Balance: 10 << 20},
			budget: 10 << 20, bytes: 10 << 20},
		{name: "the account's balance is short",
			f:      HoldFacts{Run: run, Account: "team", Budget: ptr(10 << 20), Balance: 5 << 20, Quota: 20 << 20},
			budget: 10 << 20, bytes: 10 << 20, paused: PausedQuotaExhausted,
			why: []string{"paused (quota_exhausted): account team has 5.0 MiB left of its quota of 20 MiB and the run needs 10 MiB (10 MiB left of a budget of 10 MiB (the run's budget))",
				"holdfast account grant team SIZE", "holdfast run resume " + run}},
		{name: "a negative balance reads as nothing left",
			f:      HoldFacts{Account: "team", Budget: ptr(10 << 20), Balance: -3},
			budget: 10 << 20, bytes: 10 << 20, paused: PausedQuotaExhausted,
			why: []string{"has 0 B left"}},
		{name: "an unlimited account ignores its balance",
			f:      HoldFacts{Account: "team", Unlimited: true, Budget: ptr(10 << 20), Balance: -1},
			budget: 10 << 20, bytes: 10 << 20},
		{name: "the allowance of the period is enough",
			f:      HoldFacts{Account: "team", Unlimited: true, Budget: ptr(10 << 20), Allowance: ptr(20 << 20), Period: "day", Used: 10 << 20},
			budget: 10 << 20, bytes: 10 << 20},
		{name: "the allowance of the period is used up",
			f:      HoldFacts{Run: run, Account: "team", Unlimited: true, Budget: ptr(10 << 20), Allowance: ptr(20 << 20), Period: "week", Used: 11 << 20},
			budget: 10 << 20, bytes: 10 << 20, paused: PausedQuotaExhausted,
			why: []string{"account team has used 11 MiB of its allowance of 20 MiB this week and the run needs 10 MiB; wait for the next week"}},
		{name: "the quota is checked before the allowance",
			f:      HoldFacts{Account: "team", Budget: ptr(10 << 20), Balance: 1, Allowance: ptr(1), Period: "day"},
			budget: 10 << 20, bytes: 10 << 20, paused: PausedQuotaExhausted,
			why: []string{"has 1 B left"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := DecideHold(c.f)
			if h.Sized != c.sized {
				t.Fatalf("DecideHold = sized %v, want %v: %+v", h.Sized, c.sized, h)
			}
			if h.Budget != c.budget || h.BudgetChanged != c.budgetChanged || h.Paused != c.paused {
				t.Fatalf("DecideHold = budget %d (changed %v), paused %q; want %d (%v), %q: %+v",
					h.Budget, h.BudgetChanged, h.Paused, c.budget, c.budgetChanged, c.paused, h)
			}
			if c.paused == "" && h.Bytes != c.bytes {
				t.Errorf("hold %d, want %d", h.Bytes, c.bytes)
			}
			text := h.Why
			if c.paused != "" {
				text = h.Reason
				if !strings.HasPrefix(text, "paused ("+c.paused+"): ") {
					t.Errorf("reason %q does not start with its code", text)
				}
			}
			for _, w := range c.why {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not say %q", text, w)
				}
			}
		})
	}
}

func TestNeedsHistory(t *testing.T) {
	for _, c := range []struct {
		f    HoldFacts
		want bool
	}{
		{HoldFacts{}, true},
		{HoldFacts{MaxAdded: ptr(1)}, false},
		{HoldFacts{Budget: ptr(1)}, false},
	} {
		if got := c.f.NeedsHistory(); got != c.want {
			t.Errorf("%+v.NeedsHistory() = %v, want %v", c.f, got, c.want)
		}
	}
}

func TestDeferral(t *testing.T) {
	for _, c := range []struct {
		ended    bool
		reason   string
		why      string
		deferred bool
	}{
		{false, "", "", false},
		{false, "odd", "odd", false},
		{true, "", "deferred: the attempt ended; its settlement is being decided", true},
		{true, "restic reported no data_added", "deferred: restic reported no data_added", true},
	} {
		why, deferred := Deferral(c.ended, c.reason)
		if why != c.why || deferred != c.deferred {
			t.Errorf("Deferral(%v, %q) = %q, %v; want %q, %v", c.ended, c.reason, why, deferred, c.why, c.deferred)
		}
	}
}

func TestParseAllowance(t *testing.T) {
	for _, c := range []struct {
		size, period string
		want         int64 // 0: none
		err          string
	}{
		{"", "", 0, ""},
		{"10GiB", "day", 10 << 30, ""},
		{"1MiB", "week", 1 << 20, ""},
		{"5GB", "month", 5_000_000_000, ""},
		{"10GiB", "", 0, "Account.AllowanceBytes SIZE goes with Account.AllowancePeriod day, week or month"},
		{"", "day", 0, "Account.AllowanceBytes SIZE goes with Account.AllowancePeriod day, week or month"},
		{"10GiB", "year", 0, "Account.AllowanceBytes SIZE goes with Account.AllowancePeriod day, week or month"},
		{"lots", "day", 0, "Account.AllowanceBytes: size \"lots\": give a positive size"},
	} {
		got, err := ParseAllowance(c.size, c.period)
		switch {
		case c.err != "":
			if err == nil || !strings.HasPrefix(err.Error(), c.err) {
				t.Errorf("ParseAllowance(%q, %q) = %v, want %q", c.size, c.period, err, c.err)
			}
		case err != nil:
			t.Errorf("ParseAllowance(%q, %q): %v", c.size, c.period, err)
		case c.want == 0 && got != nil, c.want != 0 && (got == nil || *got != c.want):
			t.Errorf("ParseAllowance(%q, %q) = %v, want %d", c.size, c.period, got, c.want)
		}
	}
}
