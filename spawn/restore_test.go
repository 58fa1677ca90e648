package spawn_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/spawn"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

// A root job's restore, in the unit spawn builds (its sandbox refuses setuid/setgid bits and
// device nodes), with the restic installed: each loss is an item error of the attempt's journal
// naming the item, whether restic said so or the comparison with its listing found it, and
// the rest restored makes the attempt partial (exit status 3), not failed.
func TestRootRestoreSandboxLosses(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("a root job's restore, and mknod: the test must run as root")
	}
	restic := testenv.Restic(t)
	holdfast := testenv.HoldfastBinary(t)
	m := testenv.SharedSystemd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := systemd.New(ctx, systemd.Config{Address: m.Address})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)

	dir := testenv.SharedDir(t)
	src := filepath.Join(dir, "src")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "shared"), 0o755))
	for name, mode := range map[string]uint32{"suid": 0o4755, "plain": 0o640, "shared/inner": 0o644} {
		must(os.WriteFile(filepath.Join(src, name), []byte(name+"\n"), 0o600))
		must(syscall.Chmod(filepath.Join(src, name), mode))
	}
	must(syscall.Chmod(filepath.Join(src, "shared"), 0o2777))
	must(syscall.Mknod(filepath.Join(src, "null"), syscall.S_IFCHR|0o666, 1<<8|3))
	repo, pw := filepath.Join(dir, "repo"), filepath.Join(dir, "pw")
	must(os.WriteFile(pw, []byte(testenv.ResticPassword+"\n"), 0o600))
	testenv.ResticRepo(t, repo)
	if out, err := exec.Command(restic, "--repo", repo, "--password-file", pw, "backup", "--no-cache", "--", src).CombinedOutput(); err != nil {
		t.Fatalf("restic backup: %v\n%s", err, out)
	}
	out, err := exec.Command(restic, "--repo", repo, "--password-file", pw, "--no-cache", "snapshots", "--json").Output()
	must(err)
	snaps, err := engine.ParseSnapshots(out)
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots: %v, %v", snaps, err)
	}

	jobs := jobunit.Config{StateDir: filepath.Join(dir, "state"), Binary: holdfast, ResticBinary: restic}
	job := model.Job{Name: "rootjob", Engine: engine.NameRestic, Repository: repo, PasswordFile: pw, Paths: []string{src}}
	target := filepath.Join(dir, "target")
	run := model.Run{ID: uuid.New(), Kind: model.KindRestore, Restore: model.Restore{Target: target, Snapshot: snaps[0].ID}}
	journalPath := jobunit.JournalPath(jobs.StateDir, run.ID, 1)
	for _, d := range []string{target, filepath.Dir(journalPath), jobunit.CacheDir(jobs.StateDir, 0, job.Name)} {
		must(os.MkdirAll(d, 0o700))
	}
	spec := spawn.UnitSpec(jobs, job, run, 1)
	// restic 0.17 and later restore with --json: their losses are JSON lines, read the same way.
	v, err := engine.ResticVersionOf(ctx, restic)
	must(err)
	resticArgv := spec.ExecStart[slices.Index(spec.ExecStart, "--")+1:]
	if got := slices.Contains(resticArgv, "--json"); got != v.RestoreJSON() {
		t.Fatalf("restic %s: --json in the restore's command is %v, want %v: %q", v, got, v.RestoreJSON(), resticArgv)
	}
	res, err := r.Output(ctx, spec, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 3 {
		t.Fatalf("exit status %d, want 3 (partial); stderr:\n%s", res.ExitStatus, res.Stderr)
	}

	evs, _, err := journal.Read(journal.Source{Dir: jobs.StateDir, Name: strings.TrimPrefix(journalPath, jobs.StateDir+"/")},
		journal.Cursor{}, run.ID, 1, 1<<20)
	must(err)
	want := map[string]string{filepath.Join(src, "null"): engine.LostDevice, filepath.Join(src, "suid"): engine.LostSetID,
		filepath.Join(src, "shared"): engine.LostSetID}
	got := map[string]string{}
	for _, ev := range evs {
		if ev.Type != engine.TypeItemError {
			continue
		}
		var ie engine.ItemError
		must(json.Unmarshal(ev.Payload, &ie))
		got[ie.Item] = ie.Message
		if !strings.HasPrefix(ie.Message, want[ie.Item]) || want[ie.Item] == "" {
			t.Errorf("item error %s: %q, want it to start %q", ie.Item, ie.Message, want[ie.Item])
		}
	}
	if len(got) != len(want) {
		t.Errorf("item errors %v, want one for each of %v; stderr:\n%s", got, want, res.Stderr)
	}
	if last := evs[len(evs)-1]; last.Type != engine.TypeExit || string(last.Payload) != `{"exit_status":3}` {
		t.Errorf("last event %s %s", last.Type, last.Payload)
	}
	// What the sandbox allowed came back whole.
	for name, mode := range map[string]os.FileMode{"plain": 0o640, "shared/inner": 0o644} {
		fi, err := os.Stat(filepath.Join(target, src, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("restored %s: %v, %v; want mode %v", name, fi, err, mode)
		}
	}
}
