package journal_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/holdfast-backup/holdfast/journal"
)

// TestHostileJournal puts in the journal's place what a job's user can put there, and checks
// that the reader refuses it as it finds it, before reading a byte of anything it should not,
// and says what is wrong without quoting a byte of it.
func TestHostileJournal(t *testing.T) {
	const secret = "s3cret-Root-Only"
	valid := lines(t, 3, nil)
	line1 := hashOf(valid[0])

	type setup func(t *testing.T, dir, path string) (journal.Source, journal.Cursor)
	plain := func(t *testing.T, dir, path string) journal.Source {
		return journal.Source{Dir: dir, Name: filepath.Join("a1", "journal.jsonl"), UID: os.Getuid()}
	}
	secretFile := func(t *testing.T) string {
		p := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name   string
		setup  setup
		reason string
	}{
		{"symlink to a root-only file", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			if err := os.Symlink(secretFile(t), path); err != nil {
				t.Fatal(err)
			}
			return plain(t, dir, path), journal.Cursor{}
		}, "journal is a symbolic link, not a regular file"},
		{"symlink to /dev/zero", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
			return plain(t, dir, path), journal.Cursor{}
		}, "journal is a symbolic link, not a regular file"},
		{"named pipe", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			if err := syscall.Mkfifo(path, 0o666); err != nil {
				t.Fatal(err)
			}
			return plain(t, dir, path), journal.Cursor{}
		}, "journal is a named pipe, not a regular file"},
		{"device", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			// The same device as /dev/zero: if it were opened and read, the read would not end.
			if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, 1<<8|5); err != nil {
				t.Skipf("mknod needs CAP_MKNOD: %v", err)
			}
			return plain(t, dir, path), journal.Cursor{}
		}, "journal is a device, not a regular file"},
		{"socket", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(fd)
			if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
				t.Fatal(err)
			}
			return plain(t, dir, path), journal.Cursor{}
		}, "journal is a socket, not a regular file"},
		{"someone else's file", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			// A hard link to a file of another user looks like this too.
			writeFile(t, path, join(valid))
			s := plain(t, dir, path)
			s.UID = os.Getuid() + 4242
			return s, journal.Cursor{}
		}, fmt.Sprintf("journal is owned by uid %d, not the job's user (uid %d)", os.Getuid(), os.Getuid()+4242)},
		{"directory on the path is a symlink", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			other := t.TempDir()
			writeFile(t, filepath.Join(other, "journal.jsonl"), []byte(secret+"\n"))
			if err := os.RemoveAll(filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
			return plain(t, dir, path), journal.Cursor{}
		}, "the journal's directory a1 is a symbolic link, not a directory"},
		{"NUL", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			writeFile(t, path, append(join(valid[:1]), "{\"seq\":2,\"x\":\""+secret+"\x00\"}\n"...))
			return plain(t, dir, path), journal.Cursor{}
		}, "line 2 at byte"},
		{"invalid UTF-8", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			writeFile(t, path, append(join(valid[:1]), "{\"seq\":2,\"x\":\""+secret+"\xff\"}\n"...))
			return plain(t, dir, path), journal.Cursor{}
		}, "invalid UTF-8 at byte"},
		{"malformed JSON", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			writeFile(t, path, append(join(valid[:1]), secret+"\n"...))
			return plain(t, dir, path), journal.Cursor{}
		}, "malformed JSON at byte 0 of the line"},
		{"wrong type", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			writeFile(t, path, append(join(valid[:1]), `{"seq":"`+secret+`"}`+"\n"...))
			return plain(t, dir, path), journal.Cursor{}
		}, "field seq has the wrong type"},
		{"bad time", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			writeFile(t, path, append(join(valid[:1]), `{"seq":2,"time":"`+secret+`"}`+"\n"...))
			return plain(t, dir, path), journal.Cursor{}
		}, "a field has an invalid value"},
		{"10 MB line", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			writeFile(t, path, append(join(valid[:1]), strings.Repeat(secret, 10<<20/len(secret))+"\n"...))
			return plain(t, dir, path), journal.Cursor{}
		}, "line 2 at byte"},
		{"past the event limit", func(t *testing.T, dir, path string) (journal.Source, journal.Cursor) {
			writeFile(t, path, join(valid))
			// As if line 1 had been the MaxEvents-th: the next one is one too many.
			return plain(t, dir, path), journal.Cursor{Offset: int64(len(valid[0]) + 1), LastSeq: journal.MaxEvents, LastHash: line1}
		}, fmt.Sprintf("is past the limit of %d events per attempt", journal.MaxEvents)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "a1"), 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "a1", "journal.jsonl")
			s, c := tt.setup(t, dir, path)
			evs, next, err := journal.Read(s, c, testRun, 1, 0)
			var ce *journal.CorruptError
			if !errors.As(err, &ce) || !journal.Quarantine(err) {
				t.Fatalf("got %v, want a *CorruptError", err)
			}
			if !strings.Contains(ce.Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", ce.Reason, tt.reason)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), secret[:1]+"'") {
				t.Errorf("the error quotes the journal's content: %q", err)
			}
			if strings.ContainsFunc(ce.Reason, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0xfffd }) {
				t.Errorf("the reason holds a control character: %q", ce.Reason)
			}
			if n := len(evs); n > 1 || next.Offset < c.Offset {
				t.Errorf("got %d events and cursor %+v from cursor %+v", n, next, c)
			}
			if c.Offset == 0 && len(evs) == 1 && next.LastSeq != 1 {
				t.Errorf("cursor %+v after the good first line", next)
			}
		})
	}
}

// TestHostileSize checks that the lag figure follows no link and refuses what Read refuses.
func TestHostileSize(t *testing.T) {
	dir := t.TempDir()
	s := journal.Source{Dir: dir, Name: "journal.jsonl", UID: os.Getuid()}
	if _, err := journal.Size(s); !errors.Is(err, journal.ErrNotYet) {
		t.Fatalf("missing journal: got %v, want ErrNotYet", err)
	}
	if err := os.Symlink("/etc/shadow", s.Path()); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.Size(s); !journal.Quarantine(err) || !strings.Contains(err.Error(), "journal is a symbolic link") {
		t.Fatalf("symlink: got %v, want a refusal", err)
	}
	os.Remove(s.Path())
	writeFile(t, s.Path(), []byte("abc\n"))
	if n, err := journal.Size(s); n != 4 || err != nil {
		t.Fatalf("regular file: got %d, %v", n, err)
	}
	s.UID++
	if _, err := journal.Size(s); !journal.Quarantine(err) || !strings.Contains(err.Error(), "owned by uid") {
		t.Fatalf("someone else's file: got %v, want a refusal", err)
	}
	if _, err := journal.Size(journal.Source{Dir: dir, Name: "../x", UID: 0}); err == nil || journal.Quarantine(err) {
		t.Fatalf("name outside the directory: got %v, want a plain error", err)
	}
}
