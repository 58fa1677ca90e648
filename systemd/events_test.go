package systemd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
)

// Each marker WriteMarker puts in place is reported once, with its run and attempt; the
// temporary file it writes first and other files are not.
func TestMarkerWatch(t *testing.T) {
	dir := t.TempDir()
	w, err := WatchMarkers(dir)
	if err != nil {
		t.Fatal(err)
	}
	type ended struct {
		run     uuid.UUID
		attempt int
	}
	got := make(chan ended, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func(run uuid.UUID, attempt int) { got <- ended{run, attempt} }) }()
	run := uuid.New()
	if err := os.WriteFile(filepath.Join(dir, "markers", "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		if err := WriteMarker(dir, Marker{Run: run, Attempt: attempt, ServiceResult: "success"}); err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-got:
			if e != (ended{run, attempt}) {
				t.Fatalf("reported %v, want %v attempt %d", e, run, attempt)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("marker of attempt %d not reported", attempt)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	select {
	case e := <-got:
		t.Fatalf("reported %v more", e)
	default:
	}
}

func TestParseMarkerName(t *testing.T) {
	run := uuid.MustParse("0b8f6f5e-8a8b-4c4e-9a43-2a1f0c7d9e11")
	for _, c := range []struct {
		name    string
		attempt int // 0: not a marker
	}{
		{filepath.Base(MarkerPath("/s", run, 1)), 1},
		{filepath.Base(MarkerPath("/s", run, 12)), 12},
		{run.String() + ".a0.json", 0},
		{run.String() + ".a01.json", 0},
		{run.String() + ".a-1.json", 0},
		{run.String() + ".a1.json.tmp", 0},
		{run.String() + ".b1.json", 0},
		{"0B8F6F5E-8A8B-4C4E-9A43-2A1F0C7D9E11.a1.json", 0},
		{".marker-123456", 0},
		{"short.a1.json", 0},
	} {
		id, attempt, ok := ParseMarkerName(c.name)
		if ok != (c.attempt > 0) || ok && (id != run || attempt != c.attempt) {
			t.Errorf("ParseMarkerName(%q) = %v, %d, %v; want attempt %d", c.name, id, attempt, ok, c.attempt)
		}
	}
}
