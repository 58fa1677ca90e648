// Package journal reads and writes the run journal: the JSONL record of one
// backup attempt, written inside the attempt's systemd unit by "holdfast exec"
// and tailed by the daemon from a stored Cursor.
//
// # Format
//
// One event per line: a JSON object of the form of Event, UTF-8, at most
// MaxLine bytes, followed by '\n'. Every line names its run and attempt, so a
// file that belongs to another attempt is refused. Seq counts 1, 2, 3...
// without gaps, and Prev is the lower-case hex SHA-256 of the previous line's
// exact bytes (without its newline), "" on the first line: each line vouches
// for every line before it. Unknown fields are ignored, so fields can be added
// without breaking older readers.
//
// # Writing
//
// A Writer appends each line with a single write(2), so a crash can leave at
// most an incomplete last line. Create on an existing file drops such a tail
// and continues the sequence and the hash chain.
//
// # Reading
//
// Read consumes the complete lines after a Cursor, in bounded batches, and
// checks each one. A last line without its newline is not an error: the writer
// may be in the middle of it, so it is left for the next Read. A line that
// fails a check makes the journal unreadable past it: Read returns the valid
// events before it, their cursor, and an error wrapping *CorruptError.
//
// Quarantine tells such errors ("this journal cannot be read": stop projecting
// it and record the reason) from transient ones ("read later"). The journal
// says how fresh the numbers are, never how the run ends: a quarantined
// journal does not stop the run.
package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// MaxLine is the longest line, in bytes without its newline, that can be read.
const MaxLine = 1 << 20

// MaxEvents is the most lines one attempt's journal may have. Events are
// folded into one row per attempt, so the limit bounds the work a journal can
// cause rather than storage: restic reports progress about once a second and
// one line per unreadable file, far below it. Past it the journal is
// quarantined and the run goes on.
const MaxEvents = 1_000_000

// defaultMaxBytes is Read's batch size when the caller passes maxBytes <= 0.
const defaultMaxBytes = 4 << 20

// Event is one line of a run journal.
type Event struct {
	Seq     int64           `json:"seq"`               // 1, 2, 3... without gaps
	Run     string          `json:"run"`               // run id (uuid string)
	Attempt int             `json:"attempt"`           // attempt number, >= 1
	Type    string          `json:"type"`              // non-empty, e.g. "progress", "item_error", "summary", "fatal", "start", "exit"
	Time    time.Time       `json:"time"`              // when the writer appended it
	Payload json.RawMessage `json:"payload,omitempty"` // a JSON object when present
	Prev    string          `json:"prev"`              // lower-case hex SHA-256 of the previous line's bytes (without its newline); "" on seq 1
}

// ErrNotYet means the journal does not exist yet: the unit has not written it,
// so read later.
var ErrNotYet = errors.New("journal does not exist yet")

// CorruptError means a journal cannot be read past Offset.
type CorruptError struct {
	Offset int64  // bytes that are still good (a line boundary)
	Reason string // one line for people, e.g. "line 13 at byte 3401: seq 14 follows 12 (gap)"
}

func (e *CorruptError) Error() string { return "corrupt journal: " + e.Reason }

func corrupt(offset int64, format string, args ...any) *CorruptError {
	return &CorruptError{Offset: offset, Reason: fmt.Sprintf(format, args...)}
}

// Quarantine reports whether err, returned by Read or Create, means the
// journal cannot be read (quarantine the projection and record the reason)
// rather than "read later": ErrNotYet, permission and I/O errors and context
// errors are transient. This is the single place that decision is made.
func Quarantine(err error) bool {
	var ce *CorruptError
	return errors.As(err, &ce)
}

// Size returns the journal's current size in bytes, for lag = size - Offset.
// It follows no link and returns an error wrapping ErrNotYet if the journal
// does not exist, and *CorruptError if it is not a regular file owned by
// src.UID.
func Size(src Source) (int64, error) {
	n, err := statChecked(src)
	if err != nil {
		return 0, fmt.Errorf("size of journal %s: %w", src.Path(), err)
	}
	return n, nil
}

// ParseLine parses and validates one line (without its newline) on its own:
// UTF-8 without NUL bytes, JSON of the form of Event, at most MaxLine bytes, seq >= 1,
// attempt >= 1, run a valid uuid, non-empty type, a time, payload a JSON
// object or absent (null counts as absent), prev "" on seq 1 and a SHA-256
// hex digest after it. Checks that need the neighbouring lines are Read's.
func ParseLine(line []byte) (Event, error) {
	if len(line) > MaxLine {
		return Event{}, fmt.Errorf("line is %d bytes, over the 1 MiB limit", len(line))
	}
	// The line is the job user's: a reason says where it is wrong, never
	// what it holds, so no byte of it reaches the database or a terminal.
	if i := bytes.IndexByte(line, 0); i >= 0 {
		return Event{}, fmt.Errorf("NUL byte at byte %d of the line", i)
	}
	// encoding/json would silently replace invalid bytes, and the writer never
	// produces them.
	if i := invalidUTF8(line); i >= 0 {
		return Event{}, fmt.Errorf("invalid UTF-8 at byte %d of the line", i)
	}
	// PostgreSQL stores no NUL in text or jsonb.
	if i := escapedNUL(line); i >= 0 {
		return Event{}, fmt.Errorf("escaped NUL (\\u0000) at byte %d of the line", i)
	}
	var e Event
	if err := json.Unmarshal(line, &e); err != nil {
		return Event{}, jsonError(err)
	}
	if string(e.Payload) == "null" {
		e.Payload = nil
	}
	switch {
	case e.Seq < 1:
		return Event{}, fmt.Errorf("seq %d is not positive", e.Seq)
	case e.Attempt < 1:
		return Event{}, fmt.Errorf("attempt %d is not positive", e.Attempt)
	case e.Type == "":
		return Event{}, errors.New("type is empty")
	case e.Time.IsZero():
		return Event{}, errors.New("time is missing")
	case len(e.Payload) > 0 && e.Payload[0] != '{':
		return Event{}, errors.New("payload is not a JSON object")
	case e.Seq == 1 && e.Prev != "":
		return Event{}, errors.New("seq 1 has a prev hash")
	case e.Seq > 1 && !isHash(e.Prev):
		return Event{}, errors.New("prev is not a lower-case hex SHA-256")
	}
	if _, err := uuid.Parse(e.Run); err != nil {
		return Event{}, errors.New("run is not a uuid")
	}
	return e, nil
}

// jsonError says what is wrong with a line that is not the JSON of an Event
// by position or field only: encoding/json's messages quote the offending
// character or value.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("malformed JSON at byte %d of the line", max(syn.Offset-1, 0))
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Errorf("malformed JSON: field %s has the wrong type (%s expected)", typ.Field, typ.Type)
	case errors.As(err, &typ):
		return fmt.Errorf("malformed JSON: not an object (%s expected)", typ.Type)
	}
	// time.Time's own parse errors quote the value.
	return errors.New("malformed JSON: a field has an invalid value")
}

// escapedNUL returns the index of the first \u0000 escape in b, or -1. A
// backslash before it that is itself escaped does not count.
func escapedNUL(b []byte) int {
	for from := 0; ; {
		i := bytes.Index(b[from:], []byte(`\u0000`))
		if i < 0 {
			return -1
		}
		i += from
		n := 0
		for j := i; j >= 0 && b[j] == '\\'; j-- {
			n++
		}
		if n%2 == 1 {
			return i
		}
		from = i + 1
	}
}

// invalidUTF8 returns the index of the first byte that is not valid UTF-8, or -1.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// clip shortens s to about n bytes so reasons stay short enough to record.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
