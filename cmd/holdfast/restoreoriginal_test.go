package main_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A root job backs up homes, among them nobody's; nobody then deletes a file, changes another
// and plants a link to root's secret where a third was. restore --to-original puts the deleted
// ones back with their owner, mode and time, keeps what changed (the run is partial and says
// which) unless --overwrite, never writes through the link, and leaves no stage behind; its dry
// run lists each case and writes nothing; a restore with nothing to put back is refused.
func TestRestoreToOriginal(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	if os.Geteuid() != 0 {
		t.Fatal("the job runs as root and the files are nobody's: the test must run as root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	homes := filepath.Join(w.dir, "homes")
	home := filepath.Join(homes, "nobody")
	docs := filepath.Join(home, "docs")
	must(os.MkdirAll(docs, 0o755))
	secret := filepath.Join(w.dir, "root-secret")
	must(os.WriteFile(secret, []byte("root's own\n"), 0o600))
	when := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	files := map[string]string{
		filepath.Join(home, "notes.txt"): "nobody's notes, v1\n",
		filepath.Join(docs, "a.txt"):     "a, v1\n",
		filepath.Join(docs, "b.txt"):     "b, v1\n",
		filepath.Join(docs, "c.txt"):     "c, v1\n",
	}
	for p, content := range files {
		must(os.WriteFile(p, []byte(content), 0o640))
		must(os.Chtimes(p, when, when))
	}
	for _, p := range []string{home, docs, filepath.Join(home, "notes.txt"), filepath.Join(docs, "a.txt"), filepath.Join(docs, "b.txt"), filepath.Join(docs, "c.txt")} {
		must(os.Lchown(p, uid, gid))
	}
	must(os.Chmod(home, 0o700))
	repo, pw := w.resticRepo("repo")
	must(os.Chmod(pw, 0o600))
	w.mustRun("job", "add", "homes", "--repo", repo, "--password-file", pw, "--path", homes)
	w.startDaemon()
	var backup runJSON
	must(json.Unmarshal([]byte(w.mustRun("run", "start", "homes", "--wait", "--json")), &backup))
	if backup.Status != "succeeded" {
		t.Fatalf("backup: %+v", backup)
	}

	// nobody's doings after the snapshot.
	must(os.Remove(filepath.Join(home, "notes.txt")))
	must(os.Remove(filepath.Join(docs, "a.txt")))
	must(os.WriteFile(filepath.Join(docs, "b.txt"), []byte("b, changed since\n"), 0o640))
	must(os.Remove(filepath.Join(docs, "c.txt")))
	must(os.Symlink(secret, filepath.Join(docs, "c.txt")))
	must(os.Lchown(filepath.Join(docs, "c.txt"), uid, gid))

	noStage := func() {
		t.Helper()
		entries, err := os.ReadDir(homes)
		must(err)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".holdfast-restore-") {
				t.Fatalf("a stage was left in %s: %s", homes, e.Name())
			}
		}
	}
	untouched := func() {
		t.Helper()
		if got, err := os.ReadFile(secret); err != nil || string(got) != "root's own\n" {
			t.Fatalf("root's secret = %q, %v: written through nobody's link", got, err)
		}
		if l, err := os.Readlink(filepath.Join(docs, "c.txt")); err != nil || l != secret {
			t.Fatalf("nobody's link = %q, %v: want it kept", l, err)
		}
	}

	// The dry run: each entry's action, nothing written.
	res := w.run("restore", "homes", "--to-original", "--include", filepath.Join(home, "notes.txt"), "--include", docs, "--dry-run", "--json")
	if res.code != 0 {
		t.Fatalf("restore --to-original --dry-run: exit %d\n%s", res.code, res.stderr)
	}
	actions := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		var wr struct{ Path, Action string }
		must(json.Unmarshal([]byte(l), &wr))
		actions[strings.TrimPrefix(wr.Path, home+"/")] = wr.Action
	}
	want := map[string]string{"notes.txt": "write", "docs": "merge", "docs/a.txt": "write", "docs/b.txt": "keep", "docs/c.txt": "keep"}
	if len(actions) != len(want) {
		t.Fatalf("the dry run's actions = %v, want %v", actions, want)
	}
	for p, a := range want {
		if actions[p] != a {
			t.Fatalf("the dry run's actions = %v, want %v", actions, want)
		}
	}
	human := w.run("restore", "homes", "--to-original", "--include", docs, "--overwrite", "--dry-run")
	if human.code != 0 || !strings.Contains(human.stdout, "overwrite") || !strings.Contains(human.stderr, "would write 3 entries") ||
		!strings.Contains(human.stderr, "2 of them over what is there") {
		t.Fatalf("the human dry run with --overwrite: exit %d\n%s\n%s", human.code, human.stdout, human.stderr)
	}
	if _, err := os.Lstat(filepath.Join(home, "notes.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the dry run put notes.txt back: %v", err)
	}
	noStage()
	untouched()

	// Nothing to put back: refused in one line, nothing queued.
	before := len(w.runs("homes"))
	res = w.run("restore", "homes", "--to-original", "--include", filepath.Join(docs, "b.txt"))
	if res.code != 2 || !strings.Contains(res.stderr, "nothing to put back") || !strings.Contains(res.stderr, "--overwrite") ||
		strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
		t.Fatalf("a restore of a changed file without --overwrite: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"with a target too", []string{"--target", filepath.Join(w.dir, "t"), "--include", docs}, "not both"},
		{"without paths", nil, "--include"},
		{"a pattern, which is taken as a name", []string{"--include", filepath.Join(docs, "*.txt")}, "holds nothing there"},
		{"a relative path", []string{"--include", "docs"}, "clean and absolute"},
		{"one inside another", []string{"--include", docs, "--include", filepath.Join(docs, "a.txt")}, "inside"},
		{"through nobody's link", []string{"--include", filepath.Join(docs, "c.txt", "x")}, "link"},
	} {
		res := w.run(append([]string{"restore", "homes", "--to-original"}, tc.args...)...)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line saying %q", tc.name, res.code, res.stderr, tc.want)
		}
	}
	if after := len(w.runs("homes")); after != before {
		t.Fatalf("refused restores queued %d runs", after-before)
	}

	// Put back without --overwrite: the deleted files return, the changed one and the link stay.
	var r restoreOut
	res = w.run("restore", "homes", "--to-original", "--include", filepath.Join(home, "notes.txt"), "--include", docs, "--wait", "--json")
	must(json.Unmarshal([]byte(res.stdout), &r))
	if r.Status != "partial" || !strings.Contains(r.Reason, "kept") || r.Restore.Target != homes {
		t.Fatalf("restore --to-original: exit %d, %+v, want partial (kept entries), staged in %s\n%s", res.code, r, homes, res.stderr)
	}
	for _, p := range []string{filepath.Join(home, "notes.txt"), filepath.Join(docs, "a.txt")} {
		got, err := os.ReadFile(p)
		info, serr := os.Lstat(p)
		if err != nil || serr != nil || string(got) != files[p] || info.Mode().Perm() != 0o640 || !info.ModTime().Equal(when) ||
			int(info.Sys().(*syscall.Stat_t).Uid) != uid {
			t.Fatalf("%s put back = %q (%v), %v: want the snapshot's content, mode 0640, time and owner nobody", p, got, err, info)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(docs, "b.txt")); string(got) != "b, changed since\n" {
		t.Fatalf("the changed b.txt = %q: want it kept", got)
	}
	untouched()
	noStage()
	logs := w.mustRun("run", "logs", r.ID)
	if !strings.Contains(logs, "b.txt kept") || !strings.Contains(logs, "2 entries placed") {
		t.Fatalf("the restore's log does not say what it put back and kept:\n%s", logs)
	}

	// With --overwrite: the changed file and the link are replaced by the snapshot's files.
	res = w.run("restore", "homes", "--to-original", "--include", docs, "--overwrite", "--wait", "--json")
	must(json.Unmarshal([]byte(res.stdout), &r))
	if res.code != 0 || r.Status != "succeeded" || !strings.Contains(r.Reason, "put back") {
		t.Fatalf("restore --to-original --overwrite: exit %d, %+v\n%s", res.code, r, res.stderr)
	}
	for _, p := range []string{filepath.Join(docs, "b.txt"), filepath.Join(docs, "c.txt")} {
		info, err := os.Lstat(p)
		if got, _ := os.ReadFile(p); err != nil || !info.Mode().IsRegular() || string(got) != files[p] {
			t.Fatalf("%s after --overwrite = %q, %v: want the snapshot's file", p, got, info)
		}
	}
	if got, err := os.ReadFile(secret); err != nil || string(got) != "root's own\n" {
		t.Fatalf("root's secret = %q, %v", got, err)
	}
	noStage()
	w.checkInvariants()
}

// A restore to the original paths that a hard crash of its manager interrupts mid-way is
// restarted from the top: the next attempt clears the stage the first left, restores again and
// puts every file back, once, as the snapshot has it; no stage is left.
func TestRestoreToOriginalAfterCrash(t *testing.T) {
	parallel(t)
	w := newWorldOwnManager(t) // it kills its manager
	w.spawnGrace = "3s"
	if os.Geteuid() != 0 {
		t.Fatal("the job runs as root and the files are nobody's: the test must run as root")
	}
	homes := filepath.Join(w.dir, "homes")
	home := w.sampleData(filepath.Join("homes", "nobody"), 4, slowData)
	if out, err := exec.Command("chown", "-R", "nobody:", home).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	kept := filepath.Join(w.dir, "as-backed-up")
	if out, err := exec.Command("cp", "-a", home, kept).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	repo, pw := w.resticRepo("repo")
	if err := os.Chmod(pw, 0o600); err != nil {
		t.Fatal(err)
	}
	w.slowBackups()
	w.backupRate(0) // the backup at full speed
	w.mustRun("job", "add", "homes", "--repo", repo, "--password-file", pw, "--path", homes)
	w.startDaemon()
	var backup runJSON
	if err := json.Unmarshal([]byte(w.mustRun("run", "start", "homes", "--wait", "--json")), &backup); err != nil || backup.Status != "succeeded" {
		t.Fatalf("backup: %+v (%v)", backup, err)
	}
	entries, err := os.ReadDir(home)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(home, e.Name())); err != nil {
			t.Fatal(err)
		}
	}

	w.backupRate(stuckKiBps) // the restore crawls
	var r restoreOut
	if err := json.Unmarshal([]byte(w.mustRun("restore", "homes", "--to-original", "--include", home, "--json")), &r); err != nil {
		t.Fatal(err)
	}
	w.waitRun(r.ID, "the restore's progress", w.underway)
	if got := w.show(r.ID); ended(got) {
		t.Fatalf("the restore ended before the crash: %+v", got)
	}
	w.backupRate(0) // the attempt after the crash
	w.mgr.Kill(t)
	w.mgr.Start(t)
	end := w.waitEnd(r.ID)
	if end.Status != "succeeded" || len(end.Attempts) != 2 || end.Attempts[0].ServiceResult != "" {
		t.Fatalf("restore to the original paths after a hard crash = %+v, want succeeded in attempt 2, attempt 1 without a marker", end)
	}
	if out, err := exec.Command("diff", "-r", "--no-dereference", kept, home).CombinedOutput(); err != nil {
		t.Fatalf("the files put back differ from the backed-up ones: %v\n%s", err, out)
	}
	left, err := filepath.Glob(filepath.Join(homes, ".holdfast-restore-*"))
	if err != nil || len(left) != 0 {
		t.Fatalf("stages left: %v %v", left, err)
	}
	w.noLocks(repo)
	w.checkInvariants()
}
