package supervisor_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

// The rules that order runs (priority, the global limit, dependencies, no overlap of a job
// with itself, each slot once under several supervisors) are shown here with the daemon in process:
// jobs and runs are set up through the store, units are real (systemd, the exec wrapper, the
// exit marker), and nothing else starts a process. cmd/holdfast's tests keep what only the
// binary shows.

// attemptSpan is when the run's first attempt's spawn was claimed and when it ended: the span in
// which it held its place. (Its start may stay unrecorded: a sweep can finish a short run from
// its marker before the spawn marked it started.)
func (e env) attemptSpan(t *testing.T, run model.Run) (claimed, ended time.Time) {
	t.Helper()
	attempts, err := e.st.AttemptList(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) == 0 || attempts[0].SpawnClaimedAt == nil || attempts[0].EndedAt == nil {
		t.Fatalf("run %s: attempts %+v, want a first attempt that was claimed and ended", run.ID, attempts)
	}
	return *attempts[0].SpawnClaimedAt, *attempts[0].EndedAt
}

// With one place free at a time, queued runs of higher priority start first: their spawns are
// claimed first (claims are made one at a time, in the sweep's order, when places are limited).
func TestPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.cfg.Reconcile.Limits.MaxRunning = 1
	var runs []model.Run
	for i := range 6 {
		name := fmt.Sprintf("p%d", i)
		e.createJob(t, model.Job{Name: name, Engine: "command", Command: []string{"/bin/sleep", "0.2"}, Priority: 10 * (i % 2)})
		runs = append(runs, e.admit(t, name))
	}
	e.start(t)
	type start struct {
		job string
		at  time.Time
	}
	var starts []start
	for _, run := range runs {
		if r := e.waitEnded(t, run.ID.String(), time.Minute); r.Status != model.StatusSucceeded {
			t.Fatalf("run of %s: %s (%s), want succeeded", run.JobName, r.Status, r.Reason)
		}
		at, _ := e.attemptSpan(t, run)
		starts = append(starts, start{run.JobName, at})
	}
	sort.Slice(starts, func(a, b int) bool { return starts[a].at.Before(starts[b].at) })
	for k, s := range starts[:3] {
		if n := s.job[1] - '0'; n%2 != 1 {
			t.Fatalf("start %d was %s (priority 0) before all priority-10 runs: %+v", k, s.job, starts)
		}
	}
	e.checkInvariants(t)
}

// 24 runs admitted at once with a global limit of 4 never hold more than 4 places (attempts with
// a unit and no recorded end, sampled from the record), nor have more than 4 units whose main
// process lives (as systemd says, sampled every 10 ms; a unit still stopping after its end was
// recorded holds no place), wait with a visible reason, and all end.
func TestGlobalLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.cfg.Reconcile.Limits.MaxRunning = 4
	const n = 24
	for i := range n {
		name := fmt.Sprintf("crowd%d", i)
		e.createJob(t, model.Job{Name: name, Engine: "command", Command: []string{"/bin/sleep", "0.3"}})
		e.admit(t, name)
	}
	db, err := pgx.Connect(ctx, e.cfg.Database.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	e.start(t)
	conn := e.mgr.Conn(t)
	var most, mostHeld atomic.Int64
	stop, polled := make(chan struct{}), make(chan error, 2)
	var sampling sync.WaitGroup
	stopSampling := sync.OnceFunc(func() { close(stop); sampling.Wait() })
	defer stopSampling() // before db is closed
	sample := func(count func() (int64, error), peak *atomic.Int64) {
		defer sampling.Done()
		for {
			select {
			case <-stop:
				polled <- nil
				return
			default:
			}
			c, err := count()
			if err != nil {
				polled <- err
				return
			}
			if c > peak.Load() {
				peak.Store(c)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	sampling.Add(2)
	go sample(func() (int64, error) {
		units, err := conn.ListUnitsByPatternsContext(ctx, []string{"activating", "active", "deactivating", "reloading"}, []string{"holdfast-crowd*"})
		c := int64(0)
		for _, u := range units {
			switch u.SubState { // its main process lives, or is about to: not stopping
			case "start-pre", "start", "start-post", "running":
				c++
			}
		}
		return c, err
	}, &most)
	go sample(func() (int64, error) {
		var c int64
		err := db.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE unit IS NOT NULL AND ended_at IS NULL`).Scan(&c)
		return c, err
	}, &mostHeld)
	sawWaiting := false
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		all, err := e.st.RunList(context.Background(), "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, r := range all {
			sawWaiting = sawWaiting || strings.Contains(r.WaitingReason, "global limit is 4")
			if !model.Live(r.Status) {
				done++
			}
		}
		if done == n {
			if i := slices.IndexFunc(all, func(r model.Run) bool { return r.Status != model.StatusSucceeded }); i >= 0 {
				t.Fatalf("run %+v, want every run succeeded", all[i])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d runs ended", done, n)
		}
	}
	stopSampling()
	for range 2 {
		if err := <-polled; err != nil {
			t.Fatal(err)
		}
	}
	if peak := mostHeld.Load(); peak > 4 || peak == 0 {
		t.Fatalf("%d places held at once, want between 1 and the limit of 4", peak)
	}
	if peak := most.Load(); peak > 4 || peak == 0 {
		t.Fatalf("%d units ran at once, want between 1 and the limit of 4", peak)
	}
	if !sawWaiting {
		t.Fatal("no queued run said why it waited")
	}
	t.Logf("at most %d places held and %d units running at once", mostHeld.Load(), most.Load())
	e.checkInvariants(t)
}

// A run waits for its prerequisite's next outcome at most DependsWait, then fails naming it.
func TestDependencyWaitIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.cfg.Reconcile.DependsWait = 2 * time.Second
	e.createJob(t, model.Job{Name: "idle", Engine: "command", Command: []string{"/bin/true"}})
	e.createJob(t, model.Job{Name: "after", Engine: "command", Command: []string{"/bin/true"}, DependsOn: "idle"})
	e.start(t)
	queued := time.Now()
	run := e.admit(t, "after")
	r := e.waitEnded(t, run.ID.String(), time.Minute)
	if r.Status != model.StatusFailed || r.FailureClass != "permanent" || !strings.Contains(r.Reason, "prerequisite job idle") ||
		!strings.Contains(r.Reason, "never run") || !strings.Contains(r.Reason, "within 2s") {
		t.Fatalf("after: %s (%s, %s), want failed, permanent, naming idle, never run and the 2s bound", r.Status, r.FailureClass, r.Reason)
	}
	if waited := time.Since(queued); waited < 2*time.Second {
		t.Fatalf("failed after %s, before the 2s bound", waited)
	}
	if attempts, err := e.st.AttemptList(context.Background(), run.ID); err != nil || len(attempts) != 1 || attempts[0].Unit != "" {
		t.Fatalf("attempts %+v (%v), want one that never started a unit", attempts, err)
	}
	e.checkInvariants(t)
}

// An @every 2s job whose runs take 3s runs again and again, never overlapping itself; the slots
// it could not run are recorded as skipped, with the reason.
func TestScheduleNoOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.scheduled(t, "slow", "@every 2s", nextSecond(), "/bin/sleep", "3")
	e.start(t)
	// Until two runs ended and a slot was skipped for a live run: then runs followed each other
	// and met a slot while one was live.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		runs, err := e.st.RunList(ctx, "slow", 100)
		if err != nil {
			t.Fatal(err)
		}
		j, err := e.st.JobGet(ctx, "slow")
		if err != nil {
			t.Fatal(err)
		}
		ended := slices.DeleteFunc(runs, func(r model.Run) bool { return model.Live(r.Status) })
		if len(ended) >= 2 && j.OverlapSkips > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two ended runs and a skipped slot: job %+v, runs %+v", j, runs)
		}
	}
	// No more slots; the last run ends.
	if _, err := e.st.JobUpdate(ctx, "slow", func(j *model.Job) error { j.Schedule, j.NextRunAt = "", nil; return nil }); err != nil {
		t.Fatal(err)
	}
	var runs []model.Run
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if runs, err = e.st.RunList(ctx, "slow", 100); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(runs, func(r model.Run) bool { return model.Live(r.Status) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs still live a minute after the schedule was removed: %+v", runs)
		}
	}
	var spans [][2]time.Time
	for _, r := range runs {
		if r.Status != model.StatusSucceeded || r.Trigger != "schedule" || r.PlannedAt == nil {
			t.Fatalf("run %+v, want succeeded, triggered by the schedule at a planned slot", r)
		}
		claimed, ended := e.attemptSpan(t, r)
		spans = append(spans, [2]time.Time{claimed, ended})
	}
	// Each run's spawn is claimed only once the one before it has ended.
	sort.Slice(spans, func(i, j int) bool { return spans[i][0].Before(spans[j][0]) })
	for i := 1; i < len(spans); i++ {
		if spans[i][0].Before(spans[i-1][1]) {
			t.Fatalf("runs overlap: claimed and ended %v, then claimed at %s", spans[i-1], spans[i][0])
		}
	}
	j, err := e.st.JobGet(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	if j.OverlapSkips == 0 || !strings.Contains(j.LastSkipWhy, "still live") {
		t.Fatalf("job %+v, want skipped slots recorded with the reason", j)
	}
	e.checkInvariants(t)
}

// Three supervisors, each another host's daemon over one database, run jobs due every second:
// each slot runs once, on the job's pinned host when it has one and on any of them when not.
// (cmd/holdfast's TestHostsPinning shows a pinned run on its own host's manager.)
//
// Not parallel: a slot a second per job needs much of the machine, or most slots are skipped
// or missed and the supervisors are hardly ever tested against each other.
func TestSupervisorsEachSlotOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	// A loaded machine's systemd can go quiet for seconds: the supervisors wait for it as long as
	// the test would, and a unit it creates late is not taken for gone (each run has one attempt).
	e.cfg.Systemd.CallTimeout = testenv.Patience
	e.cfg.Reconcile.RunBudget, e.cfg.Reconcile.PassTimeout = testenv.Patience, 2*testenv.Patience
	e.cfg.Reconcile.SpawnGrace = time.Hour
	hosts := []string{"h1", "h2", "h3"}
	pinnedTo := map[string]string{} // job: its host, "" for any host
	for i, host := range hosts {
		for _, name := range []string{fmt.Sprintf("pinned-%d", i+1), fmt.Sprintf("any-%d", i+1)} {
			j := model.Job{Name: name, Engine: "command", Schedule: "@every 1s",
				Command: []string{"/bin/sh", "-c", "echo ran >> " + filepath.Join(e.dir, name+".log")}}
			if strings.HasPrefix(name, "pinned") {
				j.Host = host
			}
			e.scheduledJob(t, j, nextSecond())
			pinnedTo[name] = j.Host
		}
	}
	for _, host := range hosts {
		// Each its own store and systemd connection, as each host's daemon has: two supervisors of
		// one host name in one process are one lease holder and would take the lease from each other.
		other := e
		st, err := store.New(ctx, e.cfg.Database)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		rn, err := systemd.New(ctx, e.cfg.Systemd)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rn.Close)
		other.cfg.Store, other.cfg.Runner, other.cfg.Reconcile.Host = st, rn, host
		other.start(t)
	}

	// Until 40 slots of each kind of job ran: seconds, or minutes on a loaded machine, where most
	// slots are missed.
	counts := func() (pinned, anyHost int) {
		runs, err := e.st.RunList(ctx, "", 10000) // the six jobs are the only ones
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if pinnedTo[r.JobName] != "" {
				pinned++
			} else {
				anyHost++
			}
		}
		return pinned, anyHost
	}
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(time.Second) {
		if pinned, anyHost := counts(); pinned >= 40 && anyHost >= 40 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after %s: %d pinned and %d any-host runs, want 40 of each", testenv.Patience, pinned, anyHost)
		}
	}
	for name := range pinnedTo {
		if _, err := e.st.JobUpdate(ctx, name, func(j *model.Job) error { j.Schedule, j.NextRunAt = "", nil; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// The runs still live end under the supervisors, so that every run has ended and each ran its
	// command once.
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(100 * time.Millisecond) {
		runs, err := e.st.RunList(ctx, "", 10000)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(runs, func(r model.Run) bool { return model.Live(r.Status) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs still live %s after the schedules were cleared", testenv.Patience)
		}
	}

	byHost := map[string]int{} // attempts of any-host runs by host
	for name, pinned := range pinnedTo {
		runs, err := e.st.RunList(ctx, name, 10000)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[time.Time]bool{}
		var planned []time.Time
		for _, r := range runs {
			if r.PlannedAt == nil || seen[*r.PlannedAt] {
				t.Fatalf("%s: run %+v: slot started twice, or a run of no slot", name, r)
			}
			seen[*r.PlannedAt] = true
			planned = append(planned, *r.PlannedAt)
			if r.Status != model.StatusSucceeded {
				t.Fatalf("%s: run %s is %s: %s", name, r.ID, r.Status, r.Reason)
			}
			attempts, err := e.st.AttemptList(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(attempts) != 1 || pinned != "" && attempts[0].Host != pinned {
				t.Fatalf("%s (pinned to %q): run %s has attempts %+v; want one, on the pinned host", name, pinned, r.ID, attempts)
			}
			if pinned == "" {
				byHost[attempts[0].Host]++
			}
		}
		if len(planned) == 0 {
			t.Fatalf("%s: no slot ran", name)
		}
		// Each run ran its command once: as many executions as runs.
		execs, err := os.ReadFile(filepath.Join(e.dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(execs), "ran\n"); n != len(runs) {
			t.Fatalf("%s: %d executions for %d runs", name, n, len(runs))
		}
		slices.SortFunc(planned, func(a, b time.Time) int { return a.Compare(b) })
		j, err := e.st.JobGet(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		// A loaded machine can leave an admission pass late by more than a slot: such slots are
		// counted missed. Skips and misses may also fall outside the span.
		span := int(planned[len(planned)-1].Sub(planned[0])/time.Second) + 1
		if got := len(planned) + int(j.OverlapSkips) + int(j.MissedSlots); got < span {
			t.Fatalf("%s: %d runs + %d skipped (previous run live) for %d slots, %d missed; want every slot accounted for",
				name, len(planned), j.OverlapSkips, span, j.MissedSlots)
		}
	}
	if len(byHost) < 2 {
		t.Fatalf("any-host runs by host %v, want more than one host to have run them", byHost)
	}
	t.Logf("each slot ran once across three supervisors; any-host attempts by host: %v", byHost)
	e.checkInvariants(t)
}
