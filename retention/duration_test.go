package retention

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const day = 24 * time.Hour

func TestParseDuration(t *testing.T) {
	good := []struct {
		in   string
		want Duration
	}{
		{"36h", Duration{Hours: 36}},
		{"7d", Duration{Days: 7}},
		{"6m", Duration{Months: 6}}, // months, as restic reads it, never minutes
		{"90m", Duration{Months: 90}},
		{"1y", Duration{Years: 1}},
		{"1y6m", Duration{Years: 1, Months: 6}},
		{"6m1y", Duration{Years: 1, Months: 6}},
		{"1y2m3d4h", Duration{Years: 1, Months: 2, Days: 3, Hours: 4}},
		{"0d", Duration{}},
		{"1000000y", Duration{Years: 1000000}},
	}
	for _, tt := range good {
		got, err := ParseDuration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}

	bad := []struct {
		in   string
		want string
	}{
		{"", "empty duration"},
		{"-7d", `duration "-7d" is negative`},
		{"+7d", `invalid duration "+7d"`},
		{"7", `invalid duration "7": the number 7 has no unit`},
		{"0", `invalid duration "0": the number 0 has no unit`},
		{"d", `invalid duration "d"`},
		{"7x", `invalid duration "7x"`},
		{"7 d", `invalid duration "7 d"`},
		{" 7d", `invalid duration " 7d"`},
		{"7D", `invalid duration "7D"`},
		{"1.5d", `invalid duration "1.5d"`},
		{"2w", `restic has no weeks; give days, e.g. 14d`},
		{"90s", `invalid duration "90s"`},
		{"1d1d", `the unit d appears twice`},
		{"7d-1h", `duration "7d-1h" is negative`},
		{"1000001y", `duration "1000001y" is too long`},
		{"99999999999999999999d", `duration "99999999999999999999d" is too long`},
	}
	for _, tt := range bad {
		got, err := ParseDuration(tt.in)
		if err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", tt.in, got)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseDuration(%q) error = %q, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

// Before counts on the calendar as restic's Duration.PastTime does (AddDate, then hours).
func TestDurationBefore(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		d    Duration
		from time.Time
		want time.Time
	}{
		{Duration{Months: 6}, time.Date(2026, 8, 31, 12, 0, 0, 0, time.UTC), time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC)}, // 31 February is 3 March
		{Duration{Years: 1}, time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)},
		{Duration{Days: 1}, time.Date(2026, 3, 29, 12, 0, 0, 0, berlin), time.Date(2026, 3, 28, 12, 0, 0, 0, berlin)}, // 23 hours across DST
		{Duration{Days: 1, Hours: 12}, time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		if got := tt.d.Before(tt.from); !got.Equal(tt.want) {
			t.Errorf("%s before %v = %v, want %v", FormatDuration(tt.d), tt.from, got, tt.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in          Duration
		want, words string
	}{
		{Duration{}, "0h", "0 hours"},
		{Duration{Days: 7}, "7d", "7 days"},
		{Duration{Months: 6}, "6m", "6 months"},
		{Duration{Years: 1, Months: 1, Days: 1, Hours: 1}, "1y1m1d1h", "1 year 1 month 1 day 1 hour"},
		{Duration{Hours: 36}, "36h", "36 hours"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.in); got != tt.want {
			t.Errorf("FormatDuration(%+v) = %q, want %q", tt.in, got, tt.want)
		}
		if got := tt.in.Words(); got != tt.words {
			t.Errorf("%+v.Words() = %q, want %q", tt.in, got, tt.words)
		}
		if back, err := ParseDuration(FormatDuration(tt.in)); err != nil || back != tt.in {
			t.Errorf("ParseDuration(FormatDuration(%+v)) = %v, %v", tt.in, back, err)
		}
	}
}

// A policy is stored as JSON: the duration as restic writes it, and a number of nanoseconds as
// stored before durations were calendar ones is still read (rounded up to whole hours).
func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(Policy{KeepWithin: Duration{Months: 6}, KeepLast: 1})
	if err != nil || string(b) != `{"keep_within":"6m","keep_last":1}` {
		t.Fatalf("marshal = %s, %v", b, err)
	}
	if b, _ := json.Marshal(Policy{KeepLast: 1}); string(b) != `{"keep_last":1}` {
		t.Fatalf("marshal without keep-within = %s", b)
	}
	for in, want := range map[string]Duration{
		`"1y6m"`:              {Years: 1, Months: 6},
		`604800000000000`:     {Days: 7},
		`5400000000000`:       {Hours: 2},
		`9223372036854775807`: {Days: 106752},
		`"0h"`:                {},
	} {
		var p struct {
			D Duration `json:"d"`
		}
		if err := json.Unmarshal([]byte(`{"d":`+in+`}`), &p); err != nil || p.D != want {
			t.Errorf("unmarshal %s = %+v, %v; want %+v", in, p.D, err, want)
		}
	}
	for _, in := range []string{`"2w"`, `-1`, `true`} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("unmarshal %s = %+v, want an error", in, d)
		}
	}
}
