package reconcile

import (
	"fmt"
	"strconv"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/setting"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// verdict is how a run ends (or that it must restart), with the sentence that says why.
type verdict struct {
	status     string
	class      string
	reason     string
	snapshotID string // from the repair channel, when the journal had no summary
	neverRan   bool   // systemd refused the unit: nothing ran, nothing was added
	// snapshot is the run's snapshot for the inventory, recorded with the ending: from the
	// repair channel's listing, or from the backup's summary (finishBackup).
	snapshot *model.Snapshot
}

// systemdExitStatuses are the statuses systemd itself uses when it could not run the command
// (systemd.exec(5), "Process Exit Codes"): the engine never ran, so the engine cannot explain them.
var systemdExitStatuses = map[int]string{
	200: "CHDIR: the working directory could not be entered",
	203: "EXEC: the command could not be executed",
	204: "MEMORY: out of memory",
	205: "LIMITS: resource limits could not be set",
	216: "GROUP: the group could not be found or set",
	217: "USER: the user could not be found or set",
	226: "NAMESPACE: the file system namespace could not be set up",
	243: "CREDENTIALS: the unit's credentials could not be loaded (an encrypted one this host's key or TPM cannot decrypt, or one encrypted under another name: systemd-creds encrypt --name= FILE FILE.cred)",
}

// interrupted reports whether a readable marker says the engine was ended by a signal: an
// interruption only counts as one if nothing else (a timeout, an OOM kill) explains it.
func interrupted(m systemd.Marker, eng classifier) bool {
	switch m.ServiceResult {
	case "timeout", "oom-kill", "core-dump", "watchdog", "start-limit-hit":
		return false
	}
	switch m.ExitCode {
	case "killed":
		return true
	case "exited":
		status, _ := strconv.Atoi(m.ExitStatus)
		return eng.Classify(engine.Evidence{ExitStatus: status}).Status == engine.Interrupted
	}
	return false
}

// classifier is what the outcome mapping needs from an engine.
type classifier interface {
	Classify(engine.Evidence) engine.Outcome
}

// outcome maps a readable marker, the attempt's projected evidence and the run's intents to a
// final status (see docs/ARCHITECTURE.md, Outcome mapping). It is only asked when decide chose
// actFinish, so an interruption here always has a stop intent or a paused reason behind it.
func outcome(m systemd.Marker, ev engine.Evidence, eng classifier, stopRequested bool, stopReason, pausedReason string) verdict {
	if pausedReason == store.PausedRunCeiling {
		return verdict{status: model.StatusPaused, reason: setting.Render("paused (run_ceiling): the backup added more than its hold, so holdfast stopped it (SIGINT, restic unlocks); raise the job's {Job.MaxAdded} and resume it")}
	}
	if pausedReason != "" {
		return verdict{status: model.StatusPaused, reason: "paused: " + pausedReason}
	}
	switch m.ServiceResult {
	case "timeout":
		return verdict{status: model.StatusFailed, class: string(engine.Transient), reason: "the run reached its runtime limit (RuntimeMaxSec) and was stopped by systemd"}
	case "oom-kill":
		return verdict{status: model.StatusFailed, class: string(engine.Transient), reason: "the engine was killed by the kernel's out-of-memory killer"}
	case "core-dump":
		return verdict{status: model.StatusFailed, reason: fmt.Sprintf("the engine crashed (signal %s, core dumped)", m.ExitStatus)}
	case "watchdog":
		return verdict{status: model.StatusFailed, reason: "systemd's watchdog killed the engine"}
	}
	switch m.ExitCode {
	case "killed", "dumped":
		if stopRequested {
			return verdict{status: model.StatusStopped, reason: fmt.Sprintf("%s (engine ended by SIG%s)", stoppedBy(stopReason), m.ExitStatus)}
		}
		return verdict{status: model.StatusFailed, reason: fmt.Sprintf("the engine was killed by SIG%s", m.ExitStatus)}
	case "exited":
		status, err := strconv.Atoi(m.ExitStatus)
		if err != nil {
			return verdict{status: model.StatusFailed, reason: fmt.Sprintf("exit status %q is not a number", m.ExitStatus)}
		}
		if what, ok := systemdExitStatuses[status]; ok && ev.Summary == nil {
			return verdict{status: model.StatusFailed, class: "permanent",
				reason: fmt.Sprintf("systemd could not start the engine: exit %d/%s", status, what)}
		}
		ev.ExitStatus = status
		o := eng.Classify(ev)
		if o.Status == engine.Interrupted {
			if stopRequested {
				return verdict{status: model.StatusStopped, reason: stoppedBy(stopReason) + ": " + o.Reason}
			}
			// decide restarts these; reaching here means the table and this mapping disagree.
			return verdict{status: model.StatusFailed, reason: "interrupted without a stop request: " + o.Reason}
		}
		return verdict{status: o.Status, class: string(o.Class), reason: o.Reason}
	}
	if stopRequested {
		return verdict{status: model.StatusStopped, reason: stoppedBy(stopReason) + " before the engine ran"}
	}
	return verdict{status: model.StatusFailed, reason: fmt.Sprintf("the unit ended without running the engine (%s)", m.ServiceResult)}
}
