package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A job that depends on another starts only if the other's last run succeeded: otherwise it waits
// for the other's next outcome, and fails naming the prerequisite if that is not success
// (partial is not enough).
func TestDependency(t *testing.T) {
	parallel(t)
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
	closeToOthers(t, repo) // a root job's repository is root's to write alone
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
