package journal

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"
)

// Cursor is where a reader stands in a journal; the daemon stores it in the
// attempt's row. The zero Cursor is the start of the journal.
type Cursor struct {
	Offset   int64  // bytes consumed (always at a line boundary)
	LastSeq  int64  // seq of the last event consumed (0 before the first)
	LastHash string // SHA-256 hex of the last consumed line ("" before the first)
}

func (c Cursor) valid() bool {
	if c.Offset < 0 || c.LastSeq < 0 {
		return false
	}
	if c.Offset == 0 {
		return c.LastSeq == 0 && c.LastHash == ""
	}
	return c.LastSeq > 0 && isHash(c.LastHash)
}

// Read returns the complete events after c, at most maxBytes worth of lines
// (but at least one line if one is complete; maxBytes <= 0 means 4 MiB), and
// the cursor after the last one returned. It reads only from c.Offset on, with
// memory bounded by maxBytes plus one line.
//
// Each line must pass ParseLine, belong to run and attempt, have Seq one more
// than the previous line's and Prev equal to the previous line's hash (for the
// first line after c: c.LastSeq and c.LastHash). A last line without its
// newline is left for a later Read, unless it is already longer than MaxLine.
//
// On any error the events and cursor returned are the valid ones read before
// it, safe to apply. The error wraps ErrNotYet if the journal does not exist
// and c is the zero Cursor, and *CorruptError if the journal cannot be read
// past the cursor returned: a line fails a check, the journal is shorter than
// c or does not end a line just before c.Offset (truncated or replaced), is
// missing although c is past its start, is not a regular file owned by
// src.UID (a link, a named pipe, a device, another user's file: refused
// before a byte is read), has more than MaxEvents lines, or c itself is
// inconsistent. Other errors (permission, I/O) are transient.
func Read(src Source, c Cursor, run uuid.UUID, attempt int, maxBytes int64) ([]Event, Cursor, error) {
	b, err := ReadBatch(src, c, run, attempt, maxBytes)
	return b.Events, b.Next, err
}

// Batch is what one read of a journal found.
type Batch struct {
	Events []Event
	Next   Cursor // the cursor after Events
	// Size is the journal's size when it was opened (0 if it was not): Size - Next.Offset bytes
	// are left to read.
	Size int64
}

// ReadBatch is Read, also returning the journal's size it saw, so that a reader that drained
// the journal knows how far behind it is without opening it again.
func ReadBatch(src Source, c Cursor, run uuid.UUID, attempt int, maxBytes int64) (Batch, error) {
	b, err := read(src, c, run, attempt, maxBytes)
	if err != nil {
		err = fmt.Errorf("read journal %s: %w", src.Path(), err)
	}
	return b, err
}

func read(src Source, c Cursor, run uuid.UUID, attempt int, maxBytes int64) (Batch, error) {
	if attempt < 1 {
		return Batch{Next: c}, fmt.Errorf("attempt %d is not positive", attempt)
	}
	if !c.valid() {
		return Batch{Next: c}, corrupt(max(c.Offset, 0), "cursor (offset %d, seq %d, hash %q) is inconsistent",
			c.Offset, c.LastSeq, clip(c.LastHash, 70))
	}
	f, size, err := openChecked(src, c.Offset)
	if errors.Is(err, ErrNotYet) {
		if c.Offset > 0 {
			return Batch{Next: c}, corrupt(c.Offset, "journal is missing but the cursor is at byte %d (deleted or replaced)", c.Offset)
		}
		return Batch{Next: c}, ErrNotYet
	}
	if err != nil {
		return Batch{Next: c}, err
	}
	if f == nil {
		return Batch{Next: c, Size: size}, nil
	}
	defer f.Close()
	evs, next, err := readFrom(f, size, c, run, attempt, maxBytes)
	return Batch{Events: evs, Next: next, Size: size}, err
}

// readFrom reads r, whose first size bytes are the journal, from a valid c.
func readFrom(r io.ReaderAt, size int64, c Cursor, run uuid.UUID, attempt int, maxBytes int64) ([]Event, Cursor, error) {
	if size < c.Offset {
		return nil, c, corrupt(c.Offset, "journal is %d bytes, shorter than the cursor at %d (truncated or replaced)", size, c.Offset)
	}
	if c.Offset > 0 {
		var b [1]byte
		if _, err := r.ReadAt(b[:], c.Offset-1); err != nil {
			return nil, c, err
		}
		if b[0] != '\n' {
			return nil, c, corrupt(c.Offset, "the cursor at byte %d is not at the end of a line (journal replaced)", c.Offset)
		}
	}
	if maxBytes <= 0 {
		maxBytes = defaultMaxBytes
	}

	// Reading only up to size keeps the returned cursor within the size seen
	// and a growing journal from stretching one call.
	br := bufio.NewReaderSize(io.NewSectionReader(r, c.Offset, size-c.Offset), int(min(size-c.Offset, 64<<10)))
	var (
		evs  []Event
		line []byte
		used int64
	)
	for {
		var complete bool
		var err error
		line, complete, err = nextLine(br, line[:0])
		if err != nil {
			return evs, c, err
		}
		n := c.LastSeq + 1 // the line's number, if every line before it is good
		if n > MaxEvents {
			return evs, c, corrupt(c.Offset, "line %d at byte %d is past the limit of %d events per attempt", n, c.Offset, MaxEvents)
		}
		if len(line) > MaxLine {
			return evs, c, corrupt(c.Offset, "line %d at byte %d is over the 1 MiB limit (more than %d bytes)", n, c.Offset, MaxLine)
		}
		if !complete {
			return evs, c, nil
		}
		if len(evs) > 0 && used+int64(len(line))+1 > maxBytes {
			return evs, c, nil
		}

		e, err := ParseLine(line)
		if err != nil {
			return evs, c, corrupt(c.Offset, "line %d at byte %d: %v", n, c.Offset, err)
		}
		if id, _ := uuid.Parse(e.Run); id != run || e.Attempt != attempt {
			return evs, c, corrupt(c.Offset, "line %d at byte %d belongs to run %s attempt %d, not run %s attempt %d",
				n, c.Offset, e.Run, e.Attempt, run, attempt)
		}
		if e.Seq != n {
			why := "gap"
			switch {
			case e.Seq == c.LastSeq:
				why = "duplicate"
			case e.Seq < c.LastSeq:
				why = "out of order"
			}
			return evs, c, corrupt(c.Offset, "line %d at byte %d: seq %d follows %d (%s)", n, c.Offset, e.Seq, c.LastSeq, why)
		}
		if e.Prev != c.LastHash {
			return evs, c, corrupt(c.Offset, "line %d at byte %d: hash chain broken at seq %d (prev is not the hash of line %d)",
				n, c.Offset, e.Seq, c.LastSeq)
		}

		sum := sha256.Sum256(line)
		c = Cursor{Offset: c.Offset + int64(len(line)) + 1, LastSeq: e.Seq, LastHash: hex.EncodeToString(sum[:])}
		used += int64(len(line)) + 1
		evs = append(evs, e)
	}
}

// nextLine appends the next line of br to buf and returns it without its
// newline. complete is false at the end of the input without a newline, or
// as soon as the line is longer than MaxLine, so memory stays bounded.
func nextLine(br *bufio.Reader, buf []byte) (line []byte, complete bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return buf[:len(buf)-1], true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			if len(buf) > MaxLine {
				return buf, false, nil
			}
		case errors.Is(err, io.EOF):
			return buf, false, nil
		default:
			return buf, false, err
		}
	}
}
