package reconcile

import "time"

// markerState is what reading the exit marker found.
type markerState int

const (
	markerNone markerState = iota
	markerReadable
	markerUnreadable
)

// unitState is systemd's answer about the attempt's unit.
type unitState int

const (
	unitNotAsked unitState = iota // no unit recorded, or a marker made asking pointless
	unitAlive
	unitGone
)

// facts are the evidence about one live run in one pass (see docs/ARCHITECTURE.md, Evidence).
type facts struct {
	marker        markerState
	markerProblem string // for an unreadable marker: the error, starting "exit marker unreadable"
	interrupted   bool   // readable marker: the engine ended because a signal interrupted it
	unitRecorded  bool
	unit          unitState
	stopRequested bool
	pausedReason  string
	sinceSpawn    time.Duration // since the spawn claim
}

// action is what the pass does about a run.
type action int

const (
	actNothing          action = iota
	actSpawn                   // start the attempt's unit
	actFinish                  // close the run with the outcome mapping (outcome.go)
	actFinishUnreadable        // close the run failed: the marker cannot be trusted
	actFinishStopped           // close the run stopped: the operator asked and the unit is gone
	actFinishPaused            // close the run paused with the recorded reason
	actStopAgain               // ask systemd to stop the unit again
	actRestart                 // open the next attempt
	actAskSystemd              // the table needs systemd's answer before it can decide
)

var actionNames = [...]string{"nothing", "spawn", "finish", "finish-unreadable", "finish-stopped",
	"finish-paused", "stop-again", "restart", "ask-systemd"}

func (a action) String() string { return actionNames[a] }

// decide is the reconciler's decision table (see docs/ARCHITECTURE.md, The decision table), read
// top to bottom; the first row that matches wins. It is called after the journal was drained and
// the paused reason re-read.
func decide(f facts, spawnGrace time.Duration) action {
	switch {
	// The unit ended and said how.
	case f.marker == markerReadable && f.interrupted && !f.stopRequested && f.pausedReason == "":
		return actRestart // a reboot or someone else's stop interrupted it
	case f.marker == markerReadable:
		return actFinish
	// The marker was changed by something outside holdfast: re-reading never repairs it.
	case f.marker == markerUnreadable:
		return actFinishUnreadable

	// Never spawned.
	case !f.unitRecorded && f.stopRequested:
		return actFinishStopped
	case !f.unitRecorded:
		return actSpawn

	// Spawned, no marker yet: systemd's word is needed ("could not ask" never gets here).
	case f.unit == unitNotAsked:
		return actAskSystemd
	case f.unit == unitAlive && (f.stopRequested || f.pausedReason != ""):
		return actStopAgain // the first request may have been lost
	case f.unit == unitAlive:
		return actNothing
	case f.sinceSpawn < spawnGrace:
		return actNothing // systemd may not have got to it yet
	case f.stopRequested:
		return actFinishStopped
	case f.pausedReason != "":
		return actFinishPaused
	default:
		return actRestart // the unit vanished without a marker: a crash or power loss
	}
}
