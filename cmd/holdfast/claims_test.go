package main_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/testenv"
)

// script writes an executable shell script under the world's directory, with each placeholder
// of vars replaced, and returns its path.
func (w *world) script(name, body string, vars ...string) string {
	w.t.Helper()
	path := filepath.Join(w.dir, name)
	if err := os.WriteFile(path, []byte(strings.NewReplacer(vars...).Replace(body)), 0o755); err != nil {
		w.t.Fatal(err)
	}
	return path
}

func repoSize(t *testing.T, repo string) int64 {
	t.Helper()
	n, err := ledger.RepoSize(repo)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A job running as nobody puts 50 MiB of fresh random data into a local repository while its
// journal says restic added nothing: restic runs through a wrapper, as the job's user inside the
// unit, that rewrites the summary's data_added to 0 before holdfast exec journals it. The
// journal is a claim; the charge is the growth root measured, and says so.
func TestForgedJournalCharge(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	openToAll(t, repo)
	data := w.sampleData("data", 5, 50<<20)
	forger := w.script("forge-restic", `#!/bin/bash
# The job's user, inside the unit: the real restic, with a summary that claims nothing was added.
set -o pipefail
case " $* " in
*" backup "*) REAL "$@" | sed -u -e 's/"data_added":[0-9]*/"data_added":0/' ;;
*) exec REAL "$@" ;;
esac
`, "REAL", testenv.Restic(t))
	w.mustRun("job", "add", "forged", "--repo", repo, "--password-file", pw, "--path", data, "--user", "nobody")
	before := repoSize(t, repo)
	w.startDaemon("--restic", forger)
	r := w.waitEnd(w.startRun("forged"))
	grown := repoSize(t, repo) - before
	if r.Status != "succeeded" || r.BytesAdded == nil || *r.BytesAdded != 0 {
		t.Fatalf("run = %+v, want succeeded with the forged bytes_added 0 in its journal", r)
	}
	if grown < 50<<20 {
		t.Fatalf("the repository grew by %d, want the 50 MiB of random data", grown)
	}
	// The daemon measured at the spawn and at the end; the inventory refresh after the run may
	// hold a lock file of a few hundred bytes while the test measures.
	settle, ok := w.ledger("default").entries(r.ID, "settle")[1]
	if !ok || settle.Bytes < grown-4096 || settle.Bytes > grown+4096 || r.SettledBytes != settle.Bytes {
		t.Fatalf("run %s charged %+v, want the measured growth %d", r.ID, settle, grown)
	}
	t.Logf("the repository grew by %d bytes, the journal claimed 0; charged %d: %s", grown, settle.Bytes, settle.Note)
	if !strings.Contains(settle.Note, "measured growth of the local repository; the run reported less (data_added 0 B)") {
		t.Fatalf("settlement note %q, want it to say the measured growth was charged over the run's lower claim", settle.Note)
	}
	if !strings.Contains(r.Attempts[0].Settlement, "measured growth") {
		t.Fatalf("run show --json attempt = %+v, want the settlement's source", r.Attempts[0])
	}
	if out := w.mustRun("run", "show", r.ID); !strings.Contains(out, "charged from: measured growth") {
		t.Fatalf("run show does not say where the charge came from:\n%s", out)
	}
	w.checkInvariants()
}

// A job running as nobody whose repository's locks/ and one data/ subdirectory are links to a
// big root-owned directory: while the run is live, root writes pack-named files there. Neither
// the runaway guard (inotify and the per-pass measurement) nor the settlement counts them: the
// run is not stopped for a ceiling it never reached, and its charge is what its own repository
// grew by.
func TestRepositoryLinksNotMeasured(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	openToAll(t, repo)
	big := filepath.Join(w.dir, "big")
	if err := os.Mkdir(big, 0o755); err != nil {
		t.Fatal(err)
	}
	writePacks := func(n int, size int) {
		buf := make([]byte, size)
		for range n {
			name := make([]byte, 32)
			_, _ = rand.Read(name)
			_, _ = rand.Read(buf)
			// As restic writes a pack: under a temporary name, renamed once complete.
			tmp := filepath.Join(big, "tmp-pack")
			if err := os.WriteFile(tmp, buf, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(big, hex.EncodeToString(name))); err != nil {
				t.Fatal(err)
			}
		}
	}
	writePacks(4, 4<<20)
	if err := os.RemoveAll(filepath.Join(repo, "locks")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(repo, "data", "ff")); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{"locks", "data/ff"} {
		path := filepath.Join(repo, link)
		if err := os.Symlink(big, path); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	// The job's restic waits until root has written while the run is live.
	gate := filepath.Join(w.dir, "go")
	waiter := w.script("waiting-restic", `#!/bin/bash
case " $* " in
*" backup "*) for i in $(seq 1200); do [ -e GATE ] && break; sleep 0.1; done; exec REAL "$@" ;;
*) exec REAL "$@" ;;
esac
`, "REAL", testenv.Restic(t), "GATE", gate)
	data := w.sampleData("data", 1, 1<<20)
	w.mustRun("job", "add", "linked", "--repo", repo, "--password-file", pw, "--path", data, "--user", "nobody", "--max-added", "20MiB")
	before := repoSize(t, repo)
	w.startDaemon("--restic", waiter)
	id := w.startRun("linked")
	// running: the unit started and the watch was armed.
	w.waitRun(id, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	writePacks(10, 4<<20) // 40 MiB, twice the hold, behind the links
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := w.waitEnd(id)
	if r.Status == "paused" || r.PausedReason != "" {
		t.Fatalf("run = %+v: stopped for files behind links, which are not its repository's", r)
	}
	grown := repoSize(t, repo) - before
	settle, ok := w.ledger("default").entries(id, "settle")[1]
	if !ok || settle.Bytes != max(grown, 0) || settle.Bytes > 1<<20 || !strings.Contains(settle.Note, "measured growth") {
		t.Fatalf("run %+v charged %+v, want the growth of its own repository (%d), nothing of the 56 MiB behind its links", r, settle, grown)
	}
	t.Logf("run %s; charged %d: %s", r.Status, settle.Bytes, settle.Note)
	if n := repoSize(t, repo); n > 1<<20 {
		t.Fatalf("the repository measures %s, want only its own files", strconv.FormatInt(n, 10))
	}
	w.checkInvariants()
}
