package journal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Writer appends events to one attempt's journal. It is used inside the unit,
// one writer per file, and is safe for concurrent use.
type Writer struct {
	path    string
	run     uuid.UUID
	attempt int
	now     func() time.Time

	mu   sync.Mutex
	f    *os.File // nil once closed
	seq  int64    // seq of the last line written
	prev string   // hash of the last line written
	size int64    // bytes of complete lines
	err  error    // set when the file may end in a partial line
}

// Create opens the journal at path for run and attempt. It creates the file
// (mode 0640, before umask; the parent directory must exist) or, if the file
// exists because the process was restarted, checks it and continues the seq
// and hash chain after its last complete line, truncating away an incomplete
// last line. If the existing file cannot be read, Create leaves it as it is
// and returns an error wrapping *CorruptError (see Quarantine); the caller
// should then run on without a journal, since the journal never stops a run.
func Create(path string, run uuid.UUID, attempt int) (*Writer, error) {
	if attempt < 1 {
		return nil, fmt.Errorf("create journal %s: attempt %d is not positive", path, attempt)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("create journal %s: %w", path, err)
	}
	w := &Writer{path: path, run: run, attempt: attempt, now: time.Now, f: f}
	if err := w.resume(); err != nil {
		f.Close()
		return nil, fmt.Errorf("create journal %s: %w", path, err)
	}
	return w, nil
}

func (w *Writer) resume() error {
	fi, err := w.f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	var c Cursor
	for {
		evs, next, err := readFrom(w.f, size, c, w.run, w.attempt, 0)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		c = next
	}
	if c.Offset < size {
		if err := w.f.Truncate(c.Offset); err != nil {
			return fmt.Errorf("drop incomplete last line: %w", err)
		}
	}
	w.seq, w.prev, w.size = c.LastSeq, c.LastHash, c.Offset
	return nil
}

// Append writes one event of type typ. A non-nil payload is marshalled with
// encoding/json and must be a JSON object; nil, or a payload that marshals to
// null, writes no payload. The line goes out in a single write(2); Append
// does not sync.
func (w *Writer) Append(typ string, payload any) error {
	if typ == "" {
		return fmt.Errorf("append to journal %s: empty event type", w.path)
	}
	var raw json.RawMessage
	if payload != nil {
		b, err := json.Marshal(payload)
		if err != nil {
			return fmt.Errorf("append %s to journal %s: %w", typ, w.path, err)
		}
		if string(b) != "null" {
			if b[0] != '{' {
				return fmt.Errorf("append %s to journal %s: payload %T is not a JSON object", typ, w.path, payload)
			}
			raw = b
		}
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return fmt.Errorf("append %s to journal %s: writer is closed", typ, w.path)
	}
	if w.err != nil {
		return fmt.Errorf("append %s to journal %s: %w", typ, w.path, w.err)
	}
	line, err := json.Marshal(Event{
		Seq:     w.seq + 1,
		Run:     w.run.String(),
		Attempt: w.attempt,
		Type:    typ,
		Time:    w.now().UTC(),
		Payload: raw,
		Prev:    w.prev,
	})
	if err != nil {
		return fmt.Errorf("append %s to journal %s: %w", typ, w.path, err)
	}
	if len(line) > MaxLine {
		return fmt.Errorf("append %s to journal %s: line is %d bytes, over the 1 MiB limit", typ, w.path, len(line))
	}
	sum := sha256.Sum256(line)
	line = append(line, '\n')
	if n, err := w.f.Write(line); err != nil {
		// A partial line would break the chain for every later line: cut it.
		if n > 0 {
			if terr := w.f.Truncate(w.size); terr != nil {
				w.err = fmt.Errorf("journal may end in a partial line: %w", errors.Join(err, terr))
			}
		}
		return fmt.Errorf("append %s to journal %s: %w", typ, w.path, err)
	}
	w.seq++
	w.prev = hex.EncodeToString(sum[:])
	w.size += int64(len(line))
	return nil
}

// Sync commits the journal to stable storage.
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return fmt.Errorf("sync journal %s: writer is closed", w.path)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("sync journal %s: %w", w.path, err)
	}
	return nil
}

// Close syncs and closes the journal. Closing a closed Writer does nothing.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	serr := w.f.Sync()
	cerr := w.f.Close()
	w.f = nil
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("close journal %s: %w", w.path, err)
	}
	return nil
}
