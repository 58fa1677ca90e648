package safepath_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/holdfast-backup/holdfast/safepath"
)

const (
	user  = 65534 // the job's user (nobody)
	other = 12345 // a third user
)

// tree is a directory the test builds paths in, as root, below a root-only directory.
type tree struct {
	t    *testing.T
	root string
}

func setup(t *testing.T) *tree {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("safepath's tests chown files: run them as root")
		}
		t.Skip("safepath's tests chown files: run them as root")
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return &tree{t: t, root: root}
}

func (tr *tree) path(rel string) string { return filepath.Join(tr.root, rel) }

// dir makes rel a directory of owner with mode.
func (tr *tree) dir(rel string, owner int, mode os.FileMode) string {
	tr.t.Helper()
	p := tr.path(rel)
	if err := os.Mkdir(p, 0o700); err != nil {
		tr.t.Fatal(err)
	}
	tr.own(p, owner, mode)
	return p
}

func (tr *tree) file(rel string, owner int, mode os.FileMode, data string) string {
	tr.t.Helper()
	p := tr.path(rel)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		tr.t.Fatal(err)
	}
	tr.own(p, owner, mode)
	return p
}

func (tr *tree) link(rel string, owner int, target string) string {
	tr.t.Helper()
	p := tr.path(rel)
	if err := os.Symlink(target, p); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.Lchown(p, owner, owner); err != nil {
		tr.t.Fatal(err)
	}
	return p
}

func (tr *tree) own(p string, owner int, mode os.FileMode) {
	tr.t.Helper()
	if err := os.Chown(p, owner, owner); err != nil {
		tr.t.Fatal(err)
	}
	// Chmod after chown: chown clears the set-id bits, and the sticky bit is os.ModeSticky.
	if err := os.Chmod(p, mode); err != nil {
		tr.t.Fatal(err)
	}
}

func TestWritable(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(tr *tree) string // returns the path to check
		uid   int
		want  string // "" accepted, else a part of the refusal, with {root} the tree
		path  string // the resolved path, if accepted and not the path itself
	}{
		{"root's directory, for root", func(tr *tree) string { return tr.dir("t", 0, 0o700) }, 0, "", ""},
		{"the user's directory, for the user", func(tr *tree) string { return tr.dir("t", user, 0o700) }, user, "", ""},
		{"the user's directory, for root", func(tr *tree) string { return tr.dir("t", user, 0o700) }, 0,
			"{root}/t is owned by uid 65534 (nobody), not root", ""},
		{"a target in another user's directory", func(tr *tree) string {
			tr.dir("alice", other, 0o755)
			return tr.dir("alice/t", 0, 0o700)
		}, 0, "{root}/alice is owned by uid 12345, not root: whoever owns a directory on the way", ""},
		{"another user's link as the target", func(tr *tree) string {
			tr.dir("etc", 0, 0o755)
			return tr.link("t", other, tr.path("etc"))
		}, 0, "{root}/t is a symbolic link owned by uid 12345, not root", ""},
		{"the user's link, for root", func(tr *tree) string {
			tr.dir("etc", 0, 0o755)
			return tr.link("t", user, tr.path("etc"))
		}, 0, "{root}/t is a symbolic link owned by uid 65534 (nobody), not root", ""},
		{"root's link on the way is followed, and the result names no link", func(tr *tree) string {
			tr.dir("real", 0, 0o755)
			tr.dir("real/t", 0, 0o700)
			tr.link("via", 0, "real")
			return tr.path("via/t")
		}, 0, "", "real/t"},
		{"the user's link, for the user", func(tr *tree) string {
			tr.dir("real", user, 0o700)
			return tr.link("t", user, tr.path("real"))
		}, user, "", "real"},
		{"a relative link that climbs", func(tr *tree) string {
			tr.dir("a", 0, 0o755)
			tr.dir("b", 0, 0o700)
			tr.link("a/up", 0, "../b")
			return tr.path("a/up")
		}, 0, "", "b"},
		{"a group-writable directory on the way", func(tr *tree) string {
			tr.dir("g", 0, 0o775)
			return tr.dir("g/t", 0, 0o700)
		}, 0, "{root}/g has mode 0775: a directory on the way must not be writable", ""},
		{"a sticky directory on the way, root's entry", func(tr *tree) string {
			tr.dir("tmp", 0, 0o777|os.ModeSticky)
			return tr.dir("tmp/t", 0, 0o700)
		}, 0, "", ""},
		{"a sticky directory on the way, another user's entry", func(tr *tree) string {
			tr.dir("tmp", 0, 0o777|os.ModeSticky)
			tr.dir("tmp/x", 0, 0o700)
			return tr.link("tmp/t", other, tr.path("tmp/x"))
		}, 0, "{root}/tmp/t is owned by uid 12345, not root, in {root}/tmp, which others may write", ""},
		{"a target others may write", func(tr *tree) string { return tr.dir("t", 0, 0o777) }, 0,
			"{root}/t has mode 0777: its group and others must not be able to write it", ""},
		{"a FIFO", func(tr *tree) string {
			p := tr.path("f")
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, 0, "{root}/f is a FIFO: only a directory or a regular file", ""},
		{"a link loop", func(tr *tree) string {
			tr.link("a", 0, "b")
			tr.link("b", 0, "a")
			return tr.path("a")
		}, 0, "goes through more than 40 symbolic links", ""},
		{"a file where a directory is on the way", func(tr *tree) string {
			tr.file("f", 0, 0o600, "x")
			return tr.path("f/t")
		}, 0, "{root}/f is a regular file, not a directory", ""},
		{"a relative path", func(tr *tree) string { return "t" }, 0, "t is a relative path", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := setup(t)
			p := c.build(tr)
			n, err := safepath.Writable(p, c.uid)
			want := strings.ReplaceAll(c.want, "{root}", tr.root)
			if c.want == "" {
				if err != nil {
					t.Fatalf("Writable(%s): %v, want it accepted", p, err)
				}
				wantPath := p
				if c.path != "" {
					wantPath = tr.path(c.path)
				}
				if n.Path != wantPath {
					t.Fatalf("Writable(%s) resolved to %s, want %s", p, n.Path, wantPath)
				}
				var st syscall.Stat_t
				if err := syscall.Lstat(wantPath, &st); err != nil || st.Ino != n.Ino || st.Dev != n.Dev {
					t.Fatalf("Writable(%s) gave inode %d:%d, the path has %d:%d (%v)", p, n.Dev, n.Ino, st.Dev, st.Ino, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Writable(%s): %v, want a refusal with %q", p, err, want)
			}
			if !safepath.Refused(err) {
				t.Fatalf("Writable(%s): %v is not a refusal (*safepath.Error)", p, err)
			}
		})
	}
}

// UserControlled tells whether the job's user had a hand in what a path names.
func TestUserControlled(t *testing.T) {
	tr := setup(t)
	tr.dir("rootdir", 0, 0o755)
	secret := tr.file("rootdir/secret", 0, 0o600, "s")
	home := tr.dir("home", user, 0o755)
	tr.link("home/link", user, secret)
	rootInHome := tr.file("home/rootfile", 0, 0o600, "s")
	tr.dir("tmp", 0, 0o777|os.ModeSticky)
	tr.file("tmp/f", 0, 0o600, "s")
	for _, c := range []struct {
		path string
		want bool
	}{
		{secret, false},
		{tr.path("home/link"), true}, // the user's link
		{rootInHome, true},           // root's file, in the user's directory
		{home, false},                // the user's directory, reached through root's
		{tr.path("tmp/f"), true},     // others may add entries to a sticky directory
		{tr.path("rootdir"), false},
	} {
		n, err := safepath.Resolve(c.path, user)
		if err != nil {
			t.Fatalf("Resolve(%s): %v", c.path, err)
		}
		if n.UserControlled != c.want {
			t.Errorf("Resolve(%s).UserControlled = %t, want %t", c.path, n.UserControlled, c.want)
		}
	}
}

func TestParent(t *testing.T) {
	tr := setup(t)
	tr.dir("ok", 0, 0o755)
	tr.dir("alice", other, 0o755)
	if _, err := safepath.Parent(tr.path("ok/new"), 0); err != nil {
		t.Fatalf("Parent in root's directory: %v", err)
	}
	_, err := safepath.Parent(tr.path("alice/new"), 0)
	if want := tr.path("alice") + " is owned by uid 12345, not root"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Parent in another user's directory: %v, want %q", err, want)
	}
}
