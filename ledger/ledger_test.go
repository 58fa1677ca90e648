package ledger

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"10MiB", 10 << 20}, {"5GiB", 5 << 30}, {"100MB", 100_000_000}, {"1048576", 1 << 20}, {" 2 KiB ", 2 << 10},
	} {
		if got, err := ParseSize(c.in); err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "0", "-5MiB", "ten", "5 parsecs", "99999999999EiB"} {
		if _, err := ParseSize(in); err == nil || !strings.Contains(err.Error(), "positive size") {
			t.Errorf("ParseSize(%q) = %v, want a refusal saying what to give", in, err)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n <= 0 {
			t.Fatalf("ParseSize(%q) = %d without an error", s, n)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("ParseSize(%q): a multi-line error", s)
		}
	})
}

func TestBudget(t *testing.T) {
	ceiling := int64(5 << 20)
	for _, c := range []struct {
		name    string
		max     *int64
		history []int64
		want    int64
	}{
		{"the job's ceiling wins", &ceiling, []int64{1 << 30}, 5 << 20},
		{"no history", nil, nil, DefaultEstimate},
		{"twice the most of recent runs", nil, []int64{10 << 20, 40 << 20, 20 << 20}, 80 << 20},
		{"never below the minimum", nil, []int64{0, 1 << 10}, MinEstimate},
	} {
		if got, why := Budget(c.max, c.history, nil); got != c.want || why == "" {
			t.Errorf("%s: Budget = %d (%q), want %d with a reason", c.name, got, why, c.want)
		}
	}
}

func TestSettle(t *testing.T) {
	p := func(n int64) *int64 { return &n }
	const hold = 10 << 20
	for _, c := range []struct {
		name string
		ev   Evidence
		want Settlement
		says []string
	}{
		{"never ran: released whole", Evidence{Spawned: false, DataAdded: p(5)}, Settlement{Release: true}, []string{"never ran"}},
		{"growth above the claim: the growth", Evidence{Spawned: true, DataAdded: p(3 << 20), Growth: p(9 << 20)},
			Settlement{Bytes: 9 << 20}, []string{"measured growth", "the run reported less (data_added 3.0 MiB)"}},
		{"a forged claim of nothing: the growth", Evidence{Spawned: true, DataAdded: p(0), Growth: p(7 << 20)},
			Settlement{Bytes: 7 << 20}, []string{"measured growth", "reported less (data_added 0 B)"}},
		{"claim above the growth: the claim", Evidence{Spawned: true, DataAdded: p(5 << 20), Growth: p(4 << 20)},
			Settlement{Bytes: 5 << 20}, []string{"data_added), reported by the run", "growth of the local repository (4.0 MiB) is lower"}},
		{"claim equal to the growth", Evidence{Spawned: true, DataAdded: p(4 << 20), Growth: p(4 << 20)},
			Settlement{Bytes: 4 << 20}, []string{"reported by the run", "is the same"}},
		{"shrunk repository: the claim", Evidence{Spawned: true, DataAdded: p(1 << 20), Growth: p(-3 << 20)},
			Settlement{Bytes: 1 << 20}, []string{"reported by the run", "(0 B) is lower"}},
		{"both above the hold", Evidence{Spawned: true, DataAdded: p(20 << 20), Growth: p(12 << 20)},
			Settlement{Bytes: hold}, []string{"reported by the run", "charged at the hold"}},
		{"growth above the hold, claim of nothing", Evidence{Spawned: true, DataAdded: p(0), Growth: p(12 << 20)},
			Settlement{Bytes: hold}, []string{"measured growth", "charged at the hold"}},
		{"remote: the claim, reported by the run", Evidence{Spawned: true, DataAdded: p(3 << 20), NoGrowth: "the repository is not local"},
			Settlement{Bytes: 3 << 20}, []string{"reported by the run, not verified: the repository is not local"}},
		{"restic's figure of nothing is a figure", Evidence{Spawned: true, DataAdded: p(0)}, Settlement{Bytes: 0},
			[]string{"data_added", "reported by the run"}},
		{"claim above the hold", Evidence{Spawned: true, DataAdded: p(50 << 20)}, Settlement{Bytes: hold}, []string{"charged at the hold"}},
		{"shared growth with a claim: the claim", Evidence{Spawned: true, DataAdded: p(2 << 20), Growth: p(8 << 20), UpperBound: "run x wrote to it meanwhile"},
			Settlement{Bytes: 2 << 20}, []string{"reported by the run, not verified: run x wrote to it meanwhile"}},
		{"shared growth below a claim: never below the claim", Evidence{Spawned: true, DataAdded: p(6 << 20), Growth: p(1 << 20), UpperBound: "run x wrote to it meanwhile"},
			Settlement{Bytes: 6 << 20}, []string{"reported by the run"}},
		{"measured growth", Evidence{Spawned: true, Growth: p(7 << 20)}, Settlement{Bytes: 7 << 20}, []string{"measured growth"}},
		{"growth above the hold", Evidence{Spawned: true, Growth: p(12 << 20)}, Settlement{Bytes: hold}, []string{"charged at the hold"}},
		{"shared growth, an upper bound", Evidence{Spawned: true, Growth: p(4 << 20), UpperBound: "run x wrote to it meanwhile"},
			Settlement{Bytes: 4 << 20}, []string{"an upper bound: run x"}},
		{"growth wins over restic stats", Evidence{Spawned: true, Growth: p(2 << 20), SnapshotAdded: p(6 << 20)}, Settlement{Bytes: 2 << 20}, []string{"measured growth"}},
		{"restic stats", Evidence{Spawned: true, SnapshotAdded: p(6 << 20)}, Settlement{Bytes: 6 << 20}, []string{"restic stats"}},
		{"nothing known: deferred, never zero", Evidence{Spawned: true, NoGrowth: "the repository is not local"},
			Settlement{Deferred: "x"}, []string{"the repository is not local"}},
	} {
		got := Settle(hold, c.ev)
		text := got.Source + got.Deferred
		ok := got.Release == c.want.Release && got.Bytes == c.want.Bytes && (got.Deferred != "") == (c.want.Deferred != "")
		for _, s := range c.says {
			ok = ok && strings.Contains(text, s)
		}
		if !ok {
			t.Errorf("%s: Settle = %+v, want %+v saying %q", c.name, got, c.want, c.says)
		}
		// Whatever the evidence, a run that ran is never charged below its own claim (within
		// the hold), nor below a growth of its own.
		if c.ev.Spawned && got.Deferred == "" {
			if c.ev.DataAdded != nil && got.Bytes < min(*c.ev.DataAdded, hold) {
				t.Errorf("%s: charged %d, below the run's claim %d", c.name, got.Bytes, *c.ev.DataAdded)
			}
			if c.ev.Growth != nil && c.ev.UpperBound == "" && got.Bytes < min(*c.ev.Growth, hold) {
				t.Errorf("%s: charged %d, below the measured growth %d", c.name, got.Bytes, *c.ev.Growth)
			}
		}
	}
}

func TestRepoSize(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "data", "ab"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"config": 155, "data/ab/abcd": 4096, "index/x": 100} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, repo := range []string{dir, "local:" + dir} {
		if got, err := RepoSize(repo); err != nil || got != 155+4096+100 {
			t.Errorf("RepoSize(%s) = %d, %v; want %d", repo, got, err, 155+4096+100)
		}
	}
	for _, repo := range []string{"sftp:host:/srv/repo", "rest:http://h:8000/", "s3:s3.amazonaws.com/b", "relative/dir"} {
		if _, err := RepoSize(repo); err != ErrNotLocal {
			t.Errorf("RepoSize(%s) = %v, want ErrNotLocal", repo, err)
		}
	}
	if _, err := RepoSize(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing repository measured without an error")
	}
}

// The repository belongs to the job's user: links in it, to directories or files elsewhere, and
// anything but regular files count nothing, and a repository that is itself a link is refused.
func TestRepoSizeLinks(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(dir, "elsewhere")
	repo := filepath.Join(dir, "repo")
	for _, d := range []string{elsewhere, filepath.Join(repo, "data", "ab"), filepath.Join(repo, "data", "cd")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path string, size int) {
		if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(elsewhere, "big"), 1<<20)
	write(filepath.Join(repo, "config"), 155)
	write(filepath.Join(repo, "data", "ab", "pack"), 4096)
	const want = 155 + 4096
	if err := os.Remove(filepath.Join(repo, "data", "cd")); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"locks":        elsewhere,
		"data/cd":      elsewhere,
		"data/ab/file": filepath.Join(elsewhere, "big"),
		"index":        "/usr",
	} {
		if err := os.Symlink(target, filepath.Join(repo, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(repo, "data", "ab", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	deep := repo
	for range 20 {
		deep = filepath.Join(deep, "d")
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(deep, "hidden"), 1<<10)
	if got, err := RepoSize(repo); err != nil || got != want {
		t.Errorf("RepoSize with links = %d, %v; want %d: links, FIFOs and trees deeper than restic's counted nothing", got, err, want)
	}
	linked := filepath.Join(dir, "linked-repo")
	if err := os.Symlink(repo, linked); err != nil {
		t.Fatal(err)
	}
	if _, err := RepoSize(linked); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("RepoSize of a repository that is a link = %v, want a refusal naming the link", err)
	}
}
