package jobdef

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestReadable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/nonexistent", link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		a    Access
		want string
	}{
		{"a regular file", Access{Path: file}, ""},
		{"an empty file", Access{Path: empty, Regular: true}, ""},
		{"a directory", Access{Path: dir}, ""},
		{"a link is backed up as a link", Access{Path: link}, ""},
		{"a dangling link as a password file", Access{Path: link, Regular: true}, "no such file or directory"},
		{"a directory as a password file", Access{Path: dir, Regular: true}, "it is not a regular file"},
		{"a FIFO as a password file", Access{Path: fifo, Regular: true}, "it is not a regular file"},
		{"missing", Access{Path: filepath.Join(dir, "missing")}, "no such file or directory"},
		{"a program through its link", Access{Path: "/bin/sh", Regular: true, Exec: true}, ""},
		{"a file no one may execute as a program", Access{Path: file, Regular: true, Exec: true}, "it cannot be executed (no execute permission)"},
	} {
		if got := Readable([]Access{c.a})[0]; got != c.want {
			t.Errorf("%s: Readable = %q, want %q", c.name, got, c.want)
		}
	}
}
