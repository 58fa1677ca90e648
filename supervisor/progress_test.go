package supervisor

import (
	"cmp"
	"errors"
	"testing"
	"time"
)

// The watchdog is pinged only while the sweep keeps its rhythm: a pass under way within its
// timeout, or the last pass ended within the sweep's wait after it, each with slack.
func TestPulse(t *testing.T) {
	const interval, passTimeout = 2 * time.Second, time.Minute
	slack := interval + 5*time.Second
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		passFrom  time.Time
		passEnded time.Time
		wait      time.Duration // the sweep's after the last pass; 0 is interval
		now       time.Time
		want      bool
	}{
		{"before the first pass", time.Time{}, time.Time{}, 0, t0, false},
		{"first pass under way", t0, time.Time{}, 0, t0.Add(time.Second), true},
		{"pass under way up to its timeout and slack", t0, time.Time{}, 0, t0.Add(passTimeout + slack), true},
		{"pass under way past its timeout and slack", t0, time.Time{}, 0, t0.Add(passTimeout + slack + time.Millisecond), false},
		{"between passes", time.Time{}, t0, 0, t0.Add(interval), true},
		{"between passes up to the slack", time.Time{}, t0, 0, t0.Add(interval + slack), true},
		{"no pass begun after the slack", time.Time{}, t0, 0, t0.Add(interval + slack + time.Millisecond), false},
		{"a pass under way counts from its start", t0.Add(time.Hour), t0, 0, t0.Add(time.Hour + time.Second), true},
		{"an idle daemon's wait, up to the slack", time.Time{}, t0, PollBackstop, t0.Add(PollBackstop + slack), true},
		{"past an idle daemon's wait and the slack", time.Time{}, t0, PollBackstop, t0.Add(PollBackstop + slack + time.Millisecond), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProgress()
			p.passFrom, p.passEnded, p.wait = tt.passFrom, tt.passEnded, cmp.Or(tt.wait, interval)
			if got := p.pulse(tt.now, interval, passTimeout); got != tt.want {
				t.Fatalf("pulse = %v, want %v", got, tt.want)
			}
		})
	}
}

// The status is one line: live runs, the next due slot, and the errors of the last passes.
func TestStatus(t *testing.T) {
	p := newProgress()
	if got, want := p.status(), "0 live run(s); next due not read yet"; got != want {
		t.Fatalf("status = %q, want %q", got, want)
	}
	p.due(nil)
	if got, want := p.status(), "0 live run(s); nothing scheduled"; got != want {
		t.Fatalf("status = %q, want %q", got, want)
	}
	due := time.Date(2026, 12, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	p.passEnds(time.Now(), 3, 2*time.Second, nil)
	p.due(&due)
	p.admitted(nil)
	if got, want := p.status(), "3 live run(s); next due 2026-12-02 02:04:05Z"; got != want {
		t.Fatalf("status = %q, want %q", got, want)
	}
	p.passEnds(time.Now(), 0, 2*time.Second, errors.New("connect to database:\n  refused"))
	p.due(nil)
	p.admitted(errors.New("admit: timeout"))
	got := p.status()
	if want := "3 live run(s); nothing scheduled; sweep failing: connect to database: refused; admission failing: admit: timeout"; got != want {
		t.Fatalf("status = %q, want %q (a failed pass keeps the last count)", got, want)
	}
}

// Besides after each pass, the notifier wakes under a watchdog at a quarter of its period (three
// pings at least within every period, however long an idle sweep waits), else every
// PollBackstop.
func TestPingEvery(t *testing.T) {
	for _, c := range []struct {
		watchdog, want time.Duration
	}{
		{0, PollBackstop},
		{2 * time.Second, 500 * time.Millisecond},
		{30 * time.Second, 7500 * time.Millisecond}, // the packaged unit's WatchdogSec
		{3 * time.Minute, 45 * time.Second},
	} {
		if got := pingEvery(c.watchdog); got != c.want {
			t.Errorf("pingEvery(%s) = %s, want %s", c.watchdog, got, c.want)
		}
		if c.watchdog > 0 && 3*pingEvery(c.watchdog) >= c.watchdog {
			t.Errorf("pingEvery(%s): fewer than three pings a period", c.watchdog)
		}
	}
}

// The status's next due time is read again only when it may have changed: never read yet,
// admission read its own since, or the time passed; an idle daemon's status reads nothing.
func TestDueStale(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	p := newProgress()
	stale, seen := p.dueStale(t0, 0)
	if !stale {
		t.Fatal("never read: not stale")
	}
	due := t0.Add(time.Minute)
	p.due(&due)
	if stale, seen = p.dueStale(t0, seen); stale {
		t.Fatal("read, nothing since: stale")
	}
	p.admitted(nil)
	if stale, seen = p.dueStale(t0, seen); !stale {
		t.Fatal("admission read the due time since: not stale")
	}
	p.due(&due)
	if stale, seen = p.dueStale(t0.Add(time.Second), seen); stale {
		t.Fatal("read again, nothing since: stale")
	}
	if stale, _ = p.dueStale(due, seen); !stale {
		t.Fatal("the due time passed: not stale")
	}
	p.due(nil)
	if stale, _ = p.dueStale(due.Add(time.Hour), seen); stale {
		t.Fatal("nothing scheduled, nothing since: stale")
	}
}
