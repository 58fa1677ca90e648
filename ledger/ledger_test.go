package ledger

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		if got, why := Budget(c.max, c.history); got != c.want || why == "" {
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
		says string
	}{
		{"never ran: released whole", Evidence{Spawned: false, DataAdded: p(5)}, Settlement{Release: true}, "never ran"},
		{"restic's figure", Evidence{Spawned: true, DataAdded: p(3 << 20), Growth: p(9 << 20)}, Settlement{Bytes: 3 << 20}, "data_added"},
		{"restic's figure of nothing is a figure", Evidence{Spawned: true, DataAdded: p(0)}, Settlement{Bytes: 0}, "data_added"},
		{"restic's figure above the hold", Evidence{Spawned: true, DataAdded: p(50 << 20)}, Settlement{Bytes: hold}, "charged at the hold"},
		{"measured growth", Evidence{Spawned: true, Growth: p(7 << 20)}, Settlement{Bytes: 7 << 20}, "measured growth"},
		{"growth above the hold", Evidence{Spawned: true, Growth: p(12 << 20)}, Settlement{Bytes: hold}, "charged at the hold"},
		{"shared growth, an upper bound", Evidence{Spawned: true, Growth: p(4 << 20), UpperBound: "run x wrote to it meanwhile"},
			Settlement{Bytes: 4 << 20}, "an upper bound: run x"},
		{"growth wins over restic stats", Evidence{Spawned: true, Growth: p(2 << 20), SnapshotAdded: p(6 << 20)}, Settlement{Bytes: 2 << 20}, "measured growth"},
		{"restic stats", Evidence{Spawned: true, SnapshotAdded: p(6 << 20)}, Settlement{Bytes: 6 << 20}, "restic stats"},
		{"nothing known: deferred, never zero", Evidence{Spawned: true, NoGrowth: "the repository is not local"},
			Settlement{}, "the repository is not local"},
	} {
		got := Settle(hold, c.ev)
		text := got.Source + got.Deferred
		if got.Release != c.want.Release || got.Bytes != c.want.Bytes || !strings.Contains(text, c.says) {
			t.Errorf("%s: Settle = %+v, want %+v saying %q", c.name, got, c.want, c.says)
		}
		if c.name == "nothing known: deferred, never zero" && got.Deferred == "" {
			t.Errorf("%s: not deferred: %+v", c.name, got)
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
