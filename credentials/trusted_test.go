package credentials

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// ReadTrusted reads only a regular file that no one but root and this user could have written or
// put in its place: not group- or other-writable, owned by root or this user, in directories
// that are too (or sticky), links on the way judged where they lead, at most its bound.
func TestReadTrusted(t *testing.T) {
	root := t.TempDir()
	mkdir := func(name string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	write := func(dir, name string, data []byte, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(target, name string) string {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const max = 64
	conf := []byte("jobs:\n")
	safe := mkdir("safe", 0o755)
	good := write(safe, "good.yaml", conf, 0o644)
	write(safe, "full.yaml", bytes.Repeat([]byte("#"), max), 0o600)
	write(safe, "big.yaml", bytes.Repeat([]byte("#"), max+1), 0o644)
	write(safe, "group.yaml", conf, 0o664)
	write(safe, "others.yaml", conf, 0o646)
	foreign := write(safe, "foreign.yaml", conf, 0o644)
	if err := syscall.Mkfifo(filepath.Join(safe, "fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	mkdir("safe/dir.yaml", 0o755)
	sticky := mkdir("sticky", 0o777|os.ModeSticky)
	write(sticky, "good.yaml", conf, 0o644)
	open := mkdir("open", 0o777)
	write(open, "good.yaml", conf, 0o644)
	mkdir("open/sub", 0o755)
	write(root, "beside.yaml", conf, 0o644)
	grouped := mkdir("grouped/a/b", 0o755)
	mkdir("grouped", 0o775)
	write(grouped, "good.yaml", conf, 0o644)
	given := mkdir("given", 0o755)
	write(given, "good.yaml", conf, 0o644)
	if os.Geteuid() == 0 {
		for _, p := range []string{foreign, given} {
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
	}
	link(good, "link.yaml")
	link("safe", "to-safe")
	link(open+"/sub", "to-open-sub")
	link("to-safe", "to-link")
	for _, tc := range []struct {
		name, path, want string // want "" reads
		root             bool   // needs root, to give a file or directory away
	}{
		{"a regular 0644 file", good, "", false},
		{"read-only and exactly the bound", filepath.Join(safe, "full.yaml"), "", false},
		{"in a sticky directory", filepath.Join(sticky, "good.yaml"), "", false},
		{"through a link to a safe directory", filepath.Join(root, "to-safe", "good.yaml"), "", false},
		{"through a link to a link", filepath.Join(root, "to-link", "good.yaml"), "", false},
		{"writable by its group", filepath.Join(safe, "group.yaml"), "group.yaml has mode 0664: its group or others could change it (chmod go-w ", false},
		{"writable by others", filepath.Join(safe, "others.yaml"), "others.yaml has mode 0646", false},
		{"another user's", foreign, "foreign.yaml is owned by uid 65534, who could change it: chown root ", true},
		{"in a directory others may write", filepath.Join(open, "good.yaml"), open + " has mode 0777: a directory on the way must not be writable by its group or others (chmod go-w " + open, false},
		{"below a directory its group may write", filepath.Join(grouped, "good.yaml"), filepath.Join(root, "grouped") + " has mode 0775", false},
		{"in another user's directory", filepath.Join(given, "good.yaml"), given + " is owned by uid 65534 (nobody), not root", true},
		// The kernel resolves .. in the link's target: open/, not the link's own directory.
		{"through a link, then ..", filepath.Join(root, "to-open-sub") + "/../good.yaml", open + " has mode 0777", false},
		{"a link", filepath.Join(root, "link.yaml"), "link.yaml is a symbolic link: give the file itself", false},
		{"a FIFO", filepath.Join(safe, "fifo.yaml"), "fifo.yaml is not a regular file", false},
		{"a directory", filepath.Join(safe, "dir.yaml"), "dir.yaml is not a regular file", false},
		{"a device", "/dev/null", "is not a regular file", false},
		{"over the bound", filepath.Join(safe, "big.yaml"), ErrTooLarge.Error(), false},
		{"missing", filepath.Join(safe, "none.yaml"), "no such file", false},
		{"in a missing directory", filepath.Join(root, "none", "good.yaml"), "no such file", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("needs root to give a file away")
			}
			data, err := ReadTrusted(tc.path, max)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ReadTrusted: %v", err)
			case tc.want == "" && len(data) == 0:
				t.Fatal("read nothing")
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ReadTrusted = %q, %v; want an error with %q", data, err, tc.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("the error is more than one line: %q", err)
			}
		})
	}
	if _, err := ReadTrusted(filepath.Join(safe, "big.yaml"), max); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a file over the bound: %v, want ErrTooLarge", err)
	}
}
