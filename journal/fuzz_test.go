package journal_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/holdfast-backup/holdfast/journal"
)

// The seed corpus is in testdata/fuzz; its journals belong to testRun attempt 1.

func FuzzParseLine(f *testing.F) {
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := journal.ParseLine(line)
		if err != nil {
			// Reasons say where a line is wrong, never what it holds.
			if strings.ContainsFunc(err.Error(), func(r rune) bool { return unicode.IsControl(r) || r == utf8.RuneError }) {
				t.Fatalf("reason %q holds a byte of the line", err)
			}
			return
		}
		if strings.ContainsRune(e.Type, 0) || bytes.Contains(e.Payload, []byte(`\u0000`)) && !bytes.Contains(e.Payload, []byte(`\\u0000`)) {
			t.Fatalf("a NUL passed: %+v", e)
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("marshal %+v: %v", e, err)
		}
		e2, err := journal.ParseLine(b)
		if err != nil {
			t.Fatalf("parse %s again: %v", b, err)
		}
		if e.Seq != e2.Seq || e.Run != e2.Run || e.Attempt != e2.Attempt || e.Type != e2.Type ||
			e.Prev != e2.Prev || !e.Time.Equal(e2.Time) || !sameJSON(t, e.Payload, e2.Payload) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e, e2)
		}
	})
}

// sameJSON reports whether a and b are the same JSON value, or both absent.
func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var va, vb any
	for _, x := range []struct {
		raw json.RawMessage
		v   *any
	}{{a, &va}, {b, &vb}} {
		d := json.NewDecoder(bytes.NewReader(x.raw))
		d.UseNumber()
		if err := d.Decode(x.v); err != nil {
			t.Fatalf("payload %s: %v", x.raw, err)
		}
	}
	return reflect.DeepEqual(va, vb)
}

func FuzzRead(f *testing.F) {
	path := filepath.Join(f.TempDir(), "journal.jsonl")
	f.Fuzz(func(t *testing.T, data []byte, offset, lastSeq int64, lastHash string, maxBytes int64) {
		if err := os.WriteFile(path, data, 0o640); err != nil {
			t.Fatal(err)
		}
		size := int64(len(data))

		// From an arbitrary cursor.
		c := journal.Cursor{Offset: offset, LastSeq: lastSeq, LastHash: lastHash}
		evs, next, err := journal.Read(src(path), c, testRun, 1, maxBytes)
		checkRead(t, c, evs, next, err, size)

		// From the start in batches of maxBytes, as the daemon does: the same
		// events, cursor and verdict as one read of everything.
		var (
			all []journal.Event
			cur journal.Cursor
		)
		for {
			evs, next, err = journal.Read(src(path), cur, testRun, 1, maxBytes)
			checkRead(t, cur, evs, next, err, size)
			all, cur = append(all, evs...), next
			if err != nil || len(evs) == 0 {
				break
			}
		}
		one, oneNext, oneErr := journal.Read(src(path), journal.Cursor{}, testRun, 1, size+1)
		if len(one) != len(all) || oneNext != cur || journal.Quarantine(oneErr) != journal.Quarantine(err) || (oneErr == nil) != (err == nil) {
			t.Fatalf("batches gave %d events to %+v (%v), one read %d events to %+v (%v)",
				len(all), cur, err, len(one), oneNext, oneErr)
		}
	})
}

func checkRead(t *testing.T, c journal.Cursor, evs []journal.Event, next journal.Cursor, err error, size int64) {
	t.Helper()
	checkSeqs(t, c, evs, next)
	if next != c && next.Offset > size {
		t.Fatalf("cursor moved to %d, past the end of a %d-byte journal", next.Offset, size)
	}
	if next.Offset < c.Offset {
		t.Fatalf("cursor moved back from %d to %d", c.Offset, next.Offset)
	}
	var ce *journal.CorruptError
	if errors.As(err, &ce) && c.Offset >= 0 && ce.Offset != next.Offset {
		t.Fatalf("CorruptError.Offset %d, cursor at %d", ce.Offset, next.Offset)
	}
	if err != nil && !journal.Quarantine(err) {
		t.Fatalf("unexpected transient error: %v", err)
	}
}
