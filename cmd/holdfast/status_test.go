package main_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// holdfast status exits as monitoring plugins expect: 0 when all is well, 2 when a job is
// overdue (judged by status itself when no daemon runs), 3 when the database cannot be read.
func TestStatusExitCodes(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	if r := w.run("status"); r.code != 0 || !strings.Contains(r.stdout, "holdfast status: OK") || !strings.Contains(r.stdout, "no jobs") {
		t.Fatalf("status with no jobs: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	w.mustRun("job", "add", "weekly", "--engine", "command", "--command", "/bin/true", "--expect-every", "168h")
	if r := w.run("status"); r.code != 0 || !strings.Contains(r.stdout, "weekly") {
		t.Fatalf("status with a job not yet due: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	w.mustRun("job", "edit", "weekly", "--expect-every", "1s")
	time.Sleep(1100 * time.Millisecond)
	r := w.run("status", "--json")
	var report struct {
		State string `json:"state"`
		Jobs  []struct {
			Name         string  `json:"name"`
			State        string  `json:"state"`
			OverdueSince *string `json:"overdue_since"`
			Note         string  `json:"note"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &report); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if r.code != 2 || report.State != "critical" || len(report.Jobs) != 1 || report.Jobs[0].OverdueSince == nil ||
		!strings.Contains(report.Jobs[0].Note, "expected every 1s") {
		t.Fatalf("status of an overdue job: exit %d, %+v\n%s", r.code, report, r.stderr)
	}
	human := w.run("status")
	if human.code != 2 || !strings.Contains(human.stdout, "holdfast status: CRITICAL") {
		t.Fatalf("status of an overdue job: exit %d\n%s%s", human.code, human.stdout, human.stderr)
	}
	t.Logf("holdfast status:\n%s", human.stdout)
	if r := w.run("status", "--dsn", "postgres:///nowhere?host=/nonexistent&connect_timeout=5"); r.code != 3 || !strings.Contains(r.stdout, "UNKNOWN") {
		t.Fatalf("status without a database: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
