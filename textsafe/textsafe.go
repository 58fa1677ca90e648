// Package textsafe makes text from untrusted sources safe to print on a terminal: file names,
// restic's messages, reasons and job fields can carry escape sequences that move the cursor,
// rewrite lines, change the window title or reverse the text that follows.
//
// Control characters (C0 and C1, DEL), the Unicode bidirectional overrides and isolates, and
// bytes that are not UTF-8 are written as Go-style escapes (\x1b, \u009b, \u202e). Everything
// else passes unchanged, so ordinary text, including non-ASCII names, reads as it is. JSON
// output needs none of this: encoding/json escapes what JSON must.
package textsafe

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// String escapes s for one field of a line: every control character, tab and newline
// included, so a field can neither break the line nor pose as another one.
func String(s string) string {
	if clean(s, false) {
		return s
	}
	var b strings.Builder
	escape(&b, s, false)
	return b.String()
}

// Writer escapes what is written to W as String does, except for tabs and newlines, which
// pass: it guards whole outputs (tables, listings, another program's output).
type Writer struct {
	W io.Writer
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{W: w} }

// Write escapes p and writes it. Each call stands alone: a UTF-8 sequence split across two
// calls is escaped byte by byte. It returns len(p) when everything was written.
func (w *Writer) Write(p []byte) (int, error) {
	s := string(p)
	if clean(s, true) {
		return w.W.Write(p)
	}
	var b strings.Builder
	escape(&b, s, true)
	if _, err := io.WriteString(w.W, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// unsafe reports whether r must be escaped; layout keeps tabs and newlines.
func unsafe(r rune, layout bool) bool {
	switch {
	case layout && (r == '\n' || r == '\t'):
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidi embeddings, overrides, isolates and marks
	}
	return false
}

func clean(s string, layout bool) bool {
	for _, r := range s {
		if r == utf8.RuneError || unsafe(r, layout) {
			return false
		}
	}
	return true
}

func escape(b *strings.Builder, s string, layout bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(b, `\x%02x`, s[i])
		case !unsafe(r, layout):
			b.WriteString(s[i : i+n])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80:
			fmt.Fprintf(b, `\x%02x`, r)
		default:
			fmt.Fprintf(b, `\u%04x`, r)
		}
		i += n
	}
}
