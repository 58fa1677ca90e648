package model

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Retention plan outcomes.
const (
	PlanApplied = "applied"           // a forget run deletes its snapshots
	PlanRefused = "refused"           // a guardrail or a protection stopped it
	PlanNothing = "nothing to delete" // applied, but it deletes nothing
)

// RetentionPlan is the audit record of a retention plan that was applied or refused.
type RetentionPlan struct {
	ID         uuid.UUID
	JobName    string
	Repository string
	CreatedAt  time.Time
	Actor      string    // who applied it
	PlanAt     time.Time // the plan's reference time
	Policy     json.RawMessage
	Forced     bool
	Outcome    string
	Refusal    string
	Summary    string
	DeleteIDs  []string
	Decisions  json.RawMessage // one decision per snapshot, as package retention writes them
	RunID      *uuid.UUID      // the forget run that deletes DeleteIDs
}
