package schedule

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Window is a recurring span of wall-clock time during which no run starts, e.g.
// "Sat 01:00-05:00", "Mon-Fri 22:00-06:00" (it may cross midnight) or "daily 03:00-04:00".
type Window struct {
	text  string
	days  [7]bool // by time.Weekday of the day the window starts
	start time.Duration
	end   time.Duration // after start, possibly past 24h
}

var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// ParseWindow reads "DAYS HH:MM-HH:MM", where DAYS is daily, a day (Sat), a range (Mon-Fri) or
// a list (Sat,Sun).
func ParseWindow(text string) (Window, error) {
	bad := func(why string) (Window, error) {
		return Window{}, fmt.Errorf("window %q: %s: use e.g. \"Sat 01:00-05:00\", \"Mon-Fri 22:00-06:00\" or \"daily 03:00-04:00\"", text, why)
	}
	fields := strings.Fields(text)
	if len(fields) != 2 {
		return bad("want days and a time range")
	}
	w := Window{text: text}
	if err := w.parseDays(strings.ToLower(fields[0])); err != nil {
		return bad(err.Error())
	}
	from, to, ok := strings.Cut(fields[1], "-")
	if !ok {
		return bad("the time range needs a '-'")
	}
	var err error
	if w.start, err = clock(from); err != nil {
		return bad(err.Error())
	}
	if w.end, err = clock(to); err != nil {
		return bad(err.Error())
	}
	if w.end == w.start {
		return bad("the window is empty")
	}
	if w.end < w.start {
		w.end += 24 * time.Hour
	}
	return w, nil
}

// ParseWindows reads each of texts as ParseWindow does; the first that does not parse is the
// error.
func ParseWindows(texts []string) ([]Window, error) {
	var windows []Window
	for _, text := range texts {
		w, err := ParseWindow(text)
		if err != nil {
			return nil, err
		}
		windows = append(windows, w)
	}
	return windows, nil
}

func (w *Window) parseDays(s string) error {
	if s == "daily" || s == "*" {
		w.days = [7]bool{true, true, true, true, true, true, true}
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, ok := weekdays[from]
		if !ok {
			return fmt.Errorf("%q is not a day", from)
		}
		if !isRange {
			w.days[a] = true
			continue
		}
		b, ok := weekdays[to]
		if !ok {
			return fmt.Errorf("%q is not a day", to)
		}
		for d := a; ; d = (d + 1) % 7 {
			w.days[d] = true
			if d == b {
				break
			}
		}
	}
	return nil
}

func clock(s string) (time.Duration, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a time of day (HH:MM)", s)
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, nil
}

// String returns the window as written.
func (w Window) String() string { return w.text }

// until returns the end of the window occurrence containing t (in zone), if t is inside one.
func (w Window) until(t time.Time, zone *time.Location) (time.Time, bool) {
	local := t.In(zone)
	for back := 0; back <= 2; back++ { // a window may have started up to two days ago
		day := time.Date(local.Year(), local.Month(), local.Day()-back, 0, 0, 0, 0, zone)
		if !w.days[day.Weekday()] {
			continue
		}
		from := wallAdd(day, w.start, zone)
		to := wallAdd(day, w.end, zone)
		if !t.Before(from) && t.Before(to) {
			return to, true
		}
	}
	return time.Time{}, false
}

// wallAdd is midnight of day plus d of wall-clock time, placed with the same DST rules as slots.
func wallAdd(day time.Time, d time.Duration, zone *time.Location) time.Time {
	at, _ := place(floating(day).Add(d), zone)
	return at
}

// Allowed returns the earliest instant at or after t outside every window, and the window that
// held it back ("" if t itself is allowed).
func Allowed(t time.Time, windows []Window, zone *time.Location) (time.Time, string) {
	var held string
	for range 64 { // windows can chain; each step moves past one
		moved := false
		for _, w := range windows {
			if end, in := w.until(t, zone); in {
				t, held, moved = end, w.text, true
			}
		}
		if !moved {
			break
		}
	}
	return t, held
}

// MaxBackoff caps the delay before a retry: retries are never further apart than this.
const MaxBackoff = time.Hour

// Backoff is the delay before retry n (1-based): base doubled for each earlier retry, capped at
// max, then moved by up to ±20% so that jobs that failed together do not retry together.
func Backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(d))
	return d + jitter
}
