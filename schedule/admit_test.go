package schedule

import (
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
)

// A slot admitted ahead of now is decided as at its own time: run on schedule, nothing missed,
// and the next slot after it; a slot already past is still judged against now.
func TestDecideAhead(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		slot    time.Time
		run     bool
		missed  int
		planned time.Time
	}{
		{"ahead", now.Add(5 * time.Second), true, 0, now.Add(5 * time.Second)},
		{"due now", now, true, 0, now},
		{"past its late grace", now.Add(-150 * time.Second), false, 1, now.Add(-150 * time.Second)},
	} {
		slot := tc.slot
		d := Decide(model.Job{Schedule: "@every 1h", NextRunAt: &slot}, now, time.Minute)
		if d.Run != tc.run || d.Missed != tc.missed || !d.Planned.Equal(tc.planned) || d.Next == nil || !d.Next.Equal(slot.Add(time.Hour)) {
			t.Fatalf("%s: %+v, want run %v, %d missed, planned %s, next an hour after the slot", tc.name, d, tc.run, tc.missed, tc.planned)
		}
		if tc.run && d.Trigger != model.TriggerSchedule {
			t.Fatalf("%s: trigger %q, want %q", tc.name, d.Trigger, model.TriggerSchedule)
		}
	}
}
