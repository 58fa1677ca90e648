package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/testenv"
)

// restoreWorld is a world with a job "home" run as nobody over data that has a name with spaces,
// a symbolic link and a 0600 file of nobody's, backed up once; restores go under a directory
// nobody may write.
type restoreWorld struct {
	*world
	repo, pw, data string
	restores       string // a directory of nobody's for the targets
	snapshot       string // the backup's snapshot (short id)
	uid, gid       int
}

func newRestoreWorld(t *testing.T, w *world, files int, size int64) *restoreWorld {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("restores run as the job's user: the test must run as root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	rw := &restoreWorld{world: w}
	rw.uid, _ = strconv.Atoi(nobody.Uid)
	rw.gid, _ = strconv.Atoi(nobody.Gid)
	rw.repo, rw.pw = w.resticRepo("repo")
	openToAll(t, rw.repo)
	rw.data = w.sampleData("data", files, size)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(rw.data, "sub dir"), 0o755))
	must(os.WriteFile(filepath.Join(rw.data, "sub dir", "name with spaces.txt"), []byte("spaces\n"), 0o644))
	must(os.Symlink("sub dir/name with spaces.txt", filepath.Join(rw.data, "a link")))
	private := filepath.Join(rw.data, "private.key")
	must(os.WriteFile(private, []byte("nobody's own\n"), 0o600))
	must(os.Chown(private, rw.uid, rw.gid))
	rw.restores = filepath.Join(w.dir, "restores")
	must(os.Mkdir(rw.restores, 0o755))
	must(os.Chown(rw.restores, rw.uid, rw.gid))
	w.mustRun("job", "add", "home", "--repo", rw.repo, "--password-file", rw.pw, "--path", rw.data, "--user", "nobody")
	return rw
}

// backup runs one backup of home and records its snapshot.
func (rw *restoreWorld) backup() {
	rw.t.Helper()
	var r runJSON
	if err := json.Unmarshal([]byte(rw.mustRun("run", "start", "home", "--wait", "--json")), &r); err != nil || r.Status != "succeeded" {
		rw.t.Fatalf("backup: %+v (%v)", r, err)
	}
	rw.snapshot = r.SnapshotID
}

// restoreOut is a restore run as run show --json prints it.
type restoreOut struct {
	runJSON
	Kind    string `json:"kind"`
	Host    string `json:"host"`
	Restore struct {
		Target     string `json:"target"`
		Snapshot   string `json:"snapshot"`
		TotalBytes *int64 `json:"total_bytes"`
	} `json:"restore"`
}

// sameTree fails the test unless target holds the backed-up data as it is (restic restores a
// snapshot's absolute paths under its target): names, contents, the link as a link, and the
// private file still nobody's with mode 0600.
func (rw *restoreWorld) sameTree(target string) {
	rw.t.Helper()
	restored := filepath.Join(target, rw.data)
	if out, err := exec.Command("diff", "-r", "--no-dereference", rw.data, restored).CombinedOutput(); err != nil {
		rw.t.Fatalf("diff -r %s %s: %v\n%s", rw.data, restored, err, out)
	}
	if l, err := os.Readlink(filepath.Join(restored, "a link")); err != nil || l != "sub dir/name with spaces.txt" {
		rw.t.Fatalf("restored link = %q, %v", l, err)
	}
	info, err := os.Lstat(filepath.Join(restored, "private.key"))
	if err != nil {
		rw.t.Fatal(err)
	}
	st := info.Sys().(*syscall.Stat_t)
	if info.Mode().Perm() != 0o600 || int(st.Uid) != rw.uid {
		rw.t.Fatalf("restored private.key: mode %v owner %d, want 0600 and nobody (%d)", info.Mode().Perm(), st.Uid, rw.uid)
	}
}

// A restore gives back the snapshot as it was, as the job's user, into a target it made; the
// run is a restore of the snapshot's full id, pinned to the host that asked for it.
func TestRestoreEqualsSource(t *testing.T) {
	parallel(t)
	rw := newRestoreWorld(t, newWorld(t), 3, 1<<20)
	rw.startDaemon()
	rw.backup()
	target := filepath.Join(rw.restores, "new target")
	res := rw.run("restore", "home", "--target", target, "--wait", "--json")
	if res.code != 0 {
		t.Fatalf("restore --wait: exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	var r restoreOut
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Kind != "restore" || r.Status != "succeeded" || !strings.HasPrefix(r.Restore.Snapshot, rw.snapshot) ||
		len(r.Restore.Snapshot) != 64 || r.Restore.Target != target || r.Host == "" || !strings.Contains(r.Reason, "restore complete") {
		t.Fatalf("restore run = %+v, want a succeeded restore of snapshot %s into %s", r, rw.snapshot, target)
	}
	if r.Restore.TotalBytes == nil || *r.Restore.TotalBytes < 1<<20 {
		t.Fatalf("restore's total = %v, want the snapshot's size", r.Restore.TotalBytes)
	}
	rw.sameTree(target)
	// Its last progress, restic's own from 0.17 (restore --json), measured under the target
	// before: all of it.
	if !regexp.MustCompile(`, \d+ files, 1\.0 MiB$`).MatchString(r.Reason) {
		t.Fatalf("the restore's reason %q does not end with its last progress: all of its 1 MiB", r.Reason)
	}
	// Its unit's own lines, as for a backup: restic says what it restores where (journald may
	// take a moment to have them), "restoring <Snapshot 25a5aaf6 of …" up to 0.15, "restoring
	// snapshot 25a5aaf6 of …" to 0.16; from 0.17, whose restore prints JSON, holdfast's own
	// line with restic's summary.
	v, err := engine.ParseResticVersion([]byte("restic " + r.Attempts[0].ResticVersion))
	if err != nil {
		t.Fatal(err)
	}
	var logs string
	if !testenv.Eventually(time.Minute, func() bool {
		logs = rw.mustRun("run", "logs", r.ID)
		if v.RestoreJSON() {
			m := regexp.MustCompile(`holdfast: restic restored (\d+) files of (\d+) \(1\.0 MiB of 1\.0 MiB\) into (.*)`).FindStringSubmatch(logs)
			return m != nil && m[1] == m[2] && m[3] == target
		}
		return strings.Contains(logs, "restoring <Snapshot "+rw.snapshot[:8]) || strings.Contains(logs, "restoring snapshot "+rw.snapshot[:8])
	}) {
		t.Fatalf("run logs of the restore (restic %s) lack what it restored:\n%s", v, logs)
	}
	info, err := os.Stat(target)
	if err != nil || int(info.Sys().(*syscall.Stat_t).Uid) != rw.uid {
		t.Fatalf("target %s: %v, want it made by nobody", target, err)
	}
	// The ledger charges a restore nothing; it is no backup, so the job's last outcome stays.
	if r.HoldBytes != 0 || r.SettledBytes != 0 || r.BudgetBytes != nil {
		t.Fatalf("restore run held or settled bytes: %+v", r)
	}
	rw.checkInvariants()
}

// Refusals: each says what is wrong, and nothing is queued or made.
func TestRestoreRefusals(t *testing.T) {
	parallel(t)
	rw := newRestoreWorld(t, newWorld(t), 1, 1<<10)
	rw.startDaemon()
	rw.backup()
	full := filepath.Join(rw.restores, "full")
	if err := os.Mkdir(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep.txt"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(full, rw.uid, rw.gid); err != nil {
		t.Fatal(err)
	}
	rootOwned := filepath.Join(rw.dir, "root-owned") // 0755, root's: nobody cannot write it
	if err := os.Mkdir(rootOwned, 0o755); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(rw.restores, "absent")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"non-empty target", []string{"restore", "home", "--target", full}, "is not empty"},
		{"unwritable target", []string{"restore", "home", "--target", rootOwned}, "cannot be written by the job's user"},
		{"unwritable parent", []string{"restore", "home", "--target", filepath.Join(rootOwned, "x")}, "cannot be made"},
		{"unknown snapshot", []string{"restore", "home", "--target", absent, "--snapshot", "deadbeef"}, "no snapshot deadbeef"},
		{"bad snapshot", []string{"restore", "home", "--target", absent, "--snapshot", "../x"}, "give a snapshot id"},
		{"relative target", []string{"restore", "home", "--target", "out"}, "relative path"},
		{"subset 0%", []string{"run", "start", "home", "--verify", "--read-data-subset", "0%"}, "above 0%"},
		{"subset 150%", []string{"run", "start", "home", "--verify", "--read-data-subset", "150%"}, "at most 100%"},
		{"subset 3/2", []string{"run", "start", "home", "--verify", "--read-data-subset", "3/2"}, "1 <= n <= t"},
		{"subset without verify", []string{"run", "start", "home", "--read-data-subset", "5%"}, "add --verify"},
	} {
		res := rw.run(tc.args...)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line saying %q", tc.name, res.code, res.stderr, tc.want)
		}
	}
	if runs := rw.runs("home"); len(runs) != 1 {
		t.Fatalf("runs after the refusals: %+v, want only the backup", runs)
	}
	if _, err := os.Lstat(absent); !os.IsNotExist(err) {
		t.Fatalf("a refused restore made its target %s: %v", absent, err)
	}
	if names, _ := os.ReadDir(full); len(names) != 1 {
		t.Fatalf("the non-empty target was changed: %v", names)
	}
	// With --overwrite the same target is restored over.
	res := rw.run("restore", "home", "--target", full, "--overwrite", "--wait")
	if res.code != 0 {
		t.Fatalf("restore --overwrite: exit %d\n%s", res.code, res.stderr)
	}
	rw.sameTree(full)
	if _, err := os.Stat(filepath.Join(full, "keep.txt")); err != nil {
		t.Fatalf("restore --overwrite removed what was there: %v", err)
	}
}

// A slow restore killed with its manager, hard, is restarted as attempt 2 and gives back the
// whole tree; a restore the operator stops stays stopped.
func TestRestoreAfterCrash(t *testing.T) {
	parallel(t)
	w := newWorldOwnManager(t) // it kills its manager
	w.spawnGrace = "3s"
	rw := newRestoreWorld(t, w, 4, slowData)
	w.slowBackups()
	w.backupRate(0) // the backup at full speed
	rw.startDaemon()
	rw.backup()

	w.backupRate(stuckKiBps) // the restores crawl
	crashed := filepath.Join(rw.restores, "crashed")
	var r restoreOut
	if err := json.Unmarshal([]byte(rw.mustRun("restore", "home", "--target", crashed, "--json")), &r); err != nil {
		t.Fatal(err)
	}
	// restic writes a file only once it has a pack of it: at this rate, not for minutes. Its
	// restore has begun when the unit measures its target.
	w.waitRun(r.ID, "the restore's progress", w.underway)
	if got := w.show(r.ID); ended(got) {
		t.Fatalf("the restore ended before the crash: %+v", got)
	}
	w.backupRate(0) // the attempt after the crash
	w.mgr.Kill(t)
	w.mgr.Start(t)
	end := w.waitEnd(r.ID)
	if end.Status != "succeeded" || len(end.Attempts) != 2 || end.Attempts[0].ServiceResult != "" {
		t.Fatalf("restore after a hard crash = %+v, want succeeded in attempt 2, attempt 1 without a marker", end)
	}
	rw.sameTree(crashed)

	// Stopped by the operator: not restarted, whatever the manager does next.
	w.backupRate(stuckKiBps)
	stopped := filepath.Join(rw.restores, "stopped")
	if err := json.Unmarshal([]byte(rw.mustRun("restore", "home", "--target", stopped, "--json")), &r); err != nil {
		t.Fatal(err)
	}
	// restic writes a file only once it has a pack of it: at this rate, not for minutes. Its
	// restore has begun when the unit measures its target.
	w.waitRun(r.ID, "the restore's progress", w.underway)
	rw.mustRun("run", "stop", r.ID)
	end = w.waitEnd(r.ID)
	if end.Status != "stopped" || len(end.Attempts) != 1 {
		t.Fatalf("stopped restore = %+v, want stopped after 1 attempt", end)
	}
	w.noLocks(rw.repo)
	w.checkInvariants()
}

// A restore and a prune of the same repository never run at once: the prune waits for the
// restore, and a restore waits for the prune.
func TestRestoreNeverBesidePrune(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	rw := newRestoreWorld(t, w, 4, slowData)
	for _, name := range []string{"tidy", "other"} {
		w.mustRun("job", "add", name, "--repo", rw.repo, "--password-file", rw.pw, "--path", w.sampleData("data-"+name, 1, 1<<10), "--user", "nobody")
	}
	w.slowBackups()
	w.backupRate(0)
	rw.startDaemon()
	rw.backup()
	w.backupRate(slowKiBps) // slow enough for the prune to be asked for while the restore runs
	var first, second restoreOut
	if err := json.Unmarshal([]byte(rw.mustRun("restore", "home", "--target", filepath.Join(rw.restores, "one"), "--json")), &first); err != nil {
		t.Fatal(err)
	}
	w.waitRun(first.ID, "the restore to run", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	var prune runJSON
	if err := json.Unmarshal([]byte(w.mustRun("run", "start", "tidy", "--prune", "--json")), &prune); err != nil {
		t.Fatal(err)
	}
	sawWaiting := false
	w.waitRun(prune.ID, "the prune to wait or end", func(r runJSON) bool {
		sawWaiting = sawWaiting || strings.Contains(r.WaitingReason, "repository busy: restore run "+first.ID)
		return sawWaiting || ended(r)
	})
	if !sawWaiting {
		t.Fatalf("the prune never waited for the restore: %+v", w.show(prune.ID))
	}
	// Asked for while the prune waits or runs: it must not overlap it either. (A job has one live
	// run at a time: this is another job's restore, of home's snapshot in the shared repository.)
	if err := json.Unmarshal([]byte(rw.mustRun("restore", "other", "--snapshot", rw.snapshot, "--target", filepath.Join(rw.restores, "two"), "--json")), &second); err != nil {
		t.Fatal(err)
	}
	var spans []span
	for _, id := range []string{first.ID, prune.ID, second.ID} {
		r := w.waitEnd(id)
		if r.Status != "succeeded" {
			t.Fatalf("run %s = %+v, want succeeded", id, r)
		}
		spans = append(spans, w.lastSpan(id))
	}
	p := spans[1]
	for _, o := range []span{spans[0], spans[2]} {
		if o.start.Before(p.end) && p.start.Before(o.end) {
			t.Fatalf("prune %v overlaps restore %v", p, o)
		}
	}
	rw.sameTree(filepath.Join(rw.restores, "one"))
	rw.sameTree(filepath.Join(rw.restores, "two"))
	w.noLocks(rw.repo)
	w.checkInvariants()
}

// A dry run lists what a restore would write and what it would write over, after the restore's
// own checks, and writes and queues nothing: into a new target every entry is a write; into a
// target holding a changed copy of a file, with --overwrite, that file is an overwrite with the
// size it has now; an --include path narrows it to that subtree; a pattern, a path the snapshot
// does not hold and --wait are refused.
func TestRestoreDryRun(t *testing.T) {
	parallel(t)
	rw := newRestoreWorld(t, newWorld(t), 2, 1<<10)
	rw.startDaemon()
	rw.backup()
	fresh := filepath.Join(rw.restores, "fresh")
	res := rw.run("restore", "home", "--target", fresh, "--dry-run", "--json")
	if res.code != 0 {
		t.Fatalf("restore --dry-run: exit %d\n%s", res.code, res.stderr)
	}
	type write struct {
		Path        string  `json:"path"`
		Action      string  `json:"action"`
		Type        string  `json:"type"`
		Size        *uint64 `json:"size"`
		PresentSize *int64  `json:"present_size"`
	}
	lines := func(out string) []write {
		t.Helper()
		var ws []write
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var w write
			if err := json.Unmarshal([]byte(l), &w); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			ws = append(ws, w)
		}
		return ws
	}
	spaces := filepath.Join(rw.data, "sub dir", "name with spaces.txt")
	all := lines(res.stdout)
	found := false
	for _, w := range all {
		if w.Action != "write" {
			t.Fatalf("into a new target: %+v, want every entry a write", w)
		}
		if w.Path == filepath.Join(fresh, spaces) {
			found = w.Type == "file" && w.Size != nil && *w.Size == 7
		}
	}
	if !found || len(all) < 5 {
		t.Fatalf("the dry run's %d entries lack %s of 7 bytes: %+v", len(all), spaces, all)
	}
	if _, err := os.Lstat(fresh); !os.IsNotExist(err) {
		t.Fatalf("a dry run made its target: %v", err)
	}

	// Over a target that holds a changed copy of one file.
	over := filepath.Join(rw.restores, "over")
	there := filepath.Join(over, spaces)
	if err := os.MkdirAll(filepath.Dir(there), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(there, []byte("changed since, and longer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", rw.uid, rw.gid), over).Run(); err != nil {
		t.Fatal(err)
	}
	if res := rw.run("restore", "home", "--target", over, "--dry-run"); res.code != 2 || !strings.Contains(res.stderr, "is not empty") {
		t.Fatalf("a dry run into a full target without --overwrite: exit %d\n%s", res.code, res.stderr)
	}
	res = rw.run("restore", "home", "--target", over, "--overwrite", "--include", filepath.Join(rw.data, "sub dir"), "--dry-run", "--json")
	if res.code != 0 {
		t.Fatalf("restore --overwrite --include --dry-run: exit %d\n%s", res.code, res.stderr)
	}
	sub := lines(res.stdout)
	if len(sub) != 2 || sub[0].Path != filepath.Join(over, rw.data, "sub dir") || sub[0].Action != "write" ||
		sub[1].Path != there || sub[1].Action != "overwrite" || sub[1].PresentSize == nil || *sub[1].PresentSize != 26 {
		t.Fatalf("the dry run of sub dir over the changed copy: %+v", sub)
	}
	human := rw.run("restore", "home", "--target", over, "--overwrite", "--include", filepath.Join(rw.data, "sub dir"), "--dry-run")
	if human.code != 0 || !strings.Contains(human.stdout, "overwrite") || !strings.Contains(human.stderr, "would write 2 entries") ||
		!strings.Contains(human.stderr, "1 of them over what is there") {
		t.Fatalf("the human dry run: exit %d\n%s\n%s", human.code, human.stdout, human.stderr)
	}
	if got, _ := os.ReadFile(there); string(got) != "changed since, and longer\n" {
		t.Fatalf("a dry run wrote over %s: %q", there, got)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a pattern", []string{"--include", "*.txt"}, "not patterns"},
		{"a path the snapshot lacks", []string{"--include", filepath.Join(rw.data, "nowhere")}, "holds nothing there"},
		{"with --wait", []string{"--wait"}, "--wait has no run"},
	} {
		res := rw.run(append([]string{"restore", "home", "--target", fresh, "--dry-run"}, tc.args...)...)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line saying %q", tc.name, res.code, res.stderr, tc.want)
		}
	}
	if runs := rw.runs("home"); len(runs) != 1 {
		t.Fatalf("runs after the dry runs: %+v, want only the backup", runs)
	}
}
