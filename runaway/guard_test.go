package runaway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
)

// calls records what the guard asks of the store and of systemd, in order. The repository is a
// real directory; the store's answers are the fake's.
type calls struct {
	mu      sync.Mutex
	list    []string
	other   *uuid.UUID // AttemptOtherWriter's answer
	paused  bool       // RunRequestPause's answer
	stopped chan string
}

func (c *calls) add(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, fmt.Sprintf(format, args...))
}

func (c *calls) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.list)
}

func (c *calls) AttemptOtherWriter(context.Context, model.AttemptRef) (*uuid.UUID, error) {
	c.add("OtherWriter")
	return c.other, nil
}

func (c *calls) RunRequestPause(_ context.Context, _ uuid.UUID, reason string) (bool, error) {
	c.add("RequestPause %s", reason)
	return c.paused, nil
}

func (c *calls) Stop(_ context.Context, name string) error {
	c.add("Stop %s", name)
	if c.stopped != nil {
		c.stopped <- name
	}
	return nil
}

// backup is a live backup of 100 bytes' hold on a fresh local repository, measured as spawned.
func backup(t *testing.T) (model.LiveRun, string) {
	t.Helper()
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "data", "00"), 0o700); err != nil {
		t.Fatal(err)
	}
	before, err := ledger.RepoSize(repo)
	if err != nil {
		t.Fatal(err)
	}
	hold := int64(100)
	return model.LiveRun{Run: model.Run{ID: uuid.New(), Kind: model.KindBackup},
		Attempt:       model.Attempt{No: 1, Unit: "holdfast-x.service", HoldBytes: &hold, RepoBytesBefore: &before},
		JobRepository: repo}, repo
}

// write puts a file of size bytes into the repository's data/00 as restic puts a pack there:
// written under a temporary name, then renamed into place.
func write(t *testing.T, repo, name string, size int) {
	t.Helper()
	tmp := filepath.Join(repo, "data", "00", "tmp-"+name)
	if err := os.WriteFile(tmp, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(repo, "data", "00", name)); err != nil {
		t.Fatal(err)
	}
}

// Measured on a pass: within its hold nothing; past it, the excess, unless another run wrote to
// the repository meanwhile. Paused: the pause is recorded before the unit is stopped, and a run
// whose pause was not recorded (it ended meanwhile) is not stopped.
func TestMeasureAndPause(t *testing.T) {
	ctx := context.Background()
	l, repo := backup(t)
	c := &calls{}
	g := New(Config{Store: c, Units: c})
	write(t, repo, "small", 60)
	if e := g.Measure(ctx, l); e != nil {
		t.Fatalf("60 bytes on a hold of 100: %+v, want none", e)
	}
	write(t, repo, "big", 200)
	e := g.Measure(ctx, l)
	if e == nil || e.Hold != 100 || e.Grown < 260 {
		t.Fatalf("260 bytes on a hold of 100: %+v, want the excess", e)
	}
	c.other = new(uuid.New())
	if e := g.Measure(ctx, l); e != nil {
		t.Fatalf("with another writer: %+v, want none (the growth is not this run's alone)", e)
	}
	l.Run.Kind = model.KindPrune
	if e := g.Measure(ctx, l); e != nil {
		t.Fatalf("a prune: %+v, want none", e)
	}

	c.list = nil
	if err := g.Pause(ctx, l, Excess{Hold: 100, Grown: 260}); err != nil {
		t.Fatal(err)
	}
	if got := c.got(); !slices.Equal(got, []string{"RequestPause run_ceiling"}) {
		t.Fatalf("pause not recorded: %v, want no stop", got)
	}
	c.list, c.paused = nil, true
	if err := g.Pause(ctx, l, Excess{Hold: 100, Grown: 260}); err != nil {
		t.Fatal(err)
	}
	if got := c.got(); !slices.Equal(got, []string{"RequestPause run_ceiling", "Stop holdfast-x.service"}) {
		t.Fatalf("pause: %v, want the pause recorded, then the unit stopped", got)
	}
}

// Between passes the watch counts complete pack files only (64 hex digits, not restic's
// temporary names) and stops the backup once they pass its hold, once. Without the lease it
// does nothing but count on: once the lease is back, a last pack of one byte trips it.
func TestWatchStopsARunaway(t *testing.T) {
	l, repo := backup(t)
	c := &calls{paused: true, stopped: make(chan string, 1)}
	var mu sync.Mutex
	held := false
	refusedOnce := make(chan struct{})
	var refuse sync.Once
	// Asked only for a pack past the hold: without the lease it says so once, and the test
	// then knows the watch has seen the packs past the hold while it could not act.
	acting := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if !held {
			refuse.Do(func() { close(refusedOnce) })
		}
		return held
	}
	g := New(Config{Store: c, Units: c, Acting: acting})
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	g.Watch(l)
	g.Watch(l) // once per attempt
	write(t, repo, "tmp-not-a-pack", 500)
	write(t, repo, strings.Repeat("a", 64), 80)
	write(t, repo, strings.Repeat("b", 64), 80) // 160 counted: past the hold, but no lease
	select {
	case <-refusedOnce:
	case <-time.After(time.Minute):
		t.Fatalf("the watch never asked for the lease; calls: %v", c.got())
	}
	if got := c.got(); len(got) != 0 {
		t.Fatalf("without the lease the watch acted: %v", got)
	}
	mu.Lock()
	held = true
	mu.Unlock()
	write(t, repo, strings.Repeat("c", 64), 1)
	select {
	case unit := <-c.stopped:
		if unit != l.Attempt.Unit {
			t.Fatalf("stopped %s, want %s", unit, l.Attempt.Unit)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the runaway was not stopped; calls: %v", c.got())
	}
	want := []string{"OtherWriter", "RequestPause run_ceiling", "Stop " + l.Attempt.Unit}
	if got := c.got(); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v (once, after the lease came back)", got, want)
	}
}

// A repository that cannot be watched is told once per attempt, though each pass tries again;
// an attempt no longer live is forgotten.
func TestUnwatchableToldOnce(t *testing.T) {
	l, repo := backup(t)
	if err := os.RemoveAll(repo); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	var mu sync.Mutex
	g := New(Config{Store: &calls{}, Units: &calls{}, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))})
	told := func() int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(log.String(), "cannot watch the repository")
	}
	for range 3 {
		g.Watch(l)
	}
	if n := told(); n != 1 {
		t.Fatalf("told %d times over three passes, want once:\n%s", n, log.String())
	}
	g.Prune(nil) // the attempt ended
	g.Watch(l)
	if n := told(); n != 2 {
		t.Fatalf("told %d times after the attempt was pruned and watched again, want 2", n)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A watch starts from what the attempt had added when it began, and while it follows the
// attempt a pass does not walk the repository; a count past the hold is measured before it
// stops anything, so a pack counted twice stops nothing.
func TestWatchCountsFromItsStart(t *testing.T) {
	ctx := context.Background()
	l, repo := backup(t)
	c := &calls{paused: true, stopped: make(chan string, 1)}
	g := New(Config{Store: c, Units: c})
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	write(t, repo, strings.Repeat("a", 64), 80) // before the watch: its seed
	if g.Watching(l.Ref()) {
		t.Fatal("watching before Watch")
	}
	g.Watch(l)
	if !g.Watching(l.Ref()) {
		t.Fatal("not watching after Watch")
	}
	write(t, repo, "extra", 500) // not a pack: only a measure sees it
	if e := g.Measure(ctx, l); e != nil {
		t.Fatalf("a pass measured %+v while a watch follows the attempt, want nothing", e)
	}
	write(t, repo, strings.Repeat("b", 64), 30) // 80 + 30: past the hold only with the seed
	select {
	case <-c.stopped:
	case <-time.After(time.Minute):
		t.Fatalf("the runaway was not stopped; calls: %v", c.got())
	}
	want := []string{"OtherWriter", "RequestPause run_ceiling", "Stop " + l.Attempt.Unit}
	if got := c.got(); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v (measured, then paused and stopped)", got, want)
	}
	g.Unwatch(l.Ref())
	if g.Watching(l.Ref()) {
		t.Fatal("watching after Unwatch")
	}
	if e := g.Measure(ctx, l); e == nil || e.Grown < 610 {
		t.Fatalf("a pass after the watch let go measured %+v, want the whole growth", e)
	}
}

// A watch begun from the baseline its spawn just measured (WatchFromBaseline) counts from
// nothing, without measuring first: 80 bytes another writer left since the baseline are not in
// its count, so a pack of 30 bytes keeps it within the hold of 100, and one of 200 passes it,
// which it stops on what it saw written (230 bytes). Watch would have measured the 80 bytes
// as its seed, and stopped the run on the 110 measured after the first pack.
func TestWatchFromBaselineCountsFromNothing(t *testing.T) {
	ctx := context.Background()
	l, repo := backup(t)
	c := &calls{paused: true, stopped: make(chan string, 1)}
	var mu sync.Mutex
	var log strings.Builder
	g := New(Config{Store: c, Units: c, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))})
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	write(t, repo, "index-file", 80) // not a pack: no watch counts it
	g.WatchFromBaseline(l)
	if !g.Watching(l.Ref()) {
		t.Fatal("not watching after WatchFromBaseline")
	}
	write(t, repo, strings.Repeat("b", 64), 30)
	write(t, repo, strings.Repeat("c", 64), 200)
	select {
	case <-c.stopped:
	case <-time.After(time.Minute):
		t.Fatalf("the runaway was not stopped; calls: %v", c.got())
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(log.String(), `added="230 B"`) {
		t.Fatalf("the stop was not on the 230 bytes of packs the watch saw:\n%s", log.String())
	}
}

// The growth of an attempt whose unit ended is measured once: Ending begins the measure as the
// marker appears, and EndGrowth takes it for the settlement. Where Ending measured nothing (an
// attempt no watch follows, one let go of since, a baseline that is not the attempt's), EndGrowth
// measures itself.
func TestEndGrowthTakesEndingsMeasure(t *testing.T) {
	for _, c := range []struct {
		name     string
		watched  bool
		unwatch  bool  // Unwatch between Ending and EndGrowth
		baseline int64 // added to the attempt's baseline EndGrowth is given
		measures int   // the repository's measures (each asks who else wrote to it first)
	}{
		{name: "watched: Ending's measure", watched: true, measures: 1},
		{name: "not watched: measured at the end", measures: 1},
		{name: "let go of since: measured at the end", watched: true, unwatch: true, measures: 2},
		{name: "another baseline: measured at the end", watched: true, baseline: 1, measures: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			l, repo := backup(t)
			calls := &calls{}
			g := New(Config{Store: calls, Units: calls})
			if err := g.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer g.Stop()
			if c.watched {
				g.WatchFromBaseline(l)
			}
			write(t, repo, strings.Repeat("a", 64), 30)
			g.Ending(l.Ref())
			if c.unwatch {
				g.Unwatch(l.Ref())
			}
			a := l.Attempt
			a.RunID = l.Run.ID // as the store reads it
			before := *a.RepoBytesBefore - c.baseline
			a.RepoBytesBefore = &before
			grown, shared, why := g.EndGrowth(ctx, repo, a)
			if grown == nil || *grown != 30+c.baseline || shared != nil {
				t.Fatalf("EndGrowth = %v, %v, %q; want %d bytes", grown, shared, why, 30+c.baseline)
			}
			g.Stop() // Ending's measure done, taken or not
			if got := calls.got(); len(got) != c.measures {
				t.Fatalf("calls %v: want %d measures", got, c.measures)
			}
		})
	}
}

// A count that holds a pack twice (renamed as the seed was measured) stops nothing: the measure
// puts it right, and the watch counts on from it. Here the seed says 140 bytes where 50 were
// added: the watch measures at once, then counts 30 and 40 bytes of packs on the 50, and the run
// is stopped on the measured 120, never on the seed's 140 nor on the 70 it saw itself.
func TestWatchMeasuresBeforeItStops(t *testing.T) {
	l, repo := backup(t)
	c := &calls{paused: true, stopped: make(chan string, 1)}
	var mu sync.Mutex
	var log strings.Builder
	g := New(Config{Store: c, Units: c, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))})
	write(t, repo, "index-file", 50) // added before the watch, not a pack
	fw, data, err := watchData(repo)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(data)
		g.follow(context.Background(), fw, data, l, *l.Attempt.HoldBytes, 140)
	}()
	write(t, repo, strings.Repeat("a", 64), 30)
	write(t, repo, strings.Repeat("b", 64), 40)
	select {
	case <-c.stopped:
	case <-time.After(time.Minute):
		t.Fatalf("the runaway was not stopped; calls: %v", c.got())
	}
	<-done // a watch that stopped its run lets go
	got := c.got()
	if n := len(got); n < 3 || !slices.Equal(got[n-2:], []string{"RequestPause run_ceiling", "Stop " + l.Attempt.Unit}) ||
		slices.ContainsFunc(got[:n-2], func(s string) bool { return s != "OtherWriter" }) {
		t.Fatalf("calls %v, want measures, then one pause and one stop", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(log.String(), `added="120 B"`) {
		t.Fatalf("the pause was not on the measured growth of 120 bytes:\n%s", log.String())
	}
}

// A watch lets go when it can no longer tell: a new subdirectory of data, which it does not see
// into, or a repository another run writes to, after which the guard neither watches nor
// measures the attempt again until it is no longer live.
func TestWatchLetsGo(t *testing.T) {
	ctx := context.Background()
	l, repo := backup(t)
	c := &calls{}
	g := New(Config{Store: c, Units: c})
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	waitLetGo := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); g.Watching(l.Ref()); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the watch did not let go after %s", what)
			}
		}
	}
	g.Watch(l)
	if err := os.Mkdir(filepath.Join(repo, "data", "01"), 0o700); err != nil {
		t.Fatal(err)
	}
	waitLetGo("a new subdirectory of data")
	if got := c.got(); len(got) != 0 {
		t.Fatalf("a watch that let go acted: %v", got)
	}

	g.Watch(l) // the next pass arms it again, seeing into data/01 too
	if !g.Watching(l.Ref()) {
		t.Fatal("not watching again")
	}
	c.other = new(uuid.New())
	write(t, repo, strings.Repeat("a", 64), 200) // past the hold, with another writer
	waitLetGo("another writer")
	g.Watch(l)
	if g.Watching(l.Ref()) {
		t.Fatal("watching an attempt whose repository another run writes to")
	}
	if e := g.Measure(ctx, l); e != nil {
		t.Fatalf("measured %+v for an attempt whose repository another run writes to", e)
	}
	if got := c.got(); !slices.Equal(got, []string{"OtherWriter"}) {
		t.Fatalf("calls %v, want the one question that found the other writer", got)
	}
	g.Prune(nil) // the attempt ended: forgotten
	c.other = nil
	if err := os.Remove(filepath.Join(repo, "data", "00", strings.Repeat("a", 64))); err != nil {
		t.Fatal(err) // within its hold again, so that the watch stays
	}
	g.Watch(l)
	if !g.Watching(l.Ref()) {
		t.Fatal("an attempt pruned and live again is not watched")
	}
}
