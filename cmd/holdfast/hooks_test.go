package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A before hook runs in the backup's unit as the job's user, with the run in its environment,
// and may write into the job's paths: its file is in the snapshot. A hook that fails fails the
// run, naming the hook, and no snapshot is made.
func TestBeforeHooks(t *testing.T) {
	parallel(t)
	rw := newRestoreWorld(t, newWorld(t), 1, 1<<10)
	if err := os.Chown(rw.data, rw.uid, rw.gid); err != nil { // the hook, as nobody, writes there
		t.Fatal(err)
	}
	hookFile := filepath.Join(rw.data, "from-hook.txt")
	rw.mustRun("job", "edit", "home", "--before", "/bin/sh -c 'echo \"$HOLDFAST_RUN $HOLDFAST_ATTEMPT $(id -un)\" >\"$0\"' "+hookFile)
	if exp := rw.mustRun("export", "--job", "home"); !strings.Contains(exp, "before:") {
		t.Fatalf("the hook was not stored:\n%s", exp)
	}
	rw.startDaemon()
	rw.backup()
	runs := rw.runs("home")
	got, err := os.ReadFile(hookFile)
	if err != nil || strings.TrimSpace(string(got)) != runs[0].ID+" 1 nobody" {
		t.Fatalf("the hook wrote %q (%v), want the run %s, attempt 1, as nobody\n%s", got, err, runs[0].ID, rw.mustRun("run", "logs", runs[0].ID))
	}
	if ls := rw.restic(rw.repo, rw.pw, "ls", "latest"); !strings.Contains(ls, hookFile) {
		t.Fatalf("the snapshot lacks the hook's file %s:\n%s", hookFile, ls)
	}
	snapshots := strings.Count(rw.restic(rw.repo, rw.pw, "snapshots", "--json"), `"id"`)

	rw.mustRun("job", "edit", "home", "--before", "/bin/true", "--before", "/bin/false --with an-argument")
	res := rw.run("run", "start", "home", "--wait", "--json")
	var r runJSON
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatal(err)
	}
	if res.code != 4 || r.Status != "failed" || r.FailureClass != "permanent" ||
		!strings.Contains(r.Reason, "before hook /bin/false --with an-argument exited 1") || r.SnapshotID != "" {
		t.Fatalf("a failing before hook: exit %d, %+v; want failed (permanent), naming the hook, no snapshot", res.code, r)
	}
	if n := strings.Count(rw.restic(rw.repo, rw.pw, "snapshots", "--json"), `"id"`); n != snapshots {
		t.Fatalf("the repository has %d snapshots after the failed hook, %d before", n, snapshots)
	}
	// A hook that exits 75 skips the backup: neither a success nor a failure, no snapshot; the
	// job counts it, and its last failures do not.
	rw.mustRun("job", "edit", "home", "--before", "/bin/sh -c 'exit 75'")
	res = rw.run("run", "start", "home", "--wait", "--json")
	r = runJSON{}
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatal(err)
	}
	if res.code != 7 || r.Status != "skipped" || r.FailureClass != "" || !strings.Contains(r.Reason, "skipped: before hook /bin/sh -c 'exit 75' exited 75") {
		t.Fatalf("a skipping before hook: exit %d, %+v; want skipped, naming the hook", res.code, r)
	}
	if n := strings.Count(rw.restic(rw.repo, rw.pw, "snapshots", "--json"), `"id"`); n != snapshots {
		t.Fatalf("the repository has %d snapshots after the skip, %d before", n, snapshots)
	}
	var j struct {
		HookSkips   int    `json:"hook_skips"`
		LastOutcome string `json:"last_outcome"`
		LastSkipWhy string `json:"last_skip_why"`
	}
	if err := json.Unmarshal([]byte(rw.mustRun("job", "show", "home", "--json")), &j); err != nil || j.HookSkips != 1 ||
		j.LastOutcome != "skipped" || !strings.Contains(j.LastSkipWhy, "exited 75") {
		t.Fatalf("job home after the skip: %+v (%v), want one hook skip, its reason kept", j, err)
	}

	// Refused before they are stored: a shell's pipeline, a relative program, open quotes.
	for _, bad := range []string{"/bin/echo a | /bin/cat", "sh -c true", "/bin/echo 'open"} {
		if res := rw.run("job", "edit", "home", "--before", bad); res.code != 2 || !strings.Contains(res.stderr, "--before") {
			t.Errorf("--before %q: exit %d %q, want a refusal", bad, res.code, res.stderr)
		}
	}
	rw.mustRun("job", "edit", "home", "--no-before")
	rw.backup()
	rw.checkInvariants()
}

// After hooks run whatever the outcome, which they see; one that fails is recorded in the
// run's reason and changes nothing else.
func TestAfterHooks(t *testing.T) {
	parallel(t)
	rw := newRestoreWorld(t, newWorld(t), 1, 1<<10)
	if err := os.Chown(rw.data, rw.uid, rw.gid); err != nil {
		t.Fatal(err)
	}
	seen := filepath.Join(rw.data, "outcomes.txt")
	record := "/bin/sh -c 'echo \"$HOLDFAST_RUN $HOLDFAST_OUTCOME\" >>\"$0\"' " + seen
	rw.mustRun("job", "edit", "home", "--after", record, "--after", "/bin/false")
	rw.startDaemon()
	res := rw.run("run", "start", "home", "--wait", "--json")
	var ok runJSON
	if err := json.Unmarshal([]byte(res.stdout), &ok); err != nil {
		t.Fatal(err)
	}
	if res.code != 0 || ok.Status != "succeeded" || ok.SnapshotID == "" || !strings.Contains(ok.Reason, "; after hook /bin/false exited 1") {
		t.Fatalf("a backup whose after hook failed: exit %d, %+v; want succeeded, the hook's failure in its reason", res.code, ok)
	}
	rw.mustRun("job", "edit", "home", "--before", "/bin/false", "--after", record)
	res = rw.run("run", "start", "home", "--wait", "--json")
	var failed runJSON
	if err := json.Unmarshal([]byte(res.stdout), &failed); err != nil {
		t.Fatal(err)
	}
	if res.code != 4 || failed.Status != "failed" || strings.Contains(failed.Reason, "after hook") {
		t.Fatalf("a backup whose before hook failed: exit %d, %+v", res.code, failed)
	}
	got, err := os.ReadFile(seen)
	if want := ok.ID + " succeeded\n" + failed.ID + " failed\n"; err != nil || string(got) != want {
		t.Fatalf("the after hook saw %q (%v), want %q", got, err, want)
	}
	rw.checkInvariants()
}
