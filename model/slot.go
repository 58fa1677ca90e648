package model

import (
	"time"
)

// SlotDecision is what the scheduler decided about one due job.
type SlotDecision struct {
	Run     bool       // admit a run for Planned
	Trigger string     // TriggerSchedule or TriggerCatchUp
	Planned time.Time  // the slot
	Missed  int        // slots skipped, never replayed
	Next    *time.Time // the job's next slot; nil stops scheduling it
	Why     string     // set when scheduling stopped: the reason
}
