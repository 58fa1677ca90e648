package credentials

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// ReadSecret reads only a regular file of root's (or this user's) that its group and others
// cannot access, of at most 4 KiB, not through a link; a FIFO is refused without blocking the
// reader. CheckSecret says the same without reading.
func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	good := write("good", []byte("s3cr3t\n"), 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	others := write("others", []byte("s3cr3t"), 0o604)
	group := write("group", []byte("s3cr3t"), 0o640)
	groupWrite := write("group-write", []byte("s3cr3t"), 0o620)
	full := write("full", bytes.Repeat([]byte("k"), MaxSecretFile), 0o400)
	big := write("big", bytes.Repeat([]byte("k"), MaxSecretFile+1), 0o600)
	foreign := write("foreign", []byte("s3cr3t"), 0o600)
	if os.Geteuid() == 0 {
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, path, want string // want "" reads
	}{
		{"a regular 0600 file", good, ""},
		{"read-only and exactly 4 KiB", full, ""},
		{"a link to a good file", link, "is a symbolic link"},
		{"a FIFO", fifo, "is not a regular file"},
		{"a directory", dir, "is not a regular file"},
		{"a device", "/dev/null", "is not a regular file"},
		{"readable by others", others, "has mode 0604"},
		{"readable by its group", group, "has mode 0640"},
		{"writable by its group", groupWrite, "has mode 0620"},
		{"over 4 KiB", big, "larger than 4 KiB"},
		{"missing", filepath.Join(dir, "none"), "no such file"},
		{"another user's", foreign, "is owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.path == foreign && os.Geteuid() != 0 {
				t.Skip("needs root to give the file away")
			}
			data, err := ReadSecret(tc.path)
			checkErr := CheckSecret(tc.path)
			switch {
			case tc.want == "" && (err != nil || checkErr != nil):
				t.Fatalf("ReadSecret: %v; CheckSecret: %v", err, checkErr)
			case tc.want == "" && len(data) == 0:
				t.Fatal("read nothing")
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ReadSecret = %q, %v; want an error with %q", data, err, tc.want)
			case tc.want != "" && (checkErr == nil || !strings.Contains(checkErr.Error(), tc.want)):
				t.Fatalf("CheckSecret = %v; want an error with %q", checkErr, tc.want)
			case err != nil && (strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "kkkk")):
				t.Fatalf("the error shows the content: %v", err)
			}
		})
	}
}
