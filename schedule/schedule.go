// Package schedule decides when jobs run: cron expressions in an IANA time zone, intervals and
// manual jobs; what to do with slots that were missed; maintenance windows; retry backoff.
//
// Cron expressions are evaluated on the wall clock of the job's zone and then placed on the
// time line with ISC cron's rules for daylight saving time. A job at a fixed time: a slot that
// falls in a skipped hour runs right after the jump, and a slot in a repeated hour runs once, at
// its first occurrence. A job with '*' in its minute or hour field ("*/15 * * * *", "30 * * * *",
// @hourly) is not moved: it follows the new wall clock, so its slots in a skipped hour do not run
// and those in a repeated hour run again.
// Everything here is a pure function of its arguments (Parse and LoadZone remember their
// answers, which does not change them).
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/robfig/cron/v3"
)

// Schedule says when a job runs.
type Schedule struct {
	spec  string
	zone  *time.Location
	cron  cron.Schedule // evaluated on floating wall-clock time (UTC with the zone's wall fields)
	every time.Duration
	// wildcard: the minute or hour field starts with '*' (or @hourly), which cron(8) does not
	// move across daylight saving time.
	wildcard bool
}

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// MinInterval is the shortest @every interval accepted.
const MinInterval = time.Second

// Parse reads a schedule: a five-field cron expression ("0 2 * * *"), a descriptor ("@daily",
// "@hourly", "@weekly", "@monthly", "@yearly"), an interval ("@every 6h"), or "" for a job that
// only runs when started by hand. tz is an IANA zone name ("" means UTC).
func Parse(spec, tz string) (Schedule, error) {
	return parsed.get([2]string{spec, tz}, func() (Schedule, error) { return parse(spec, tz) })
}

// parsed remembers Parse's schedules: the daemons judge every job's schedule at each watch
// pass, and parsing a cron expression in a zone costs tens of microseconds. A Schedule is
// never changed once made, so one value serves every caller.
var parsed = memo[[2]string, Schedule]{m: map[[2]string]Schedule{}}

// memo remembers the answers of a function that always answers the same for a key, errors
// excepted, up to rememberMax of them; past that it forgets them all at once.
type memo[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

const rememberMax = 4096

// get returns the answer for key, asking answer when it is not remembered.
func (c *memo[K, V]) get(key K, answer func() (V, error)) (V, error) {
	c.mu.Lock()
	v, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := answer()
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	if len(c.m) >= rememberMax {
		clear(c.m)
	}
	c.m[key] = v
	c.mu.Unlock()
	return v, nil
}

func parse(spec, tz string) (Schedule, error) {
	spec = strings.TrimSpace(spec)
	zone, err := LoadZone(tz)
	if err != nil {
		return Schedule{}, err
	}
	s := Schedule{spec: spec, zone: zone}
	switch {
	case spec == "" || spec == "manual":
		s.spec = ""
		return s, nil
	case strings.HasPrefix(spec, "@every"):
		arg := strings.TrimSpace(strings.TrimPrefix(spec, "@every"))
		d, err := time.ParseDuration(arg)
		if err != nil {
			return Schedule{}, fmt.Errorf("schedule %q: %q is not a duration: use e.g. @every 6h or @every 90m", spec, arg)
		}
		if d < MinInterval {
			return Schedule{}, fmt.Errorf("schedule %q: the interval must be at least %s", spec, MinInterval)
		}
		s.every = d
		return s, nil
	}
	c, err := parser.Parse(spec)
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule %q: %v: use five fields (minute hour day-of-month month day-of-week), e.g. \"0 2 * * *\", or @daily, @every 6h", spec, err)
	}
	// robfig/cron looks five years ahead; from 2001 that reaches 29 February 2004, so a
	// day-of-month and month that exist are found, and one that never exists (30 February,
	// 31 April) is not.
	if c.Next(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Schedule{}, fmt.Errorf("schedule %q never fires: no month has that day (e.g. 30 February, 31 April); check the day-of-month and month fields", spec)
	}
	s.cron = c
	s.wildcard = wildcardSpec(spec)
	return s, nil
}

// wildcardSpec reports whether cron(8) would flag the expression's minute or hour field as a
// wildcard (MIN_STAR, HR_STAR): the field starts with '*', as in "*/15" or "*".
func wildcardSpec(spec string) bool {
	if spec == "@hourly" {
		return true
	}
	fields := strings.Fields(spec)
	return len(fields) == 5 && (strings.HasPrefix(fields[0], "*") || strings.HasPrefix(fields[1], "*"))
}

// LoadZone loads an IANA time zone; "" is UTC.
func LoadZone(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	return zones.get(tz, func() (*time.Location, error) {
		zone, err := time.LoadLocation(tz)
		if err != nil || strings.EqualFold(tz, "local") {
			return nil, fmt.Errorf("time zone %q is unknown: use an IANA name such as Europe/Berlin or America/New_York", tz)
		}
		return zone, nil
	})
}

// zones remembers the zones loaded: time.LoadLocation reads the zone's file each time. A zone
// file changed on disk is read again when the daemon restarts.
var zones = memo[string, *time.Location]{m: map[string]*time.Location{}}

// String returns the schedule as given ("" for manual).
func (s Schedule) String() string { return s.spec }

// Zone is the schedule's time zone.
func (s Schedule) Zone() *time.Location { return s.zone }

// Manual reports whether the job only runs when started by hand.
func (s Schedule) Manual() bool { return s.spec == "" }

// Next returns the first slot strictly after t; ok is false for a manual schedule.
func (s Schedule) Next(t time.Time) (next time.Time, ok bool) {
	switch {
	case s.Manual():
		return time.Time{}, false
	case s.every > 0:
		return t.Truncate(time.Second).Add(s.every), true
	}
	c, ok := s.next(t)
	return c.at, ok
}

// dstSlack is more than any daylight saving shift: in a repeated hour the next slot can have an
// earlier wall time than t, so the search starts this far back on the wall clock.
const dstSlack = 3 * time.Hour

// candidate is one cron slot placed on the time line.
type candidate struct {
	at       time.Time
	wall     time.Time // the slot's wall-clock time (floating)
	how      Placement
	wildcard bool
	second   bool        // the second occurrence of a repeated wall time (wildcard jobs)
	dropped  []time.Time // wall times of a wildcard job's slots in a skipped hour, before at
}

// next finds the first placed slot after t, and what daylight saving time did on the way.
func (s Schedule) next(t time.Time) (candidate, bool) {
	// Without a zone transition soon after t, wall clock and time line run in step: the first
	// slot found is the answer. Near one, a slot with an earlier wall time than t's can still be
	// ahead (a repeated hour), so the search starts dstSlack back and takes the earliest instant.
	_, transition := t.In(s.zone).ZoneBounds()
	near := !transition.IsZero() && transition.Sub(t) <= dstSlack
	wall := floating(t.In(s.zone))
	if near {
		wall = wall.Add(-dstSlack)
	}
	type gap struct{ wall, jump time.Time }
	var gaps []gap
	var best candidate
	found := false
	for range 5000 { // bounded: every step moves the wall clock forward
		wall = s.cron.Next(wall)
		if wall.IsZero() {
			break
		}
		if found && (transition.IsZero() || transition.After(best.at) || wall.Sub(best.wall) > dstSlack) {
			break
		}
		at, how := place(wall, s.zone)
		ats := []time.Time{at}
		switch {
		case how == Skipped && s.wildcard:
			// cron(8): a job with * in its minute or hour field follows the new wall clock, so
			// its slots in a skipped hour do not run...
			if at.After(t) {
				gaps = append(gaps, gap{wall, at})
			}
			continue
		case how == Repeated && s.wildcard:
			// ... and in a repeated hour they run again.
			ats = append(ats, secondOccurrence(at, wall, s.zone))
		}
		for i, a := range ats {
			if a.After(t) && (!found || a.Before(best.at)) {
				best, found = candidate{at: a, wall: wall, how: how, wildcard: s.wildcard, second: i == 1}, true
			}
		}
	}
	for _, g := range gaps {
		if found && !g.jump.After(best.at) {
			best.dropped = append(best.dropped, g.wall)
		}
	}
	return best, found
}

// secondOccurrence is the later instant of a wall time that happens twice, given the first.
func secondOccurrence(first, wall time.Time, zone *time.Location) time.Time {
	for _, shift := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		if later := first.Add(shift); floating(later.In(zone)).Equal(wall) {
			return later
		}
	}
	return first
}

// floating is t's wall clock as a UTC time, where cron arithmetic has no DST.
func floating(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// Placement says how a wall-clock slot landed on the time line.
type Placement int

const (
	Exact    Placement = iota
	Skipped            // the wall time did not exist: the slot runs right after the jump
	Repeated           // the wall time happened twice: the slot runs at the first
)

// place puts a wall-clock time (floating) on the time line in zone.
func place(wall time.Time, zone *time.Location) (time.Time, Placement) {
	t := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), 0, zone)
	if !floating(t).Equal(wall) {
		// In a gap: the jump is the bound of t's zone period nearest to t.
		start, end := t.ZoneBounds()
		jump := start
		if !end.IsZero() && (start.IsZero() || end.Sub(t) < t.Sub(start)) {
			jump = end
		}
		return jump, Skipped
	}
	// In an overlap the same wall time exists twice, an offset change apart: look both ways.
	_, offset := t.Zone()
	start, end := t.ZoneBounds()
	if !end.IsZero() {
		_, after := end.Zone()
		if shift := time.Duration(offset-after) * time.Second; shift > 0 && floating(t.Add(shift)).Equal(wall) {
			return t, Repeated
		}
	}
	if !start.IsZero() {
		_, before := start.Add(-time.Second).Zone()
		if shift := time.Duration(before-offset) * time.Second; shift > 0 && floating(t.Add(-shift)).Equal(wall) {
			return t.Add(-shift), Repeated
		}
	}
	return t, Exact
}

// Slot is one start time of a schedule, for previews.
type Slot struct {
	At   time.Time
	Note string // set where daylight saving time moved or merged the slot
}

// Preview lists the next n slots after t.
func (s Schedule) Preview(t time.Time, n int) []Slot {
	var slots []Slot
	for len(slots) < n {
		if s.cron == nil {
			next, ok := s.Next(t)
			if !ok {
				break
			}
			slots = append(slots, Slot{At: next})
			t = next
			continue
		}
		c, ok := s.next(t)
		if !ok {
			break
		}
		slots = append(slots, Slot{At: c.at, Note: c.note()})
		t = c.at
	}
	return slots
}

// note explains a slot that daylight saving time moved, repeated, or that follows dropped ones.
func (c candidate) note() string {
	var notes []string
	if len(c.dropped) > 0 {
		span := c.dropped[0].Format("15:04")
		if len(c.dropped) > 1 {
			span += "-" + c.dropped[len(c.dropped)-1].Format("15:04")
		}
		notes = append(notes, fmt.Sprintf("DST: %s does not exist that day; those %d slot(s) do not run (the job follows the wall clock)", span, len(c.dropped)))
	}
	switch {
	case c.how == Skipped:
		notes = append(notes, fmt.Sprintf("DST: %s does not exist that day; runs right after the jump", c.wall.Format("15:04")))
	case c.how == Repeated && c.second:
		notes = append(notes, fmt.Sprintf("DST: %s happens twice that day; runs again (the job follows the wall clock)", c.wall.Format("15:04")))
	case c.how == Repeated && c.wildcard:
		notes = append(notes, fmt.Sprintf("DST: %s happens twice that day; runs at both", c.wall.Format("15:04")))
	case c.how == Repeated:
		notes = append(notes, fmt.Sprintf("DST: %s happens twice that day; runs once, at the first", c.wall.Format("15:04")))
	}
	return strings.Join(notes, "; ")
}

// Decision is what admission does with a job whose slot is due.
type Decision struct {
	Run     bool      // admit a run now
	Trigger string    // store.TriggerSchedule or store.TriggerCatchUp
	Planned time.Time // the slot the run is admitted for
	Missed  int       // slots skipped and not replayed
	Next    time.Time // the job's next slot, from the planned times (no drift)
}

// ErrNotDue means the planned slot is still in the future.
var ErrNotDue = errors.New("not due yet")

// maxMissedCount bounds counting slots one by one; longer gaps of an interval are computed.
const maxMissedCount = 100000

// Due decides, at claim time, about a job whose next slot is planned. Slots up to now are due;
// the newest runs if it is at most grace late, and every other due slot is missed: counted,
// never replayed. If even the newest is older than grace (holdfast was down), all are missed,
// and a job that opted into catch-up gets one run for them.
func (s Schedule) Due(planned, now time.Time, grace time.Duration, catchUp bool) (Decision, error) {
	if s.Manual() {
		return Decision{}, errors.New("a manual schedule has no slots")
	}
	if planned.After(now) {
		return Decision{}, ErrNotDue
	}
	last, count := planned, 1
	if s.every > 0 {
		steps := int(now.Sub(planned) / s.every)
		last, count = planned.Add(time.Duration(steps)*s.every), steps+1
	} else {
		for count < maxMissedCount {
			next, ok := s.Next(last)
			if !ok || next.After(now) {
				break
			}
			last, count = next, count+1
		}
	}
	next, ok := s.Next(last)
	if !ok {
		return Decision{}, fmt.Errorf("schedule %q has no slot after %s", s.spec, last)
	}
	d := Decision{Planned: last, Next: next}
	switch {
	case now.Sub(last) <= grace:
		d.Run, d.Trigger, d.Missed = true, model.TriggerSchedule, count-1
	case catchUp:
		d.Run, d.Trigger, d.Missed = true, model.TriggerCatchUp, count-1
	default:
		d.Missed = count
	}
	return d, nil
}
