package reconcile

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
)

// liveShape changes with what the next due time rests on, and with nothing else: a journal's
// progress or a new read of the same runs leaves it as it was.
func TestLiveShape(t *testing.T) {
	at := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	base := func() []model.LiveRun {
		return []model.LiveRun{
			{Run: model.Run{ID: uuid.MustParse("00000000-0000-0000-0000-000000000001"), Status: model.StatusRunning},
				Attempt: model.Attempt{No: 1, Unit: "holdfast-a.service"}},
			{Run: model.Run{ID: uuid.MustParse("00000000-0000-0000-0000-000000000002"), Status: model.StatusQueued},
				Attempt: model.Attempt{No: 1}},
		}
	}
	same := base()
	same[0].Attempt.LastEventAt, same[0].ReadAt = &at, at
	if liveShape(base()) != liveShape(same) {
		t.Fatal("the same runs read again changed the shape")
	}
	if swapped := base(); liveShape(base()) != liveShape([]model.LiveRun{swapped[1], swapped[0]}) {
		t.Fatal("the same runs read in another order changed the shape")
	}
	if liveShape(nil) == 0 || liveShape(base()) == 0 {
		t.Fatal("a shape is 0, which means none read")
	}
	for _, c := range []struct {
		what   string
		change func([]model.LiveRun) []model.LiveRun
	}{
		{"a run ended", func(l []model.LiveRun) []model.LiveRun { return l[:1] }},
		{"no run is live", func([]model.LiveRun) []model.LiveRun { return nil }},
		{"a run went on in a new attempt", func(l []model.LiveRun) []model.LiveRun { l[0].Attempt.No = 2; return l }},
		{"a queued run was spawned", func(l []model.LiveRun) []model.LiveRun { l[1].Attempt.Unit = "holdfast-b.service"; return l }},
		{"a queued run waits until a time", func(l []model.LiveRun) []model.LiveRun { l[1].Run.NotBefore = &at; return l }},
		{"a run was admitted", func(l []model.LiveRun) []model.LiveRun {
			return append(l, model.LiveRun{Run: model.Run{ID: uuid.New(), Status: model.StatusQueued}})
		}},
	} {
		if liveShape(base()) == liveShape(c.change(base())) {
			t.Errorf("%s: the shape did not change", c.what)
		}
	}
}

// The orphans of the down hosts are read at the first pass, when the hosts down change, while
// the last read found some, and at least every orphansAgainAfter; not while the same hosts
// stay down with none.
func TestOrphanReads(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	var o orphanReads
	a, ab := []string{"a"}, []string{"a", "b"}
	if !o.due(a, t0) {
		t.Fatal("never read: not due")
	}
	if !o.read(a, 2, t0) {
		t.Fatal("the first read: the hosts down did not change")
	}
	if !o.due(a, t0.Add(time.Second)) {
		t.Fatal("the last read found orphans: not due")
	}
	if o.read(a, 0, t0.Add(time.Second)) {
		t.Fatal("the same host down: read as a change")
	}
	for _, c := range []struct {
		what string
		down []string
		at   time.Duration
		want bool
	}{
		{"the same host down, none found", a, 2 * time.Second, false},
		{"up to the backstop", a, time.Second + orphansAgainAfter - time.Millisecond, false},
		{"at the backstop", a, time.Second + orphansAgainAfter, true},
		{"another host went down", ab, 2 * time.Second, true},
		{"another host down instead", []string{"b"}, 2 * time.Second, true},
	} {
		if got := o.due(c.down, t0.Add(c.at)); got != c.want {
			t.Errorf("%s: due = %v, want %v", c.what, got, c.want)
		}
	}
	// A pass with no host down records that, so that the same host down again is a change.
	o.read(nil, 0, t0.Add(3*time.Second))
	if !o.due(a, t0.Add(4*time.Second)) {
		t.Error("a host back and down again: not due")
	}
	if !o.read(a, 0, t0.Add(4*time.Second)) {
		t.Error("a host back and down again: not a change")
	}
}
