package engine

import (
	"fmt"
	"syscall"
)

// Command is the engine for a plain command: it says nothing Exec can read,
// and only its exit status tells how it ended.
type Command struct{}

var _ Engine = Command{}

// ParseStdout reports no events.
func (Command) ParseStdout([]byte) (Event, bool) { return Event{}, false }

// ParseStderr reports no events.
func (Command) ParseStderr([]byte) (Event, bool) { return Event{}, false }

// Classify calls exit status 0 success and anything else a failure, except
// an ending by SIGINT, SIGTERM or SIGHUP, which is an interruption. A failure
// has no class: a command is not known to be safe to repeat.
func (Command) Classify(ev Evidence) Outcome {
	if o, ok := hookOutcome(ev); ok {
		return o
	}
	switch s := ev.ExitStatus; {
	case s == 0:
		return Outcome{Status: Succeeded, Reason: "command exited with status 0"}
	case s == 128+int(syscall.SIGINT), s == 128+int(syscall.SIGTERM), s == 128+int(syscall.SIGHUP):
		return Outcome{Status: Interrupted, Reason: fmt.Sprintf("interrupted: command ended by %s (exit status %d)", signalName(s-128), s)}
	case s > 128 && s < 128+65:
		return Outcome{Status: Failed, Reason: fmt.Sprintf("command was killed by %s (exit status %d)", signalName(s-128), s)}
	default:
		return Outcome{Status: Failed, Reason: withFatal(fmt.Sprintf("command exited with status %d", s), ev.Fatal)}
	}
}
