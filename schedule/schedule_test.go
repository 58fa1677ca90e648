package schedule

import (
	"fmt"
	"strings"
	"sync"
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

// Next across daylight saving time, as cron(8) does it. A job at a fixed time: a slot in a skipped
// hour runs right after the jump, a slot in a repeated hour runs once, at its first occurrence. A
// job with * in its minute or hour field follows the wall clock: its slots in a skipped hour do
// not run, and in a repeated hour they run again.
func TestNextAcrossDST(t *testing.T) {
	cases := []struct {
		name, spec, tz, after string
		want                  []string // wall times with zone abbreviation
	}{
		{"new york, spring forward skips 02:30", "30 2 * * *", "America/New_York", "2026-03-07 12:00:00",
			[]string{"2026-03-08 03:00 EDT", "2026-03-09 02:30 EDT"}},
		{"new york, fall back runs 01:30 once", "30 1 * * *", "America/New_York", "2026-10-31 12:00:00",
			[]string{"2026-11-01 01:30 EDT", "2026-11-02 01:30 EST"}},
		{"new york, every 30 minutes through the repeated hour runs it twice", "*/30 * * * *", "America/New_York", "2026-11-01 00:45:00",
			[]string{"2026-11-01 01:00 EDT", "2026-11-01 01:30 EDT", "2026-11-01 01:00 EST", "2026-11-01 01:30 EST", "2026-11-01 02:00 EST"}},
		{"new york, every 15 minutes through the repeated hour runs it twice", "*/15 * * * *", "America/New_York", "2026-11-01 01:40:00",
			[]string{"2026-11-01 01:45 EDT", "2026-11-01 01:00 EST", "2026-11-01 01:15 EST", "2026-11-01 01:30 EST", "2026-11-01 01:45 EST", "2026-11-01 02:00 EST"}},
		{"new york, every 15 minutes through the skipped hour drops it", "*/15 * * * *", "America/New_York", "2026-03-08 01:40:00",
			[]string{"2026-03-08 01:45 EST", "2026-03-08 03:00 EDT", "2026-03-08 03:15 EDT"}},
		{"new york, half past every hour drops 02:30", "30 * * * *", "America/New_York", "2026-03-08 00:00:00",
			[]string{"2026-03-08 00:30 EST", "2026-03-08 01:30 EST", "2026-03-08 03:30 EDT"}},
		{"new york, half past every hour runs 01:30 twice", "30 * * * *", "America/New_York", "2026-11-01 00:00:00",
			[]string{"2026-11-01 00:30 EDT", "2026-11-01 01:30 EDT", "2026-11-01 01:30 EST", "2026-11-01 02:30 EST"}},
		{"new york, @hourly follows the wall clock", "@hourly", "America/New_York", "2026-11-01 00:30:00",
			[]string{"2026-11-01 01:00 EDT", "2026-11-01 01:00 EST", "2026-11-01 02:00 EST"}},
		{"new york, 02:00 runs right after the jump", "0 2 * * *", "America/New_York", "2026-03-07 12:00:00",
			[]string{"2026-03-08 03:00 EDT", "2026-03-09 02:00 EDT"}},
		{"berlin, every 15 minutes drops 02:00-02:45", "*/15 * * * *", "Europe/Berlin", "2026-03-29 01:40:00",
			[]string{"2026-03-29 01:45 CET", "2026-03-29 03:00 CEST"}},
		{"berlin, half past every hour runs 02:30 twice", "30 * * * *", "Europe/Berlin", "2026-10-25 01:00:00",
			[]string{"2026-10-25 01:30 CEST", "2026-10-25 02:30 CEST", "2026-10-25 02:30 CET", "2026-10-25 03:30 CET"}},
		{"berlin, 02:00 in the repeated hour runs once", "0 2 * * *", "Europe/Berlin", "2026-10-24 12:00:00",
			[]string{"2026-10-25 02:00 CEST", "2026-10-26 02:00 CET"}},
		{"sao paulo 2018, every 30 minutes drops the skipped midnight hour", "*/30 * * * *", "America/Sao_Paulo", "2018-11-03 23:10:00",
			[]string{"2018-11-03 23:30 -03", "2018-11-04 01:00 -02"}},
		{"sao paulo 2019, half past every hour runs 23:30 twice", "30 * * * *", "America/Sao_Paulo", "2019-02-16 22:00:00",
			[]string{"2019-02-16 22:30 -02", "2019-02-16 23:30 -02", "2019-02-16 23:30 -03", "2019-02-17 00:30 -03"}},
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
	cases := []struct {
		spec, after string
		n           int
		notes       []string // per slot: a part of its note, "" for none
	}{
		{"30 2 * * *", "2026-03-06 12:00:00", 3, []string{"", "02:30 does not exist that day; runs right after the jump", ""}},
		{"30 1 * * *", "2026-10-31 12:00:00", 2, []string{"01:30 happens twice that day; runs once, at the first", ""}},
		{"*/15 * * * *", "2026-03-08 01:40:00", 2, []string{"", "02:00-02:45 does not exist that day; those 4 slot(s) do not run"}},
		{"30 * * * *", "2026-03-08 01:00:00", 2, []string{"", "02:30 does not exist that day; those 1 slot(s) do not run"}},
		{"30 * * * *", "2026-11-01 01:00:00", 3, []string{"01:30 happens twice that day; runs at both", "01:30 happens twice that day; runs again", ""}},
	}
	for _, tc := range cases {
		s := mustParse(t, tc.spec, "America/New_York")
		slots := s.Preview(at(t, "America/New_York", tc.after), tc.n)
		if len(slots) != tc.n {
			t.Fatalf("%s: preview = %+v, want %d slots", tc.spec, slots, tc.n)
		}
		for i, want := range tc.notes {
			if (want == "") != (slots[i].Note == "") || !strings.Contains(slots[i].Note, want) {
				t.Errorf("%s after %s: slot %d (%s) note %q, want %q", tc.spec, tc.after, i, slots[i].At.In(s.Zone()).Format("15:04 MST"), slots[i].Note, want)
			}
		}
	}
}

// A cron expression whose day never exists is refused: it would never run.
func TestParseRefusesNeverFiring(t *testing.T) {
	for _, spec := range []string{"0 2 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *", "0 0 30,31 2 *"} {
		if _, err := Parse(spec, ""); err == nil || !strings.Contains(err.Error(), "never fires") {
			t.Errorf("Parse(%q) = %v, want never fires", spec, err)
		}
	}
	// 29 February fires every four years, and 31 in a month that has it fires.
	for _, spec := range []string{"0 0 29 2 *", "0 0 31 * *", "0 0 30 2 1", "0 0 31 1-4 *"} {
		if _, err := Parse(spec, ""); err != nil {
			t.Errorf("Parse(%q) = %v, want it accepted", spec, err)
		}
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

// Slots missed across daylight saving time are counted as they would have run: a wildcard job's
// repeated hour twice, its skipped hour not at all.
func TestDueCountsWildcardDST(t *testing.T) {
	cases := []struct {
		name, planned, now string
		wantMissed         int
	}{
		// 00:00-00:45 EDT, 01:00-01:45 EDT, 01:00-01:45 EST, 02:00-02:45 EST; 03:00 EST runs.
		{"fall back", "2026-11-01 00:00:00", "2026-11-01 03:00:30", 16},
		// 00:00-01:45 EST; 02:00-02:45 do not exist; 03:00-03:45 EDT; 04:00 EDT runs.
		{"spring forward", "2026-03-08 00:00:00", "2026-03-08 04:00:30", 12},
	}
	for _, tc := range cases {
		s := mustParse(t, "*/15 * * * *", "America/New_York")
		d, err := s.Due(at(t, "America/New_York", tc.planned), at(t, "America/New_York", tc.now), time.Minute, false)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Run || d.Missed != tc.wantMissed {
			t.Errorf("%s: %+v, want a run and %d missed", tc.name, d, tc.wantMissed)
		}
	}
}

// Parse remembers its schedules: callers on several goroutines (admission, the watch) get the
// same answers as a first parse, and an error is never remembered as a schedule.
func TestParseRemembersAcrossGoroutines(t *testing.T) {
	specs := [][2]string{{"0 3 * * *", "Europe/Berlin"}, {"@every 6h", ""}, {"*/15 * * * *", "America/New_York"}, {"@daily", "Asia/Tokyo"}}
	from := time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC)
	want := make([]time.Time, len(specs))
	for i, s := range specs {
		sched, err := parse(s[0], s[1])
		if err != nil {
			t.Fatal(err)
		}
		want[i], _ = sched.Next(from)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(specs))
	for range 8 {
		wg.Go(func() {
			for i, s := range specs {
				sched, err := Parse(s[0], s[1])
				if got, _ := sched.Next(from); err != nil || !got.Equal(want[i]) {
					errs <- fmt.Sprintf("%s in %q: next %s (%v), want %s", s[0], s[1], got, err, want[i])
				}
				if _, err := Parse("61 * * * *", s[1]); err == nil {
					errs <- "an invalid expression parsed once it was asked for again"
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
