package reconcile_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

// restic's questions about a job's repository run as the job's user, in a unit of its own:
// links the user put in its cache lead nowhere the user could not go itself, root writes nothing
// through them, and what only root may read stays unread.
func TestJobResticRunsAsTheJobsUser(t *testing.T) {
	t.Parallel()
	resticBin := testenv.Restic(t)
	dir := testenv.SharedDir(t)
	mgr := testenv.Systemd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel) // not defer: the parallel cases below run after this function returned
	rn, err := systemd.New(ctx, systemd.Config{Manager: "user", Address: mgr.Address})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rn.Close() })

	pw, data := filepath.Join(dir, "pw"), filepath.Join(dir, "data")
	if err := os.WriteFile(pw, []byte(testenv.ResticPassword+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := reconcile.Config{Runner: rn, StateDir: filepath.Join(dir, "state"), Binary: testenv.HoldfastBinary(t), ResticBinary: resticBin}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// newJob is a job of nobody's on a repository of its own holding one snapshot. restic
	// 0.14 retries a refused read for some 40s before it gives up or goes on: the cases that
	// provoke one run at once, each on its own repository and cache.
	newJob := func(t *testing.T, name string) (engine.Restic, engine.Job, string) {
		t.Helper()
		repo := filepath.Join(dir, name)
		testenv.ResticRepo(t, repo)
		backup := exec.Command(resticBin, "--repo", repo, "--password-file", pw, "--no-cache", "backup", "--tag", "holdfast-run="+uuid.Nil.String(), data)
		if out, err := backup.CombinedOutput(); err != nil {
			t.Fatalf("restic backup: %v\n%s", err, out)
		}
		if err := exec.Command("chown", "-R", "nobody", repo).Run(); err != nil {
			t.Fatal(err)
		}
		job := model.Job{Name: name, Engine: "restic", Repository: repo, PasswordFile: pw, Paths: []string{data}, User: "nobody"}
		restic, ej := reconcile.JobRestic(cfg, job)
		// A lock-free question is answered, as nobody: the listing is the repository's.
		if snaps, err := restic.ListSnapshots(ctx, ej); err != nil || len(snaps) != 1 {
			t.Fatalf("ListSnapshots = %d snapshots, %v; want 1", len(snaps), err)
		}
		return restic, ej, repo
	}

	t.Run("linked cache", func(t *testing.T) {
		t.Parallel()
		restic, ej, _ := newJob(t, "links")
		// The user links a subdirectory of its cache to a directory of root's: restic, as
		// nobody, cannot write through it. restic 0.14 still answers the question; later
		// releases (0.16.4, 0.19.1 seen) leave the snapshot out and exit 0, which holdfast refuses as a
		// partial answer.
		// Never is an answer without the snapshot taken for the repository's.
		trap := filepath.Join(dir, "root-only")
		if err := os.Mkdir(trap, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(trap, "keep"), []byte("root's"), 0o600); err != nil {
			t.Fatal(err)
		}
		caches, err := filepath.Glob(filepath.Join(ej.CacheDir, "*", "snapshots"))
		if err != nil || len(caches) != 1 {
			t.Fatalf("the job's cache has %v (%v), want one repository's snapshots/", caches, err)
		}
		if err := os.RemoveAll(caches[0]); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(trap, caches[0]); err != nil {
			t.Fatal(err)
		}
		snaps, err := restic.ListSnapshots(ctx, ej)
		switch {
		case err != nil && strings.Contains(err.Error(), "restic left out snapshot "):
			t.Logf("ListSnapshots with a linked cache refused restic's partial answer: %v", err)
		case err != nil || len(snaps) != 1:
			t.Fatalf("ListSnapshots with a linked cache = %d snapshots, %v; want 1, or a refusal of a partial answer", len(snaps), err)
		}
		trapUntouched(t, trap)
	})

	t.Run("file only root may read", func(t *testing.T) {
		t.Parallel()
		restic, ej, repo := newJob(t, "config")
		// Only the job's user's reach counts: a repository file root alone may read stops
		// restic, where restic run as root would have read it.
		config := filepath.Join(repo, "config")
		if err := os.Chown(config, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(config, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := restic.RunSnapshots(ctx, ej, uuid.Nil); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("RunSnapshots with a config only root can read: err = %v, want permission denied (did it run as root?)", err)
		}
	})

	t.Cleanup(func() {
		// The cache is the user's own and per uid; none is left for root.
		if _, err := os.Stat(filepath.Join(cfg.StateDir, "cache", "0")); !os.IsNotExist(err) {
			t.Errorf("a root cache exists: %v", err)
		}
	})
}

func trapUntouched(t *testing.T, trap string) {
	t.Helper()
	entries, err := os.ReadDir(trap)
	if err != nil || len(entries) != 1 || entries[0].Name() != "keep" {
		t.Fatalf("root's directory now holds %v (%v): something wrote through the user's link", entries, err)
	}
}
