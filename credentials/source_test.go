package credentials

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const (
	jobUser = 65534 // nobody
	other   = 12345
)

// sourceTree is a root-only directory holding root's secrets and a home of the job's user.
type sourceTree struct {
	t          *testing.T
	root, home string
}

func setupSources(t *testing.T) *sourceTree {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the credential source tests chown files: run them as root")
		}
		t.Skip("the credential source tests chown files: run them as root")
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, jobUser, jobUser); err != nil {
		t.Fatal(err)
	}
	return &sourceTree{t: t, root: root, home: home}
}

func (s *sourceTree) file(path string, owner int, mode os.FileMode, data string) string {
	s.t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chown(path, owner, owner); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		s.t.Fatal(err)
	}
	return path
}

// contentRefusal is ReadSource's refusal of what CheckSource, which reads nothing, accepts.
const contentRefusal = "is the job's user's own, yet a credential systemd encrypted: only root's may be one"

// ReadSource serves a unit root's own secrets and its user's own files, and nothing the user
// could have pointed at a secret of root's: not a link of the user's, not a hard link in the
// user's directory, not a file others may read, not a FIFO (without blocking), not a large file.
func TestReadSource(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(s *sourceTree) string
		uid   int
		want  string // "" read, else a part of the refusal
	}{
		{"root's 0600 file, for the user", func(s *sourceTree) string {
			return s.file(filepath.Join(s.root, "pw"), 0, 0o600, "secret")
		}, jobUser, ""},
		{"root's 0600 file, for root", func(s *sourceTree) string {
			return s.file(filepath.Join(s.root, "pw"), 0, 0o600, "secret")
		}, 0, ""},
		{"root's file others may read", func(s *sourceTree) string {
			return s.file(filepath.Join(s.root, "pw"), 0, 0o644, "secret")
		}, jobUser, "has mode 0644: a credential source of root's must be closed to its group and others (chmod 0600"},
		{"the user's own file, for the user", func(s *sourceTree) string {
			return s.file(filepath.Join(s.home, "pw"), jobUser, 0o644, "secret")
		}, jobUser, ""},
		{"the user's own copy of an encrypted credential, for the user", func(s *sourceTree) string {
			sealed, err := os.ReadFile(filepath.Join("testdata", "host-key.cred"))
			if err != nil {
				t.Fatal(err)
			}
			return s.file(filepath.Join(s.home, "pw"), jobUser, 0o600, string(sealed))
		}, jobUser, contentRefusal},
		{"the user's own file, for root", func(s *sourceTree) string {
			return s.file(filepath.Join(s.root, "pw"), jobUser, 0o600, "secret")
		}, 0, "is owned by uid 65534: a credential source must be root's or the job's user's"},
		{"another user's file", func(s *sourceTree) string {
			return s.file(filepath.Join(s.root, "pw"), other, 0o600, "secret")
		}, jobUser, "is owned by uid 12345"},
		{"the user's link to root's secret", func(s *sourceTree) string {
			secret := s.file(filepath.Join(s.root, "holdfast.env"), 0, 0o600, "secret")
			link := filepath.Join(s.home, "job.env")
			if err := os.Symlink(secret, link); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(link, jobUser, jobUser); err != nil {
				t.Fatal(err)
			}
			return link
		}, jobUser, "is root's but reached through a directory or link the job's user controls"},
		{"a hard link to root's secret in the user's directory", func(s *sourceTree) string {
			secret := s.file(filepath.Join(s.root, "holdfast.env"), 0, 0o600, "secret")
			link := filepath.Join(s.home, "job.env")
			if err := os.Link(secret, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, jobUser, "is root's but reached through a directory or link the job's user controls"},
		{"the user's link, for root", func(s *sourceTree) string {
			secret := s.file(filepath.Join(s.root, "holdfast.env"), 0, 0o600, "secret")
			link := filepath.Join(s.root, "job.env")
			if err := os.Symlink(secret, link); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(link, jobUser, jobUser); err != nil {
				t.Fatal(err)
			}
			return link
		}, 0, "is a symbolic link owned by uid 65534 (nobody), not root"},
		{"root's link to root's secret", func(s *sourceTree) string {
			secret := s.file(filepath.Join(s.root, "holdfast.env"), 0, 0o600, "secret")
			link := filepath.Join(s.root, "job.env")
			if err := os.Symlink(secret, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, jobUser, ""},
		{"a FIFO", func(s *sourceTree) string {
			p := filepath.Join(s.home, "fifo")
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, jobUser, jobUser); err != nil {
				t.Fatal(err)
			}
			return p
		}, jobUser, "is not a regular file"},
		{"a large file", func(s *sourceTree) string {
			return s.file(filepath.Join(s.root, "pw"), 0, 0o600, strings.Repeat("x", MaxSource+1))
		}, jobUser, "is larger than 64 KiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := setupSources(t)
			p := c.build(s)
			b, err := ReadSource(p, c.uid)
			checkErr := CheckSource("--env-file", p, c.uid)
			if c.want == "" {
				if err != nil || checkErr != nil {
					t.Fatalf("ReadSource(%s): %v; CheckSource: %v; want both to accept it", p, err, checkErr)
				}
				if string(b) != "secret" {
					t.Fatalf("ReadSource(%s) = %q", p, b)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("ReadSource(%s): %v, want a refusal naming the path with %q", p, err, c.want)
			}
			if c.want == contentRefusal {
				if checkErr != nil {
					t.Fatalf("CheckSource(%s): %v, want it to accept what only its content refuses", p, checkErr)
				}
				return
			}
			if checkErr == nil || !strings.Contains(checkErr.Error(), c.want) || !strings.HasPrefix(checkErr.Error(), "--env-file ") {
				t.Fatalf("CheckSource(%s): %v, want the same refusal after the flag", p, checkErr)
			}
			if strings.Contains(err.Error(), "secret\n") || b != nil {
				t.Fatalf("ReadSource(%s) let bytes out: %q, %v", p, b, err)
			}
		})
	}
}

// Stage writes root-only copies under the state directory, replaces an earlier try's, and leaves
// nothing when a source is refused; RemoveStaged takes them away.
func TestStage(t *testing.T) {
	s := setupSources(t)
	state := t.TempDir()
	pw := s.file(filepath.Join(s.root, "pw"), 0, 0o600, "secret")
	bad := s.file(filepath.Join(s.root, "open"), 0, 0o644, "secret")

	staged, err := Stage(state, "k", map[string]string{Password: pw}, jobUser)
	if err != nil {
		t.Fatal(err)
	}
	got := staged[Password].Path
	if got != filepath.Join(state, "credentials", "k", Password) || staged[Password].Encrypted {
		t.Fatalf("staged %+v", staged[Password])
	}
	for _, p := range []string{filepath.Join(state, "credentials"), filepath.Dir(got), got} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Fatalf("%s has mode %v, uid %d: want root's alone", p, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid)
		}
	}
	if b, _ := os.ReadFile(got); string(b) != "secret" {
		t.Fatalf("staged %q", b)
	}

	// A credential systemd encrypted is staged as it is, for LoadCredentialEncrypted=.
	sealed, err := os.ReadFile(filepath.Join("testdata", "host-key.cred"))
	if err != nil {
		t.Fatal(err)
	}
	enc := s.file(filepath.Join(s.root, "pw.cred"), 0, 0o600, string(sealed))
	staged, err = Stage(state, "k3", map[string]string{Password: enc}, jobUser)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(staged[Password].Path); !staged[Password].Encrypted || !bytes.Equal(b, sealed) {
		t.Fatalf("an encrypted credential staged as %+v: %q", staged[Password], b)
	}

	// A try with a refused source stages nothing of it and says which source it was.
	if _, err := Stage(state, "k2", map[string]string{Password: pw, Env: bad}, jobUser); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Stage with a source others may read: %v, want a refusal naming %s", err, bad)
	}
	if _, err := os.Stat(StagedDir(state, "k2")); !os.IsNotExist(err) {
		t.Fatalf("a refused try left %s: %v", StagedDir(state, "k2"), err)
	}
	if err := RemoveStaged(state, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(got)); !os.IsNotExist(err) {
		t.Fatalf("staged credentials left after RemoveStaged: %v", err)
	}
	if err := RemoveStaged(state, "../x"); err == nil {
		t.Fatal("RemoveStaged took a key with a slash")
	}
}
