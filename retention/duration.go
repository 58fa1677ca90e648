package retention

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a keep-within duration as restic 0.14 reads it: whole years, months, days and
// hours, counted back on the calendar from a reference time (time.AddDate), not a fixed number
// of seconds. "6m" is six months, as it is to restic and to anyone copying a restic policy.
type Duration struct {
	Years  int `json:"years,omitempty"`
	Months int `json:"months,omitempty"`
	Days   int `json:"days,omitempty"`
	Hours  int `json:"hours,omitempty"`
}

// IsZero reports whether d is no duration at all (the keep-within rule is off).
func (d Duration) IsZero() bool { return d == Duration{} }

// negative reports whether any part of d is below zero.
func (d Duration) negative() bool { return d.Years < 0 || d.Months < 0 || d.Days < 0 || d.Hours < 0 }

// Before returns the time d before t, as restic computes it: t.AddDate(-y, -m, -d) minus the
// hours, in t's own location.
func (d Duration) Before(t time.Time) time.Time {
	return t.AddDate(-d.Years, -d.Months, -d.Days).Add(-time.Duration(d.Hours) * time.Hour)
}

// maxDurationPart bounds each number so that the calendar arithmetic cannot overflow.
const maxDurationPart = 1_000_000

// ParseDuration parses a keep-within duration the way restic 0.14 does: numbers followed by y
// (years), m (months), d (days) or h (hours), e.g. "7d", "6m", "1y6m", "36h". Unlike restic,
// which overwrites a repeated unit, accepts signs and panics on huge numbers, a repeated unit,
// a sign, an empty string and a number past 1,000,000 are refused.
func ParseDuration(s string) (Duration, error) {
	if s == "" {
		return Duration{}, fmt.Errorf("empty duration: give one such as 7d, 6m (six months) or 1y")
	}
	var d Duration
	seen := map[byte]bool{}
	for rest := s; rest != ""; {
		n := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		switch {
		case n == 0 && rest[0] == '-':
			return Duration{}, fmt.Errorf("duration %q is negative: give one such as 7d, 6m (six months) or 1y", s)
		case n == 0:
			return Duration{}, badDuration(s)
		case n < 0:
			return Duration{}, fmt.Errorf("invalid duration %q: the number %s has no unit; give y (years), m (months), d (days) or h (hours)", s, rest)
		}
		v, err := strconv.Atoi(rest[:n])
		if err != nil || v > maxDurationPart {
			return Duration{}, fmt.Errorf("duration %q is too long: each number may be at most %d", s, maxDurationPart)
		}
		unit := rest[n]
		rest = rest[n+1:]
		if seen[unit] {
			return Duration{}, fmt.Errorf("invalid duration %q: the unit %c appears twice", s, unit)
		}
		seen[unit] = true
		switch unit {
		case 'y':
			d.Years = v
		case 'm':
			d.Months = v
		case 'd':
			d.Days = v
		case 'h':
			d.Hours = v
		case 'w':
			return Duration{}, fmt.Errorf("invalid duration %q: restic has no weeks; give days, e.g. 14d", s)
		default:
			return Duration{}, badDuration(s)
		}
	}
	return d, nil
}

func badDuration(s string) error {
	return fmt.Errorf("invalid duration %q: give whole years (y), months (m), days (d) and hours (h) as restic does, e.g. 7d, 36h, 6m (six months) or 1y6m", s)
}

// FormatDuration writes d the way ParseDuration and restic read it ("1y6m", "7d", "36h"); the
// zero duration is "0h". ParseDuration(FormatDuration(d)) == d for every non-zero d that
// ParseDuration can return.
func FormatDuration(d Duration) string {
	var b []byte
	for _, p := range []struct {
		n    int
		unit byte
	}{{d.Years, 'y'}, {d.Months, 'm'}, {d.Days, 'd'}, {d.Hours, 'h'}} {
		if p.n != 0 {
			b = append(strconv.AppendInt(b, int64(p.n), 10), p.unit)
		}
	}
	if len(b) == 0 {
		return "0h"
	}
	return string(b)
}

// Words says d in English: "1 year 6 months", "36 hours".
func (d Duration) Words() string {
	var parts []string
	for _, p := range []struct {
		n           int
		one, plural string
	}{{d.Years, "year", "years"}, {d.Months, "month", "months"}, {d.Days, "day", "days"}, {d.Hours, "hour", "hours"}} {
		switch {
		case p.n == 1:
			parts = append(parts, "1 "+p.one)
		case p.n != 0:
			parts = append(parts, strconv.Itoa(p.n)+" "+p.plural)
		}
	}
	if len(parts) == 0 {
		return "0 hours"
	}
	return strings.Join(parts, " ")
}

// MarshalJSON writes d as restic writes it: "1y6m".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(FormatDuration(d)) }

// UnmarshalJSON reads "1y6m", or a number of nanoseconds as policies stored before durations
// were calendar ones: those become days and hours, rounded up to whole hours (keep more).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s == "0h" {
			*d = Duration{}
			return nil
		}
		v, err := ParseDuration(s)
		if err != nil {
			return err
		}
		*d = v
		return nil
	}
	var ns int64
	if err := json.Unmarshal(b, &ns); err != nil {
		return fmt.Errorf("keep-within %s is neither a duration such as \"7d\" nor a number", b)
	}
	if ns < 0 {
		return fmt.Errorf("keep-within %d is negative", ns)
	}
	hours := ns / int64(time.Hour)
	if ns%int64(time.Hour) != 0 {
		hours++
	}
	*d = Duration{Days: int(hours / 24), Hours: int(hours % 24)}
	return nil
}
