package retention

import (
	"strings"
	"testing"
)

func TestChangeApply(t *testing.T) {
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }
	berlin := Policy{KeepDaily: 7, KeepWeekly: 4, TimeZone: "Europe/Berlin"}
	for _, c := range []struct {
		name   string
		base   Policy
		change Change
		want   Policy
		err    string
	}{
		{name: "nothing changes", base: berlin, want: berlin},
		{name: "a preset replaces the rules and keeps the zone", base: berlin, change: Change{Preset: str("30d")},
			want: Policy{KeepWithin: Duration{Days: 30}, KeepLast: 1, TimeZone: "Europe/Berlin"}},
		{name: "a rule after a preset", base: berlin, change: Change{Preset: str("7d"), KeepLast: num(3)},
			want: Policy{KeepWithin: Duration{Days: 7}, KeepLast: 3, TimeZone: "Europe/Berlin"}},
		{name: "single rules", base: berlin, change: Change{KeepDaily: num(14), KeepMonthly: num(6), KeepYearly: num(2), KeepHourly: num(24)},
			want: Policy{KeepHourly: 24, KeepDaily: 14, KeepWeekly: 4, KeepMonthly: 6, KeepYearly: 2, TimeZone: "Europe/Berlin"}},
		{name: "a rule set to zero", base: berlin, change: Change{KeepWeekly: num(0)},
			want: Policy{KeepDaily: 7, TimeZone: "Europe/Berlin"}},
		{name: "keep-within as restic reads it", change: Change{KeepWithin: str("6m")},
			want: Policy{KeepWithin: Duration{Months: 6}}},
		{name: "the zone", base: berlin, change: Change{TimeZone: str("")},
			want: Policy{KeepDaily: 7, KeepWeekly: 4}},
		{name: "an unknown preset", change: Change{Preset: str("forever")}, err: `unknown retention preset "forever"`},
		{name: "a bad keep-within", change: Change{KeepWithin: str("7 fortnights")}, err: "Change.KeepWithin: "},
		{name: "a policy that keeps nothing", base: Policy{KeepLast: 1}, change: Change{KeepLast: num(0)}, err: "retention policy"},
		{name: "a negative rule", change: Change{KeepLast: num(-1)}, err: "Policy.KeepLast -1: give 0 or more"},
		{name: "an unknown zone", base: berlin, change: Change{TimeZone: str("Mars/Olympus")}, err: `time zone "Mars/Olympus" is unknown`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.change.Apply(c.base)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Apply = %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Apply = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}
