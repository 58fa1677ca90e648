package model

import (
	"time"

	"github.com/google/uuid"
)

// Ledger entry kinds.
const (
	EntryGrant   = "grant"
	EntryHold    = "hold"
	EntrySettle  = "settle"
	EntryRelease = "release"
	// EntryRecovered charges an account, as a settlement does but of no run, with what its
	// repositories held that a database rebuilt by holdfast recover had not charged.
	EntryRecovered = "recovered"
)

// Account is a ledger account with its sums.
type Account struct {
	Name            string
	CreatedAt       time.Time
	Unlimited       bool
	AllowanceBytes  *int64 // per AllowancePeriod, on top of the quota
	AllowancePeriod string // day, week or month
	GrantedBytes    int64  // the quota: all grants
	SettledBytes    int64
	HeldBytes       int64 // open holds
}

// Balance is what the account can still hold: grants − settled − open holds.
func (a Account) Balance() int64 { return a.GrantedBytes - a.SettledBytes - a.HeldBytes }

// LedgerEntry is one ledger entry.
type LedgerEntry struct {
	ID        int64
	Account   string
	Kind      string
	Bytes     int64
	RunID     *uuid.UUID
	Attempt   *int
	HoldID    *int64
	CreatedAt time.Time
	Actor     string
	Note      string
}

// OpenHold is a hold no settle or release has closed yet.
type OpenHold struct {
	LedgerEntry
	JobName      string
	AttemptEnded bool
	Deferred     string // why it is still open after its attempt ended
}

// AccountLedger is an account with its open holds, told apart by ledger.Deferral, and its
// latest entries.
type AccountLedger struct {
	Account
	Held     []OpenHold    // holds of attempts not ended yet
	Deferred []OpenHold    // holds of ended attempts; Deferred says why each is still open
	Entries  []LedgerEntry // newest first
}

// SizedHold is the hold AttemptHoldSize took, or why the run paused instead.
type SizedHold struct {
	Taken  bool // false: nothing changed (the attempt is not live under the writer's claim, or holds already)
	Budget int64
	Bytes  int64
	Why    string
	Paused string // the run's reason, when it ended paused instead of holding
}

// DeferredSettlement is an ended attempt whose hold is still open.
type DeferredSettlement struct {
	RunID      uuid.UUID
	Attempt    int
	JobName    string
	Hold       int64
	Deferred   string
	SnapshotID string // the snapshot the run made, if it made one and this is its last attempt
	Engine     string
	Repository string
	Password   string // the job's password file
}
