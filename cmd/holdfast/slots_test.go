package main_test

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-backup/holdfast/testenv"
)

// go test hands its -parallel slots to the paused tests in the order the runtime happens to wake
// them: the longest tests (a booted host's install, the package's upgrade) were among the last in
// some runs and then made the package's last minutes alone. Here the tests take slots from slots
// instead, sized by -parallel, the long ones (parallelLong) first; TestMain lifts go test's own
// limit, which would otherwise keep deciding the order.
var slots slotGate

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f == nil || f.Value.String() == "" { // fuzzing: -parallel is its workers
		n, err := strconv.Atoi(flag.Lookup("test.parallel").Value.String())
		if err == nil && n > 0 {
			slots.on, slots.free = true, n
			_ = flag.Set("test.parallel", "1000000")
		}
	}
	testenv.RunMain(m)
}

// parallel is t.Parallel, taking one of the package's slots (see slots) until t ends.
func parallel(t *testing.T) {
	if slots.take(t, false) {
		t.Cleanup(slots.release) // registered first, so it runs after the test's own cleanups
	}
}

// parallelLong is parallel for a test that takes minutes: it gets a slot before the others.
func parallelLong(t *testing.T) {
	if slots.take(t, true) {
		t.Cleanup(slots.release)
	}
}

// parallelParent is parallel (parallelLong if long) for a test whose body starts parallel
// subtests: it holds its slot until the body returns (defer the returned func), while the
// subtests take their own.
func parallelParent(t *testing.T, long bool) (release func()) {
	if slots.take(t, long) {
		return slots.release
	}
	return func() {}
}

type slotGate struct {
	mu   sync.Mutex
	on   bool // false: go test's -parallel decides (fuzzing)
	free int
	// pending counts the top-level tests paused in t.Parallel: no slot is handed out before they
	// all wait for one, so the long ones are first whatever order they wake in.
	pending int
	started bool
	waiting []slotWaiter
}

type slotWaiter struct {
	long  bool
	ready chan struct{}
}

// take calls t.Parallel and waits for a slot; false if the gate is off.
func (g *slotGate) take(t *testing.T, long bool) bool {
	top := !strings.Contains(t.Name(), "/")
	g.mu.Lock()
	on := g.on
	if on && top {
		g.pending++
	}
	g.mu.Unlock()
	t.Parallel()
	if !on {
		return false
	}
	w := slotWaiter{long: long, ready: make(chan struct{})}
	g.mu.Lock()
	g.waiting = append(g.waiting, w)
	if top {
		g.pending--
	}
	g.grant()
	g.mu.Unlock()
	<-w.ready
	return true
}

// grant hands free slots to the waiting tests, long ones first, each kind in arrival order.
// g.mu is held.
func (g *slotGate) grant() {
	if !g.started && g.pending > 0 {
		return
	}
	g.started = true
	for g.free > 0 && len(g.waiting) > 0 {
		i := max(0, slices.IndexFunc(g.waiting, func(w slotWaiter) bool { return w.long }))
		close(g.waiting[i].ready)
		g.waiting = slices.Delete(g.waiting, i, i+1)
		g.free--
	}
}

func (g *slotGate) release() {
	g.mu.Lock()
	g.free++
	g.grant()
	g.mu.Unlock()
}

// Every parallel test of package main_test takes its slot through parallel: with go test's
// limit lifted, one calling t.Parallel itself would run beside the others without one.
func TestParallelThroughSlots(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	direct := regexp.MustCompile(`\.Parallel\(\)`)
	for _, f := range files {
		if f == "slots_test.go" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "package main_test\n") { // the slots are main_test's
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			if direct.MatchString(line) {
				t.Errorf("%s:%d calls Parallel itself; call parallel(t) (or parallelLong, parallelParent)", f, i+1)
			}
		}
	}
}
