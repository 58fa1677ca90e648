package supervisor

import (
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/wake"
)

// The notifications naming runs that come together wake admission and the sweep once, no sooner
// than namedSettle after the first; a notification after that wake wakes them again.
func TestPassesAfterNamed(t *testing.T) {
	s := &Supervisor{sweepWake: wake.New(), admitWake: wake.New()}
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
	woken("admission", s.admitWake)
	if since := time.Since(first); since < namedSettle {
		t.Fatalf("woken %s after the first notification, before namedSettle (%s)", since, namedSettle)
	}
	select {
	case <-s.sweepWake:
		t.Fatal("the sweep woken again for the same burst")
	case <-time.After(2 * namedSettle):
	}
	s.passesAfterNamed()
	woken("the sweep, for a later notification", s.sweepWake)
}
