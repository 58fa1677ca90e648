package ledger

import (
	"fmt"

	"github.com/holdfast-backup/holdfast/setting"
)

// Paused reasons the ledger gives a run that may not hold what its next attempt needs.
const (
	PausedQuotaExhausted = "quota_exhausted" // its account could not hold what it needs
	PausedRunCeiling     = "run_ceiling"     // it reached what it may add
	// PausedSettlementDeferred: an earlier attempt's figure is unknown and its open hold leaves
	// nothing of the run's budget; settling it by hand lets the run resume.
	PausedSettlementDeferred = "settlement_deferred"
)

// HoldFacts are what is known about the hold of a run's next attempt, read in the transaction
// that takes it with the account's row locked: the run's budget, what its attempts were charged
// and still hold, and its account's quota and allowance.
type HoldFacts struct {
	Run     string // the run's id, for the hints of a pause
	Account string
	// MaxAdded is the job's ceiling (--max-added), nil for none. It is read at every hold:
	// raising it lets a run paused at its ceiling resume.
	MaxAdded *int64
	Budget   *int64 // the run's recorded budget, nil before its first hold
	// Recent is what the job's recent successful runs added, newest first; it is read only
	// when NeedsHistory says so.
	Recent []int64
	// Sizable: the job backs up paths root can measure (not a command's output). A run of it
	// with no ceiling and no history holds nothing until its attempt starts and Source, what
	// the paths hold then, is known: no default guess ever pauses a first backup.
	Sizable bool
	Source  *Source
	Charged int64 // settled against the run's attempts
	Open    int64 // still held by the run's attempts
	// Unlimited: the account has no quota. Otherwise Balance is its quota − settled − held,
	// and Quota what it was granted.
	Unlimited bool
	Balance   int64
	Quota     int64
	// Allowance is what the account may add per Period (day, week or month), nil for none;
	// Used is what was settled or held in the current period.
	Allowance *int64
	Period    string
	Used      int64
}

// NeedsHistory reports whether the run's budget is estimated from the job's recent runs, so
// Recent must be read.
func (f HoldFacts) NeedsHistory() bool { return f.MaxAdded == nil && f.Budget == nil }

// Hold is the decision about the hold of a run's next attempt.
type Hold struct {
	Budget        int64 // the run's budget over all its attempts
	BudgetChanged bool  // Budget is to be recorded as the run's budget
	Bytes         int64 // the attempt's hold, when it may run
	Why           string
	// Sized: nothing is held yet; the attempt's hold is decided as it starts, from what its
	// job's paths hold (HoldFacts.Sizable).
	Sized bool
	// Paused is set when the attempt may not run: one of the Paused* codes, with Reason the
	// run's reason, saying what to do.
	Paused string
	Reason string
}

// DecideHold decides the hold of a run's next attempt, or why the run pauses. What earlier
// attempts were charged, and what they still hold, counts against the run's budget: a run
// never spends its budget twice. Lowering a job's ceiling never takes back what the run was
// charged or holds.
func DecideHold(f HoldFacts) Hold {
	var h Hold
	budget := f.Budget
	if f.MaxAdded != nil {
		ceiling := max(*f.MaxAdded, f.Charged+f.Open)
		if budget == nil || *budget != ceiling {
			budget, h.BudgetChanged = &ceiling, true
		}
	}
	var budgetWhy string
	if budget == nil && f.MaxAdded == nil && len(f.Recent) == 0 && f.Sizable && f.Source == nil {
		h.Sized = true
		h.Why = "not held yet: with no ceiling and no history, the hold is sized from the job's paths as the attempt starts"
		return h
	}
	if budget == nil {
		h.Budget, budgetWhy = Budget(f.MaxAdded, f.Recent, f.Source)
		h.BudgetChanged = true
	} else {
		h.Budget, budgetWhy = *budget, "the run's budget"
		if f.MaxAdded != nil {
			budgetWhy = setting.Render("the job's ceiling ({Job.MaxAdded})")
		}
	}
	h.Bytes = h.Budget - f.Charged - f.Open
	if h.Bytes <= 0 && f.Open > 0 {
		h.Paused = PausedSettlementDeferred
		h.Reason = setting.Sprintf("paused (settlement_deferred): %s of the run's budget of %s is still held by an earlier attempt whose figure is unknown; settle it (holdfast ledger settle %s {LedgerSettle.Bytes} N {LedgerSettle.Why} ...) and resume the run",
			FormatSize(f.Open), FormatSize(h.Budget), f.Run)
		return h
	}
	if h.Bytes <= 0 {
		h.Paused = PausedRunCeiling
		h.Reason = setting.Sprintf("paused (run_ceiling): the run has used its budget of %s (%s); raise the job's {Job.MaxAdded} and resume it",
			FormatSize(h.Budget), budgetWhy)
		return h
	}
	h.Why = fmt.Sprintf("%s left of a budget of %s (%s)", FormatSize(h.Bytes), FormatSize(h.Budget), budgetWhy)
	if !f.Unlimited && f.Balance < h.Bytes {
		h.Paused = PausedQuotaExhausted
		h.Reason = fmt.Sprintf("paused (quota_exhausted): account %s has %s left of its quota of %s and the run needs %s (%s); grant more (holdfast account grant %s SIZE) and resume it (holdfast run resume %s)",
			f.Account, FormatSize(max(f.Balance, 0)), FormatSize(f.Quota), FormatSize(h.Bytes), h.Why, f.Account, f.Run)
		return h
	}
	if f.Allowance != nil && f.Used+h.Bytes > *f.Allowance {
		h.Paused = PausedQuotaExhausted
		h.Reason = fmt.Sprintf("paused (quota_exhausted): account %s has used %s of its allowance of %s this %s and the run needs %s; wait for the next %s or grant, then resume it (holdfast run resume %s)",
			f.Account, FormatSize(f.Used), FormatSize(*f.Allowance), f.Period, FormatSize(h.Bytes), f.Period, f.Run)
	}
	return h
}

// Deferral classifies an open hold: once its attempt ended it is deferred (its settlement
// waits for a figure), and why says so; before that it is held, and reason passes unchanged.
func Deferral(attemptEnded bool, reason string) (why string, deferred bool) {
	if !attemptEnded {
		return reason, false
	}
	if reason == "" {
		reason = "the attempt ended; its settlement is being decided"
	}
	return "deferred: " + reason, true
}

// ParseAllowance reads an account's allowance as operators give it: a size per period (day,
// week or month, in UTC), or neither; nil for none.
func ParseAllowance(size, period string) (*int64, error) {
	if size == "" && period == "" {
		return nil, nil
	}
	if size == "" || (period != "day" && period != "week" && period != "month") {
		return nil, setting.Errorf("{Account.AllowanceBytes} SIZE goes with {Account.AllowancePeriod} day, week or month")
	}
	n, err := ParseSize(size)
	if err != nil {
		return nil, setting.Errorf("{Account.AllowanceBytes}: %w", err)
	}
	return &n, nil
}
