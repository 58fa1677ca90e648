package textsafe_test

import (
	"bytes"
	"testing"

	"github.com/holdfast-backup/holdfast/textsafe"
)

func TestEscape(t *testing.T) {
	tests := []struct {
		name, in, field, layout string
	}{
		{"plain", "run 1 succeeded", "run 1 succeeded", "run 1 succeeded"},
		{"non-ASCII names pass", "/home/zoë/Überweisung €.pdf", "/home/zoë/Überweisung €.pdf", "/home/zoë/Überweisung €.pdf"},
		{"empty", "", "", ""},
		{"ESC sequence", "a\x1b[2Jb", `a\x1b[2Jb`, `a\x1b[2Jb`},
		{"window title", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`, `\x1b]0;pwned\x07`},
		{"newline and tab", "a\nb\tc", `a\nb\tc`, "a\nb\tc"},
		{"carriage return", "ok\rfailed", `ok\rfailed`, `ok\rfailed`},
		{"NUL and BEL", "a\x00\x07", `a\x00\x07`, `a\x00\x07`},
		{"DEL", "a\x7fb", `a\x7fb`, `a\x7fb`},
		{"C1 CSI", "a\u009b2Jb", `a\u009b2Jb`, `a\u009b2Jb`},
		{"bidi override", "file\u202egpj.exe", `file\u202egpj.exe`, `file\u202egpj.exe`},
		{"bidi isolate", "a\u2067b\u2069", `a\u2067b\u2069`, `a\u2067b\u2069`},
		{"invalid UTF-8", "a\xffb\xc3", `a\xffb\xc3`, `a\xffb\xc3`},
		{"replacement character as written passes", "a\uFFFDb", "a\uFFFDb", "a\uFFFDb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := textsafe.String(tt.in); got != tt.field {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.field)
			}
			var buf bytes.Buffer
			n, err := textsafe.NewWriter(&buf).Write([]byte(tt.in))
			if err != nil || n != len(tt.in) {
				t.Errorf("Write = %d, %v; want %d, nil", n, err, len(tt.in))
			}
			if buf.String() != tt.layout {
				t.Errorf("Writer wrote %q, want %q", buf.String(), tt.layout)
			}
		})
	}
}
