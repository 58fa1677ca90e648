package runaway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The pack watch reports a pack renamed into place, or created under its final name, in data or
// a subdirectory of it; writes to a file already there are no events at all.
func TestPackWatch(t *testing.T) {
	repo := t.TempDir()
	for _, dir := range []string{"data", "data/00", "data/ff"} {
		if err := os.Mkdir(filepath.Join(repo, dir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	existing := filepath.Join(repo, "data", "ff", strings.Repeat("f", 64))
	if err := os.WriteFile(existing, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, data, err := watchData(repo)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(data)
	type entry struct{ sub, name string }
	found := make(chan entry, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.run(ctx, func(sub, name string) bool { found <- entry{sub, name}; return true }) }()

	f, err := os.OpenFile(existing, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if _, err := f.Write([]byte("more")); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	renamed := strings.Repeat("a", 64)
	tmp := filepath.Join(repo, "data", "00", "tmp-pack")
	if err := os.WriteFile(tmp, []byte("pack"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(repo, "data", "00", renamed)); err != nil {
		t.Fatal(err)
	}
	direct := strings.Repeat("b", 64)
	if err := os.WriteFile(filepath.Join(repo, "data", "ff", direct), []byte("pack"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []entry{{"00", "tmp-pack"}, {"00", renamed}, {"ff", direct}}
	for _, e := range want {
		select {
		case got := <-found:
			if got != e {
				t.Fatalf("event for %+v, want %+v (no events for writes to %s)", got, e, existing)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for %+v", e)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run ended with %v, want nil once its context ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	select {
	case got := <-found:
		t.Fatalf("unexpected event %+v", got)
	default:
	}
}
