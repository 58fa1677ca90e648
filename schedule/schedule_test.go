package schedule

import (
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, spec, tz string) Schedule {
	t.Helper()
	s, err := Parse(spec, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func at(t *testing.T, tz, value string) time.Time {
	t.Helper()
	zone, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04:05", value, zone)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Next across daylight saving time: a slot in a skipped hour runs right after the jump; a slot
// in a repeated hour runs once, at its first occurrence.
func TestNextAcrossDST(t *testing.T) {
	cases := []struct {
		name, spec, tz, after string
		want                  []string // wall times with zone abbreviation
	}{
		{"new york, spring forward skips 02:30", "30 2 * * *", "America/New_York", "2026-03-07 12:00:00",
			[]string{"2026-03-08 03:00 EDT", "2026-03-09 02:30 EDT"}},
		{"new york, fall back runs 01:30 once", "30 1 * * *", "America/New_York", "2026-10-31 12:00:00",
			[]string{"2026-11-01 01:30 EDT", "2026-11-02 01:30 EST"}},
		{"new york, every 30 minutes through the repeated hour", "*/30 * * * *", "America/New_York", "2026-11-01 00:45:00",
			[]string{"2026-11-01 01:00 EDT", "2026-11-01 01:30 EDT", "2026-11-01 02:00 EST"}},
		{"new york, every 15 minutes through the skipped hour", "*/15 * * * *", "America/New_York", "2026-03-08 01:40:00",
			[]string{"2026-03-08 01:45 EST", "2026-03-08 03:00 EDT", "2026-03-08 03:15 EDT"}},
		{"berlin, spring forward skips 02:00", "0 2 * * *", "Europe/Berlin", "2026-03-28 12:00:00",
			[]string{"2026-03-29 03:00 CEST", "2026-03-30 02:00 CEST"}},
		{"berlin, fall back runs 02:30 once", "30 2 * * *", "Europe/Berlin", "2026-10-24 12:00:00",
			[]string{"2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"}},
		{"sao paulo 2018, midnight skipped", "0 0 * * *", "America/Sao_Paulo", "2018-11-03 12:00:00",
			[]string{"2018-11-04 01:00 -02", "2018-11-05 00:00 -02"}},
		{"sao paulo 2019, midnight repeated", "0 23 * * *", "America/Sao_Paulo", "2019-02-15 12:00:00",
			[]string{"2019-02-15 23:00 -02", "2019-02-16 23:00 -02", "2019-02-17 23:00 -03"}},
		{"utc daily", "@daily", "", "2026-06-01 10:00:00", []string{"2026-06-02 00:00 UTC", "2026-06-03 00:00 UTC"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tz := tc.tz
			if tz == "" {
				tz = "UTC"
			}
			s := mustParse(t, tc.spec, tc.tz)
			cur := at(t, tz, tc.after)
			for i, want := range tc.want {
				next, ok := s.Next(cur)
				if !ok {
					t.Fatalf("slot %d: no next", i)
				}
				if got := next.In(s.Zone()).Format("2006-01-02 15:04 MST"); got != want {
					t.Fatalf("slot %d after %s: got %s, want %s", i, cur.In(s.Zone()).Format(time.RFC3339), got, want)
				}
				cur = next
			}
		})
	}
}

func TestPreviewMarksDST(t *testing.T) {
	s := mustParse(t, "30 2 * * *", "America/New_York")
	slots := s.Preview(at(t, "America/New_York", "2026-03-06 12:00:00"), 3)
	if len(slots) != 3 || slots[0].Note != "" || !strings.Contains(slots[1].Note, "does not exist") || slots[2].Note != "" {
		t.Fatalf("preview = %+v, want the second slot marked", slots)
	}
	s = mustParse(t, "30 1 * * *", "America/New_York")
	slots = s.Preview(at(t, "America/New_York", "2026-10-31 12:00:00"), 1)
	if !strings.Contains(slots[0].Note, "happens twice") {
		t.Fatalf("preview = %+v, want the repeated hour marked", slots)
	}
}

// The next slot comes from the planned time, not from when the run was claimed: no drift.
func TestNoDrift(t *testing.T) {
	for _, spec := range []string{"@every 6h", "0 */6 * * *"} {
		s := mustParse(t, spec, "Europe/Berlin")
		planned := at(t, "Europe/Berlin", "2026-06-01 06:00:00")
		d, err := s.Due(planned, planned.Add(47*time.Second), time.Minute, false)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Run || !d.Planned.Equal(planned) || !d.Next.Equal(planned.Add(6*time.Hour)) || d.Missed != 0 {
			t.Fatalf("%s: %+v, want a run for %s and the next slot 6h after it", spec, d, planned)
		}
	}
}

// After a 3-day downtime, the missed slots are counted and skipped, not replayed; with catch-up
// there is exactly one run for them.
func TestDowntimeSkipsAndCounts(t *testing.T) {
	cases := []struct {
		spec       string
		wantMissed int
	}{
		{"0 2 * * *", 3},
		{"0 */6 * * *", 12},
		{"@every 6h", 12},
		{"@hourly", 72},
	}
	for _, tc := range cases {
		s := mustParse(t, tc.spec, "Europe/Berlin")
		planned := at(t, "Europe/Berlin", "2026-06-01 02:00:00")
		if tc.spec == "@hourly" || strings.Contains(tc.spec, "6") {
			planned = at(t, "Europe/Berlin", "2026-06-01 06:00:00")
		}
		now := planned.Add(3*24*time.Hour - time.Minute) // back just before the slot 3 days on
		d, err := s.Due(planned, now, time.Minute, false)
		if err != nil {
			t.Fatal(err)
		}
		if d.Run || d.Missed != tc.wantMissed || !d.Next.After(now) {
			t.Fatalf("%s: %+v, want no run, %d missed, next after now", tc.spec, d, tc.wantMissed)
		}
		d, err = s.Due(planned, now, time.Minute, true)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Run || d.Trigger != "catch-up" || d.Missed != tc.wantMissed-1 {
			t.Fatalf("%s with catch-up: %+v, want one catch-up run", tc.spec, d)
		}
	}
}

func TestDueNotYet(t *testing.T) {
	s := mustParse(t, "@every 1m", "")
	now := time.Now()
	if _, err := s.Due(now.Add(time.Second), now, time.Minute, false); err != ErrNotDue {
		t.Fatalf("err = %v, want ErrNotDue", err)
	}
}

func TestParseRefusesWithTheBadPart(t *testing.T) {
	cases := []struct{ spec, tz, want string }{
		{"0 25 * * *", "", `"0 25 * * *"`},
		{"every day", "", `"every day"`},
		{"@every soon", "", `"soon"`},
		{"@every 10ms", "", "at least"},
		{"0 2 * * *", "Mars/Olympus", `"Mars/Olympus"`},
		{"* * * * * *", "", `"* * * * * *"`},
	}
	for _, tc := range cases {
		_, err := Parse(tc.spec, tc.tz)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q, %q) = %v, want a one-line error containing %s", tc.spec, tc.tz, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{"0 2 * * *", "@daily", "@every 6h", "*/15 1-5 * * MON-FRI", "", "0 0 31 2 *", "@every 0s", "61 * * * *"} {
		f.Add(seed, "Europe/Berlin")
	}
	f.Fuzz(func(t *testing.T, spec, tz string) {
		s, err := Parse(spec, tz)
		if err != nil {
			return
		}
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		if next, ok := s.Next(start); ok && !next.After(start) {
			t.Fatalf("Next(%s) = %s, not after", start, next)
		}
	})
}
