package main_test

import (
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/fssnap"
	"github.com/holdfast-backup/holdfast/testenv"
)

// A job with --fs-snapshot btrfs backs up its paths as they were at one instant, while a writer
// changes them throughout the backup, under their own names; no Btrfs snapshot is left after a
// success, a failure, a stop, or a hard kill of the manager followed by the daemon's next pass.
func TestBtrfsSnapshots(t *testing.T) {
	parallel(t)
	fs := testenv.Btrfs(t) // before the manager, whose mount namespace must hold it
	w := newWorldOwnManager(t)
	w.slowBackups()
	data, vol := filepath.Join(fs, "data"), filepath.Join(fs, "vol")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.BtrfsSubvolume(t, vol) // a path that is a subvolume's root: its snapshots are in it
	// restic reads a, then m1 and m2 (4 MiB each, at the slow rate: seconds), then z and vol's g.
	for _, name := range []string{"m1", "m2"} {
		b := make([]byte, slowData/2)
		rand.Read(b)
		if err := os.WriteFile(filepath.Join(data, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	counted := []string{filepath.Join(data, "a"), filepath.Join(data, "z"), filepath.Join(vol, "g")}
	var n atomic.Int64
	// Each file is replaced whole (a rename), a, z, g in turn: at any instant a is z or z+1, and
	// z is g or g+1.
	writeAll := func(v int64) {
		for _, f := range counted {
			tmp := filepath.Join(filepath.Dir(f), ".next")
			err := os.WriteFile(tmp, []byte(strconv.FormatInt(v, 10)), 0o644)
			if err == nil {
				err = os.Rename(tmp, f)
			}
			if err != nil {
				t.Error(err)
			}
		}
		n.Store(v)
	}
	writeAll(0)
	repo, pw := w.resticRepo("repo")
	w.startDaemon()

	// Refused at job add, in one line, with nothing stored.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--path", w.dir}, "not Btrfs"},
		{[]string{"--path", data, "--before", "/bin/true"}, "before hook"},
		{[]string{"--path", data, "--fs-snapshot", "zfs"}, "give btrfs"},
	} {
		args := append([]string{"job", "add", "refused", "--repo", repo, "--password-file", pw, "--fs-snapshot", "btrfs"}, tc.args...)
		r := w.run(args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("%s: exit %d, %q; want 2 and one line saying %q", strings.Join(args, " "), r.code, r.stderr, tc.want)
		}
	}
	if r := w.run("job", "show", "refused"); r.code == 0 {
		t.Fatal("a refused job was stored")
	}
	w.mustRun("job", "add", "snap", "--repo", repo, "--password-file", pw, "--path", data, "--path", vol, "--fs-snapshot", "btrfs")

	// The writer counts in every file, from before the run until after it.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for v := int64(1); ; v++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			writeAll(v)
		}
	})
	id := w.startRun("snap")
	w.waitRun(id, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	atStart := n.Load() // the snapshot was taken before the unit started
	r := w.waitEnd(id)
	close(stop)
	wg.Wait()
	if r.Status != "succeeded" {
		t.Fatalf("run = %+v, want succeeded", r)
	}
	final := n.Load()
	w.noBtrfsSnapshots(fs, vol)

	// Restored, every counted file holds one value, from before the unit started, though restic
	// read the last of them seconds after the first while the writer went on.
	target := filepath.Join(w.dir, "restored")
	w.mustRun("restore", "snap", "--target", target, "--wait")
	var got []int64
	for _, f := range counted {
		b, err := os.ReadFile(filepath.Join(target, f))
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	// a and z are in one subvolume, snapshotted at one instant; vol's was taken right after.
	a, z, g := got[0], got[1], got[2]
	if a < z || a > z+1 || g+1 < a || g > atStart || final-atStart < 50 {
		t.Fatalf("restored counts %v (a, z, g); the writer was at %d when the unit started and %d after the run: want a = z or z+1, g >= a-1, g <= %d, with the writer well past it",
			got, atStart, final, atStart)
	}
	var snaps []struct {
		Paths []string `json:"paths"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("snapshot", "list", "snap", "--json")), &snaps); err != nil || len(snaps) != 1 {
		t.Fatalf("snapshot list: %v, %+v", err, snaps)
	}
	if want := []string{data, vol}; !slices.Equal(snaps[0].Paths, want) {
		t.Fatalf("snapshot paths %q, want the job's own %q", snaps[0].Paths, want)
	}

	// A failing backup (a wrong password) leaves none either.
	wrong := filepath.Join(w.dir, "wrong.password")
	if err := os.WriteFile(wrong, []byte("not the password\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mustRun("job", "edit", "snap", "--password-file", wrong)
	if r := w.waitEnd(w.startRun("snap")); r.Status != "failed" {
		t.Fatalf("run with a wrong password = %+v, want failed", r)
	}
	w.noBtrfsSnapshots(fs, vol)
	w.mustRun("job", "edit", "snap", "--password-file", pw)

	// A stopped one, kept in flight by new data at a crawl.
	newData := func() {
		b := make([]byte, slowData/2)
		rand.Read(b)
		if err := os.WriteFile(filepath.Join(data, "m1"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	newData()
	w.backupRate(stuckKiBps)
	id = w.startRun("snap")
	w.waitRun(id, "progress", w.underway)
	if len(w.btrfsSnapshots(fs, vol)) != 2 {
		t.Fatalf("a backup in flight reads no snapshot of each subvolume: %q", w.btrfsSnapshots(fs, vol))
	}
	w.mustRun("run", "stop", id)
	if r := w.waitEnd(id); r.Status != "stopped" {
		t.Fatalf("stopped run = %+v", r)
	}
	w.noBtrfsSnapshots(fs, vol)

	// The manager killed mid-backup: its snapshots stay until the daemon's next pass, once the
	// attempt after the restart is live; that attempt's go once it has ended.
	newData()
	id = w.startRun("snap")
	w.waitRun(id, "progress", w.underway)
	left := w.btrfsSnapshots(fs, vol)
	if records, err := os.ReadDir(fssnap.RecordDir(w.state)); err != nil || len(records) != 1 {
		t.Fatalf("records of the attempt in flight: %v, %v; want one", records, err)
	}
	w.mgr.Kill(t)
	if got := w.btrfsSnapshots(fs, vol); !slices.Equal(got, left) || len(got) != 2 {
		t.Fatalf("after the kill: snapshots %q, want attempt 1's %q still there", got, left)
	}
	w.backupRate(0) // the attempt after the kill
	w.mgr.Start(t)
	r = w.waitEnd(id)
	if r.Status != "succeeded" || len(r.Attempts) != 2 || r.Attempts[0].ServiceResult != "" {
		t.Fatalf("run after the kill = %+v, want succeeded in attempt 2, attempt 1 without a marker", r)
	}
	w.noBtrfsSnapshots(fs, vol)
	w.checkInvariants()
}

// btrfsSnapshots lists holdfast's snapshots in the subvolumes at dirs.
func (w *world) btrfsSnapshots(dirs ...string) []string {
	w.t.Helper()
	var out []string
	for _, d := range dirs {
		entries, err := os.ReadDir(filepath.Join(d, fssnap.DirName))
		if err != nil && !os.IsNotExist(err) {
			w.t.Fatal(err)
		}
		for _, e := range entries {
			out = append(out, filepath.Join(d, fssnap.DirName, e.Name()))
		}
	}
	return out
}

// noBtrfsSnapshots waits until no snapshot is left in the subvolumes at dirs, nor a record of
// one in the daemon's state: its sweep releases them once their attempt has ended.
func (w *world) noBtrfsSnapshots(dirs ...string) {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := w.btrfsSnapshots(dirs...)
		records, err := os.ReadDir(fssnap.RecordDir(w.state))
		if err != nil && !os.IsNotExist(err) {
			w.t.Fatal(err)
		}
		for _, r := range records {
			left = append(left, filepath.Join(fssnap.RecordDir(w.state), r.Name()))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("Btrfs snapshots left: %q", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
