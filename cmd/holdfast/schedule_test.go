package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/store"
)

type jobJSON struct {
	Name         string  `json:"name"`
	NextRunAt    *string `json:"next_run_at"`
	NextPruneAt  *string `json:"next_prune_at"`
	MissedSlots  int64   `json:"missed_slots"`
	OverlapSkips int64   `json:"overlap_skips"`
	LastSkipWhy  string  `json:"last_skip_why"`
	LastOutcome  string  `json:"last_outcome"`
}

type listedRun struct {
	ID            string  `json:"id"`
	Job           string  `json:"job"`
	Status        string  `json:"status"`
	Trigger       string  `json:"trigger"`
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

// count is how many of runs have the status.
func count(runs []listedRun, status string) int {
	n := 0
	for _, r := range runs {
		if r.Status == status {
			n++
		}
	}
	return n
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

// An @every 2s job whose runs take 3s runs again and again, never overlapping itself; the slots
// it could not run are recorded as skipped.
func TestScheduleNoOverlap(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.mustRun("job", "add", "slow", "--engine", "command", "--command", "/bin/sleep", "--command", "3", "--schedule", "@every 2s")
	w.startDaemon()
	// Until two runs ended and a slot was skipped for a live run: then runs followed each other
	// and met a slot while one was live.
	w.waitRuns("slow", "two successes and a skipped slot", func(runs []listedRun) bool {
		return count(runs, "succeeded") >= 2 && w.job("slow").OverlapSkips > 0
	})
	w.mustRun("job", "edit", "slow", "--schedule", "") // stop scheduling, let the last run end
	runs := w.waitNoLive("slow")
	if len(runs) < 2 {
		t.Fatalf("%d runs, want at least 2", len(runs))
	}
	// Every run has its own attempt interval; none overlaps the next.
	var spans [][2]time.Time
	for _, r := range runs {
		show := w.show(r.ID)
		if show.Status != "succeeded" {
			t.Fatalf("run %s = %+v, want succeeded", r.ID, show)
		}
		var full struct {
			Attempts []struct {
				StartedAt *string `json:"started_at"`
				EndedAt   *string `json:"ended_at"`
			} `json:"attempts"`
		}
		if err := json.Unmarshal([]byte(w.mustRun("run", "show", r.ID, "--json")), &full); err != nil {
			t.Fatal(err)
		}
		a := full.Attempts[0]
		spans = append(spans, [2]time.Time{parseTime(t, a.StartedAt), parseTime(t, a.EndedAt)})
		if r.Trigger != "schedule" || r.PlannedAt == nil {
			t.Fatalf("run %+v: want trigger schedule with planned_at", r)
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0].Before(spans[j][0]) })
	for i := 1; i < len(spans); i++ {
		if spans[i][0].Before(spans[i-1][1]) {
			t.Fatalf("runs overlap: %v and %v", spans[i-1], spans[i])
		}
	}
	j := w.job("slow")
	if j.OverlapSkips == 0 || !strings.Contains(j.LastSkipWhy, "still live") {
		t.Fatalf("job = %+v, want skipped slots recorded with the reason", j)
	}
	w.checkInvariants()
}

// Two daemons share one database: over more than 100 slots every slot is started exactly once.
//
// Not parallel: a slot a second per job needs much of the machine, or most slots are skipped
// or missed and the two daemons are hardly ever tested against each other.
func TestTwoDaemonsEachSlotOnce(t *testing.T) {
	w := newWorld(t)
	const jobs = 10
	for i := range jobs {
		w.mustRun("job", "add", fmt.Sprintf("tick%d", i), "--engine", "command", "--command", "/bin/true", "--schedule", "@every 1s")
	}
	w.startDaemon()
	w.startDaemon()
	// Until 50 slots ran (a loaded machine runs fewer a second), for a minute at most. The
	// store, read in this process, counts: ten `run list` a second would take CPU from the daemons.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		runs, _ := w.storeRuns("") // the ten jobs are the world's only ones
		if len(runs) >= 50 {
			break
		}
	}
	for i := range jobs {
		w.mustRun("job", "edit", fmt.Sprintf("tick%d", i), "--schedule", "")
	}
	total := 0
	for i := range jobs {
		name := fmt.Sprintf("tick%d", i)
		runs := w.runs(name)
		seen := map[string]bool{}
		var planned []time.Time
		for _, r := range runs {
			if seen[*r.PlannedAt] {
				t.Fatalf("%s: slot %s started twice", name, *r.PlannedAt)
			}
			seen[*r.PlannedAt] = true
			planned = append(planned, parseTime(t, r.PlannedAt))
		}
		sort.Slice(planned, func(a, b int) bool { return planned[a].Before(planned[b]) })
		j := w.job(name)
		span := int(planned[len(planned)-1].Sub(planned[0])/time.Second) + 1
		// Every slot between the first and the last run is run, skipped or counted missed (a
		// loaded machine can leave an admission pass late by more than a slot); skips and misses
		// may also fall outside that span. No slot ran twice (seen, above).
		if got := len(planned) + int(j.OverlapSkips) + int(j.MissedSlots); got < span {
			t.Fatalf("%s: %d runs + %d skipped (previous run live) for %d slots, %d missed; want every slot accounted for",
				name, len(planned), j.OverlapSkips, span, j.MissedSlots)
		}
		total += len(planned)
	}
	if total < 50 {
		t.Fatalf("only %d slots ran, want at least 50", total)
	}
	t.Logf("%d slots ran once each across two daemons", total)
	w.checkInvariants()
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
	t.Parallel()
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
	release := w.lockRepo(repo, pw)
	w.startDaemon()
	first := w.startRun("locked")
	bad := w.startRun("badpw")

	// Two failures while locked, then the lock goes and the third try succeeds.
	r1 := w.waitEnd(first)
	if r1.Status != "failed" || r1.FailureClass != "transient" {
		t.Fatalf("first run = %+v, want failed, transient", r1)
	}
	w.waitRuns("locked", "a second failure", func(chain []listedRun) bool { return count(chain, "failed") >= 2 })
	release()
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

	rb := w.waitEnd(bad)
	time.Sleep(3 * time.Second) // longer than its first retry would wait
	if rb.Status != "failed" || rb.FailureClass != "permanent" || len(w.runs("badpw")) != 1 {
		t.Fatalf("wrong password: %+v and %d runs, want one permanent failure, never retried", rb, len(w.runs("badpw")))
	}
	w.checkInvariants()
}

// 24 runs admitted at once with a global limit of 4 never have more than 4 units running, wait
// with a visible reason, and all end.
func TestGlobalLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const n = 24
	for i := range n {
		w.mustRun("job", "add", fmt.Sprintf("crowd%d", i), "--engine", "command", "--command", "/bin/sleep", "--command", "0.3")
	}
	for i := range n {
		w.startRun(fmt.Sprintf("crowd%d", i))
	}
	w.startDaemon("--max-running", "4")
	conn := w.mgr.Conn(t)
	var most atomic.Int64
	stop := make(chan struct{})
	polled := make(chan error, 1)
	go func() { // systemd's own count, sampled often
		for {
			select {
			case <-stop:
				polled <- nil
				return
			default:
			}
			units, err := conn.ListUnitsByPatternsContext(context.Background(),
				[]string{"active", "activating", "deactivating", "reloading"}, []string{"holdfast-crowd*"})
			if err != nil {
				polled <- err
				return
			}
			if c := int64(len(units)); c > most.Load() {
				most.Store(c)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// The store, read in this process, is polled: a `run list` every few hundred milliseconds
	// would take CPU from the daemon. `run list` shows the end.
	sawWaiting := false
	deadline := time.Now().Add(3 * time.Minute)
	for {
		done := 0
		runs, _ := w.storeRuns("")
		for _, r := range runs {
			sawWaiting = sawWaiting || strings.Contains(r.WaitingReason, "global limit is 4")
			if r.Status == store.StatusSucceeded {
				done++
			}
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d runs ended", done, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var all []listedRun
	if err := json.Unmarshal([]byte(w.mustRun("run", "list", "--limit", "1000", "--json")), &all); err != nil {
		t.Fatal(err)
	}
	if len(all) != n || slices.ContainsFunc(all, func(r listedRun) bool { return r.Status != "succeeded" }) {
		t.Fatalf("run list shows %+v, want %d runs, all succeeded", all, n)
	}
	close(stop)
	if err := <-polled; err != nil {
		t.Fatal(err)
	}
	if peak := most.Load(); peak > 4 {
		t.Fatalf("%d units ran at once, the limit is 4", peak)
	}
	if !sawWaiting {
		t.Fatal("no queued run said why it waited")
	}
	t.Logf("at most %d units at once", most.Load())
	w.checkInvariants()
}
