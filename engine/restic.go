package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// Job is what an engine needs to know about a backup job.
type Job struct {
	Name         string   // validated elsewhere: [a-z0-9][a-z0-9._-]{0,62}
	Repository   string   // restic repository (local path or URL)
	PasswordFile string   // absolute path
	Paths        []string // absolute paths
	Excludes     []string // restic --exclude patterns
	CacheDir     string   // optional restic --cache-dir ("" = --no-cache)
	LimitUpload  int      // restic --limit-upload in KiB/s; 0 = none
	// StdinFilename, if set, makes a backup read its standard input as one file of this name
	// (restic --stdin) instead of Paths.
	StdinFilename string
}

// The prefixes of the tags holdfast puts on the snapshots it makes.
const (
	JobTagPrefix = "holdfast-job="
	RunTagPrefix = "holdfast-run="
)

// JobTag is the restic tag that marks the snapshots of a job.
func JobTag(name string) string { return JobTagPrefix + name }

// RunTag is the restic tag that marks the snapshot of a run.
func RunTag(run uuid.UUID) string { return RunTagPrefix + run.String() }

// Restic builds restic command lines and reads restic's output (restic 0.14
// and later). Its zero value runs "restic", looked up in PATH by the caller.
type Restic struct {
	Binary string
	// Operation is what the restic whose output it reads does: "" or OpBackup, OpRestore,
	// OpVerify, OpDrill (what restic says on its standard error means something else in each).
	Operation string
	// Run runs one of restic's query commands (snapshots, stats) and returns its stdout; nil
	// runs it here, as this process. The daemon runs them as the job's user instead.
	Run func(ctx context.Context, argv []string) ([]byte, error)
	// Stream runs a query whose answer may be too large to hold (ls, find), handing its stdout to
	// consume as it comes; nil runs it here. An error of consume's stops the query.
	Stream func(ctx context.Context, argv []string, consume func(io.Reader) error) error
}

var _ interface {
	Engine
	Concluder
	StopGracer
} = Restic{}

// StopGrace is how long restic has after a SIGINT before Exec kills it: CheckStopGrace for a
// check or a prune, StopGrace for the rest (see the constants).
func (r Restic) StopGrace() time.Duration {
	if r.Operation == OpVerify || r.Operation == OpPrune {
		return CheckStopGrace
	}
	return StopGrace
}

// global returns the program and the options every restic command needs.
// Without a cache directory restic would try $HOME/.cache, which a service
// user such as nobody (HOME=/nonexistent) cannot create.
func (r Restic) global(j Job) []string {
	bin := r.Binary
	if bin == "" {
		bin = "restic"
	}
	argv := []string{bin, "--repo", j.Repository}
	if j.PasswordFile != "" {
		// Without it, restic reads RESTIC_PASSWORD_FILE, which the unit's credentials provide.
		argv = append(argv, "--password-file", j.PasswordFile)
	}
	if j.LimitUpload > 0 {
		argv = append(argv, "--limit-upload", strconv.Itoa(j.LimitUpload))
	}
	if j.CacheDir != "" {
		return append(argv, "--cache-dir", j.CacheDir)
	}
	return append(argv, "--no-cache")
}

// BackupTags are the tags, in order, of the snapshot a backup of j for run makes.
func BackupTags(j Job, run uuid.UUID) []string { return []string{JobTag(j.Name), RunTag(run)} }

// BackupArgv returns the command line that backs up j's paths as a snapshot
// tagged with the job and the run (BackupTags). The "--" keeps a path that starts with a
// dash from being read as an option (restic 0.14 accepts it).
func (r Restic) BackupArgv(j Job, run uuid.UUID) []string {
	argv := append(r.global(j), "backup", "--json")
	for _, tag := range BackupTags(j, run) {
		argv = append(argv, "--tag", tag)
	}
	if j.StdinFilename != "" {
		return append(argv, "--stdin", "--stdin-filename", j.StdinFilename)
	}
	for _, x := range j.Excludes {
		argv = append(argv, "--exclude", x)
	}
	argv = append(argv, "--")
	return append(argv, j.Paths...)
}

// UnlockArgv returns the command line that removes stale locks: locks of
// processes that are gone, or older than 30 minutes. A live backup's lock
// stays, so running it before a backup is safe.
func (r Restic) UnlockArgv(j Job) []string {
	return append(r.global(j), "unlock")
}

// PruneArgv returns the command line that removes unreferenced data from the repository. It
// takes restic's exclusive lock, so it must not overlap a backup of the same repository.
func (r Restic) PruneArgv(j Job) []string {
	return append(r.global(j), "prune")
}

// ForgetArgv returns the command line that removes exactly the given snapshots (full ids) from
// the repository's index; their data stays until a prune. restic warns about an id it cannot
// find and still exits 0: ParseStderr makes that warning an item error.
func (r Restic) ForgetArgv(j Job, ids []string) []string {
	return append(append(r.global(j), "forget"), ids...)
}

// GlobalArgv is restic with the options every command on j's repository needs, for a program
// that runs restic's commands itself (`holdfast drill`).
func (r Restic) GlobalArgv(j Job) []string { return r.global(j) }

// RestoreArgv returns the command line that restores snapshot (a full id) into target, only the
// paths matching includes if there are any; with json (restic 0.17 and later: RestoreJSON), its
// progress and summary as JSON lines, which Restic reads as a restore's progress.
func (r Restic) RestoreArgv(j Job, snapshot, target string, includes []string, json bool) []string {
	argv := r.global(j)
	if json {
		argv = append(argv, "--json")
	}
	argv = append(argv, "restore", "--target", target)
	for _, p := range includes {
		argv = append(argv, "--include", p)
	}
	return append(argv, snapshot)
}

// ListArgv returns the command line that lists snapshot (a full id) as JSON, one line per file
// or directory (restic ls --json): what a restore's target is compared with (Restore.List).
func (r Restic) ListArgv(j Job, snapshot string) []string {
	return append(r.global(j), "ls", "--json", snapshot)
}

// CopyArgv returns the command line that copies snapshot (an id or a unique prefix) of from's
// repository into j's (restic copy): the destination is restic's own repository, the source its
// --from-repo, its password from --from-password-file, or RESTIC_FROM_PASSWORD_FILE when the
// unit's credentials provide it. restic copies a snapshot once: one already in j's is skipped.
func (r Restic) CopyArgv(j, from Job, snapshot string) []string {
	argv := append(r.global(j), "copy", "--from-repo", from.Repository)
	if from.PasswordFile != "" {
		argv = append(argv, "--from-password-file", from.PasswordFile)
	}
	return append(argv, snapshot)
}

// CheckArgv returns the command line that checks the repository's structure and, with subset
// (ValidateReadDataSubset), reads that part of its data. It takes restic's exclusive lock.
func (r Restic) CheckArgv(j Job, subset string) []string {
	argv := append(r.global(j), "check")
	if subset != "" {
		argv = append(argv, "--read-data-subset", subset)
	}
	return argv
}

// ValidateReadDataSubset checks a value for restic check's --read-data-subset as holdfast takes
// it: a percentage above 0 and at most 100 ("5%", "2.5%"), or a part n of t ("1/7").
func ValidateReadDataSubset(s string) error {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || !(f > 0 && f <= 100) || strings.ContainsAny(p, "eE+-") || p == "" {
			return fmt.Errorf("read-data subset %q: give a percentage above 0%% and at most 100%%, such as 5%%", s)
		}
		return nil
	}
	n, t, ok := strings.Cut(s, "/")
	if ok {
		ni, err1 := strconv.ParseUint(n, 10, 31)
		ti, err2 := strconv.ParseUint(t, 10, 31)
		if err1 == nil && err2 == nil && ni >= 1 && ni <= ti {
			return nil
		}
	}
	return fmt.Errorf("read-data subset %q: give a percentage such as 5%% or a part n/t with 1 <= n <= t, such as 1/7", s)
}

// SnapshotsArgv returns the command line that lists, as JSON, the snapshots
// a run made: the repair channel for a run whose journal lost the summary.
func (r Restic) SnapshotsArgv(j Job, run uuid.UUID) []string {
	return append(r.global(j), "--no-lock", "snapshots", "--json", "--tag", RunTag(run))
}

// resticMessage is one line of `restic backup --json`. Status lines omit
// fields with zero values: absent reads as 0.
type resticMessage struct {
	MessageType string `json:"message_type"`

	// status
	SecondsElapsed float64 `json:"seconds_elapsed"`
	PercentDone    float64 `json:"percent_done"`
	TotalFiles     int64   `json:"total_files"`
	FilesDone      int64   `json:"files_done"`
	TotalBytes     int64   `json:"total_bytes"`
	BytesDone      int64   `json:"bytes_done"`
	ErrorCount     int64   `json:"error_count"`

	// error
	Error  json.RawMessage `json:"error"`
	During string          `json:"during"`
	Item   string          `json:"item"`

	// exit_error (0.18 and later, on standard error, with --json): the final error
	Message string `json:"message"`

	// a restore's status and summary (0.17 and later, with --json)
	FilesRestored int64 `json:"files_restored"`
	FilesSkipped  int64 `json:"files_skipped"`
	BytesRestored int64 `json:"bytes_restored"`
	BytesSkipped  int64 `json:"bytes_skipped"`

	Summary
}

func decodeMessage(line []byte) (resticMessage, bool) {
	var m resticMessage
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return m, false
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return m, false
	}
	return m, true
}

// ParseStdout turns a "status" line into a progress event and a "summary"
// line into a summary event.
func (r Restic) ParseStdout(line []byte) (Event, bool) {
	m, ok := decodeMessage(line)
	if !ok {
		return Event{}, false
	}
	if r.Operation == OpDrill {
		var d drillMessage
		if m.MessageType != "drill" || json.Unmarshal(bytes.TrimSpace(line), &d) != nil {
			return Event{}, false
		}
		return Event{TypeSummary, d.Drill}, true
	}
	if r.Operation == OpRestore {
		return restoreProgress(m)
	}
	switch m.MessageType {
	case "status":
		return Event{TypeProgress, Progress{
			PercentDone:    m.PercentDone,
			FilesDone:      m.FilesDone,
			TotalFiles:     m.TotalFiles,
			BytesDone:      m.BytesDone,
			TotalBytes:     m.TotalBytes,
			ErrorCount:     m.ErrorCount,
			SecondsElapsed: m.SecondsElapsed,
		}}, true
	case "summary":
		return Event{TypeSummary, m.Summary}, true
	}
	return Event{}, false
}

// restoreProgress reads a line of `restic restore --json` (0.17 and later): its status, and its
// summary, which is the restore's last progress (a restore makes no snapshot, so no summary of
// holdfast's). A file or byte restic skipped (there already) is done too.
func restoreProgress(m resticMessage) (Event, bool) {
	if m.MessageType != "status" && m.MessageType != "summary" {
		return Event{}, false
	}
	p := Progress{FilesDone: m.FilesRestored + m.FilesSkipped, TotalFiles: m.TotalFiles,
		BytesDone: m.BytesRestored + m.BytesSkipped, TotalBytes: m.TotalBytes, SecondsElapsed: m.SecondsElapsed}
	switch {
	case m.MessageType == "summary":
		p.PercentDone = 1
	case p.TotalBytes > 0:
		p.PercentDone = min(1, float64(p.BytesDone)/float64(p.TotalBytes))
	}
	return Event{TypeProgress, p}, true
}

// The package's expressions are compiled at their first use, not at every start of a process
// that links the package: holdfast-unit starts twice in each run, and most commands need none.
var (
	escapes = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`) })
	// A Go stack frame as printed by %+v: a function, or a tab-indented file:line.
	stackFrame = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^(\t.*\.(go|s):\d+|[A-Za-z_][\w./-]*\.[\w.()*]+(\[\.\.\.\])?)$`)
	})
)

const (
	doesNotExist = " does not exist, skipping"
	restoreError = "ignoring error for "
)

// The operations whose output Restic reads differently (Restic.Operation).
const (
	OpBackup  = "backup"
	OpRestore = "restore"
	OpVerify  = "verify"
	OpCopy    = "copy"
	OpPrune   = "prune"
	OpForget  = "forget"
)

// ParseStderr turns an "error" line into an item_error event, restic's final
// error (a "Fatal:" line, or from 0.18 an "exit_error" line) into a fatal event and other
// messages into warnings. Stack frames
// (restic prints them below unexpected errors) and JSON it cannot read yield
// nothing.
func (r Restic) ParseStderr(line []byte) (Event, bool) {
	if m, ok := decodeMessage(line); ok {
		if m.MessageType == "exit_error" {
			return Event{TypeFatal, Fatal{Message: clip(strings.TrimSpace(m.Message))}}, true
		}
		if m.MessageType != "error" {
			return Event{}, false
		}
		msg := clip(goError(m.Error))
		if msg == "" {
			msg = "restic gave no details"
		}
		item := m.Item
		// restore --json (0.17.1 and later) says what "ignoring error for" says in text.
		if r.Operation == OpRestore {
			if i, loss, ok := sandboxLoss(item + ": " + msg); ok {
				item, msg = i, loss
			}
		}
		return Event{TypeItemError, ItemError{Item: item, During: m.During, Message: msg}}, true
	}
	raw := escapes().ReplaceAllString(string(line), "")
	if isJSON(line) || stackFrame().MatchString(raw) {
		return Event{}, false
	}
	s := clip(strings.TrimSpace(raw))
	fatal := strings.HasPrefix(s, "Fatal: ") || strings.Contains(s, ": Fatal: ")
	switch {
	case s == "":
		return Event{}, false
	// restore reports each file it could not restore (or, with --verify, that differs) so, and
	// exits 1 after "Fatal: There were N errors".
	// A restore's sandbox refuses setuid/setgid bits and device nodes: such a loss says so.
	case (r.Operation == OpRestore || r.Operation == OpDrill) && strings.HasPrefix(s, restoreError):
		rest := strings.TrimPrefix(s, restoreError)
		item, msg, _ := strings.Cut(rest, ": ")
		if i, loss, ok := sandboxLoss(rest); ok && r.Operation == OpRestore {
			item, msg = i, loss
		}
		return Event{TypeItemError, ItemError{Item: item, During: "restore", Message: msg}}, true
	// What check prints on its standard error before its last word is a finding about the
	// repository ("Pack ID does not match, ..." up to 0.16, "pack ID contains N errors: ..." from
	// 0.17), except a finding's indented continuation and the advice 0.17 and later print below
	// damaged packs (checkAdvice).
	case r.Operation == OpVerify && !fatal && !strings.HasPrefix(s, "unable to create lock in backend: "):
		if raw[0] == ' ' || raw[0] == '\t' || isCheckAdvice(s) {
			return Event{}, false
		}
		return Event{TypeItemError, ItemError{During: "check", Message: s}}, true
	// restic prints fatal errors as they are wrapped: "Resolving password
	// failed: Fatal: ...", and a lock conflict without the "Fatal:" prefix.
	case strings.HasPrefix(s, "Fatal: "), strings.Contains(s, ": Fatal: "),
		strings.HasPrefix(s, "unable to create lock in backend: "):
		return Event{TypeFatal, Fatal{Message: s}}, true
	// A path given on the command line that is missing is skipped with only
	// this line and, if other paths exist, exit status 0: it must still count.
	// forget names a snapshot it did not remove this way ("no matching ID found", "could not
	// load snapshot") and still exits 0.
	case strings.HasPrefix(s, `Ignoring "`):
		item, rest, _ := strings.Cut(strings.TrimPrefix(s, `Ignoring "`), `"`)
		msg := "no such snapshot in the repository"
		if !strings.Contains(rest, "no matching ID found") {
			msg = strings.TrimLeft(rest, ":, ")
		}
		return Event{TypeItemError, ItemError{Item: item, During: "forget", Message: msg}}, true
	// restic 0.16 fails (exit 1) removing a snapshot whose file is gone but still in its cache,
	// after removing the others; any restic so fails where the backend refuses the deletion (an
	// append-only server's 403, the next line says so).
	case strings.HasPrefix(s, "unable to remove <snapshot/") && strings.HasSuffix(s, "> from the repository"):
		item := strings.TrimSuffix(strings.TrimPrefix(s, "unable to remove <snapshot/"), "> from the repository")
		return Event{TypeItemError, ItemError{Item: item, During: "forget", Message: "could not be removed: gone already, or the repository refused (an append-only server)"}}, true
	case strings.HasSuffix(s, doesNotExist):
		item := strings.TrimSuffix(s, doesNotExist)
		return Event{TypeItemError, ItemError{Item: item, During: "target", Message: "does not exist"}}, true
	}
	return Event{TypeWarning, Warning{Message: s}}, true
}

// checkAdvice starts the lines restic check 0.17 and later print below the damaged packs it
// found: what to run and read, not findings.
var checkAdvice = []string{
	"The repository contains damaged pack files.",
	"restic repair packs ",
	"restic repair snapshots ",
	"restic repair index",
	"Damaged pack files can be caused by ",
}

func isCheckAdvice(s string) bool {
	for _, a := range checkAdvice {
		if strings.HasPrefix(s, a) {
			return true
		}
	}
	return false
}

// clip cuts a message to 4 KiB: the rest is still in the unit's log.
func clip(s string) string {
	const limit = 4 << 10
	if len(s) <= limit {
		return s
	}
	return strings.ToValidUTF8(s[:limit], "") + " [cut]"
}

// goError renders an error as restic encodes it: restic 0.14 marshals the Go
// error value itself, e.g. {"Op":"open","Path":"/d/c","Err":13} for an
// *os.PathError and {} for errors without exported fields; later versions
// write {"message":"..."}.
func goError(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var errno uint64
	if json.Unmarshal(raw, &errno) == nil {
		return syscall.Errno(errno).Error()
	}
	var e struct {
		Message string
		Op      string
		Path    string
		Syscall string
		Err     json.RawMessage
	}
	if json.Unmarshal(raw, &e) != nil {
		return ""
	}
	inner := goError(e.Err)
	switch {
	case e.Message != "":
		return e.Message
	case e.Op != "":
		return strings.TrimSpace(e.Op+" "+e.Path) + ": " + inner
	case e.Syscall != "":
		return e.Syscall + ": " + inner
	}
	return inner
}

// Conclude makes restic's last message the fatal error when restic exited 1
// without a "Fatal:" line: unexpected errors are printed plainly, followed
// by a stack trace.
func (Restic) Conclude(exitStatus int, lastWarning string) (Event, bool) {
	if exitStatus != 1 || lastWarning == "" {
		return Event{}, false
	}
	return Event{TypeFatal, Fatal{Message: lastWarning}}, true
}

// Classify maps restic's exit status and what it said to an outcome. restic
// 0.14 exits 0, 1, 3 or 130; 10, 11 and 12 come from later versions.
func (r Restic) Classify(ev Evidence) Outcome {
	if o, ok := hookOutcome(ev); ok {
		return o
	}
	if o, ok := streamOutcome(ev); ok {
		return o
	}
	switch ev.Operation {
	case OpVerify:
		if ev.ExitStatus == 0 {
			return Outcome{Status: Succeeded, Reason: "verify complete: restic check found no errors"}
		}
		if ev.ExitStatus == 1 && ev.ItemErrors > 0 && strings.Contains(ev.Fatal, "repository contains errors") {
			return Outcome{Status: Failed, Class: Permanent, Reason: fmt.Sprintf("verify failed: the repository contains errors (%s, first: %s)",
				plural(ev.ItemErrors, "finding"), ev.FirstItemError)}
		}
	case OpForget:
		// The snapshots restic could remove are gone; the ones it names were not removed.
		if ev.ExitStatus == 1 && ev.ItemErrors > 0 {
			return partial(ev)
		}
	case OpRestore, OpDrill:
		if ev.ExitStatus == 1 && ev.ItemErrors > 0 {
			return Outcome{Status: Failed, Class: Permanent, Reason: fmt.Sprintf("%s failed: %s could not be restored or verified, first: %s",
				ev.Operation, plural(ev.ItemErrors, "file"), ev.FirstItemError)}
		}
		if ev.ExitStatus == 0 && ev.Operation == OpDrill {
			return Outcome{Status: Succeeded, Reason: "drill complete"}
		}
	}
	switch s := ev.ExitStatus; s {
	case 0:
		if ev.ItemErrors > 0 {
			return partial(ev)
		}
		if ev.Operation != "" && ev.Operation != OpBackup {
			return Outcome{Status: Succeeded, Reason: ev.Operation + " complete"}
		}
		if ev.Summary == nil {
			return Outcome{Status: Succeeded, Reason: "backup complete, but no summary was recorded"}
		}
		return Outcome{Status: Succeeded, Reason: fmt.Sprintf("backup complete: snapshot %s, %s, %s added",
			snapshotName(ev.Summary.SnapshotID), plural(ev.Summary.TotalFilesProcessed, "file"), FormatBytes(ev.Summary.DataAdded))}
	case 3:
		return partial(ev)
	case 130:
		return Outcome{Status: Interrupted, Reason: "interrupted: restic was stopped with SIGINT (exit status 130)"}
	case 128 + int(syscall.SIGHUP), 128 + int(syscall.SIGTERM):
		// restic 0.14 does not handle these signals: it dies mid-backup as on
		// SIGINT, only without removing its lock (`restic unlock` will).
		return Outcome{Status: Interrupted, Reason: fmt.Sprintf(
			"interrupted: restic was killed by %s (exit status %d) and may have left a stale lock", signalName(s-128), s)}
	case 1, 10, 11, 12:
		return classifyFailure(s, ev.Fatal)
	}
	if ev.ExitStatus > 128 && ev.ExitStatus < 128+65 {
		return Outcome{Status: Failed, Reason: fmt.Sprintf("restic was killed by %s (exit status %d)",
			signalName(ev.ExitStatus-128), ev.ExitStatus)}
	}
	return Outcome{Status: Failed, Reason: withFatal(fmt.Sprintf("restic exited with status %d", ev.ExitStatus), ev.Fatal)}
}

// snapshotName names a summary's snapshot in a reason; a summary whose id was not taken (the
// daemon takes only restic's form of one) has none.
func snapshotName(id string) string {
	if id == "" {
		return "of no recorded id"
	}
	return id
}

func partial(ev Evidence) Outcome {
	reason := "partial: restic could not read some source data"
	if ev.ItemErrors > 0 {
		reason = fmt.Sprintf("partial: %s skipped", plural(ev.ItemErrors, "item"))
		if ev.FirstItemError != "" {
			reason += ", first: " + ev.FirstItemError
		}
	}
	switch {
	case ev.Operation != "" && ev.Operation != OpBackup:
		reason = fmt.Sprintf("partial: %s: %s not done", ev.Operation, plural(ev.ItemErrors, "item"))
		if ev.FirstItemError != "" {
			reason += ", first: " + ev.FirstItemError
		}
	case ev.Summary != nil:
		reason += fmt.Sprintf(" (snapshot %s)", snapshotName(ev.Summary.SnapshotID))
	default:
		reason += " (no summary recorded)"
	}
	return Outcome{Status: Partial, Reason: reason}
}

// networkTrouble are signs that a remote repository could not be reached,
// which says nothing about whether it exists.
var networkTrouble = []string{
	"connection refused", "connection reset", "no such host", "i/o timeout",
	"network is unreachable", "host is unreachable", "no route to host",
	"temporary failure in name resolution", "server misbehaving",
	"tls handshake timeout", "context deadline exceeded",
	"500 internal server error", "502 bad gateway", "503 service unavailable", "504 gateway timeout",
}

func classifyFailure(status int, fatal string) Outcome {
	msg := strings.ToLower(fatal)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	fail := func(c Class, why string) Outcome {
		if fatal == "" {
			why += fmt.Sprintf(" (restic exit status %d)", status)
		} else {
			why += " (restic: " + firstLine(fatal) + ")"
		}
		return Outcome{Status: Failed, Class: c, Reason: why}
	}
	switch {
	case status == 12 || has("wrong password or no key found"):
		return fail(Permanent, "repository password is wrong")
	case has("resolving password failed"):
		return fail(Permanent, "the repository password could not be read")
	case status == 11 || has("unable to create lock", "repository is already locked"):
		return fail(Transient, "repository is locked by another process")
	case status != 10 && has(networkTrouble...):
		return fail(Transient, "repository is unreachable")
	case status == 10 || has("unable to open config file", "is there a repository"):
		return fail(Permanent, "no repository at "+repositoryLocation(fatal))
	case has("all target directories/files do not exist", "all source directories/files do not exist"):
		return fail(Permanent, "none of the paths to back up exist")
	case has("nothing to backup"):
		return fail(Permanent, "no paths to back up")
	}
	// Anything else (backend I/O, a full disk, an internal error) is worth a
	// bounded retry: a restic backup is safe to repeat, and a missed backup
	// costs more than a repeated failure whose reason is on record.
	if fatal == "" {
		return fail(Transient, "restic failed without an error message")
	}
	return Outcome{Status: Failed, Class: Transient, Reason: "restic failed: " + firstLine(fatal)}
}

// repositoryLocation finds the line restic prints below "Is there a
// repository at the following location?".
func repositoryLocation(fatal string) string {
	lines := strings.Split(fatal, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "Is there a repository") && i+1 < len(lines) && lines[i+1] != "" {
			return lines[i+1]
		}
	}
	return "the configured location"
}

func withFatal(reason, fatal string) string {
	if fatal == "" {
		return reason
	}
	return reason + ": " + firstLine(fatal)
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
