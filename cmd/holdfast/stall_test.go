package main_test

import (
	"strings"
	"testing"
)

// A command job that sleeps without progress is stalled once its --stall-after passed: its
// attempt is marked, a "stalled" event is written and status is critical, while the run goes on.
// With --stall-action stop the run is stopped too, and its reason says holdfast stopped it.
func TestStalledRuns(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	for _, job := range []struct{ name, action string }{{"hang", "alert"}, {"hangstop", "stop"}} {
		w.mustRun("job", "add", job.name, "--engine", "command", "--command", "/bin/sleep", "--command", "120",
			"--stall-after", "2s", "--stall-action", job.action)
	}
	w.startDaemon("--watch-interval", "500ms")
	alert, stop := w.startRun("hang"), w.startRun("hangstop")

	r := w.waitRun(stop, "the end", ended)
	if r.Status != "stopped" || !strings.Contains(r.Reason, "stopped by holdfast (stalled: no progress for 2s") ||
		len(r.Attempts) != 1 || r.Attempts[0].StalledAt == "" {
		t.Fatalf("run of hangstop: %s (%s), attempts %+v; want stopped by holdfast for the stall", r.Status, r.Reason, r.Attempts)
	}
	r = w.waitRun(alert, "stalled", func(r runJSON) bool { return len(r.Attempts) > 0 && r.Attempts[0].StalledAt != "" || ended(r) })
	if r.Status != "running" {
		t.Fatalf("run of hang: %s (%s); want still running, only reported", r.Status, r.Reason)
	}
	if s := w.run("status"); s.code != 2 || !strings.Contains(s.stdout, "STALLED since") {
		t.Fatalf("status with a stalled run: exit %d\n%s%s", s.code, s.stdout, s.stderr)
	}
	w.mustRun("run", "stop", alert)
	if r := w.waitRun(alert, "the end", ended); r.Status != "stopped" || !strings.Contains(r.Reason, "stopped by the operator") {
		t.Fatalf("run of hang after run stop: %s (%s)", r.Status, r.Reason)
	}
	for job, want := range map[string]string{"hang": "started,stalled,stopped", "hangstop": "started,stalled,stopped"} {
		if got := strings.Join(w.eventNames(job), ","); got != want {
			t.Errorf("events of %s: %s, want %s", job, got, want)
		}
	}
	w.checkInvariants()
}
