package journal_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/journal"
)

var (
	testRun  = uuid.MustParse("6f1c9a52-8d4e-4b7a-9f3e-2a5b7c8d9e01")
	otherRun = uuid.MustParse("0d2b7e44-1c3a-4f59-8e6d-7a9b0c1d2e3f")
	t0       = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
)

func hashOf(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

// lines returns n lines of testRun attempt 1 with a valid chain. edit, if not
// nil, changes event i (0-based) before it is marshalled; the chain goes on
// from the edited line's bytes.
func lines(t testing.TB, n int, edit func(i int, e *journal.Event)) [][]byte {
	t.Helper()
	var out [][]byte
	prev := ""
	for i := range n {
		e := journal.Event{
			Seq:     int64(i + 1),
			Run:     testRun.String(),
			Attempt: 1,
			Type:    "progress",
			Time:    t0.Add(time.Duration(i) * time.Second),
			Payload: json.RawMessage(fmt.Sprintf(`{"files":%d}`, i)),
			Prev:    prev,
		}
		if edit != nil {
			edit(i, &e)
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
		prev = hashOf(b)
	}
	return out
}

// join ends every line with a newline.
func join(ls [][]byte) []byte {
	var b []byte
	for _, l := range ls {
		b = append(append(b, l...), '\n')
	}
	return b
}

// padTo grows e's payload so that e marshals to exactly n bytes.
func padTo(t testing.TB, e *journal.Event, n int) {
	t.Helper()
	e.Payload = json.RawMessage(`{"pad":""}`)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	e.Payload = json.RawMessage(`{"pad":"` + strings.Repeat("x", n-len(b)) + `"}`)
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// cursorAfter reads k events one by one from the start of path.
func cursorAfter(t testing.TB, path string, k int) journal.Cursor {
	t.Helper()
	var c journal.Cursor
	for range k {
		evs, next, err := journal.Read(src(path), c, testRun, 1, 1)
		if err != nil || len(evs) != 1 {
			t.Fatalf("cursorAfter: got %d events, %v", len(evs), err)
		}
		c = next
	}
	return c
}

// readAll drains path from c in batches of maxBytes.
func readAll(t testing.TB, path string, c journal.Cursor, maxBytes int64) ([]journal.Event, journal.Cursor) {
	t.Helper()
	var all []journal.Event
	for {
		evs, next, err := journal.Read(src(path), c, testRun, 1, maxBytes)
		if err != nil {
			t.Fatalf("read from %+v: %v", c, err)
		}
		checkSeqs(t, c, evs, next)
		all = append(all, evs...)
		c = next
		if len(evs) == 0 {
			return all, c
		}
	}
}

// checkSeqs checks that evs follow c without gaps and that next is after them.
func checkSeqs(t testing.TB, c journal.Cursor, evs []journal.Event, next journal.Cursor) {
	t.Helper()
	for i, e := range evs {
		if e.Seq != c.LastSeq+int64(i)+1 {
			t.Fatalf("event %d has seq %d after cursor seq %d", i, e.Seq, c.LastSeq)
		}
	}
	if len(evs) == 0 && next != c {
		t.Fatalf("no events but the cursor moved from %+v to %+v", c, next)
	}
	if len(evs) > 0 && (next.LastSeq != evs[len(evs)-1].Seq || next.Offset <= c.Offset) {
		t.Fatalf("cursor %+v does not follow the last event (seq %d)", next, evs[len(evs)-1].Seq)
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	w, err := journal.Create(path, testRun, 2)
	if err != nil {
		t.Fatal(err)
	}
	type progress struct {
		Files int    `json:"files"`
		Note  string `json:"note,omitempty"`
	}
	const n = 40
	for i := range n {
		var p any
		switch i % 4 {
		case 0:
			p = nil
		case 1:
			p = progress{Files: i, Note: "<é & \u2028>"}
		case 2:
			p = map[string]any{"files": i}
		case 3:
			p = json.RawMessage(fmt.Sprintf(` { "files" : %d } `, i))
		}
		if err := w.Append("progress", p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&^0o640 != 0 {
		t.Errorf("mode %v, want at most 0640", perm)
	}

	for _, maxBytes := range []int64{-1, 0, 1, 150, 1000, 1 << 30} {
		t.Run(fmt.Sprint(maxBytes), func(t *testing.T) {
			var (
				c   journal.Cursor
				all []journal.Event
			)
			for {
				evs, next, err := journal.Read(src(path), c, testRun, 2, maxBytes)
				if err != nil {
					t.Fatal(err)
				}
				checkSeqs(t, c, evs, next)
				if maxBytes > 0 && len(evs) > 1 && next.Offset-c.Offset > maxBytes {
					t.Fatalf("batch of %d bytes, over maxBytes %d", next.Offset-c.Offset, maxBytes)
				}
				if maxBytes == 1 && len(evs) != 1 && len(evs) != 0 {
					t.Fatalf("maxBytes 1 gave %d events, want one at a time", len(evs))
				}
				all = append(all, evs...)
				c = next
				if len(evs) == 0 {
					break
				}
			}
			if len(all) != n {
				t.Fatalf("read %d events, want %d", len(all), n)
			}
			if c.Offset != fi.Size() {
				t.Errorf("cursor at %d, file is %d bytes", c.Offset, fi.Size())
			}
			for i, e := range all {
				if e.Run != testRun.String() || e.Attempt != 2 || e.Type != "progress" || e.Time.IsZero() {
					t.Errorf("event %d: %+v", i, e)
				}
				switch {
				case i%4 == 0 && e.Payload != nil:
					t.Errorf("event %d: payload %s, want none", i, e.Payload)
				case i%4 != 0:
					var p progress
					if err := json.Unmarshal(e.Payload, &p); err != nil || p.Files != i {
						t.Errorf("event %d: payload %s (%v)", i, e.Payload, err)
					}
				}
			}
		})
	}
}

func TestResume(t *testing.T) {
	tests := []struct {
		name string
		tail string // appended to a journal of 3 events before Create resumes it
	}{
		{"clean", ""},
		{"incomplete json", `{"seq":4,"run":"` + testRun.String()},
		{"incomplete line that is valid json", string(lines(t, 4, nil)[3])},
		{"one byte", "{"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			writeFile(t, path, append(join(lines(t, 3, nil)), tt.tail...))
			w, err := journal.Create(path, testRun, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Append("progress", map[string]int{"files": 3}); err != nil {
				t.Fatal(err)
			}
			if err := w.Append("exit", nil); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			all, c := readAll(t, path, journal.Cursor{}, 0)
			if len(all) != 5 || all[3].Type != "progress" || all[4].Type != "exit" {
				t.Fatalf("got %d events: %+v", len(all), all)
			}
			if size, err := journal.Size(src(path)); err != nil || size != c.Offset {
				t.Errorf("size %d (%v), cursor at %d", size, err, c.Offset)
			}
		})
	}

	t.Run("empty file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "journal.jsonl")
		writeFile(t, path, nil)
		w, err := journal.Create(path, testRun, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Append("start", nil); err != nil {
			t.Fatal(err)
		}
		w.Close()
		if all, _ := readAll(t, path, journal.Cursor{}, 0); len(all) != 1 || all[0].Seq != 1 {
			t.Fatalf("got %+v", all)
		}
	})

	for _, tt := range []struct {
		name    string
		run     uuid.UUID
		attempt int
		data    []byte
	}{
		{"other attempt", testRun, 2, join(lines(t, 3, nil))},
		{"other run", otherRun, 1, join(lines(t, 3, nil))},
		{"gap", testRun, 1, join(lines(t, 3, func(i int, e *journal.Event) {
			if i == 2 {
				e.Seq = 4
			}
		}))},
	} {
		t.Run("corrupt "+tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			writeFile(t, path, tt.data)
			w, err := journal.Create(path, tt.run, tt.attempt)
			if err == nil {
				w.Close()
				t.Fatal("Create succeeded on a journal it cannot continue")
			}
			if !journal.Quarantine(err) {
				t.Errorf("Quarantine(%v) = false", err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, tt.data) {
				t.Error("Create changed a journal it cannot continue")
			}
		})
	}
}

func TestIncompleteTail(t *testing.T) {
	ls := lines(t, 3, nil)
	whole := join(ls)
	head := len(join(ls[:2]))
	for _, cut := range []int{1, len(ls[2]) / 2, len(ls[2])} { // bytes of line 3 written so far
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			writeFile(t, path, whole[:head+cut])

			evs, c, err := journal.Read(src(path), journal.Cursor{}, testRun, 1, 0)
			if err != nil || len(evs) != 2 || c.Offset != int64(head) {
				t.Fatalf("first read: %d events, cursor %+v, %v", len(evs), c, err)
			}
			evs, again, err := journal.Read(src(path), c, testRun, 1, 0)
			if err != nil || len(evs) != 0 || again != c {
				t.Fatalf("second read: %d events, cursor %+v, %v", len(evs), again, err)
			}

			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(whole[head+cut:]); err != nil {
				t.Fatal(err)
			}
			f.Close()
			evs, c, err = journal.Read(src(path), c, testRun, 1, 0)
			if err != nil || len(evs) != 1 || evs[0].Seq != 3 || c.Offset != int64(len(whole)) {
				t.Fatalf("after completion: %+v, cursor %+v, %v", evs, c, err)
			}
		})
	}
}

func TestLineLimit(t *testing.T) {
	// A line of exactly MaxLine bytes is fine, complete or not yet.
	ls := lines(t, 2, func(i int, e *journal.Event) {
		if i == 1 {
			padTo(t, e, journal.MaxLine)
		}
	})
	if len(ls[1]) != journal.MaxLine {
		t.Fatalf("line is %d bytes", len(ls[1]))
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "complete.jsonl")
	writeFile(t, path, join(ls))
	if evs, _, err := journal.Read(src(path), journal.Cursor{}, testRun, 1, 0); err != nil || len(evs) != 2 {
		t.Errorf("complete: %d events, %v", len(evs), err)
	}
	path = filepath.Join(dir, "incomplete.jsonl")
	writeFile(t, path, append(join(ls[:1]), ls[1]...))
	if evs, _, err := journal.Read(src(path), journal.Cursor{}, testRun, 1, 0); err != nil || len(evs) != 1 {
		t.Errorf("incomplete: %d events, %v", len(evs), err)
	}
}

func TestCorrupt(t *testing.T) {
	valid := lines(t, 5, nil)
	edited := func(at int, edit func(e *journal.Event)) []byte {
		return join(lines(t, 5, func(i int, e *journal.Event) {
			if i == at {
				edit(e)
			}
		}))
	}
	replaced := func(at int, line string) []byte {
		ls := append([][]byte(nil), valid...)
		ls[at] = []byte(line)
		return join(ls)
	}
	off := func(k int) int { return len(join(valid[:k])) }
	big := lines(t, 2, func(i int, e *journal.Event) {
		if i == 1 {
			padTo(t, e, journal.MaxLine+1)
		}
	})

	// from returns a setup that writes data after reading k events of it.
	from := func(k int, data []byte) func(*testing.T, string) journal.Cursor {
		return func(t *testing.T, path string) journal.Cursor {
			writeFile(t, path, data)
			return cursorAfter(t, path, k)
		}
	}
	// rewrite returns a setup that writes the valid journal, reads k events
	// and then replaces the file with data.
	rewrite := func(k int, data []byte) func(*testing.T, string) journal.Cursor {
		return func(t *testing.T, path string) journal.Cursor {
			writeFile(t, path, join(valid))
			c := cursorAfter(t, path, k)
			writeFile(t, path, data)
			return c
		}
	}

	tests := []struct {
		name   string
		setup  func(t *testing.T, path string) journal.Cursor
		want   int // valid events returned before the error
		reason string
	}{
		{"gap", from(0, edited(2, func(e *journal.Event) { e.Seq = 4 })), 2, fmt.Sprintf("line 3 at byte %d: seq 4 follows 2 (gap)", off(2))},
		{"first line not seq 1", from(0, edited(0, func(e *journal.Event) { e.Seq, e.Prev = 2, strings.Repeat("0", 64) })), 0, "seq 2 follows 0 (gap)"},
		{"duplicate seq", from(0, edited(2, func(e *journal.Event) { e.Seq = 2 })), 2, "seq 2 follows 2 (duplicate)"},
		{"seq goes back", from(0, edited(3, func(e *journal.Event) { e.Seq = 2 })), 3, "seq 2 follows 3 (out of order)"},
		{"wrong prev", from(1, edited(3, func(e *journal.Event) { e.Prev = strings.Repeat("ab", 32) })), 2, fmt.Sprintf("line 4 at byte %d: hash chain broken at seq 4 (prev is not the hash of line 3)", off(3))},
		{"line after the cursor edited", rewrite(2, bytes.Replace(join(valid), []byte(`"files":2`), []byte(`"files":7`), 1)), 1, "hash chain broken at seq 4"},
		{"line before the cursor edited", rewrite(3, bytes.Replace(join(valid), []byte(`"files":1`), []byte(`"files":1000`), 1)), 0, fmt.Sprintf("cursor at byte %d is not at the end of a line", off(3))},
		{"cursor's journal replaced", rewrite(2, join(lines(t, 5, func(i int, e *journal.Event) { e.Type = "PROGRESS" }))), 0, "hash chain broken at seq 3"},
		{"malformed json", from(0, replaced(1, `{"seq":2,`)), 1, fmt.Sprintf("line 2 at byte %d: malformed JSON at byte", off(1))},
		{"wrong json type", from(0, replaced(1, `{"seq":"2"}`)), 1, fmt.Sprintf("line 2 at byte %d: malformed JSON: field seq has the wrong type", off(1))},
		{"not an object", from(0, replaced(1, `[1,2]`)), 1, "malformed JSON"},
		{"empty line", from(0, replaced(1, ``)), 1, "malformed JSON"},
		{"invalid utf-8", from(0, replaced(1, "{\"seq\":2,\"type\":\"\xff\"}")), 1, fmt.Sprintf("line 2 at byte %d: invalid UTF-8 at byte 17 of the line", off(1))},
		{"NUL byte", from(0, replaced(1, "{\"seq\":2,\"type\":\"a\x00b\"}")), 1, fmt.Sprintf("line 2 at byte %d: NUL byte at byte 18 of the line", off(1))},
		{"empty type", from(0, edited(1, func(e *journal.Event) { e.Type = "" })), 1, "type is empty"},
		{"line over 1 MiB", from(0, join(big)), 1, fmt.Sprintf("line 2 at byte %d is over the 1 MiB limit", off(1))},
		{"incomplete line over 1 MiB", from(0, append(join(big[:1]), big[1]...)), 1, fmt.Sprintf("line 2 at byte %d is over the 1 MiB limit", off(1))},
		{"other run", from(1, edited(2, func(e *journal.Event) { e.Run = otherRun.String() })), 1,
			fmt.Sprintf("line 3 at byte %d belongs to run ", off(2)) + otherRun.String() + " attempt 1, not run " + testRun.String() + " attempt 1"},
		{"other attempt", from(0, edited(1, func(e *journal.Event) { e.Attempt = 2 })), 1, "attempt 2, not run " + testRun.String() + " attempt 1"},
		{"truncated", rewrite(4, join(valid[:2])), 0, fmt.Sprintf("journal is %d bytes, shorter than the cursor at %d (truncated or replaced)", off(2), off(4))},
		{"deleted", func(t *testing.T, path string) journal.Cursor {
			c := rewrite(2, nil)(t, path)
			os.Remove(path)
			return c
		}, 0, fmt.Sprintf("journal is missing but the cursor is at byte %d (deleted or replaced)", off(2))},
		{"payload array", from(0, edited(1, func(e *journal.Event) { e.Payload = json.RawMessage(`[1,2]`) })), 1, fmt.Sprintf("line 2 at byte %d: payload is not a JSON object", off(1))},
		{"payload string", from(0, edited(1, func(e *journal.Event) { e.Payload = json.RawMessage(`"x"`) })), 1, "payload is not a JSON object"},
		{"inconsistent cursor", func(t *testing.T, path string) journal.Cursor {
			writeFile(t, path, join(valid))
			return journal.Cursor{Offset: int64(off(1))}
		}, 0, fmt.Sprintf("cursor (offset %d, seq 0", off(1))},
		{"directory", func(t *testing.T, path string) journal.Cursor {
			if err := os.Mkdir(path, 0o750); err != nil {
				t.Fatal(err)
			}
			return journal.Cursor{}
		}, 0, "journal is a directory, not a regular file"},
		{"named pipe", func(t *testing.T, path string) journal.Cursor {
			if err := syscall.Mkfifo(path, 0o640); err != nil {
				t.Skip(err)
			}
			return journal.Cursor{}
		}, 0, "journal is a named pipe, not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			c := tt.setup(t, path)
			evs, next, err := journal.Read(src(path), c, testRun, 1, 0)
			var ce *journal.CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *CorruptError", err)
			}
			t.Log(err)
			if !journal.Quarantine(err) {
				t.Error("Quarantine = false")
			}
			if !strings.Contains(ce.Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", ce.Reason, tt.reason)
			}
			if strings.ContainsAny(ce.Reason, "\n\r") || len(ce.Reason) > 500 {
				t.Errorf("reason is not one short line: %q", ce.Reason)
			}
			if !strings.HasPrefix(err.Error(), "read journal "+path+": corrupt journal: ") {
				t.Errorf("error %q lacks context", err)
			}
			if len(evs) != tt.want {
				t.Fatalf("got %d events before the error, want %d", len(evs), tt.want)
			}
			checkSeqs(t, c, evs, next)
			if ce.Offset != next.Offset {
				t.Errorf("CorruptError.Offset %d, cursor at %d", ce.Offset, next.Offset)
			}
			// The events before the corruption are all there is: reading on
			// from the returned cursor fails the same way.
			evs, again, err := journal.Read(src(path), next, testRun, 1, 0)
			if len(evs) != 0 || again != next || !journal.Quarantine(err) {
				t.Errorf("reading on: %d events, %+v, %v", len(evs), again, err)
			}
		})
	}
}

func TestReadIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	w, err := journal.Create(path, testRun, 1)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 1000)
	const n = 8000 // about 8 MiB, more than Read's default batch
	for i := range n {
		if err := w.Append("progress", map[string]any{"i": i, "pad": pad}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()

	// The default batch stops at 4 MiB.
	evs, mid, err := journal.Read(src(path), journal.Cursor{}, testRun, 1, 0)
	if err != nil || len(evs) == 0 || len(evs) == n || mid.Offset > 4<<20 {
		t.Fatalf("default batch: %d events to %+v, %v", len(evs), mid, err)
	}
	// A small batch from anywhere costs about the batch, not the file.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const reads = 20
	for range reads {
		if evs, _, err := journal.Read(src(path), mid, testRun, 1, 4096); err != nil || len(evs) != 3 {
			t.Fatalf("small batch: %d events, %v", len(evs), err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / reads; per > 256<<10 {
		t.Errorf("a 4 KiB batch allocated %d bytes", per)
	}
}

func TestNotYet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	evs, c, err := journal.Read(src(path), journal.Cursor{}, testRun, 1, 0)
	if !errors.Is(err, journal.ErrNotYet) || journal.Quarantine(err) || len(evs) != 0 || c != (journal.Cursor{}) {
		t.Errorf("Read: %d events, %+v, %v", len(evs), c, err)
	}
	if _, err := journal.Size(src(path)); !errors.Is(err, journal.ErrNotYet) {
		t.Errorf("Size: %v", err)
	}
	writeFile(t, path, []byte("{\n"))
	if n, err := journal.Size(src(path)); n != 2 || err != nil {
		t.Errorf("Size = %d, %v", n, err)
	}
}

func TestQuarantine(t *testing.T) {
	ce := &journal.CorruptError{Offset: 10, Reason: "line 2 at byte 10: malformed JSON: x"}
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{journal.ErrNotYet, false},
		{fmt.Errorf("read journal x: %w", journal.ErrNotYet), false},
		{ce, true},
		{fmt.Errorf("read journal x: %w", ce), true},
		{errors.Join(io.ErrUnexpectedEOF, ce), true},
		{&fs.PathError{Op: "open", Path: "x", Err: fs.ErrPermission}, false},
		{fmt.Errorf("read journal x: %w", io.ErrUnexpectedEOF), false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{errors.New("corrupt journal: not really"), false},
	}
	for _, tt := range tests {
		if got := journal.Quarantine(tt.err); got != tt.want {
			t.Errorf("Quarantine(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestParseLine(t *testing.T) {
	good := lines(t, 2, nil)
	tests := []struct {
		name string
		line string
		err  string // "" for a valid line
	}{
		{"first", string(good[0]), ""},
		{"second", string(good[1]), ""},
		{"null payload", `{"seq":1,"run":"` + testRun.String() + `","attempt":1,"type":"x","time":"2025-03-01T12:00:00Z","payload":null,"prev":""}`, ""},
		{"unknown field", `{"seq":1,"run":"` + testRun.String() + `","attempt":1,"type":"x","time":"2025-03-01T12:00:00+02:00","host":"a","prev":""}`, ""},
		{"empty", ``, "malformed JSON"},
		{"garbage", `seq=1`, "malformed JSON at byte 0 of the line"},
		{"trailing garbage", string(good[0]) + `x`, "malformed JSON"},
		{"array", `[]`, "malformed JSON"},
		{"null", `null`, "seq 0 is not positive"},
		{"float seq", `{"seq":1.5}`, "malformed JSON"},
		{"negative seq", `{"seq":-1,"attempt":1}`, "seq -1 is not positive"},
		{"zero attempt", `{"seq":1,"attempt":0}`, "attempt 0 is not positive"},
		{"no type", `{"seq":1,"attempt":1}`, "type is empty"},
		{"no time", `{"seq":1,"attempt":1,"type":"x"}`, "time is missing"},
		{"bad time", `{"seq":1,"attempt":1,"type":"x","time":"yesterday"}`, "malformed JSON"},
		{"bad run", `{"seq":1,"attempt":1,"type":"x","time":"2025-03-01T12:00:00Z","run":"nope"}`, `run is not a uuid`},
		{"payload number", `{"seq":1,"attempt":1,"type":"x","time":"2025-03-01T12:00:00Z","payload":1}`, "payload is not a JSON object"},
		{"prev on seq 1", `{"seq":1,"attempt":1,"type":"x","time":"2025-03-01T12:00:00Z","prev":"` + strings.Repeat("a", 64) + `"}`, "seq 1 has a prev hash"},
		{"no prev on seq 2", `{"seq":2,"attempt":1,"type":"x","time":"2025-03-01T12:00:00Z"}`, `prev is not a lower-case hex SHA-256`},
		{"upper-case prev", `{"seq":2,"attempt":1,"type":"x","time":"2025-03-01T12:00:00Z","prev":"` + strings.Repeat("A", 64) + `"}`, "is not a lower-case hex SHA-256"},
		{"invalid utf-8", "{\"seq\":1,\"type\":\"\xc3\"}", "invalid UTF-8 at byte 17 of the line"},
		{"NUL", "{\"seq\":1,\x00\"type\":\"x\"}", "NUL byte at byte 9 of the line"},
		{"escaped NUL", `{"seq":1,"attempt":1,"type":"x","time":"2025-03-01T12:00:00Z","payload":{"m":"a\u0000"}}`, "escaped NUL (\\u0000) at byte 79 of the line"},
		{"escaped backslash before u0000", `{"seq":1,"attempt":1,"type":"x\\u0000","time":"2025-03-01T12:00:00Z","run":"` + testRun.String() + `"}`, ""},
		{"too long", `{"pad":"` + strings.Repeat("x", journal.MaxLine) + `"}`, "over the 1 MiB limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := journal.ParseLine([]byte(tt.line))
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if e.Seq < 1 || e.Type == "" || e.Payload != nil && e.Payload[0] != '{' {
					t.Errorf("got %+v", e)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("got %v, want an error containing %q", err, tt.err)
			}
		})
	}
}

func TestAppendRejects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	w, err := journal.Create(path, testRun, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tests := []struct {
		name    string
		typ     string
		payload any
		err     string // "" if the event is written
	}{
		{"nil payload", "start", nil, ""},
		{"nil map", "start", map[string]int(nil), ""},
		{"nil raw message", "start", json.RawMessage(nil), ""},
		{"empty type", "", nil, "empty event type"},
		{"array", "progress", []int{1}, "payload []int is not a JSON object"},
		{"string", "progress", "done", "not a JSON object"},
		{"number", "progress", 3, "not a JSON object"},
		{"raw array", "progress", json.RawMessage(`[1]`), "not a JSON object"},
		{"invalid raw", "progress", json.RawMessage(`{`), "unexpected end of JSON input"},
		{"unmarshalable", "progress", map[string]any{"c": make(chan int)}, "unsupported type"},
		{"too long", "progress", map[string]string{"pad": strings.Repeat("x", journal.MaxLine)}, "over the 1 MiB limit"},
	}
	written := 0
	for _, tt := range tests {
		err := w.Append(tt.typ, tt.payload)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err == "":
			written++
		case err == nil || !strings.Contains(err.Error(), tt.err):
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.err)
		}
	}
	if err := w.Append("exit", nil); err != nil {
		t.Fatal(err)
	}
	all, _ := readAll(t, path, journal.Cursor{}, 0)
	if len(all) != written+1 {
		t.Fatalf("read %d events, want %d", len(all), written+1)
	}
	for _, e := range all {
		if e.Payload != nil {
			t.Errorf("seq %d has payload %s", e.Seq, e.Payload)
		}
	}
}

func TestAppendConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	w, err := journal.Create(path, testRun, 1)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				if err := w.Append("progress", map[string]int{"worker": g, "i": i}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// A reader tailing the journal meanwhile sees only whole lines.
	var c journal.Cursor
	var seen int
	deadline := time.Now().Add(time.Minute)
	for seen < workers*each {
		if time.Now().After(deadline) {
			t.Fatalf("read %d events, want %d", seen, workers*each)
		}
		evs, next, err := journal.Read(src(path), c, testRun, 1, 512)
		if err != nil {
			t.Fatal(err)
		}
		checkSeqs(t, c, evs, next)
		c, seen = next, seen+len(evs)
	}
	wg.Wait()
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWriterClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	w, err := journal.Create(path, testRun, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := w.Append("progress", nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Append after Close: %v", err)
	}
	if err := w.Sync(); err == nil {
		t.Error("Sync after Close succeeded")
	}
	if _, err := journal.Create(filepath.Join(path, "nodir", "j"), testRun, 1); err == nil {
		t.Error("Create in a missing directory succeeded")
	}
	if _, err := journal.Create(path, testRun, 0); err == nil {
		t.Error("Create with attempt 0 succeeded")
	}
}

func BenchmarkAppend(b *testing.B) {
	w, err := journal.Create(filepath.Join(b.TempDir(), "journal.jsonl"), testRun, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	p := map[string]any{"files_done": 1234, "bytes_done": 5678901234, "current": "/home/user/photos/2024/img_0001.jpg"}
	for b.Loop() {
		if err := w.Append("progress", p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkRead(b *testing.B) {
	path := filepath.Join(b.TempDir(), "journal.jsonl")
	w, err := journal.Create(path, testRun, 1)
	if err != nil {
		b.Fatal(err)
	}
	const n = 10000
	p := map[string]any{"files_done": 1234, "bytes_done": 5678901234, "current": "/home/user/photos/2024/img_0001.jpg"}
	for range n {
		if err := w.Append("progress", p); err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	size, _ := journal.Size(src(path))
	b.SetBytes(size)
	for b.Loop() {
		var c journal.Cursor
		for got := 0; got < n; {
			evs, next, err := journal.Read(src(path), c, testRun, 1, 256<<10)
			if err != nil || len(evs) == 0 {
				b.Fatalf("%d events, %v", len(evs), err)
			}
			got, c = got+len(evs), next
		}
	}
	b.ReportMetric(float64(b.N)*n/b.Elapsed().Seconds(), "events/s")
}

// src names the journal at path as the daemon names one, owned by whoever runs the test.
func src(path string) journal.Source {
	return journal.Source{Dir: filepath.Dir(path), Name: filepath.Base(path), UID: os.Getuid()}
}

// A journal replaced by one of the same length reads as having nothing new, without an error;
// the replacement's next line shows it, and nothing of it is returned.
func TestReplacedWithSameLength(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	writeFile(t, path, join(lines(t, 3, nil)))
	c := cursorAfter(t, path, 3)
	other := lines(t, 4, func(i int, e *journal.Event) { e.Type = "PROGRESS" }) // same lengths, other hashes
	writeFile(t, path, join(other[:3]))
	b, err := journal.ReadBatch(src(path), c, testRun, 1, 0)
	if err != nil || len(b.Events) != 0 || b.Next != c || b.Size != c.Offset {
		t.Fatalf("same length: %d events, next %+v, size %d, %v; want nothing new at %+v", len(b.Events), b.Next, b.Size, err, c)
	}
	writeFile(t, path, join(other))
	b, err = journal.ReadBatch(src(path), c, testRun, 1, 0)
	if len(b.Events) != 0 || !journal.Quarantine(err) || !strings.Contains(err.Error(), "hash chain broken at seq 4") {
		t.Fatalf("after it grew: %d events, %v; want the broken chain at seq 4", len(b.Events), err)
	}
}
