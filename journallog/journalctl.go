package journallog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/textsafe"
)

// A run's log tail is read from journalctl, whose entries any local user can add to: only
// fields that journald itself sets (those starting with "_") say where an entry came from, and
// any process may write a field such as UNIT=, USER_UNIT= or HOLDFAST_RUN=. So a tail selects
// only entries from sources that cannot lie about themselves (Match), and what is read of them is
// bounded: each line, each entry, the whole tail, the tails read at once, and journalctl's memory.
const (
	// MaxTails is how many tails one process reads at once (RunTail); more wait for TailWait.
	MaxTails = 4
	// TailWait is how long RunTail waits for one of them before it answers ErrBusy.
	TailWait = 2 * time.Second
	// TailBytes is the most a tail keeps: its newest lines, with a note of how many older ones
	// were left out.
	TailBytes = 256 << 10
	// LineBytes is the most of one line that is shown, escaped; a longer one is clipped and says so.
	LineBytes = 4 << 10
	// entryBytes is the longest JSON line of journalctl that is read; a longer entry (one with
	// many fields of the same name) is skipped with a note. A single field of 4096 bytes or more
	// journalctl itself hands out as null (its JSON output's threshold).
	entryBytes = 64 << 10
	// readBytes is the most of journalctl's output RunTail reads.
	readBytes = 16 << 20
	// childData is the RLIMIT_DATA of RunTail's journalctl. journalctl reserves about twice the
	// size of each entry it looks at, even of the fields it prints as null, and journald takes
	// entries of up to about 120 MiB (a journal file's maximum size is 128 MiB): 128 MiB lets
	// it read entries of 40 MiB; at a larger one of the run's own it stops, and the tail says so.
	childData = 128 << 20
)

// ErrBusy is RunTail's answer when MaxTails tails are being read already for longer than
// TailWait.
var ErrBusy = fmt.Errorf("busy: %d log tails are being read already; try again in a few seconds", MaxTails)

var tailSlots = make(chan struct{}, MaxTails)

// AcquireTail takes one of the process's MaxTails tail slots, waiting at most wait and no
// longer than ctx allows; ErrBusy if none became free. The caller calls release when done.
func AcquireTail(ctx context.Context, wait time.Duration) (release func(), err error) {
	select {
	case tailSlots <- struct{}{}: // a free one first: the select below picks at random
		return func() { <-tailSlots }, nil
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case tailSlots <- struct{}{}:
		return func() { <-tailSlots }, nil
	case <-timer.C:
		return nil, ErrBusy
	case <-ctx.Done():
		return nil, fmt.Errorf("%w (%v)", ErrBusy, ctx.Err())
	}
}

// outputFields are what journalctl is asked for: what a line shows, and the fields its source
// is checked by. journalctl adds its timestamps and cursor.
var outputFields = []string{"MESSAGE", "SYSLOG_IDENTIFIER", "_COMM", "_PID", "_UID", "_HOSTNAME",
	"_SYSTEMD_UNIT", "UNIT", "USER_UNIT", FieldName("run")}

// Match is the journalctl match of a run's journal lines from sources that cannot pose as
// another (journalctl ORs the terms between "+", ANDs different fields within a term, and ORs
// the values of one field):
//
//   - what the units' processes wrote: _SYSTEMD_UNIT=<unit>, which journald derives from the
//     writer's cgroup. Under the system manager and under the root-run user manager of the tests
//     (which sits at a cgroup root of its own), a unit's processes carry their unit's name; a
//     user's own manager's units carry _SYSTEMD_UNIT=user@<uid>.service and are never selected,
//     whatever their names (no _SYSTEMD_USER_UNIT).
//   - what PID 1, the system manager, said about the units: _PID=1 UNIT=<unit>.
//   - what a user manager running as root said about them: _UID=0 _COMM=systemd USER_UNIT=<unit>
//     (every user's own manager writes USER_UNIT= too, under its own uid).
//   - the daemon's own lines about the run: _UID=0 HOLDFAST_RUN=<run>. A unit's lines carry
//     HOLDFAST_RUN too under the system manager (LogExtraFields); they are its unit's already.
//
// nil if the run has no unit.
func Match(run uuid.UUID, units []string) []string {
	if len(units) == 0 {
		return nil
	}
	var m []string
	term := func(fixed []string, field string) {
		if len(m) > 0 {
			m = append(m, "+")
		}
		m = append(m, fixed...)
		for _, unit := range units {
			m = append(m, field+"="+unit)
		}
	}
	term(nil, "_SYSTEMD_UNIT")
	term([]string{"_PID=1"}, "UNIT")
	term([]string{"_UID=0", "_COMM=systemd"}, "USER_UNIT")
	return append(m, "+", "_UID=0", FieldName("run")+"="+run.String())
}

// runArgv is the journalctl command line that prints a run's journal lines (Match) as JSON, one
// entry a line, for RunTail and RunLogs to read: never show its output as it is. dir is a
// journal directory to read instead of the system journal (""), lines the newest lines only
// (0: all). nil if the run has no unit.
func runArgv(dir string, run uuid.UUID, units []string, follow bool, lines int) []string {
	match := Match(run, units)
	if match == nil {
		return nil
	}
	argv := []string{"journalctl", "--no-pager", "--quiet", "--output", "json", "--output-fields", strings.Join(outputFields, ",")}
	if dir != "" {
		argv = append(argv, "--directory", dir)
	}
	if follow {
		argv = append(argv, "--follow")
	}
	if lines > 0 {
		argv = append(argv, "--lines", strconv.Itoa(lines))
	}
	return append(argv, match...)
}

// RunTail is the last lines of a run's journal lines (Match), a line per entry, each escaped
// for a terminal (textsafe) and clipped to LineBytes, at most TailBytes in all (the newest),
// with notes in brackets where something was left out. It waits at most TailWait for one of the
// process's MaxTails slots (ErrBusy). "" when the run has no unit. An error says why the tail
// is empty or ends early; what could be read is returned with it.
func RunTail(ctx context.Context, dir string, run uuid.UUID, units []string, lines int) (string, error) {
	argv := runArgv(dir, run, units, false, lines)
	if argv == nil {
		return "", nil
	}
	release, err := AcquireTail(ctx, TailWait)
	if err != nil {
		return "", err
	}
	defer release()
	var t tail
	err = journalctl(ctx, argv, childData, nil, func(r io.Reader) error {
		return scan(r, run, units, readBytes, func(line string) error { t.add(line); return nil })
	})
	if err != nil {
		t.add(note("the journal was not read to its end: %v", err))
	}
	return t.String(), err
}

// RunLogs writes a run's journal lines (Match) to w as they are read, each line escaped
// (textsafe) and clipped to LineBytes; with follow it goes on until ctx ends. journalctl's own
// messages go to errw.
func RunLogs(ctx context.Context, w, errw io.Writer, dir string, run uuid.UUID, units []string, follow bool) error {
	argv := runArgv(dir, run, units, follow, 0)
	if argv == nil {
		return errors.New("the run has no unit")
	}
	err := journalctl(ctx, argv, 0, textsafe.NewWriter(errw), func(r io.Reader) error {
		return scan(r, run, units, 0, func(line string) error {
			_, err := io.WriteString(w, line+"\n")
			return err
		})
	})
	if follow && ctx.Err() != nil {
		return nil // interrupted, the way out of --follow
	}
	return err
}

// journalctl runs argv with its output to read, which is stopped (journalctl killed) when read
// returns early. dataLimit > 0 is journalctl's RLIMIT_DATA, set as soon as it started (before it
// has read the journal). Its standard error goes to stderr, or is kept for the error (1 KiB).
func journalctl(ctx context.Context, argv []string, dataLimit uint64, stderr io.Writer, read func(io.Reader) error) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var kept capped
	if stderr == nil {
		stderr = &kept
	}
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if dataLimit > 0 {
		lim := unix.Rlimit{Cur: dataLimit, Max: dataLimit}
		if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_DATA, &lim, nil); err != nil && !errors.Is(err, unix.ESRCH) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("limit journalctl's memory: %w", err)
		}
	}
	readErr := read(out)
	if readErr != nil {
		_ = cmd.Process.Kill()
	} else {
		_, _ = io.Copy(io.Discard, out) // what scan did not take (nothing, normally)
	}
	waitErr := cmd.Wait()
	switch {
	case readErr != nil:
		return readErr
	case waitErr != nil && kept.Len() > 0:
		return fmt.Errorf("journalctl: %v: %s", waitErr, textsafe.String(strings.TrimSpace(kept.String())))
	case waitErr != nil:
		return fmt.Errorf("journalctl: %w", waitErr)
	}
	return nil
}

// capped keeps the first KiB written to it (only Write: no ReadFrom that would bypass it).
type capped struct{ buf bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := 1024 - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) Len() int       { return c.buf.Len() }
func (c *capped) String() string { return c.buf.String() }

var errTooMuch = fmt.Errorf("journalctl wrote more than %d MiB", readBytes>>20)

// scan reads journalctl's JSON output from r, at most limit bytes (0: no limit), and hands
// emit a line for each entry from a trusted source (trusted; Match selects nothing else, this
// checks it again) and a note for each entry it cannot show. Memory stays within entryBytes.
func scan(r io.Reader, run uuid.UUID, units []string, limit int64, emit func(string) error) error {
	br := bufio.NewReaderSize(r, entryBytes)
	var total int64
	for {
		raw, err := br.ReadSlice('\n')
		total += int64(len(raw))
		if errors.Is(err, bufio.ErrBufferFull) {
			// An entry longer than entryBytes: skip to its end.
			for errors.Is(err, bufio.ErrBufferFull) {
				if limit > 0 && total > limit {
					return errTooMuch
				}
				raw, err = br.ReadSlice('\n')
				total += int64(len(raw))
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			if e := emit(note("an entry of more than %d KiB is not shown", entryBytes>>10)); e != nil {
				return e
			}
			if err != nil {
				return nil
			}
			continue
		}
		if limit > 0 && total > limit {
			return errTooMuch
		}
		if len(bytes.TrimSpace(raw)) > 0 {
			line, ok := parseEntry(raw, run, units)
			if ok {
				if e := emit(line); e != nil {
					return e
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// entry is one journal entry as journalctl's JSON output gives it: each field's values (a field
// may occur more than once), and which fields journalctl left out as too large.
type entry struct {
	values  map[string][]string
	omitted map[string]bool
}

func (e entry) first(field string) string {
	if v := e.values[field]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (e entry) has(field string, want ...string) bool {
	for _, v := range e.values[field] {
		for _, w := range want {
			if v == w {
				return true
			}
		}
	}
	return false
}

// decodeEntry decodes one JSON line of journalctl: a field's value is a string, null (4096
// bytes or more), an array of byte values (not printable or not UTF-8), or an array of those
// (the field occurs more than once).
func decodeEntry(raw []byte) (entry, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return entry{}, err
	}
	e := entry{values: map[string][]string{}, omitted: map[string]bool{}}
	for name, v := range fields {
		multi := []json.RawMessage{v}
		if inner := bytes.TrimLeft(v, "[ \t\r\n"); len(v) > 0 && v[0] == '[' && len(inner) > 0 && (inner[0] == '"' || inner[0] == '[' || inner[0] == 'n') {
			// values of a field that occurs more than once; an array of numbers is one value
			multi = nil
			if err := json.Unmarshal(v, &multi); err != nil {
				return entry{}, err
			}
		}
		for _, one := range multi {
			s, ok, err := decodeValue(one)
			if err != nil {
				return entry{}, fmt.Errorf("field %s: %w", textsafe.String(name), err)
			}
			if !ok {
				e.omitted[name] = true
				continue
			}
			e.values[name] = append(e.values[name], s)
		}
	}
	return e, nil
}

func decodeValue(v json.RawMessage) (string, bool, error) {
	switch {
	case bytes.Equal(v, []byte("null")):
		return "", false, nil
	case len(v) > 0 && v[0] == '"':
		var s string
		err := json.Unmarshal(v, &s)
		return s, true, err
	default:
		var b []byte
		var nums []int
		if err := json.Unmarshal(v, &nums); err != nil {
			return "", false, err
		}
		for _, n := range nums {
			if n < 0 || n > 255 {
				return "", false, errors.New("not a byte")
			}
			b = append(b, byte(n))
		}
		return string(b), true, nil
	}
}

// trusted reports whether an entry comes from one of the sources Match selects, by the fields
// journald set.
func (e entry) trusted(run uuid.UUID, units []string) bool {
	switch {
	case e.has("_SYSTEMD_UNIT", units...):
		return true
	case e.first("_PID") == "1" && e.has("UNIT", units...):
		return true
	case e.first("_UID") == "0" && e.first("_COMM") == "systemd" && e.has("USER_UNIT", units...):
		return true
	case e.first("_UID") == "0" && e.has(FieldName("run"), run.String()):
		return true
	}
	return false
}

// parseEntry is the line of one JSON entry, false if it is not from a trusted source. An entry
// that cannot be decoded is a note.
func parseEntry(raw []byte, run uuid.UUID, units []string) (string, bool) {
	e, err := decodeEntry(raw)
	if err != nil {
		return note("an entry journalctl wrote cannot be read: %v", err), true
	}
	if !e.trusted(run, units) {
		return "", false
	}
	return e.line(), true
}

// line is an entry as journalctl's short-iso output shows it, "TIME HOST IDENTIFIER[PID]:
// MESSAGE", escaped (a message's own newlines too, so that it cannot pose as other lines) and
// clipped to LineBytes.
func (e entry) line() string {
	var b strings.Builder
	if us, err := strconv.ParseInt(e.first("__REALTIME_TIMESTAMP"), 10, 64); err == nil {
		b.WriteString(time.UnixMicro(us).Format("2006-01-02T15:04:05-0700"))
	} else {
		b.WriteString("-")
	}
	b.WriteString(" " + textsafe.String(e.first("_HOSTNAME")) + " ")
	ident := e.first("SYSLOG_IDENTIFIER")
	if ident == "" {
		ident = e.first("_COMM")
	}
	b.WriteString(textsafe.String(ident))
	if pid := e.first("_PID"); pid != "" {
		b.WriteString("[" + textsafe.String(pid) + "]")
	}
	b.WriteString(": ")
	switch {
	case len(e.values["MESSAGE"]) > 0:
		b.WriteString(textsafe.String(strings.Join(e.values["MESSAGE"], " ")))
	case e.omitted["MESSAGE"]:
		b.WriteString(note("a message of 4096 bytes or more is not shown"))
	}
	return clip(b.String(), LineBytes)
}

// note is holdfast's own remark in a tail, in brackets.
func note(format string, args ...any) string {
	return "[holdfast: " + fmt.Sprintf(format, args...) + "]"
}

// clip cuts an escaped line to at most max bytes of its own, at a character's start, and says
// so.
func clip(line string, max int) string {
	if len(line) <= max {
		return line
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut--
	}
	return line[:cut] + " " + note("line clipped: %d of %d bytes shown", cut, len(line))
}

// tail keeps the newest lines up to TailBytes.
type tail struct {
	lines   []string
	size    int
	dropped int
}

func (t *tail) add(line string) {
	t.lines = append(t.lines, line)
	t.size += len(line) + 1
	for t.size > TailBytes && len(t.lines) > 1 {
		t.size -= len(t.lines[0]) + 1
		t.lines[0] = ""
		t.lines = t.lines[1:]
		t.dropped++
	}
}

func (t *tail) String() string {
	lines := t.lines
	if t.dropped > 0 {
		lines = append([]string{note("%d older lines are not shown: a tail keeps its newest %d KiB", t.dropped, TailBytes>>10)}, lines...)
	}
	return strings.Join(lines, "\n")
}
