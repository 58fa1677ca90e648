package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// copyRuns are the job's copy runs, newest first.
func (w *world) copyRuns(job string) []listedRun {
	w.t.Helper()
	var copies []listedRun
	for _, r := range w.runs(job) {
		if r.Kind == "copy" {
			copies = append(copies, r)
		}
	}
	return copies
}

// snapshotTags are the tags of each snapshot of a repository, as restic lists them.
func (w *world) snapshotTags(repo, pw string) [][]string {
	w.t.Helper()
	var snaps []struct {
		Tags []string `json:"tags"`
	}
	if err := json.Unmarshal([]byte(w.restic(repo, pw, "snapshots", "--json")), &snaps); err != nil {
		w.t.Fatal(err)
	}
	tags := make([][]string, len(snaps))
	for i, s := range snaps {
		tags[i] = s.Tags
	}
	return tags
}

// --copy-to: each snapshot a backup makes gets a second copy in another repository through a run
// of kind copy, admitted as the backup ends. A copy interrupted by a hard kill of the manager is
// restarted and succeeds once; the copy repository then has its own retention.
func TestCopyTo(t *testing.T) {
	parallel(t)
	w := newWorldOwnManager(t) // it kills its manager
	w.spawnGrace = "3s"
	rw := newRestoreWorld(t, w, 2, 1<<20)
	copyRepo, copyPw := filepath.Join(w.dir, "copy"), filepath.Join(w.dir, "copy.password")
	if err := os.WriteFile(copyPw, []byte("another password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A repository of its own making: the tests' template repositories share their id, which
	// restic's cache is keyed on.
	if out, err := exec.Command("restic", "init", "--repo", copyRepo, "--password-file", copyPw).CombinedOutput(); err != nil {
		t.Fatalf("restic init: %v: %s", err, out)
	}
	openToAll(t, copyRepo)
	if err := os.Chmod(copyPw, 0o644); err != nil { // a user manager hands no credentials: nobody reads it
		t.Fatal(err)
	}
	rw.mustRun("job", "edit", "home", "--copy-to", copyRepo, "--copy-password-file", copyPw)
	if j := rw.mustRun("job", "show", "home", "--json"); !strings.Contains(j, `"copy_to": "`+copyRepo+`"`) {
		t.Fatalf("job show after --copy-to:\n%s", j)
	}
	w.slowBackups()
	w.backupRate(0)
	rw.startDaemon()
	var backup runJSON
	if err := json.Unmarshal([]byte(rw.mustRun("run", "start", "home", "--wait", "--json")), &backup); err != nil || backup.Status != "succeeded" {
		t.Fatalf("backup: %+v (%v)", backup, err)
	}
	rw.snapshot = backup.SnapshotID
	copies := w.copyRuns("home")
	if len(copies) != 1 || copies[0].Trigger != "after-backup" || !strings.HasPrefix(copies[0].CopySnapshot, rw.snapshot) {
		t.Fatalf("copy runs after the first backup: %+v, want one of snapshot %s", copies, rw.snapshot)
	}
	first := w.waitEnd(copies[0].ID)
	// The reason names the snapshot by its short id (restic from 0.15 gives the summary the full one).
	if first.Status != "succeeded" || !strings.Contains(first.Reason, "copy complete: snapshot "+rw.snapshot[:8]+" ") {
		t.Fatalf("the first copy: %+v", first)
	}
	if tags := w.snapshotTags(copyRepo, copyPw); len(tags) != 1 || !strings.Contains(strings.Join(tags[0], " "), "holdfast-run="+backup.ID) {
		t.Fatalf("the copy repository holds %v, want the first backup's snapshot with its tags", tags)
	}

	// The second backup's data is new, so its copy uploads it: at a crawl, long enough to kill
	// the manager under it. The backup itself runs at full speed, its summary held until the
	// copy's rate is set.
	w.sampleData("data/more", 1, 2<<20)
	release := w.holdBackups()
	id := rw.startRun("home")
	w.waitRun(id, "the backup's progress", w.underway)
	w.backupRate(stuckKiBps)
	release()
	if r := w.waitEnd(id); r.Status != "succeeded" {
		t.Fatalf("the second backup: %+v", r)
	}
	copies = w.copyRuns("home")
	if len(copies) != 2 {
		t.Fatalf("copy runs after the second backup: %+v", copies)
	}
	crashed := copies[0]
	w.waitRun(crashed.ID, "the copy's lock in the copy repository", func(r runJSON) bool { return lockFiles(copyRepo) > 0 || ended(r) })
	if r := w.show(crashed.ID); ended(r) {
		t.Fatalf("the copy ended before the crash: %+v", r)
	}
	// The copy works on the repository it was admitted for: that cannot change under it.
	if res := rw.run("job", "edit", "home", "--copy-to", ""); res.code != 2 || !strings.Contains(res.stderr, "live run "+crashed.ID+" on its copy repository") {
		t.Fatalf("job edit --copy-to \"\" during a copy: exit %d %q, want a refusal naming the copy", res.code, res.stderr)
	}
	w.backupRate(0)
	w.mgr.Kill(t)
	w.mgr.Start(t)
	end := w.waitEnd(crashed.ID)
	if end.Status != "succeeded" || len(end.Attempts) != 2 || end.Attempts[0].ServiceResult != "" {
		t.Fatalf("the copy after a hard crash = %+v, want succeeded in attempt 2, attempt 1 without a marker", end)
	}
	tags := w.snapshotTags(copyRepo, copyPw)
	if len(tags) != 2 || len(w.copyRuns("home")) != 2 {
		t.Fatalf("after the crash the copy repository holds %v and the job has %d copy runs; want each backup's snapshot once", tags, len(w.copyRuns("home")))
	}
	w.noLocks(copyRepo)
	w.noLocks(rw.repo)

	// The copy repository's retention: planned and applied there, the job's own untouched.
	var plan struct {
		Repository string `json:"repository"`
		Deletable  int    `json:"deletable"`
		RunID      string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(rw.mustRun("retention", "apply", "home", "--repository", "copy", "--keep-last", "1", "--json")), &plan); err != nil {
		t.Fatal(err)
	}
	if plan.Repository != copyRepo || plan.Deletable != 1 || plan.RunID == "" {
		t.Fatalf("retention apply --repository copy: %+v, want one of the copy's two snapshots deleted", plan)
	}
	if r := w.waitEnd(plan.RunID); r.Status != "succeeded" {
		t.Fatalf("the copy's forget: %+v", r)
	}
	if n, own := len(w.snapshotTags(copyRepo, copyPw)), len(w.snapshotTags(rw.repo, rw.pw)); n != 1 || own != 2 {
		t.Fatalf("after the copy's retention: %d snapshots in the copy, %d in the job's repository; want 1 and 2", n, own)
	}
	w.checkInvariants()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--copy-to", rw.repo, "--copy-password-file", copyPw}, "is the job's own repository"},
		{[]string{"--copy-to", "relative/copy", "--copy-password-file", copyPw}, "relative path"},
		{[]string{"--copy-to", "", "--copy-password-file", copyPw}, "drop --copy-password-file"},
		{[]string{"--copy-env-file", filepath.Join(w.dir, "no-such.env")}, "--copy-env-file " + filepath.Join(w.dir, "no-such.env") + ": no such file"},
	} {
		if res := rw.run(append([]string{"job", "edit", "home"}, tc.args...)...); res.code != 2 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("job edit home %v: exit %d %q, want a refusal saying %q", tc.args, res.code, res.stderr, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--copy-to", copyRepo}, "--copy-to needs --copy-password-file"},
		{[]string{"--copy-password-file", copyPw}, "give --copy-to REPO too"},
	} {
		args := append([]string{"job", "add", "other", "--repo", rw.repo, "--password-file", rw.pw, "--path", rw.data}, tc.args...)
		if res := rw.run(args...); res.code != 2 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("job add %v: exit %d %q, want a refusal saying %q", tc.args, res.code, res.stderr, tc.want)
		}
	}
	if j := rw.mustRun("job", "show", "home", "--json"); !strings.Contains(j, `"copy_to": "`+copyRepo+`"`) {
		t.Fatalf("a refused edit changed the job:\n%s", j)
	}
	if res := rw.run("retention", "plan", "home", "--repository", "other"); res.code != 2 {
		t.Errorf("retention plan --repository other: exit %d %q, want a refusal", res.code, res.stderr)
	}
}
