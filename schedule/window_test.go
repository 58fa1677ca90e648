package schedule

import (
	"strings"
	"testing"
	"time"
)

func TestWindows(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	parse := func(s string) Window {
		w, err := ParseWindow(s)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	sat := parse("Sat 01:00-05:00")
	night := parse("Mon-Fri 22:00-06:00")
	cases := []struct {
		at, want, held string
		windows        []Window
	}{
		{"2026-06-06 03:00", "2026-06-06 05:00", "Sat 01:00-05:00", []Window{sat}},       // a Saturday
		{"2026-06-06 05:00", "2026-06-06 05:00", "", []Window{sat}},                      // the end is allowed
		{"2026-06-07 03:00", "2026-06-07 03:00", "", []Window{sat}},                      // Sunday
		{"2026-06-05 23:30", "2026-06-06 06:00", "Mon-Fri 22:00-06:00", []Window{night}}, // Friday night into Saturday
		{"2026-06-06 05:30", "2026-06-06 06:00", "Mon-Fri 22:00-06:00", []Window{sat, night}},
		{"2026-06-06 02:00", "2026-06-06 06:00", "Mon-Fri 22:00-06:00", []Window{sat, night}}, // chained windows
	}
	for _, tc := range cases {
		start, _ := time.ParseInLocation("2006-01-02 15:04", tc.at, berlin)
		want, _ := time.ParseInLocation("2006-01-02 15:04", tc.want, berlin)
		got, held := Allowed(start, tc.windows, berlin)
		if !got.Equal(want) || held != tc.held {
			t.Errorf("Allowed(%s) = %s (%q), want %s (%q)", tc.at, got.In(berlin), held, tc.want, tc.held)
		}
	}
	for _, bad := range []string{"Sat", "Caturday 01:00-02:00", "Sat 1-2", "Sat 25:00-26:00", "Sat 01:00-01:00"} {
		if _, err := ParseWindow(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseWindow(%q) = %v, want an error quoting it", bad, err)
		}
	}
	// A list: every window, or the first that does not parse.
	if ws, err := ParseWindows([]string{"Sat 01:00-05:00", "Mon-Fri 22:00-06:00"}); err != nil || len(ws) != 2 || ws[1].String() != "Mon-Fri 22:00-06:00" {
		t.Errorf("ParseWindows = %v, %v", ws, err)
	}
	if ws, err := ParseWindows([]string{"Sat 01:00-05:00", "Sat 1-2", "Caturday 01:00-02:00"}); ws != nil || err == nil || !strings.Contains(err.Error(), `"Sat 1-2"`) {
		t.Errorf("ParseWindows with a bad one = %v, %v; want the first bad one's error", ws, err)
	}
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	prev := time.Duration(0)
	for n := 1; n <= 4; n++ {
		d := Backoff(10*time.Second, time.Hour, n)
		nominal := 10 * time.Second << (n - 1)
		if d < nominal*8/10 || d > nominal*12/10 || d <= prev*8/12 {
			t.Fatalf("retry %d: %s, want about %s", n, d, nominal)
		}
		prev = d
	}
	if d := Backoff(10*time.Second, time.Minute, 10); d > 72*time.Second {
		t.Fatalf("capped backoff = %s, want at most 1m+20%%", d)
	}
}
