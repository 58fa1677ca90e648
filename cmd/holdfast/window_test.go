package main_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A run admitted during a maintenance window waits, saying why, and starts when it ends.
func TestMaintenanceWindow(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	now := time.Now().UTC()
	from := now.Truncate(time.Minute)
	to := from.Add(time.Minute)
	if to.Sub(now) < 20*time.Second {
		to = to.Add(time.Minute)
	}
	window := fmt.Sprintf("daily %s-%s", from.Format("15:04"), to.Format("15:04"))
	w.mustRun("job", "add", "quiet", "--engine", "command", "--command", "/bin/true")
	w.startDaemon("--window", window)
	id := w.startRun("quiet")
	time.Sleep(3 * time.Second)
	var r listedRun
	for _, run := range w.runs("quiet") {
		if run.ID == id {
			r = run
		}
	}
	if r.Status != "queued" || !strings.Contains(r.WaitingReason, "maintenance window") || r.NotBefore == nil || !parseTime(t, r.NotBefore).Equal(to) {
		t.Fatalf("run during %q = %+v, want queued until %s with the window named", window, r, to)
	}
	done := w.waitRun(id, "the end", ended)
	if done.Status != "succeeded" || len(done.Attempts) != 1 {
		t.Fatalf("run = %+v, want succeeded after the window", done)
	}
	var full struct {
		Attempts []struct {
			StartedAt *string `json:"started_at"`
		} `json:"attempts"`
	}
	show := w.mustRun("run", "show", id, "--json")
	if err := json.Unmarshal([]byte(show), &full); err != nil {
		t.Fatal(err)
	}
	if started := parseTime(t, full.Attempts[0].StartedAt); started.Before(to) {
		t.Fatalf("the run started at %s, inside the window that ended at %s", started, to)
	}
	w.checkInvariants()
}
