package jobdef

import (
	"encoding/json"
	"fmt"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
)

// Policy decodes the job's stored retention policy; ok is false if it has none.
func Policy(j model.Job) (p retention.Policy, ok bool, err error) {
	if len(j.Retention.Policy) == 0 {
		return p, false, nil
	}
	if err := json.Unmarshal(j.Retention.Policy, &p); err != nil {
		return p, false, fmt.Errorf("job %s: stored retention policy unreadable: %w", j.Name, err)
	}
	return p, true, nil
}

// Guardrail is what the job's retention plans may delete without --force.
func Guardrail(j model.Job) retention.Guardrail {
	return retention.Guardrail{MaxDeleteShare: j.Retention.MaxDelete, MinKeep: j.Retention.MinKeep}
}
