package retention

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	good := []struct {
		in   string
		want time.Duration
	}{
		{"36h", 36 * time.Hour},
		{"90m", 90 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"1.5h", 90 * time.Minute},
		{"500ms", 500 * time.Millisecond},
		{"7d", 7 * day},
		{"2w", 14 * day},
		{"1w3d12h", 10*day + 12*time.Hour},
		{"3d1w", 10 * day},
		{"1d12h30m15s", day + 12*time.Hour + 30*time.Minute + 15*time.Second},
		{"0", 0},
		{"0d", 0},
		{"0s", 0},
		{"365d", 365 * day},
		{"15250w", 15250 * week},
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
		{"-1h", `duration "-1h" is negative`},
		{"+7d", `invalid duration "+7d"`},
		{"7", `invalid duration "7"`},
		{"d", `invalid duration "d"`},
		{"7x", `invalid duration "7x"`},
		{"7 d", `invalid duration "7 d"`},
		{" 7d", `invalid duration " 7d"`},
		{"7D", `invalid duration "7D"`},
		{"1.5d", `invalid duration "1.5d": days and weeks must be whole numbers`},
		{"1.w", `invalid duration "1.w": days and weeks must be whole numbers`},
		{"7d-1h", `invalid duration "7d-1h"`},
		{"1y", `invalid duration "1y"`},
		{"..h", `invalid duration "..h"`},
		{"99999999999999999999d", `duration "99999999999999999999d" is too long`},
		{"15251w", `duration "15251w" is too long`},
		{"3000000h", `duration "3000000h" is too long`},
		{"106751d23h47m16s1s", `duration "106751d23h47m16s1s" is too long`},
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

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{7 * day, "7d"},
		{14 * day, "2w"},
		{21 * day, "3w"},
		{30 * day, "30d"},
		{36 * time.Hour, "1d12h"},
		{12 * time.Hour, "12h"},
		{90 * time.Minute, "1h30m"},
		{day + 1500*time.Millisecond, "1d1.5s"},
		{time.Minute + 1, "1m1ns"},
		{-7 * day, "-7d"},
		{math.MaxInt64, "106751d23h47m16.854775807s"},
		{math.MinInt64, "-106751d23h47m16.854775808s"},
	}
	for _, tt := range tests {
		got := FormatDuration(tt.in)
		if got != tt.want {
			t.Errorf("FormatDuration(%d) = %q, want %q", int64(tt.in), got, tt.want)
		}
		if tt.in >= 0 {
			if back, err := ParseDuration(got); err != nil || back != tt.in {
				t.Errorf("ParseDuration(FormatDuration(%d)) = %v, %v", int64(tt.in), back, err)
			}
		}
	}
}
