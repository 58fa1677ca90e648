package ledger

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMeasureSource(t *testing.T) {
	type bundle struct{ dir, outside string }
	setup := func(t *testing.T) bundle {
		t.Helper()
		b := bundle{dir: t.TempDir(), outside: t.TempDir()}
		write := func(path string, n int) {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(filepath.Join(b.dir, "a"), 1000)
		write(filepath.Join(b.dir, "sub", "b"), 2000)
		write(filepath.Join(b.dir, "sub", "deeper", "c"), 3000)
		write(filepath.Join(b.outside, "big"), 1<<20)
		// Links the job's user may have made: counted as links, never followed.
		for name, target := range map[string]string{"to-file": filepath.Join(b.outside, "big"), "to-dir": b.outside} {
			if err := os.Symlink(target, filepath.Join(b.dir, "sub", name)); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, c := range []struct {
		name    string
		ctx     context.Context
		paths   func(b bundle) []string
		bytes   int64 // -1: the filesystems' used space, more than the tree
		entries int64
		bound   string
	}{
		{name: "a tree: its files, directories and links, no link followed",
			paths: func(b bundle) []string { return []string{b.dir} }, bytes: 6000, entries: 1 + 6 + 1},
		{name: "a file and a directory",
			paths: func(b bundle) []string {
				return []string{filepath.Join(b.dir, "a"), filepath.Join(b.dir, "sub", "deeper")}
			},
			bytes: 4000, entries: 3},
		{name: "a path that ends in a link counts the link",
			paths: func(b bundle) []string { return []string{filepath.Join(b.dir, "sub", "to-dir")} }, bytes: 0, entries: 1},
		{name: "a missing path counts nothing",
			paths: func(b bundle) []string { return []string{filepath.Join(b.dir, "gone")} }, bytes: 0, entries: 0},
		{name: "a path through a link is not walked: the filesystems' used space bounds it",
			paths: func(b bundle) []string { return []string{filepath.Join(b.dir, "sub", "to-dir", "big")} }, bytes: -1,
			bound: "a walk of the paths did not finish: open"},
		{name: "a walk out of time: the filesystems' used space bounds it",
			ctx: expired, paths: func(b bundle) []string { return []string{b.dir} }, bytes: -1,
			bound: "a walk of the paths did not finish in time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t)
			ctx := c.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			got := MeasureSource(ctx, c.paths(b))
			if got.Unmeasured != "" {
				t.Fatalf("MeasureSource = %+v, unmeasured", got)
			}
			if c.bytes < 0 {
				if got.Bound == "" || !strings.Contains(got.Bound, c.bound) || got.Bytes <= 6000 {
					t.Fatalf("MeasureSource = %+v, want the filesystems' used space with a bound saying %q", got, c.bound)
				}
				return
			}
			if got.Bytes != c.bytes || got.Entries != c.entries || got.Bound != "" {
				t.Fatalf("MeasureSource = %+v, want %d bytes in %d entries, walked", got, c.bytes, c.entries)
			}
		})
	}
}
