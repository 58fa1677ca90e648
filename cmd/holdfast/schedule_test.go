package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

type jobJSON struct {
	Name         string  `json:"name"`
	NextRunAt    *string `json:"next_run_at"`
	NextPruneAt  *string `json:"next_prune_at"`
	MissedSlots  int64   `json:"missed_slots"`
	OverlapSkips int64   `json:"overlap_skips"`
	LastSkipWhy  string  `json:"last_skip_why"`
	LastOutcome  string  `json:"last_outcome"`
	// The watching side.
	OverdueSince  *string `json:"overdue_since"`
	OverdueReason string  `json:"overdue_reason"`
}

type listedRun struct {
	ID            string  `json:"id"`
	Job           string  `json:"job"`
	Kind          string  `json:"kind"`
	Status        string  `json:"status"`
	Trigger       string  `json:"trigger"`
	CopySnapshot  string  `json:"copy_snapshot"`
	PlannedAt     *string `json:"planned_at"`
	StartedAt     *string `json:"started_at"`
	FinishedAt    *string `json:"finished_at"`
	Reason        string  `json:"reason"`
	FailureClass  string  `json:"failure_class"`
	NotBefore     *string `json:"not_before"`
	WaitingReason string  `json:"waiting_reason"`
	RetryOf       string  `json:"retry_of"`
	RetryNumber   int     `json:"retry_number"`
	RetriedBy     string  `json:"retried_by"`
	CreatedAt     string  `json:"created_at"`
}

func (w *world) runs(job string) []listedRun {
	w.t.Helper()
	var runs []listedRun
	if err := json.Unmarshal([]byte(w.mustRun("run", "list", "--job", job, "--limit", "1000", "--json")), &runs); err != nil {
		w.t.Fatal(err)
	}
	return runs
}

// waitRuns polls until cond holds for the job's runs as `run list --json` lists them, or fails
// the test.
func (w *world) waitRuns(job, what string, cond func([]listedRun) bool) []listedRun {
	w.t.Helper()
	return await(w.t, "job "+job+": "+what, func() string { return w.runsFingerprint(job) }, func() []listedRun { return w.runs(job) }, cond)
}

// runsFingerprint is the job's runs as the store reads them; "" if they could not be read.
func (w *world) runsFingerprint(job string) string {
	runs, err := w.storeRuns(job)
	if err != nil {
		return ""
	}
	fp, err := json.Marshal(runs)
	if err != nil {
		return ""
	}
	return string(fp)
}

func (w *world) job(name string) jobJSON {
	w.t.Helper()
	var j jobJSON
	if err := json.Unmarshal([]byte(w.mustRun("job", "show", name, "--json")), &j); err != nil {
		w.t.Fatal(err)
	}
	return j
}

func parseTime(t *testing.T, s *string) time.Time {
	t.Helper()
	if s == nil {
		t.Fatal("time missing")
	}
	v, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// lockRepo leaves an exclusive restic lock in a local repository that no `restic unlock` takes
// for stale: a prune on "another host" (its own UTS namespace) killed while it held the lock.
// release removes it.
func (w *world) lockRepo(repo, pw string) (release func()) {
	w.t.Helper()
	for try := 0; try < 5; try++ {
		cmd := exec.Command("unshare", "--uts", "sh", "-c", `hostname elsewhere && exec restic --repo "$1" --password-file "$2" --no-cache prune`,
			"sh", repo, pw)
		if err := cmd.Start(); err != nil {
			w.t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if lockFiles(repo) > 0 {
				break
			}
			if time.Now().After(deadline) {
				w.t.Fatal("prune never took its lock")
			}
			time.Sleep(time.Millisecond)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The prune may have finished and removed its lock first: then try again.
		if lockFiles(repo) > 0 {
			release = func() { w.restic(repo, pw, "unlock", "--remove-all") }
			return release
		}
	}
	w.t.Fatal("could not leave a lock behind")
	return nil
}

// lockFiles counts the finished lock files of a local repository; restic writes each under a
// temporary name first, which counts for nothing.
func lockFiles(repo string) int {
	entries, _ := os.ReadDir(filepath.Join(repo, "locks"))
	n := 0
	for _, e := range entries {
		if len(e.Name()) == 64 && strings.Trim(e.Name(), "0123456789abcdef") == "" {
			n++
		}
	}
	return n
}

// A transiently failing job (its repository is locked) is retried with growing delays and then
// succeeds; a permanently failing one is not retried.
func TestRetries(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 2, 4<<20)
	w.restic(repo, pw, "backup", data) // something for prune to chew on
	w.mustRun("job", "add", "locked", "--repo", repo, "--password-file", pw, "--path", data,
		"--retry-max", "3", "--retry-backoff", "2s")
	wrong := filepath.Join(w.dir, "wrong.pw")
	if err := os.WriteFile(wrong, []byte("nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mustRun("job", "add", "badpw", "--repo", repo, "--password-file", wrong, "--path", data, "--retry-max", "3", "--retry-backoff", "1s")
	w.lockRepo(repo, pw)
	// Two failures while locked, then the lock goes and the third try succeeds: the job's third
	// backup removes the lock just before it runs restic, whenever that is. The count is kept in
	// the repository's directory, which the unit's sandbox lets it write (restic ignores it).
	unlocking := w.script("unlock-third", `#!/bin/sh
case " $* " in
*" --password-file PW "*" backup "*)
	n=$(cat COUNT 2>/dev/null || echo 0)
	echo $((n + 1)) > COUNT
	[ "$n" -ge 2 ] && REAL --repo REPO --password-file PW --no-cache unlock --remove-all >/dev/null 2>&1 ;;
esac
exec REAL "$@"
`, "REAL", testenv.Restic(t), "COUNT", filepath.Join(repo, "holdfast-test-backups"), "REPO", repo, "PW", pw)
	w.startDaemon("--restic", unlocking)
	first := w.startRun("locked")
	bad := w.startRun("badpw")

	r1 := w.waitEnd(first)
	if r1.Status != "failed" || r1.FailureClass != "transient" {
		t.Fatalf("first run = %+v, want failed, transient", r1)
	}
	chain := w.waitRuns("locked", "a retry's success", func(chain []listedRun) bool { return chain[0].Status == "succeeded" })
	// Newest first: the success, then the failures it retried, each linked to the next.
	sort.Slice(chain, func(a, b int) bool {
		return parseTime(t, &chain[a].CreatedAt).Before(parseTime(t, &chain[b].CreatedAt))
	})
	if len(chain) != 3 || chain[1].Trigger != "retry" || chain[2].RetryNumber != 2 || chain[0].RetriedBy != chain[1].ID {
		t.Fatalf("retry chain = %+v, want manual, retry 1, retry 2 linked in order", chain)
	}
	delay := func(i int) time.Duration {
		return parseTime(t, chain[i].NotBefore).Sub(parseTime(t, chain[i-1].FinishedAt))
	}
	// 2s and 4s, each moved by up to ±20% of jitter.
	if d1, d2 := delay(1), delay(2); d1 < 1600*time.Millisecond || d1 > 2400*time.Millisecond || d2 < 3200*time.Millisecond || d2 > 4800*time.Millisecond {
		t.Fatalf("retry delays %s then %s, want about 2s then 4s (growing)", d1, d2)
	}

	// A retry is made in the transaction that ends the run it retries: none now, none ever.
	rb := w.waitEnd(bad)
	if runs := w.runs("badpw"); rb.Status != "failed" || rb.FailureClass != "permanent" || len(runs) != 1 || runs[0].RetriedBy != "" {
		t.Fatalf("wrong password: %+v and runs %+v, want one permanent failure, never retried", rb, runs)
	}
	w.checkInvariants()
}
