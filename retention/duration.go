package retention

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// ParseDuration parses a retention duration: a Go duration ("36h", "90m"),
// whole days ("7d") and weeks ("2w"), or a combination ("1w3d12h"). A day is
// 24 hours. Unlike restic, "m" means minutes and there is no month or year
// unit. Zero ("0", "0d") is accepted; signs, spaces and empty strings are not.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("empty duration: give one such as 7d, 2w or 36h")
	}
	if s[0] == '-' {
		return 0, fmt.Errorf("duration %q is negative: give one such as 7d, 2w or 36h", s)
	}
	if s == "0" {
		return 0, nil
	}
	var total time.Duration
	for rest := s; rest != ""; {
		n := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if n <= 0 {
			return 0, badDuration(s)
		}
		num := rest[:n]
		rest = rest[n:]
		u := strings.IndexFunc(rest, func(r rune) bool { return (r >= '0' && r <= '9') || r == '.' })
		if u < 0 {
			u = len(rest)
		}
		unit := rest[:u]
		rest = rest[u:]

		var part time.Duration
		switch unit {
		case "d", "w":
			v, err := strconv.ParseUint(num, 10, 63)
			switch {
			case errors.Is(err, strconv.ErrRange):
				return 0, fmt.Errorf("duration %q is too long", s)
			case err != nil && strings.Contains(num, "."):
				return 0, fmt.Errorf("invalid duration %q: days and weeks must be whole numbers, e.g. 1d12h instead of 1.5d", s)
			case err != nil:
				return 0, badDuration(s)
			}
			size := day
			if unit == "w" {
				size = week
			}
			if v > uint64(math.MaxInt64/size) {
				return 0, fmt.Errorf("duration %q is too long", s)
			}
			part = time.Duration(v) * size
		case "":
			return 0, badDuration(s)
		default:
			var err error
			if part, err = time.ParseDuration(num + unit); err != nil {
				// time.ParseDuration reports an overflow as an invalid duration.
				if _, ferr := strconv.ParseFloat(num, 64); ferr == nil && goUnit(unit) {
					return 0, fmt.Errorf("duration %q is too long", s)
				}
				return 0, badDuration(s)
			}
		}
		if total > math.MaxInt64-part {
			return 0, fmt.Errorf("duration %q is too long", s)
		}
		total += part
	}
	return total, nil
}

func goUnit(u string) bool {
	switch u {
	case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
		return true
	}
	return false
}

func badDuration(s string) error {
	return fmt.Errorf("invalid duration %q: use whole days (7d), weeks (2w) or Go units (36h, 90m), or combine them as in 1w3d12h", s)
}

// FormatDuration writes d the way ParseDuration reads it: whole weeks from
// two weeks up as "2w", other whole days as "7d", the rest as days followed
// by Go units ("1d12h", "36m", "1h30m0.5s"). ParseDuration(FormatDuration(d))
// == d for every d >= 0.
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	var b []byte
	u := uint64(d)
	if d < 0 {
		b = append(b, '-')
		u = -u // correct for math.MinInt64 too
	}
	days, rem := u/uint64(day), time.Duration(u%uint64(day))
	if rem == 0 {
		if days%7 == 0 && days >= 14 {
			return string(strconv.AppendUint(b, days/7, 10)) + "w"
		}
		return string(strconv.AppendUint(b, days, 10)) + "d"
	}
	if days > 0 {
		b = append(strconv.AppendUint(b, days, 10), 'd')
	}
	if h := rem / time.Hour; h > 0 {
		b = append(strconv.AppendInt(b, int64(h), 10), 'h')
	}
	if m := rem % time.Hour / time.Minute; m > 0 {
		b = append(strconv.AppendInt(b, int64(m), 10), 'm')
	}
	if s := rem % time.Minute; s > 0 {
		b = append(b, s.String()...)
	}
	return string(b)
}
