// Package engine runs backup engines and reads what they say.
//
// An engine is a program such as restic. This package builds its command
// lines (argv slices, never a shell), turns its machine-readable output into
// run-journal events, and classifies how it ended. It knows nothing of
// systemd or PostgreSQL.
//
// The contract with the rest of holdfast:
//
//   - Inside the unit, `holdfast exec` calls [Exec] with the engine as the
//     [Parser]. Exec emits journal events, forwards SIGINT and SIGTERM to the
//     engine as SIGINT, copies the engine's stderr to its own, and returns the
//     engine's exit status (128+n if a signal n killed it); exec exits with it.
//     With a [Producer], the engine's input is the producer's output, ended only
//     by the producer's exit 0; a producer's failure stops the engine first and
//     makes the attempt's fatal error ([StreamFailed]) and status 1.
//   - The events and their payloads: "progress" ([Progress], at most one a
//     second, and always the last one before the summary), "item_error"
//     ([ItemError], one per error reading an item: restic may report a
//     directory twice, in "scan" and in "archival"), "warning"
//     ([Warning]), "fatal" ([Fatal], the engine's final error, continuation
//     lines included), "summary" ([Summary], only when a snapshot was made:
//     the event itself is the proof), and always last "exit" ([Exit]).
//   - Afterwards the daemon builds [Evidence] from the journal and the exit
//     marker and asks the engine's Classify for the [Outcome]: a run status,
//     a failure class that decides about retries, and a sentence saying why.
//
// Absent is not zero: a run without a summary event has no figures, and
// callers must not read a missing Summary as "0 bytes added".
package engine

import (
	"fmt"
	"strings"
)

// Engine names, as a job's engine setting spells them.
const (
	NameRestic  = "restic"  // restic backs up the job's paths to its repository
	NameCommand = "command" // the job's own command; holdfast only supervises it
)

// Journal event types.
const (
	TypeProgress  = "progress"
	TypeItemError = "item_error"
	TypeSummary   = "summary"
	TypeFatal     = "fatal"
	TypeWarning   = "warning"
	TypeExit      = "exit"
	TypeHookError = "hook_error" // an after hook failed (HookError); the outcome stands
)

// HookError is the payload of a "hook_error" event.
type HookError struct {
	Message string `json:"message"`
}

// Event is one thing the engine said, ready for the run journal.
type Event struct {
	Type    string
	Payload any
}

// Progress is the payload of a "progress" event.
type Progress struct {
	PercentDone    float64 `json:"percent_done"`
	FilesDone      int64   `json:"files_done"`
	TotalFiles     int64   `json:"total_files"`
	BytesDone      int64   `json:"bytes_done"`
	TotalBytes     int64   `json:"total_bytes"`
	ErrorCount     int64   `json:"error_count"`
	SecondsElapsed float64 `json:"seconds_elapsed"`
}

// ItemError is the payload of an "item_error" event: an item the engine
// could not back up.
type ItemError struct {
	Item    string `json:"item"`
	During  string `json:"during"`
	Message string `json:"message"`
}

// String returns "item: message", or only the message when it already names
// the item, as in "open /data/c: permission denied". Use it for
// Evidence.FirstItemError.
func (e ItemError) String() string {
	if e.Item == "" || strings.Contains(e.Message, e.Item) {
		return e.Message
	}
	return e.Item + ": " + e.Message
}

// Summary is the payload of a "summary" event.
type Summary struct {
	FilesNew            int64   `json:"files_new"`
	FilesChanged        int64   `json:"files_changed"`
	FilesUnmodified     int64   `json:"files_unmodified"`
	DirsNew             int64   `json:"dirs_new"`
	DirsChanged         int64   `json:"dirs_changed"`
	DirsUnmodified      int64   `json:"dirs_unmodified"`
	DataBlobs           int64   `json:"data_blobs"`
	TreeBlobs           int64   `json:"tree_blobs"`
	DataAdded           int64   `json:"data_added"`
	TotalFilesProcessed int64   `json:"total_files_processed"`
	TotalBytesProcessed int64   `json:"total_bytes_processed"`
	TotalDuration       float64 `json:"total_duration"`
	SnapshotID          string  `json:"snapshot_id"`
}

// Fatal is the payload of a "fatal" event: the engine's final error.
type Fatal struct {
	Message string `json:"message"`
}

// Warning is the payload of a "warning" event.
type Warning struct {
	Message string `json:"message"`
}

// Exit is the payload of the "exit" event, the last one Exec emits.
type Exit struct {
	ExitStatus int    `json:"exit_status"`
	Signal     string `json:"signal,omitempty"` // e.g. "SIGKILL" when a signal killed the engine
	// When a stop passed on to the engine made the status 130 (Exec), how the engine itself
	// ended: its exit status (1: restic 0.17 and 0.18 on SIGINT) or, if a signal killed it, 128+n
	// and the signal's name ("SIGKILL": it outlived StopGrace).
	EngineStatus int    `json:"engine_exit_status,omitempty"`
	EngineSignal string `json:"engine_signal,omitempty"`
}

// Evidence is what the daemon knows about an ended attempt, from the journal
// projection and the exit marker.
type Evidence struct {
	ExitStatus     int      // the process exit status (EXIT_STATUS when EXIT_CODE=exited)
	Summary        *Summary // nil: no summary event was recorded
	ItemErrors     int64
	FirstItemError string // ItemError.String of the first item error
	Fatal          string
	Operation      string // what the engine did: "" or "backup", "forget", "prune", "restore", "verify"
}

// HookFailed starts the fatal error of an attempt whose before hook failed, or asked to skip the
// run: the engine never ran.
const HookFailed = "before hook "

// HookSkip is the exit status with which a before hook asks that the run be skipped (EX_TEMPFAIL),
// and with which `holdfast exec` then exits.
const HookSkip = 75

// hookOutcome is the outcome of an attempt whose before hook failed, whatever its engine: failed,
// permanent (the hook's trouble is the operator's to mend), for the reason the hook left; or
// skipped, when the hook exited HookSkip.
func hookOutcome(ev Evidence) (Outcome, bool) {
	if !strings.HasPrefix(ev.Fatal, HookFailed) {
		return Outcome{}, false
	}
	switch ev.ExitStatus {
	case 1:
		return Outcome{Status: Failed, Class: Permanent, Reason: firstLine(ev.Fatal) + "; the engine did not run"}, true
	case HookSkip:
		return Outcome{Status: Skipped, Reason: "skipped: " + firstLine(ev.Fatal) + "; the engine did not run"}, true
	}
	return Outcome{}, false
}

// streamOutcome is the outcome of an attempt whose stream's producer failed (Exec): failed, and
// worth a retry (a database that could not be reached may be back), never a success.
func streamOutcome(ev Evidence) (Outcome, bool) {
	if ev.ExitStatus != 1 || !strings.HasPrefix(ev.Fatal, StreamFailed) {
		return Outcome{}, false
	}
	return Outcome{Status: Failed, Class: Transient, Reason: firstLine(ev.Fatal)}, true
}

// Class says whether a failure is worth an automatic retry.
type Class string

// Failure classes. The empty Class means "not a failure" or "needs a look".
const (
	Permanent Class = "permanent"
	Transient Class = "transient"
)

// Run statuses an engine can report.
const (
	Succeeded   = "succeeded"
	Partial     = "partial"
	Failed      = "failed"
	Interrupted = "interrupted"
	Skipped     = "skipped" // a before hook asked that the engine not run
)

// Outcome is how an attempt ended, as the engine sees it.
type Outcome struct {
	Status string // Succeeded, Partial, Failed or Interrupted
	Class  Class
	Reason string // a human sentence: why
}

// Parser turns single lines of an engine's output into events.
type Parser interface {
	ParseStdout(line []byte) (Event, bool)
	ParseStderr(line []byte) (Event, bool)
}

// A Concluder is a Parser that can name the cause of a failure the engine did
// not announce as fatal. Exec asks it once, after the engine exited without a
// fatal event, with the message of the last warning (possibly "").
type Concluder interface {
	Conclude(exitStatus int, lastWarning string) (Event, bool)
}

// An Engine reads an engine's output and classifies how it ended.
type Engine interface {
	Parser
	Classify(Evidence) Outcome
}

// ByName returns the engine a job names; resticBinary is the restic its classification may ask.
func ByName(name, resticBinary string) (Engine, error) { return ForOperation(name, resticBinary, "") }

// ForOperation returns the engine a job names as it reads the output of one operation (a run's
// kind: "" or OpBackup, OpRestore, OpVerify, or one it reads as a backup's).
func ForOperation(name, resticBinary, operation string) (Engine, error) {
	switch name {
	case NameRestic:
		return Restic{Binary: resticBinary, Operation: operation}, nil
	case NameCommand:
		return Command{}, nil
	}
	return nil, fmt.Errorf("unknown engine %q: give %s or %s", name, NameRestic, NameCommand)
}

// FormatBytes formats n in IEC units with one decimal, e.g. "1.9 MiB".
func FormatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	i := -1
	// Stop one short of a unit's end so 1023.99 KiB reads "1.0 MiB", not "1024.0 KiB".
	for f >= 1024-0.05 && i < 5 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTPE"[i])
}

// plural returns "1 file", "2 files".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
