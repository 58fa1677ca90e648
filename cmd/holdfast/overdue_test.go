package main_test

import (
	"context"
	"github.com/holdfast-backup/holdfast/store"
	"strings"
	"testing"
	"time"
)

// An @every 3s job whose runs fail becomes overdue; two daemons watch it, and the episode is
// recorded once, with one "overdue" event. When its runs succeed again it recovers, once. Each
// run's start and end are events too.
func TestOverdueOnceWithTwoDaemons(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	w.mustRun("job", "add", "flaky", "--engine", "command", "--command", "/bin/false", "--schedule", "@every 3s")
	// Each logs its watch passes (--log-level debug).
	daemons := []*watchedDaemon{
		w.startWatchedDaemon("--watch-interval", "500ms", "--log-level", "debug"),
		w.startWatchedDaemon("--watch-interval", "500ms", "--log-level", "debug", "--host", "second"), // each daemon holds its own host's lease
	}
	// judged waits until each daemon has ended n more watch passes, each of which judged the job.
	judged := func(n int) {
		t.Helper()
		var offsets []int
		for _, d := range daemons {
			offsets = append(offsets, len(d.log.String()))
		}
		for i, d := range daemons {
			for deadline := time.Now().Add(2 * time.Minute); len(d.lines(offsets[i], `msg="watch pass"`)) < n; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("daemon %d ended %d watch passes in 2 minutes, want %d", i+1, len(d.lines(offsets[i], `msg="watch pass"`)), n)
				}
			}
		}
	}

	waitJob := func(what string, cond func(jobJSON) bool) jobJSON {
		t.Helper()
		return await(t, "job flaky: "+what, func() string { return strings.Join(w.eventNames("flaky"), ",") },
			func() jobJSON { return w.job("flaky") }, cond)
	}
	j := waitJob("overdue", func(j jobJSON) bool { return j.OverdueSince != nil })
	t.Logf("overdue since %s: %s", *j.OverdueSince, j.OverdueReason)
	if !strings.Contains(j.OverdueReason, "did not succeed") && !strings.Contains(j.OverdueReason, "no successful run") {
		t.Fatalf("overdue for %q", j.OverdueReason)
	}
	if show := w.mustRun("job", "show", "flaky"); !strings.Contains(show, "OVERDUE:") {
		t.Fatalf("job show does not say the job is overdue:\n%s", show)
	}
	if r := w.run("status"); r.code != 2 || !strings.Contains(r.stdout, "CRITICAL") || !strings.Contains(r.stdout, "overdue: ") {
		t.Fatalf("status of an overdue job: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Both daemons judge it several times meanwhile.
	judged(3)
	w.mustRun("job", "edit", "flaky", "--command", "/bin/true")
	waitJob("recovered", func(j jobJSON) bool { return j.OverdueSince == nil })
	judged(3)
	if r := w.run("status"); r.code != 0 {
		t.Fatalf("status after the recovery: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	count := map[string]int{}
	for _, e := range w.eventNames("flaky") {
		count[e]++
	}
	if count["overdue"] != 1 || count["recovered"] != 1 {
		t.Fatalf("events %v: want one overdue and one recovered", count)
	}
	if count["started"] == 0 || count["failed"] == 0 || count["succeeded"] == 0 || count["started"] < count["failed"]+count["succeeded"]-1 {
		t.Fatalf("events %v: want each run's start and its end", count)
	}
	w.checkInvariants()
}

// eventNames are the names of the job's events in the outbox, oldest first.
func (w *world) eventNames(job string) []string {
	w.t.Helper()
	st := w.store()
	if st == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	events, err := st.EventList(ctx, store.EventListParams{Job: job, Limit: 10000})
	if err != nil {
		return nil
	}
	names := make([]string, len(events))
	for i, e := range events {
		names[i] = e.Event
	}
	return names
}
