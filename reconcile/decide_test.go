package reconcile

import (
	"testing"
	"time"
)

// Each row of the decision table (docs/ARCHITECTURE.md, The decision table), in order, plus the
// cases that must not fall through to a worse row.
func TestDecide(t *testing.T) {
	const grace = 30 * time.Second
	late := grace + time.Second
	cases := []struct {
		name string
		f    facts
		want action
	}{
		{"marker, finished normally", facts{marker: markerReadable, unitRecorded: true, sinceSpawn: late}, actFinish},
		{"marker, interrupted, nobody asked: reboot", facts{marker: markerReadable, interrupted: true, unitRecorded: true}, actRestart},
		{"marker, interrupted, stop intent", facts{marker: markerReadable, interrupted: true, unitRecorded: true, stopRequested: true}, actFinish},
		{"marker, interrupted, paused reason", facts{marker: markerReadable, interrupted: true, unitRecorded: true, pausedReason: "run_ceiling"}, actFinish},
		{"marker unreadable", facts{marker: markerUnreadable, unitRecorded: true}, actFinishUnreadable},
		{"marker unreadable wins over stop intent", facts{marker: markerUnreadable, unitRecorded: true, stopRequested: true}, actFinishUnreadable},
		{"never spawned, stop intent", facts{stopRequested: true}, actFinishStopped},
		{"never spawned", facts{}, actSpawn},
		{"spawned, systemd not asked yet", facts{unitRecorded: true}, actAskSystemd},
		{"alive, stop intent: ask again", facts{unitRecorded: true, unit: unitAlive, stopRequested: true}, actStopAgain},
		{"alive", facts{unitRecorded: true, unit: unitAlive, sinceSpawn: late}, actNothing},
		{"gone within grace", facts{unitRecorded: true, unit: unitGone, sinceSpawn: time.Second}, actNothing},
		{"gone within grace, stop intent", facts{unitRecorded: true, unit: unitGone, sinceSpawn: time.Second, stopRequested: true}, actNothing},
		{"gone, stop intent", facts{unitRecorded: true, unit: unitGone, sinceSpawn: late, stopRequested: true}, actFinishStopped},
		{"gone, paused reason", facts{unitRecorded: true, unit: unitGone, sinceSpawn: late, pausedReason: "run_ceiling"}, actFinishPaused},
		{"gone: crash or power loss", facts{unitRecorded: true, unit: unitGone, sinceSpawn: late}, actRestart},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.f, grace); got != tc.want {
				t.Fatalf("decide(%+v) = %s, want %s", tc.f, got, tc.want)
			}
		})
	}
}
