package reconcile

import (
	"fmt"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runaway"
	"github.com/holdfast-backup/holdfast/systemd"
)

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
	unitNotAsked unitState = iota // no unit recorded and no stop asked for, or a marker made asking pointless
	unitAlive
	unitGone
)

// facts are the evidence about one live run in one pass (docs/ARCHITECTURE.md, Evidence), all
// read before anything is decided (gather). Only what a row can reach is read: nothing for a journal to quarantine, no systemd
// answer for a marker, the facts before a spawn only for an attempt without a unit, and nothing
// more about a removed job.
type facts struct {
	// journalProblem says why the attempt's journal cannot be read or stored; "" if it drained.
	journalProblem string

	marker        markerState
	markerProblem string         // for an unreadable marker: the error, starting "exit marker unreadable"
	ended         systemd.Marker // a readable marker's fields
	// stopping: a readable marker's unit is still alive at systemd (its ExecStopPost is ending),
	// as far as the pass's answer from systemd says.
	stopping    bool
	interrupted bool // readable marker: the engine ended because a signal interrupted it

	// Our own intents, the strongest evidence. Read again for a readable marker: a pause or a
	// stop recorded while the unit was ending must not be taken for a reboot.
	stopRequested bool
	stopReason    string // why the stop was asked for; "" the operator asked
	pausedReason  string

	attempt      int    // the live attempt's number
	queued       bool   // the run has not been marked running yet
	unitRecorded bool   // the attempt has a spawn claim (a unit name)
	unitName     string // the unit systemd was asked about
	// unit is systemd's answer: about the recorded unit, or, for a stop before any unit was
	// recorded, about the unit name the attempt would have had.
	unit       unitState
	unitFailed bool // the unit is gone but its manager keeps it as "failed"
	// sinceSpawn is the time since the spawn claim, or since the slot of an armed attempt if
	// that is later (negative before it), on the database's clock.
	sinceSpawn time.Duration
	armed      bool // a transient timer starts the unit at its slot (systemd.Client.Arm)
	// earlierBoot: the unit was asked of this host's manager in an earlier boot, so it cannot
	// still be on its way, nor its timer still armed.
	earlierBoot bool
	runaway     *runaway.Excess // a live backup grew past its hold

	// Before a spawn.
	jobMissing      bool
	refusal         string     // why this daemon's policy forbids the run
	notBefore       *time.Time // the run is not spawned before this (a retry's delay, a window)
	window          *held      // a maintenance window of the job holds the run
	windowsProblem  string     // the job's stored windows or zone do not parse: which, and why ("" they do)
	globalWindow    *held      // a global maintenance window holds the run
	protected       []string   // snapshots of a forget's plan that became protected since
	prereq          *prereq    // the job's prerequisite, for a backup of a job that has one
	identityMissing string     // why the job's user or group cannot be found on this host
	// elsewhere: the job is any-host and another live host may run it, so what this host
	// refuses (its policy, a user it lacks) is not the run's end.
	elsewhere     bool
	now, queuedAt time.Time
}

// held is a maintenance window that holds a run back.
type held struct {
	name  string
	job   string // "" for a global window
	until time.Time
}

// prereq is what is known about the job a run depends on.
type prereq struct {
	name        string
	exists      bool
	lastRun     *model.Run // its last run, if it has one
	lastOutcome string
}

// rules are the reconciler's settings the table reads.
type rules struct {
	spawnGrace  time.Duration
	dependsWait time.Duration
	maxAttempts int
	// startLead is how long before its not-before time a ready run is armed; 0 never arms.
	startLead time.Duration
}

// ArmMargin is the least time before its not-before time a run is armed: a calendar instant
// that passes before systemd has armed the timer never elapses. A run closer to its time is
// started at it, as any other.
const ArmMargin = time.Second

// action is what the pass does about a run.
type action int

const (
	actNothing      action = iota
	actQuarantine          // stop projecting the attempt's journal
	actSpawn               // claim and start the attempt's unit
	actWait                // record why the run waits, and until when
	actFinish              // close the run with the outcome mapping of its marker (outcome.go)
	actEnd                 // close the run with the decision's verdict
	actStop                // ask systemd to stop the unit (idempotent)
	actMarkRunning         // record that systemd has the unit
	actPauseRunaway        // record the run_ceiling pause, then stop the unit
	actWatch               // nothing changes; keep the runaway watch on the repository armed
	actResetFailed         // free a failed unit's name at its manager
	actRestart             // settle the attempt and open the next one
	actArm                 // claim the attempt and arm its unit's timer for the not-before time
	actDisarm              // stop an armed unit's timer and service, then close the run with the verdict
	numActions
)

var actionNames = [...]string{"nothing", "quarantine", "spawn", "wait", "finish", "end", "stop",
	"mark-running", "pause-runaway", "watch", "reset-failed", "restart", "arm", "disarm"}

func (a action) String() string { return actionNames[a] }

// decision is an action with what carrying it out needs, and the name of the row that chose it.
type decision struct {
	row   string
	act   action
	why   string     // actQuarantine, actWait: the reason recorded
	until *time.Time // actWait: when to look again; nil when only a change elsewhere frees the run
	end   verdict    // actEnd
}

func do(row string, a action) decision { return decision{row: row, act: a} }

func end(row, status, class, reason string) decision {
	return decision{row: row, act: actEnd, end: verdict{status: status, class: class, reason: reason}}
}

func wait(row, why string, until *time.Time) decision {
	return decision{row: row, act: actWait, why: why, until: until}
}

func quarantine(row, why string) decision { return decision{row: row, act: actQuarantine, why: why} }

// decide is the reconciler's decision table (docs/ARCHITECTURE.md, The decision table), read top
// to bottom; the first row that matches wins. It is pure and called once per run per pass, after the journal was drained.
func decide(f facts, p rules) decision {
	dep := f.prereq
	interruptedAlone := f.interrupted && !f.stopRequested && f.pausedReason == ""
	lastAttempt := f.attempt >= p.maxAttempts
	// A run whose time is a little ahead is prepared now and started by systemd at its time.
	armable := false
	if f.notBefore != nil && p.startLead > 0 {
		ahead := f.notBefore.Sub(f.now)
		armable = ahead > ArmMargin && ahead <= p.startLead
	}
	giveUp := func() string {
		return fmt.Sprintf("interrupted %d times (last: %s); giving up after %d attempts", f.attempt, interruption(f.ended), p.maxAttempts)
	}
	switch {
	// The projection stops, not the run; the next pass decides about the run without it.
	case f.journalProblem != "":
		return quarantine("journal unreadable", f.journalProblem)

	// The unit ended and said how. An interruption nobody asked for is a reboot or someone
	// else's stop: the run goes on, unless it has used up its attempts.
	// The place a run holds under the limits is freed when its unit is gone, not when the
	// marker is written: closing it now would let the next run start beside it.
	case f.marker == markerReadable && f.stopping:
		return do("marker, unit still stopping", actNothing)
	case f.marker == markerReadable && interruptedAlone && lastAttempt:
		return end("marker: interrupted, last attempt", model.StatusFailed, string(engine.Transient), giveUp())
	case f.marker == markerReadable && interruptedAlone:
		return do("marker: interrupted", actRestart)
	case f.marker == markerReadable:
		return do("marker", actFinish)
	// Something outside holdfast changed the marker: re-reading never repairs it.
	case f.marker == markerUnreadable:
		return end("marker unreadable", model.StatusFailed, "", f.markerProblem)

	// Never spawned, and the operator asked to stop. A released spawn claim is no proof that no
	// unit exists (the start call may have reached systemd before it failed).
	case !f.unitRecorded && f.stopRequested && f.unit == unitAlive:
		return do("unspawned, stop, unit alive", actStop) // its marker ends the run on a later pass
	case !f.unitRecorded && f.stopRequested:
		return end("unspawned, stop", model.StatusStopped, "", stoppedBy(f.stopReason)+" before it was started")

	// Never spawned: may it start now? Concurrency limits are not rows: they are decided in the
	// spawn claim's own transaction, where no other claim can take the last place meanwhile.
	case !f.unitRecorded && f.jobMissing:
		return end("unspawned, job removed", model.StatusFailed, "permanent", "the run's job was removed before the run could start")
	case !f.unitRecorded && f.refusal != "" && f.elsewhere:
		return wait("unspawned, refused here, any host", "waiting for another host: "+f.refusal, nil)
	case !f.unitRecorded && f.refusal != "":
		return end("unspawned, refused by policy", model.StatusFailed, "permanent", f.refusal)
	case !f.unitRecorded && f.notBefore != nil && f.now.Before(*f.notBefore) && !armable:
		return do("unspawned, not before", actNothing) // its reason was recorded with the time
	// Windows that cannot be read are not "no window": the run waits until they are corrected.
	case !f.unitRecorded && f.windowsProblem != "":
		return wait("unspawned, job windows unreadable", "waiting: "+f.windowsProblem, nil)
	case !f.unitRecorded && f.window != nil:
		return wait("unspawned, job window", fmt.Sprintf("waiting: maintenance window %q of job %s until %s",
			f.window.name, f.window.job, f.window.until.UTC().Format(time.RFC3339)), &f.window.until)
	case !f.unitRecorded && f.globalWindow != nil:
		return wait("unspawned, global window", fmt.Sprintf("waiting: global maintenance window %q until %s",
			f.globalWindow.name, f.globalWindow.until.UTC().Format(time.RFC3339)), &f.globalWindow.until)
	// A snapshot put under protection after its plan was recorded is still never deleted.
	case !f.unitRecorded && len(f.protected) > 0:
		return end("unspawned, forget of protected snapshots", model.StatusFailed, "permanent",
			fmt.Sprintf("%d snapshot(s) of the plan became protected after it was made (first: %.12s): nothing deleted; plan again",
				len(f.protected), f.protected[0]))
	// A prerequisite must have succeeded (partial is not enough). The run waits while it runs,
	// or for its next outcome, at most DependsWait after this run was queued.
	case !f.unitRecorded && dep != nil && !dep.exists:
		return end("unspawned, prerequisite missing", model.StatusFailed, "permanent",
			fmt.Sprintf("prerequisite job %s does not exist", dep.name))
	case !f.unitRecorded && dep != nil && dep.lastRun != nil && model.Live(dep.lastRun.Status):
		return wait("unspawned, prerequisite running", fmt.Sprintf("waiting: prerequisite job %s is %s (run %s)",
			dep.name, dep.lastRun.Status, dep.lastRun.ID), nil)
	case !f.unitRecorded && dep != nil && dep.lastOutcome != model.StatusSucceeded && dep.endedSince(f.queuedAt):
		return end("unspawned, prerequisite failed since", model.StatusFailed, "permanent",
			fmt.Sprintf("prerequisite job %s has not succeeded (its last run: %s, run %s)", dep.name, dep.outcome(), dep.lastRun.ID))
	case !f.unitRecorded && dep != nil && dep.lastOutcome != model.StatusSucceeded && !f.now.Before(f.queuedAt.Add(p.dependsWait)):
		return end("unspawned, prerequisite wait over", model.StatusFailed, "permanent",
			fmt.Sprintf("prerequisite job %s has not succeeded (its last run: %s) and had no new outcome within %s of this run being queued",
				dep.name, dep.outcome(), p.dependsWait))
	case !f.unitRecorded && dep != nil && dep.lastOutcome != model.StatusSucceeded:
		return wait("unspawned, prerequisite not succeeded", fmt.Sprintf("waiting: prerequisite job %s has not succeeded (its last run: %s); waiting for its next outcome until %s",
			dep.name, dep.outcome(), f.queuedAt.Add(p.dependsWait).UTC().Format(time.RFC3339)), nil)
	// A user or group removed from the host never comes back by itself: retrying would spin.
	case !f.unitRecorded && f.identityMissing != "" && f.elsewhere:
		return wait("unspawned, identity missing here, any host", "waiting for another host: "+f.identityMissing, nil)
	case !f.unitRecorded && f.identityMissing != "":
		d := end("unspawned, identity missing", model.StatusFailed, "permanent", f.identityMissing)
		d.end.neverRan = true
		return d
	// Windows were judged at its time, and limits are judged by the claim, as for a start now.
	case !f.unitRecorded && armable:
		return do("unspawned, arm ahead", actArm)
	case !f.unitRecorded:
		return do("unspawned", actSpawn)

	// Spawned, no marker yet: systemd's word decides ("could not ask" never gets here).
	case f.unit == unitAlive && (f.stopRequested || f.pausedReason != ""):
		return do("alive, stop or pause", actStop) // the first request may have been lost
	case f.unit == unitAlive && f.queued:
		return do("alive, not marked running", actMarkRunning) // a spawn ended before it could record it
	case f.unit == unitAlive && f.runaway != nil:
		return do("alive, past its hold", actPauseRunaway) // paused first, then SIGINT: restic unlocks
	case f.unit == unitAlive:
		return do("alive", actWatch) // after a daemon restart, the watch resumes here
	case f.unitFailed:
		return do("gone, failed", actResetFailed) // its name is ours alone; the next pass decides
	// Armed, and its time has not come: a stop or a pause disarms it. Should the timer elapse
	// meanwhile, the stop of the service that follows the timer's still ends the service. From
	// its time on, the spawn grace counts as for any other start.
	case f.armed && f.sinceSpawn < 0 && f.stopRequested:
		d := end("armed, stop", model.StatusStopped, "", stoppedBy(f.stopReason)+" before it was started")
		d.act, d.end.neverRan = actDisarm, true
		return d
	case f.armed && f.sinceSpawn < 0 && f.pausedReason != "":
		d := end("armed, paused", model.StatusPaused, "", "paused before it was started: "+f.pausedReason)
		d.act, d.end.neverRan = actDisarm, true
		return d
	case f.armed && f.sinceSpawn < 0 && !f.earlierBoot:
		return do("armed, before its time", actNothing) // systemd starts it at its slot
	case f.sinceSpawn < p.spawnGrace && !f.earlierBoot:
		return do("gone, within spawn grace", actNothing) // systemd may not have got to it yet
	case f.stopRequested:
		return end("gone, stop", model.StatusStopped, "", stoppedBy(f.stopReason)+"; the unit ended without an exit marker")
	case f.pausedReason != "":
		return end("gone, paused", model.StatusPaused, "", "paused: "+f.pausedReason)
	case lastAttempt:
		return end("gone, last attempt", model.StatusFailed, string(engine.Transient), giveUp())
	default:
		return do("gone", actRestart) // no marker: a crash or a power loss
	}
}

// stoppedBy says who asked for a stop: the operator, or holdfast for reason (a stall).
func stoppedBy(reason string) string {
	if reason == "" {
		return "stopped by the operator"
	}
	return "stopped by holdfast (" + reason + ")"
}

// endedSince reports whether the prerequisite's last run ended after t.
func (p *prereq) endedSince(t time.Time) bool {
	return p.lastRun != nil && p.lastRun.FinishedAt != nil && p.lastRun.FinishedAt.After(t)
}

func (p *prereq) outcome() string {
	if p.lastOutcome == "" {
		return "never run"
	}
	return p.lastOutcome
}

// decideTakeOver is the table for a run of an any-host job whose host lost its lease more than
// the takeover grace ago (docs/ARCHITECTURE.md, Several hosts). Its unit cannot be asked about:
// the run goes on in a new attempt on a live host, unless it reached its last attempt. A stop
// intent, read again in the takeover's transaction, ends it stopped instead.
func decideTakeOver(attempt int, p rules) (giveUp string) {
	if attempt >= p.maxAttempts {
		return fmt.Sprintf("its host lost its lease during attempt %d; giving up after %d attempts", attempt, p.maxAttempts)
	}
	return ""
}
