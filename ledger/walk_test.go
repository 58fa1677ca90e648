package ledger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
)

// wideTree lays out a repository's shape under dir: packs in many directories two levels down,
// a deeper branch, and files at the top; it returns the bytes of its regular files and the
// number of entries under dir.
func wideTree(t *testing.T, dir string) (bytes, entries int64) {
	t.Helper()
	write := func(path string, n int) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
		bytes += int64(n)
	}
	write(filepath.Join(dir, "config"), 155)
	for i := range 48 {
		for j := range 5 {
			write(filepath.Join(dir, "data", fmt.Sprintf("%02x", i), fmt.Sprintf("pack%d", j)), 100*i+j)
		}
	}
	write(filepath.Join(dir, "index", "a", "b", "c", "d", "e"), 4096)
	// A directory longer than one read of it (getdents64's 32 KiB buffer).
	for i := range 1500 {
		write(filepath.Join(dir, "snapshots", fmt.Sprintf("%064d", i)), i%7)
	}
	// data, its 48 directories and their 240 packs; config; index and its four directories and
	// file; snapshots and its files
	entries = 1 + 48 + 240 + 1 + 1 + 4 + 1 + 1 + 1500
	return bytes, entries
}

// With several cores the walk reads directories side by side: each file is counted once, and
// the totals are the same from one walk to the next.
func TestWalkSideBySide(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	dir := t.TempDir()
	bytes, entries := wideTree(t, dir)
	for range 20 {
		if got, err := RepoSize(dir); err != nil || got != bytes {
			t.Fatalf("RepoSize = %d, %v; want %d", got, err, bytes)
		}
		src := MeasureSource(context.Background(), []string{dir})
		if src.Bytes != bytes || src.Entries != entries+1 || src.Bound != "" || src.Unmeasured != "" {
			t.Fatalf("MeasureSource = %+v; want %d bytes in %d entries", src, bytes, entries+1)
		}
	}
}

// endsAfter is a context whose Err turns to Canceled after its first n calls.
type endsAfter struct {
	context.Context
	left atomic.Int64
}

func (c *endsAfter) Err() error {
	if c.left.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// A walk that fails on one of its goroutines ends on all of them: it returns the error, once
// every goroutine it started has returned, and closes the descriptors it opened.
func TestWalkFirstErrorEnds(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	dir := t.TempDir()
	bytes, _ := wideTree(t, dir)
	fdsBefore := openDescriptors(t)
	for _, after := range []int64{0, 1, 5, 20} {
		ctx := &endsAfter{Context: context.Background()}
		ctx.left.Store(after)
		w := newWalker(ctx)
		fd, err := OpenDir(-1, dir)
		if err != nil {
			t.Fatal(err)
		}
		w.walk(fd, ".", maxDepth)
		got, _, err := w.wait()
		if !errors.Is(err, context.Canceled) || got >= bytes {
			t.Errorf("a walk ended after %d directories: %d bytes, %v; want part of %d and Canceled", after, got, err, bytes)
		}
	}
	if n := openDescriptors(t); n != fdsBefore {
		t.Errorf("%d descriptors open after the walks, %d before", n, fdsBefore)
	}
}

func openDescriptors(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
