package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

// A job over a few MB ends succeeded; the snapshot carries the run's tag; bytes_added is
// restic's own data_added as journald recorded it; run logs shows the unit's output; the
// transient unit is gone afterwards.
func TestBackupSucceeds(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	w.binaryCLI = true // the whole path as an operator takes it: the binary, its environment, its exit code
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 12, 6<<20)
	w.mustRun("job", "add", "docs", "--repo", repo, "--password-file", pw, "--path", data, "--exclude", "*.tmp")
	w.startDaemon()

	res := w.run("run", "start", "docs", "--wait", "--json")
	if res.code != 0 {
		t.Fatalf("run start --wait: exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	var r runJSON
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "succeeded" || r.SnapshotID == "" || r.BytesAdded == nil || *r.BytesAdded < 6<<20 {
		t.Fatalf("run = %+v, want succeeded with a snapshot and >= 6 MiB added", r)
	}
	if r.FilesProcessed == nil || *r.FilesProcessed != 12 || r.FilesSkipped != 0 {
		t.Fatalf("files processed/skipped = %v/%d, want 12/0", r.FilesProcessed, r.FilesSkipped)
	}
	if len(r.Attempts) != 1 || r.Attempts[0].ServiceResult != "success" || r.Attempts[0].ExitStatus != "0" {
		t.Fatalf("attempts = %+v, want one, success exited 0", r.Attempts)
	}

	// The snapshot exists in the repository under the run's tag.
	var snaps []struct {
		ShortID string   `json:"short_id"`
		Tags    []string `json:"tags"`
	}
	out := w.restic(repo, pw, "snapshots", "--json", "--tag", "holdfast-run="+r.ID)
	if err := json.Unmarshal([]byte(out), &snaps); err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots tagged with the run: %s (%v)", out, err)
	}
	if !strings.HasPrefix(snaps[0].ShortID, r.SnapshotID) && !strings.HasPrefix(r.SnapshotID, snaps[0].ShortID) {
		t.Fatalf("snapshot %s in the repository, run says %s", snaps[0].ShortID, r.SnapshotID)
	}

	// run logs reads journald: the unit's output, including restic's summary line as printed.
	var logs string
	deadline := time.Now().Add(time.Minute)
	for {
		logs = w.mustRun("run", "logs", r.ID)
		if strings.Contains(logs, "summary:") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	m := regexp.MustCompile(`summary: (\{.*\})`).FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("run logs shows no summary line:\n%s", logs)
	}
	var summary struct {
		DataAdded int64 `json:"data_added"`
	}
	if err := json.Unmarshal([]byte(m[1]), &summary); err != nil {
		t.Fatalf("summary line %q: %v", m[1], err)
	}
	if summary.DataAdded != *r.BytesAdded {
		t.Fatalf("bytes_added = %d, restic's data_added in journald = %d", *r.BytesAdded, summary.DataAdded)
	}

	// The transient unit is gone.
	out, _ = w.mgr.SystemctlErr("list-units", "--all", "--plain", "--no-legend", r.Attempts[0].Unit)
	if strings.Contains(out, r.Attempts[0].Unit) {
		t.Fatalf("unit still loaded after the run: %s", out)
	}

	// The listing shows it too.
	var list []runJSON
	if err := json.Unmarshal([]byte(w.mustRun("run", "list", "--job", "docs", "--json")), &list); err != nil || len(list) != 1 || list[0].Status != "succeeded" {
		t.Fatalf("run list = %+v (%v)", list, err)
	}
}

// A job run as nobody over a directory with one unreadable file ends partial, never succeeded,
// with the file named in the reason.
func TestBackupPartialAsUser(t *testing.T) {
	parallel(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a job as another user")
	}
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	openToAll(t, repo)
	data := w.sampleData("data", 3, 1<<20)
	secret := filepath.Join(data, "secret.key")
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.mustRun("job", "add", "home", "--repo", repo, "--password-file", pw, "--path", data, "--user", "nobody")
	hook := newReceiver(t)
	w.mustRun("notify", "add", "hook", "--webhook", hook.URL, "--events", "partial")
	w.startDaemon()

	res := w.run("run", "start", "home", "--wait", "--json")
	if res.code != 3 {
		t.Fatalf("run start --wait: exit %d, want 3 (partial)\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	var r runJSON
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "partial" || r.FilesSkipped < 1 || !strings.Contains(r.Reason, secret) {
		t.Fatalf("run = %+v, want partial, >= 1 skipped, reason naming %s", r, secret)
	}
	if r.SnapshotID == "" {
		t.Fatalf("a partial restic backup still makes a snapshot; run has none: %+v", r)
	}
	// The webhook hears of it, with the run and its snapshot.
	if !testenv.Eventually(time.Minute, func() bool { return len(hook.requests()) > 0 }) {
		t.Fatal("the webhook never heard of the partial run")
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(hook.requests()[0].body), &e); err != nil || e["event"] != "partial" || e["run"] != r.ID ||
		e["snapshot_id"] != r.SnapshotID {
		t.Fatalf("the webhook got %s (%v); want the partial run %s with its snapshot %s", hook.requests()[0].body, err, r.ID, r.SnapshotID)
	}
	var jobs []struct {
		LastOutcome string `json:"last_outcome"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("job", "list", "--json")), &jobs); err != nil || jobs[0].LastOutcome != "partial" {
		t.Fatalf("job's last outcome = %+v (%v), want partial", jobs, err)
	}
}

// A wrong password and a missing repository fail permanently with a reason an operator can read.
func TestBackupFailsPermanently(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, _ := w.resticRepo("repo")
	wrong := filepath.Join(w.dir, "wrong.password")
	if err := os.WriteFile(wrong, []byte("not the password\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := w.sampleData("data", 2, 64<<10)
	w.mustRun("job", "add", "badpw", "--repo", repo, "--password-file", wrong, "--path", data)
	w.mustRun("job", "add", "norepo", "--repo", filepath.Join(w.dir, "missing"), "--password-file", wrong, "--path", data)
	w.startDaemon()

	for job, want := range map[string]string{"badpw": "password", "norepo": "repository"} {
		res := w.run("run", "start", job, "--wait", "--json")
		if res.code != 4 {
			t.Fatalf("%s: exit %d, want 4 (failed)\n%s\n%s", job, res.code, res.stdout, res.stderr)
		}
		var r runJSON
		if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
			t.Fatal(err)
		}
		if r.Status != "failed" || r.FailureClass != "permanent" || !strings.Contains(r.Reason, want) || strings.Contains(r.Reason, "\n") {
			t.Fatalf("%s: run = %+v, want failed, permanent, a one-line reason about the %s", job, r, want)
		}
		if r.BytesAdded != nil {
			t.Fatalf("%s: bytes_added = %d, want unknown (absent is not zero)", job, *r.BytesAdded)
		}
	}
}

// run stop ends a running backup stopped: restic got SIGINT (exit 130) and left no lock.
func TestStopRunningBackup(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 8, slowData)
	w.mustRun("job", "add", "big", "--repo", repo, "--password-file", pw, "--path", data)
	w.slowBackups()
	w.backupRate(stuckKiBps)
	w.startDaemon()
	id := w.startRun("big")
	w.waitRun(id, "progress", func(r runJSON) bool { return r.Progress != nil && r.Progress.BytesDone > 0 || ended(r) })
	if out := w.mustRun("run", "stop", id[:8]); !strings.Contains(out, "stop requested") {
		t.Fatalf("run stop printed %q", out)
	}
	stopped := time.Now()
	r := w.waitEnd(id)
	if r.Status != "stopped" || r.StopRequested == nil {
		t.Fatalf("run = %+v, want stopped", r)
	}
	a := r.Attempts[0]
	// 130 on every restic: 0.14 to 0.16 and 0.19 exit 130 on SIGINT, 0.17 and 0.18 exit 1, and a
	// rate-limited restic that does not act on it is killed after engine.StopGrace; the unit's
	// holdfast exec counts each as the stop.
	if a.ExitCode != "exited" || a.ExitStatus != "130" {
		t.Fatalf("attempt ended %s %s %s, want exited 130 (the stop's)", a.ServiceResult, a.ExitCode, a.ExitStatus)
	}
	// How long the stop took to end the unit's main process, from the journal (logged, not
	// asserted: the machine may be loaded).
	if at, ok := w.journalTimes("Main process exited", a.Unit)[a.Unit]; ok {
		_, killed := w.journalTimes("holdfast killed it", a.Unit)[a.Unit]
		t.Logf("the unit's main process exited %v after run stop returned (restic killed after the grace: %v)", at.Sub(stopped).Round(time.Millisecond), killed)
	}
	if locks := strings.TrimSpace(w.restic(repo, pw, "list", "locks")); locks != "" {
		t.Fatalf("restic left locks behind: %q", locks)
	}
	// A finished run cannot be stopped again: a clear refusal, exit 2.
	res := w.run("run", "stop", id)
	if res.code != 2 || !strings.Contains(res.stderr, "already stopped") {
		t.Fatalf("second stop: exit %d, %q", res.code, res.stderr)
	}
}

// Killing the daemon in the middle of a run does not stop the backup; a new daemon finishes the
// run from its marker.
func TestDaemonKilledMidRun(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 8, slowData)
	w.mustRun("job", "add", "survivor", "--repo", repo, "--password-file", pw, "--path", data)
	w.slowBackups()
	d := w.startDaemon()
	id := w.startRun("survivor")
	r := w.waitRun(id, "the unit to run", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	if r.Status != "running" {
		t.Fatalf("run = %+v, want running", r)
	}
	d.kill()
	unit := r.Attempts[0].Unit
	// The backup goes on without its daemon and ends by itself: its marker appears.
	marker := filepath.Join(w.state, "markers", id+".a1.json")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no marker for %s after the daemon died", unit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := w.show(id); r.Status != "running" {
		t.Fatalf("with no daemon the run is %s; nothing should have changed it", r.Status)
	}
	w.startDaemon()
	r = w.waitEnd(id)
	if r.Status != "succeeded" || len(r.Attempts) != 1 {
		t.Fatalf("run = %+v, want succeeded in its one attempt", r)
	}
}

// A malformed journal line quarantines the projection with a reason while the run goes on; a
// corrupted marker ends the run failed with "exit marker unreadable". Neither panics or sticks.
func TestCorruptJournalAndMarker(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 8, slowData)
	w.mustRun("job", "add", "noisy", "--repo", repo, "--password-file", pw, "--path", data)
	w.slowBackups()
	d := w.startDaemon()

	// Its summary is held back until the line that cannot be read is in its journal.
	release := w.holdBackups()
	id := w.startRun("noisy")
	w.waitRun(id, "progress", w.underway)
	journalPath := filepath.Join(w.state, "runs", id, "a1", "journal.jsonl")
	f, err := os.OpenFile(journalPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("{this is not json\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	release()
	r := w.waitEnd(id)
	if r.Status != "succeeded" {
		t.Fatalf("run = %+v, want succeeded: a journal that cannot be read stops the projection, not the run", r)
	}
	if q := r.Attempts[0].QuarantineReason; !strings.Contains(q, "malformed") && !strings.Contains(q, "JSON") {
		t.Fatalf("quarantine reason = %q, want one naming the malformed line", q)
	}
	// The summary came after the bad line, so the repair channel found the snapshot by its tag;
	// the byte figures it cannot know stay unknown rather than zero.
	if r.SnapshotID == "" || r.BytesAdded != nil || !strings.Contains(r.Reason, "found in the repository") {
		t.Fatalf("run = %+v, want the snapshot from the repair channel and bytes_added unknown", r)
	}
	// Its charge is not restic's figure, which was lost, but the measured growth of its own
	// repository, and says so: never zero, never the whole hold by default.
	settle := w.ledger("default").entries(id, "settle")[1]
	if r.HoldBytes != 0 || settle.Bytes <= 0 || r.SettledBytes != settle.Bytes || !strings.Contains(settle.Note, "measured growth") {
		t.Fatalf("run %+v charged %+v, want the measured growth of its repository", r, settle)
	}

	// Now a run whose marker is corrupted while no daemon watches.
	// Held until its daemon is gone: the unit ends, and writes its marker, unwatched.
	d.kill()
	release = w.holdBackups()
	id2 := w.startRun("noisy")
	marker := filepath.Join(w.state, "markers", id2+".a1.json")
	d = w.startDaemon()
	w.waitRun(id2, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	d.kill()
	release()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no marker appeared")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.WriteFile(marker, []byte(`{"run":"`+id2+`","attempt":1,"service_res`), 0o644); err != nil {
		t.Fatal(err)
	}
	w.startDaemon()
	r = w.waitEnd(id2)
	if r.Status != "failed" || !strings.Contains(r.Reason, "exit marker unreadable") {
		t.Fatalf("run = %+v, want failed with 'exit marker unreadable'", r)
	}
}

// Bad input gets a one-line error, exit 2, and changes nothing.
func TestBadInput(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	w.binaryCLI = true // the exit codes as the process returns them
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 1, 1024)
	w.mustRun("job", "add", "good", "--repo", repo, "--password-file", pw, "--path", data)
	before := w.mustRun("job", "list", "--json")
	runsBefore := w.mustRun("run", "list", "--json")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"invalid job name", []string{"job", "add", "Bad Name!", "--repo", repo, "--password-file", pw, "--path", data}, "invalid job name"},
		{"duplicate job", []string{"job", "add", "good", "--repo", repo, "--password-file", pw, "--path", data}, "already exists"},
		{"missing password file", []string{"job", "add", "x", "--repo", repo, "--password-file", "/nonexistent/pw", "--path", data}, "password file"},
		{"relative path", []string{"job", "add", "x", "--repo", repo, "--password-file", pw, "--path", "data"}, "relative"},
		{"relative repository", []string{"job", "add", "x", "--repo", "repo", "--password-file", pw, "--path", data}, "relative"},
		{"no path", []string{"job", "add", "x", "--repo", repo, "--password-file", pw}, "no paths"},
		{"unknown user", []string{"job", "add", "x", "--repo", repo, "--password-file", pw, "--path", data, "--user", "no-such-user-here"}, "does not exist"},
		{"unknown job", []string{"run", "start", "nosuchjob"}, "not found"},
		{"invalid name on start", []string{"run", "start", "../etc"}, "invalid job name"},
		{"unknown run", []string{"run", "show", "deadbeef"}, "not found"},
		{"unknown flag", []string{"job", "add", "x", "--colour", "red"}, "unknown flag"},
		{"remove unknown job", []string{"job", "remove", "nosuchjob"}, "not found"},
		{"bad duration", []string{"job", "add", "x", "--repo", repo, "--password-file", pw, "--path", data, "--runtime-max", "soon"}, "invalid argument"},
		{"password in the repository URL", []string{"job", "add", "x", "--repo", "rest:https://u:hunter2@host/r", "--password-file", pw, "--path", data}, "carries a password"},
		{"password in the URL on edit", []string{"job", "edit", "good", "--repo", "s3:https://key:hunter2@s3.example/b"}, "--env-file"},
		{"relative env file", []string{"job", "add", "x", "--repo", repo, "--password-file", pw, "--path", data, "--env-file", "job.env"}, "relative"},
		{"missing env file", []string{"job", "add", "x", "--repo", repo, "--password-file", pw, "--path", data, "--env-file", "/nonexistent/job.env"}, "--env-file"},
		{"env file is a directory", []string{"job", "add", "x", "--repo", repo, "--password-file", pw, "--path", data, "--env-file", data}, "not a regular file"},
	}
	for _, tc := range cases {
		res := w.run(tc.args...)
		lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
		if res.code != 2 || len(lines) != 1 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line containing %q", tc.name, res.code, res.stderr, tc.want)
		}
		if strings.Contains(res.stderr, "hunter2") {
			t.Errorf("%s: the message repeats the secret: %q", tc.name, res.stderr)
		}
		if strings.Contains(res.stderr, "panic") {
			t.Errorf("%s: panicked", tc.name)
		}
	}
	if after := w.mustRun("job", "list", "--json"); after != before {
		t.Fatalf("bad input changed the jobs:\nbefore %s\nafter %s", before, after)
	}
	if after := w.mustRun("run", "list", "--json"); after != runsBefore {
		t.Fatalf("bad input changed the runs")
	}
}
