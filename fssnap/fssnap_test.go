package fssnap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

// bundle is a Btrfs file system with a directory in its top-level subvolume and a subvolume of
// its own, each holding a file.
type bundle struct {
	fs, data, vol string
}

func setup(t *testing.T) bundle {
	t.Helper()
	fs := testenv.Btrfs(t)
	b := bundle{fs: fs, data: filepath.Join(fs, "data"), vol: filepath.Join(fs, "vol")}
	if err := os.Mkdir(b.data, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.BtrfsSubvolume(t, b.vol)
	write(t, filepath.Join(b.data, "f"), "data 1")
	write(t, filepath.Join(b.vol, "g"), "vol 1")
	return b
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A snapshot holds each path as it was when it was taken, read-only, at the source of a bind
// mount over the very path; Remove takes it away.
func TestTakeAndRemove(t *testing.T) {
	b := setup(t)
	key := credentials.AttemptKey(uuid.New(), 1)
	records := filepath.Join(t.TempDir(), "fs-snapshots")
	taken, err := Take(records, key, []string{b.data, b.vol}, []string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	wantDirs := []string{filepath.Join(b.fs, DirName), filepath.Join(b.vol, DirName)}
	rec, err := os.ReadFile(filepath.Join(records, key))
	if err != nil || !strings.Contains(string(rec), wantDirs[0]) || !strings.Contains(string(rec), wantDirs[1]) {
		t.Fatalf("record %s: %v, want both snapshot directories", rec, err)
	}
	wantBinds := []systemd.Bind{
		{Source: filepath.Join(b.fs, DirName, key, "data"), Dest: b.data},
		{Source: filepath.Join(b.vol, DirName, key), Dest: b.vol},
	}
	if !slices.Equal(taken.Binds, wantBinds) {
		t.Fatalf("binds %+v, want %+v", taken.Binds, wantBinds)
	}
	for _, d := range wantDirs {
		st, err := os.Lstat(d)
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v, %v: want a directory of mode 0700", d, st.Mode(), err)
		}
	}
	// Changed after the snapshot: the snapshot keeps what was.
	write(t, filepath.Join(b.data, "f"), "data 2")
	write(t, filepath.Join(b.vol, "g"), "vol 2")
	if got := read(t, filepath.Join(wantBinds[0].Source, "f")); got != "data 1" {
		t.Fatalf("snapshot of data holds %q, want the content before the change", got)
	}
	if got := read(t, filepath.Join(wantBinds[1].Source, "g")); got != "vol 1" {
		t.Fatalf("snapshot of vol holds %q, want the content before the change", got)
	}
	if err := os.WriteFile(filepath.Join(wantBinds[0].Source, "f"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write into the snapshot: %v, want EROFS", err)
	}
	if !taken.Fresh {
		t.Fatal("the first Take says it kept an earlier snapshot")
	}
	if got := RecordedDirs(records, []string{b.fs}); !slices.Equal(got, wantDirs) {
		t.Fatalf("recorded dirs under %s: %q, want %q (what every backup of it leaves out)", b.fs, got, wantDirs)
	}
	if got := RecordedDirs(records, []string{b.data}); len(got) != 0 {
		t.Fatalf("recorded dirs under %s: %q, want none", b.data, got)
	}
	// The same attempt again (a spawn whose unit may have started) keeps what it took.
	if again, err := Take(records, key, []string{b.data, b.vol}, nil); err != nil || again.Fresh {
		t.Fatalf("take again: %+v, %v; want the snapshots kept", again, err)
	}
	if got := read(t, filepath.Join(wantBinds[0].Source, "f")); got != "data 1" {
		t.Fatalf("taken again, the snapshot holds %q, want the first one's", got)
	}
	if err := Release(records, key); err != nil {
		t.Fatal(err)
	}
	for _, d := range wantDirs {
		if _, err := os.Lstat(filepath.Join(d, key)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left after Release: %v", filepath.Join(d, key), err)
		}
	}
	if _, err := os.Lstat(filepath.Join(records, key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("record left after Release: %v", err)
	}
	if err := Release(records, key); err != nil {
		t.Fatalf("release again: %v", err)
	}
	if err := Release(records, "not-a-key"); err == nil {
		t.Fatal("Release of a name Key does not make: no error")
	}
}

// What Take refuses, each as a refusal naming the path, leaving no snapshot behind.
func TestTakeRefuses(t *testing.T) {
	b := setup(t)
	nobody := 65534
	other := filepath.Join(b.fs, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, 1234, 1234); err != nil {
		t.Fatal(err)
	}
	otherData := filepath.Join(other, "data")
	if err := os.Mkdir(otherData, 0o755); err != nil {
		t.Fatal(err)
	}
	openVol := filepath.Join(b.fs, "open")
	testenv.BtrfsSubvolume(t, openVol)
	if err := os.Chmod(openVol, 0o777); err != nil {
		t.Fatal(err)
	}
	linkedVol := filepath.Join(b.fs, "linked")
	testenv.BtrfsSubvolume(t, linkedVol)
	if err := os.Symlink("/etc", filepath.Join(linkedVol, DirName)); err != nil {
		t.Fatal(err)
	}
	ownedVol := filepath.Join(b.fs, "owned")
	testenv.BtrfsSubvolume(t, ownedVol)
	if err := os.Mkdir(filepath.Join(ownedVol, DirName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(ownedVol, DirName), nobody, nobody); err != nil {
		t.Fatal(err)
	}
	// A subvolume inside data, and a mount point inside vol.
	inner := filepath.Join(b.data, "inner")
	testenv.BtrfsSubvolume(t, inner)
	mnt := filepath.Join(b.fs, "holder")
	testenv.BtrfsSubvolume(t, mnt)
	mounted := filepath.Join(mnt, "mnt")
	if err := os.Mkdir(mounted, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mounted, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mounted, unix.MNT_DETACH) })
	// A directory bind-mounted into the top subvolume: its files are not the subvolume's.
	bound := filepath.Join(b.fs, "bound")
	if err := os.Mkdir(bound, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(b.data, bound, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(bound, unix.MNT_DETACH) })
	repo := filepath.Join(b.vol, "repo")
	if err := os.Mkdir(repo, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		paths, writes []string
		want          string
	}{
		{"not on Btrfs", []string{t.TempDir()}, nil, "not Btrfs"},
		{"the subvolume writable by others", []string{openVol}, nil, "must be root's alone"},
		{"the snapshots' directory a link", []string{linkedVol}, nil, "is not a directory"},
		{"the snapshots' directory not root's", []string{ownedVol}, nil, "must be root's with mode 0700"},
		{"reached through a directory another user controls", []string{otherData}, nil, "through directories only root controls"},
		{"the second of two refused", []string{b.data, t.TempDir()}, nil, "not Btrfs"},
		{"holding a subvolume of its own", []string{b.data}, nil, "holds a Btrfs subvolume of its own, " + inner},
		{"holding a mount point", []string{mnt}, nil, "holds the mount point " + mounted},
		{"below a bind mount", []string{filepath.Join(bound, "f")}, nil, "is below the mount point " + bound},
		{"holding what the unit writes", []string{b.vol}, []string{repo}, "holds " + repo + ", which the backup's unit writes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := credentials.AttemptKey(uuid.New(), 1)
			records := t.TempDir()
			_, err := Take(records, key, tc.paths, tc.writes)
			if !safepath.Refused(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Take: %v, want a refusal saying %q", err, tc.want)
			}
			if err := Check(tc.paths, tc.writes); !safepath.Refused(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check: %v, want a refusal saying %q", err, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(b.fs, DirName, key)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused Take left its snapshot: %v", err)
			}
			if entries, _ := os.ReadDir(records); len(entries) != 0 {
				t.Fatalf("a refused Take left its record: %v", entries)
			}
		})
	}
	// A subvolume held is fine when it is a path of the job too (its own snapshot is mounted
	// over it); so is a path beside what the unit writes.
	if err := Check([]string{b.data, inner}, []string{repo}); err != nil {
		t.Fatalf("Check of data with its inner subvolume: %v", err)
	}
	_ = nobody
}

// inProcess runs the helper's units in this process: it reads the command line the unit would
// run and answers as the unit's command does (unitcmd's fs-snapshot-take and -release), so that
// the protocol between them is what is tested here; the scenarios run the real unit.
type inProcess struct{ units []systemd.Spec }

func (r *inProcess) Stream(_ context.Context, s systemd.Spec, consume func(io.Reader) error) (systemd.Result, error) {
	r.units = append(r.units, s)
	flags := map[string][]string{}
	argv := s.ExecStart[2:]
	for i := 0; i+1 < len(argv); i += 2 {
		flags[argv[i]] = append(flags[argv[i]], argv[i+1])
	}
	var a Answer
	switch s.ExecStart[1] {
	case "fs-snapshot-take":
		a = AnswerOf(Take(flags["--records"][0], flags["--key"][0], flags["--path"], flags["--write"]))
	case "fs-snapshot-release":
		a = AnswerOf(Taken{}, Release(flags["--records"][0], flags["--key"][0]))
	default:
		return systemd.Result{ExitStatus: 1, Stderr: []byte("unknown command")}, nil
	}
	b, err := json.Marshal(a)
	if err != nil {
		return systemd.Result{}, err
	}
	return systemd.Result{}, consume(bytes.NewReader(b))
}

// The helper's answers carry the bind mounts, a refusal as a refusal and another error as an
// error; its units run as root, outside any sandbox.
func TestHelper(t *testing.T) {
	b := setup(t)
	r := &inProcess{}
	h := Helper{Runner: r, Binary: "/usr/lib/holdfast/holdfast-unit"}
	records := filepath.Join(t.TempDir(), "fs-snapshots")
	key := credentials.AttemptKey(uuid.New(), 1)
	taken, err := h.Take(context.Background(), records, key, []string{b.data}, nil)
	if err != nil || len(taken.Binds) != 1 || taken.Binds[0].Dest != b.data {
		t.Fatalf("Take in a unit: %+v, %v", taken, err)
	}
	if _, err := h.Take(context.Background(), records, credentials.AttemptKey(uuid.New(), 1), []string{t.TempDir()}, nil); !safepath.Refused(err) || !strings.Contains(err.Error(), "not Btrfs") {
		t.Fatalf("a refused Take in a unit: %v, want the refusal", err)
	}
	if _, err := h.Take(context.Background(), records, "no key", []string{b.data}, nil); err == nil || safepath.Refused(err) {
		t.Fatalf("a failed Take in a unit: %v, want an error that is not a refusal", err)
	}
	// An answer without the mounts (another binary's), or from a helper that failed, is no
	// snapshot: the backup must not read the live paths.
	for _, fake := range []answering{{out: "{}"}, {out: `{"binds":[{"Source":"/s","Dest":"/d"}]}`, status: 1}} {
		if _, err := (Helper{Runner: fake, Binary: "x"}).Take(context.Background(), records, credentials.AttemptKey(uuid.New(), 1), []string{b.data}, nil); err == nil {
			t.Fatalf("helper answering %q with status %d: no error", fake.out, fake.status)
		}
	}
	if err := h.Release(context.Background(), records, key); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(b.fs, DirName, key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("released in a unit, the snapshot is left: %v", err)
	}
	for _, u := range r.units {
		if u.User != "" || u.Sandbox != nil || u.ExecStart[0] != h.Binary {
			t.Fatalf("helper unit %+v: want root's, unconfined, running %s", u, h.Binary)
		}
	}
}

// answering is a helper unit that prints out and exits with status.
type answering struct {
	out    string
	status int
}

func (a answering) Stream(_ context.Context, _ systemd.Spec, consume func(io.Reader) error) (systemd.Result, error) {
	return systemd.Result{ExitStatus: a.status}, consume(strings.NewReader(a.out))
}

type sweeperStore struct {
	live  []model.LiveRun
	reads int
}

func (s *sweeperStore) RunListLive(context.Context, string) ([]model.LiveRun, error) {
	s.reads++
	return s.live, nil
}

// The sweep removes the snapshots of attempts no longer live, and only holdfast's.
func TestSweeperPass(t *testing.T) {
	b := setup(t)
	records := filepath.Join(t.TempDir(), "fs-snapshots")
	st := &sweeperStore{}
	s, err := NewSweeper(SweeperConfig{Dir: records, Store: st, Host: "h1", Helper: Helper{Runner: &inProcess{}, Binary: "holdfast-unit"}})
	if err != nil {
		t.Fatal(err)
	}
	// No record: nothing read.
	if released, err := s.Pass(context.Background()); err != nil || len(released) != 0 || st.reads != 0 {
		t.Fatalf("a pass with no records: %q, %v, %d reads of the live runs", released, err, st.reads)
	}
	live, ended, earlier := uuid.New(), uuid.New(), uuid.New()
	keys := []string{credentials.AttemptKey(live, 2), credentials.AttemptKey(ended, 1), credentials.AttemptKey(earlier, 1)}
	for _, k := range keys {
		if _, err := Take(records, k, []string{b.data, b.vol}, nil); err != nil {
			t.Fatal(err)
		}
	}
	foreign := filepath.Join(b.fs, DirName, "someone-elses")
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	var l model.LiveRun
	l.Run.ID, l.Attempt.No = live, 2
	var earlierLive model.LiveRun // its attempt 1 was interrupted; attempt 2 is live
	earlierLive.Run.ID, earlierLive.Attempt.No = earlier, 2
	st.live = []model.LiveRun{l, earlierLive}
	released, err := s.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(released)
	want := []string{keys[1], keys[2]}
	slices.Sort(want)
	if !slices.Equal(released, want) {
		t.Fatalf("released %q, want %q", released, want)
	}
	for _, d := range []string{filepath.Join(b.fs, DirName), filepath.Join(b.vol, DirName)} {
		for _, k := range want {
			if _, err := os.Lstat(filepath.Join(d, k)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s left: %v", filepath.Join(d, k), err)
			}
		}
	}
	for _, d := range []string{filepath.Join(b.fs, DirName), filepath.Join(b.vol, DirName)} {
		if _, err := os.Lstat(filepath.Join(d, keys[0])); err != nil {
			t.Fatalf("the live attempt's snapshot was removed: %v", err)
		}
	}
	if _, err := os.Lstat(foreign); err != nil {
		t.Fatalf("a directory holdfast did not make was removed: %v", err)
	}
}

func TestParseKey(t *testing.T) {
	id := uuid.New()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{credentials.AttemptKey(id, 1), true},
		{credentials.AttemptKey(id, 12), true},
		{id.String() + ".a0", false},
		{id.String() + ".a01", false},
		{id.String() + ".a", false},
		{id.String(), false},
		{strings.ToUpper(id.String()) + ".a1", false},
		{"x.a1", false},
	} {
		run, n, ok := parseKey(tc.name)
		if ok != tc.ok || (ok && (run != id || credentials.AttemptKey(run, n) != tc.name)) {
			t.Errorf("parseKey(%q) = %v, %d, %v", tc.name, run, n, ok)
		}
	}
}
