package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// A job that depends on another starts only if the other's last run succeeded: otherwise it waits
// for the other's next outcome, and fails naming the prerequisite if that is not success
// (partial is not enough).
func TestDependency(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 2, 1<<20)
	if err := os.WriteFile(filepath.Join(data, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	openToAll(t, repo)
	w.mustRun("job", "add", "first", "--repo", repo, "--password-file", pw, "--path", data, "--user", "nobody")
	w.mustRun("job", "add", "second", "--engine", "command", "--command", "/bin/true", "--depends-on", "first")
	w.startDaemon("--depends-wait", "10m")

	// first never ran: second waits, saying why, instead of failing at once.
	second := w.startRun("second")
	r := w.waitRun(second, "waiting for first", func(r runJSON) bool { return strings.Contains(r.WaitingReason, "prerequisite job first") })
	if r.Status != "queued" || !strings.Contains(r.WaitingReason, "never run") {
		t.Fatalf("second before first ran = %+v, want queued, waiting for first", r)
	}
	if r := w.waitEnd(w.startRun("first")); r.Status != "partial" {
		t.Fatalf("first = %+v, want partial (an unreadable file)", r)
	}
	r = w.waitEnd(second)
	if r.Status != "failed" || !strings.Contains(r.Reason, "prerequisite job first") || !strings.Contains(r.Reason, "partial") {
		t.Fatalf("second after a partial first = %+v, want failed naming first and partial", r)
	}

	// first's last run is partial: the next second waits for first's next outcome, a success.
	w.mustRun("job", "edit", "first", "--user", "")
	if err := os.Chmod(filepath.Join(data, "secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	second = w.startRun("second")
	r = w.waitRun(second, "waiting for first", func(r runJSON) bool { return strings.Contains(r.WaitingReason, "its last run: partial") })
	if r.Status != "queued" {
		t.Fatalf("second after a partial first = %+v, want queued", r)
	}
	if r := w.waitEnd(w.startRun("first")); r.Status != "succeeded" {
		t.Fatalf("first = %+v, want succeeded", r)
	}
	if r := w.waitEnd(second); r.Status != "succeeded" {
		t.Fatalf("second after first succeeded = %+v, want succeeded", r)
	}
	// first's last run succeeded: second goes at once.
	if r := w.waitEnd(w.startRun("second")); r.Status != "succeeded" {
		t.Fatalf("second after first succeeded = %+v, want succeeded", r)
	}
	w.checkInvariants()
}

// A run waits for its prerequisite's next outcome at most --depends-wait, then fails naming it.
func TestDependencyWaitIsBounded(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.mustRun("job", "add", "idle", "--engine", "command", "--command", "/bin/true")
	w.mustRun("job", "add", "after", "--engine", "command", "--command", "/bin/true", "--depends-on", "idle")
	w.startDaemon("--depends-wait", "3s")
	queued := time.Now()
	id := w.startRun("after")
	r := w.waitEnd(id)
	if r.Status != "failed" || r.FailureClass != "permanent" || !strings.Contains(r.Reason, "prerequisite job idle") ||
		!strings.Contains(r.Reason, "never run") || !strings.Contains(r.Reason, "within 3s") {
		t.Fatalf("after = %+v, want failed naming idle, never run and the 3s bound", r)
	}
	if waited := time.Since(queued); waited < 3*time.Second {
		t.Fatalf("failed after %s, before the 3s bound", waited)
	}
	w.checkInvariants()
}

// With one place free at a time, queued runs of higher priority start first.
func TestPriority(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for i := range 6 {
		prio := "0"
		if i%2 == 1 {
			prio = "10"
		}
		w.mustRun("job", "add", fmt.Sprintf("p%d", i), "--engine", "command", "--command", "/bin/sleep", "--command", "0.2", "--priority", prio)
	}
	for i := range 6 {
		w.startRun(fmt.Sprintf("p%d", i))
	}
	w.startDaemon("--max-running", "1")
	type start struct {
		job string
		at  time.Time
	}
	var starts []start
	for i := range 6 {
		r := w.waitEnd(w.runs(fmt.Sprintf("p%d", i))[0].ID)
		if r.Status != "succeeded" {
			t.Fatalf("run = %+v", r)
		}
		starts = append(starts, start{fmt.Sprintf("p%d", i), parseTime(t, w.runs(fmt.Sprintf("p%d", i))[0].StartedAt)})
	}
	sort.Slice(starts, func(a, b int) bool { return starts[a].at.Before(starts[b].at) })
	for k, s := range starts[:3] {
		if n := s.job[1] - '0'; n%2 != 1 {
			t.Fatalf("start %d was %s (priority 0) before all priority-10 runs: %+v", k, s.job, starts)
		}
	}
	w.checkInvariants()
}
