package supervisor

import (
	"errors"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/wake"
)

// Ends closed at once want a pass only for what they leave to it, a failure, or a run that may
// be waiting for what they free.
func TestEndWakesSweep(t *testing.T) {
	for _, c := range []struct {
		name    string
		left    int
		err     error
		mayWait bool
		want    bool
	}{
		{"all closed, nothing waits", 0, nil, false, false},
		{"one left to the pass", 1, nil, false, true},
		{"a failure", 0, errors.New("database gone"), false, true},
		{"a run may wait", 0, nil, true, true},
	} {
		if got := endWakesSweep(c.left, c.err, c.mayWait); got != c.want {
			t.Errorf("%s: endWakesSweep = %v, want %v", c.name, got, c.want)
		}
	}
}

// The runs the named spawns leave together wake the sweep and admission's due time once, no
// sooner than namedSettle after the first; a run left after that wake wakes them again.
func TestPassesAfterNamed(t *testing.T) {
	s := &Supervisor{sweepWake: wake.New(), dueWake: wake.New()}
	woken := func(what string, w wake.Signal) {
		t.Helper()
		select {
		case <-w:
		case <-time.After(time.Minute):
			t.Fatalf("%s not woken", what)
		}
	}
	first := time.Now()
	for range 5 {
		s.passesAfterNamed()
	}
	if time.Since(first) >= namedSettle {
		t.Skip("the machine held the test longer than namedSettle: the burst may have had two wakes")
	}
	woken("the sweep", s.sweepWake)
	woken("admission's due time", s.dueWake)
	if since := time.Since(first); since < namedSettle {
		t.Fatalf("woken %s after the first run left, before namedSettle (%s)", since, namedSettle)
	}
	select {
	case <-s.sweepWake:
		t.Fatal("the sweep woken again for the same burst")
	case <-time.After(2 * namedSettle):
	}
	s.passesAfterNamed()
	woken("the sweep, for a run left later", s.sweepWake)
}
