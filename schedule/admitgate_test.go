package schedule

import (
	"errors"
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	due := at(10 * time.Minute)
	type pass struct {
		at    time.Duration
		woken bool
		open  bool
		next  *time.Time // what the pass's read found
		err   error
	}
	for _, c := range []struct {
		name   string
		passes []pass
	}{
		{"the first pass claims", []pass{{at: 0, open: true, next: &due}}},
		{"quiet until the due time, then open", []pass{
			{at: 0, open: true, next: &due},
			{at: 2 * time.Second, open: false, next: &due},
			{at: 58 * time.Second, open: false, next: &due},
			{at: 60 * time.Second, open: true, next: &due}, // the backstop
			{at: 62 * time.Second, open: false, next: &due},
			{at: 10 * time.Minute, open: true, next: nil},
		}},
		{"woken, it claims", []pass{
			{at: 0, open: true, next: &due},
			{at: 2 * time.Second, woken: true, open: true, next: &due},
		}},
		{"after a failed read it claims", []pass{
			{at: 0, open: true, err: errors.New("database away")},
			{at: 2 * time.Second, open: true, next: &due},
			{at: 4 * time.Second, open: false, next: &due},
		}},
		{"nothing due: the backstop", []pass{
			{at: 0, open: true, next: nil},
			{at: 30 * time.Second, open: false, next: nil},
			{at: 61 * time.Second, open: true, next: nil},
		}},
		{"due time already past: every pass claims", []pass{
			{at: 0, open: true, next: &t0},
			{at: 2 * time.Second, open: true, next: &t0},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var g Gate
			for i, p := range c.passes {
				if got := g.Open(at(p.at), p.woken); got != p.open {
					t.Fatalf("pass %d at +%v (woken %v): open %v, want %v", i, p.at, p.woken, got, p.open)
				}
				g.Learn(at(p.at), p.next, p.err)
			}
		})
	}
}
