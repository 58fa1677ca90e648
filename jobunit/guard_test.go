package jobunit_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/systemd"
)

const nobody = 65534

// guardWorld is a state directory, a root-only directory of root's files and a home of nobody's.
type guardWorld struct {
	state, root, home string
}

func setupGuard(t *testing.T) guardWorld {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("Guard's tests chown files: run them as root")
		}
		t.Skip("Guard's tests chown files: run them as root")
	}
	base := t.TempDir()
	w := guardWorld{state: filepath.Join(base, "state"), root: filepath.Join(base, "root"), home: filepath.Join(base, "home")}
	for _, d := range []string{w.state, w.root, w.home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(w.home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return w
}

func write(t *testing.T, path string, owner int, mode os.FileMode, data string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, owner, owner); err != nil {
		t.Fatal(err)
	}
	return path
}

func symlink(t *testing.T, target, path string, owner int) string {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, owner, owner); err != nil {
		t.Fatal(err)
	}
	return path
}

func mkdir(t *testing.T, path string, owner int) string {
	t.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, owner, owner); err != nil {
		t.Fatal(err)
	}
	return path
}

func fileID(t *testing.T, path string) model.FileID {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return model.FileID{Dev: st.Dev, Ino: st.Ino}
}

// Guard hands systemd only paths the rule allows, resolved, and credentials only as root-only
// copies of sources the rule allows; anything else is refused with the path named.
func TestGuard(t *testing.T) {
	for _, c := range []struct {
		name string
		user string
		// build returns the unit's writable paths, its credentials, its pins.
		build func(t *testing.T, w guardWorld) ([]string, []systemd.Credential, []jobunit.Pin)
		want  string // "" allowed, else a part of the refusal
	}{
		{"root's target and root's password, for root", "", func(t *testing.T, w guardWorld) ([]string, []systemd.Credential, []jobunit.Pin) {
			target := mkdir(t, filepath.Join(w.root, "target"), 0)
			pw := write(t, filepath.Join(w.root, "pw"), 0, 0o600, "secret")
			return []string{target}, []systemd.Credential{{Name: credentials.Password, Path: pw}}, []jobunit.Pin{{Path: target, ID: fileID(t, target)}}
		}, ""},
		{"a target in the user's home, for root", "", func(t *testing.T, w guardWorld) ([]string, []systemd.Credential, []jobunit.Pin) {
			return []string{mkdir(t, filepath.Join(w.home, "target"), 0)}, nil, nil
		}, "home is owned by uid 65534 (nobody), not root"},
		{"a target that is the user's link to /etc, for root", "", func(t *testing.T, w guardWorld) ([]string, []systemd.Credential, []jobunit.Pin) {
			return []string{symlink(t, "/etc", filepath.Join(w.root, "target"), nobody)}, nil, nil
		}, "target is a symbolic link owned by uid 65534 (nobody), not root"},
		{"a pinned target replaced since", "", func(t *testing.T, w guardWorld) ([]string, []systemd.Credential, []jobunit.Pin) {
			target := mkdir(t, filepath.Join(w.root, "target"), 0)
			id := fileID(t, target)
			if err := os.Rename(target, target+".old"); err != nil {
				t.Fatal(err)
			}
			mkdir(t, target, 0)
			return []string{target}, nil, []jobunit.Pin{{Path: target, ID: id}}
		}, "target is no longer the directory checked when the run was admitted"},
		{"a pinned target gone", "", func(t *testing.T, w guardWorld) ([]string, []systemd.Credential, []jobunit.Pin) {
			target := filepath.Join(w.root, "target")
			return []string{target}, nil, []jobunit.Pin{{Path: target, ID: model.FileID{Dev: 1, Ino: 1}}}
		}, "target cannot be reached: no such file or directory"},
		{"a repository not made yet is left out", "", func(t *testing.T, w guardWorld) ([]string, []systemd.Credential, []jobunit.Pin) {
			return []string{filepath.Join(w.root, "repo")}, nil, nil
		}, ""},
		{"the user's env file, linked to root's secret", "nobody", func(t *testing.T, w guardWorld) ([]string, []systemd.Credential, []jobunit.Pin) {
			secret := write(t, filepath.Join(w.root, "holdfast.env"), 0, 0o600, "HOLDFAST_DSN=postgres://holdfast:pw@db/holdfast")
			env := symlink(t, secret, filepath.Join(w.home, "job.env"), nobody)
			return nil, []systemd.Credential{{Name: credentials.Env, Path: env}}, nil
		}, "job.env is root's but reached through a directory or link the job's user controls"},
		{"the user's own env file, for the user", "nobody", func(t *testing.T, w guardWorld) ([]string, []systemd.Credential, []jobunit.Pin) {
			env := write(t, filepath.Join(w.home, "job.env"), nobody, 0o600, "secret")
			return []string{mkdir(t, filepath.Join(w.home, "repo"), nobody)}, []systemd.Credential{{Name: credentials.Env, Path: env}}, nil
		}, ""},
		{"a password file gone", "nobody", func(t *testing.T, w guardWorld) ([]string, []systemd.Credential, []jobunit.Pin) {
			return nil, []systemd.Credential{{Name: credentials.Password, Path: filepath.Join(w.root, "missing")}}, nil
		}, "missing cannot be reached: no such file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := setupGuard(t)
			writable, creds, pins := c.build(t, w)
			spec := systemd.Spec{Name: "u", Sandbox: &systemd.Sandbox{ReadOnlySystem: true, ReadWritePaths: slices.Clone(writable)},
				LoadCredentials: slices.Clone(creds)}
			job := model.Job{Name: "j", Engine: "restic", User: c.user}
			err := jobunit.Guard(jobunit.Config{StateDir: w.state}, job, &spec, "k", pins...)
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) || !safepath.Refused(err) {
					t.Fatalf("Guard: %v, want a refusal with %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Guard: %v", err)
			}
			for _, p := range spec.Sandbox.ReadWritePaths {
				if _, err := os.Lstat(p); err != nil {
					t.Errorf("writable path %s handed to systemd: %v", p, err)
				}
			}
			for _, cred := range spec.LoadCredentials {
				if want := filepath.Join(credentials.StagedDir(w.state, "k"), cred.Name); cred.Path != want {
					t.Errorf("credential %s from %s, want the staged copy %s", cred.Name, cred.Path, want)
				}
				if b, err := os.ReadFile(cred.Path); err != nil || !strings.Contains(string(b), "secret") {
					t.Errorf("staged credential %s: %q %v", cred.Name, b, err)
				}
			}
		})
	}
}

// userManager is a Runner of a user manager: Guard asks it which manager it is, nothing more.
type userManager struct{ jobunit.Runner }

func (userManager) SystemManager() bool { return false }

// A credential systemd encrypted is staged as it is and named by LoadCredentialEncrypted=, for
// the system manager to decrypt as the unit starts; a user manager, which would hand the unit the
// encrypted bytes, refuses it with what to do. A plain one stays LoadCredential='s.
func TestGuardEncryptedCredentials(t *testing.T) {
	w := setupGuard(t)
	sealed, err := os.ReadFile(filepath.Join("..", "credentials", "testdata", "host-key.cred"))
	if err != nil {
		t.Fatal(err)
	}
	enc := write(t, filepath.Join(w.root, "pw.cred"), 0, 0o600, string(sealed))
	env := write(t, filepath.Join(w.root, "job.env"), 0, 0o600, "AWS_SECRET_ACCESS_KEY=x\n")
	spec := systemd.Spec{Name: "u", LoadCredentials: []systemd.Credential{{Name: credentials.Password, Path: enc}, {Name: credentials.Env, Path: env}}}
	job := model.Job{Name: "j", Engine: "restic", PasswordFile: enc, EnvFile: env}
	if err := jobunit.Guard(jobunit.Config{StateDir: w.state}, job, &spec, "k"); err != nil {
		t.Fatal(err)
	}
	for _, c := range spec.LoadCredentials {
		b, err := os.ReadFile(c.Path)
		switch {
		case err != nil:
			t.Fatal(err)
		case filepath.Dir(c.Path) != credentials.StagedDir(w.state, "k"):
			t.Errorf("credential %s from %s, want the staged copy", c.Name, c.Path)
		case c.Name == credentials.Password && (!c.Encrypted || string(b) != string(sealed)):
			t.Errorf("the encrypted password staged as %+v: %q", c, b)
		case c.Name == credentials.Env && c.Encrypted:
			t.Errorf("the plain environment file staged as encrypted: %+v", c)
		}
	}

	plain := write(t, filepath.Join(w.root, "pw"), 0, 0o600, "secret")
	for _, c := range []struct {
		name     string
		password string
		envFiles []string
		want     string
	}{
		{"an encrypted password file", enc, nil, "pw.cred is a credential encrypted by systemd-creds, which only the system manager decrypts"},
		{"an encrypted environment file", plain, []string{enc}, "pw.cred is a credential encrypted by systemd-creds"},
		{"an encrypted password file of the user's", write(t, filepath.Join(w.home, "pw.cred"), nobody, 0o600, string(sealed)), nil, "pw.cred is a credential encrypted by systemd-creds"},
		{"plain files", plain, []string{env}, ""},
	} {
		spec := systemd.Spec{Name: "u", EnvironmentFiles: c.envFiles}
		job := model.Job{Name: "j", Engine: "restic", PasswordFile: c.password}
		err := jobunit.Guard(jobunit.Config{StateDir: w.state, Runner: userManager{}}, job, &spec, "k2")
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !safepath.Refused(err)) {
			t.Errorf("%s under a user manager: Guard = %v, want %q", c.name, err, c.want)
		}
	}
}
