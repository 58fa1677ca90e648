package retention

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want string // substring of the error; "" = valid
	}{
		{"last", Policy{KeepLast: 1}, ""},
		{"within", Policy{KeepWithin: Duration{Hours: 1}}, ""},
		{"yearly only", Policy{KeepYearly: 3}, ""},
		{"zone", Policy{KeepDaily: 7, TimeZone: "Europe/Berlin"}, ""},
		{"utc", Policy{KeepDaily: 7, TimeZone: "UTC"}, ""},
		{"empty", Policy{}, "retention policy keeps nothing: give at least one of Policy.KeepLast, Policy.KeepWithin"},
		{"only a zone", Policy{TimeZone: "Europe/Berlin"}, "keeps nothing"},
		{"negative last", Policy{KeepLast: -1, KeepDaily: 3}, "Policy.KeepLast -1: give 0 or more"},
		{"negative hourly", Policy{KeepHourly: -2}, "Policy.KeepHourly -2"},
		{"negative daily", Policy{KeepDaily: -3}, "Policy.KeepDaily -3"},
		{"negative weekly", Policy{KeepWeekly: -4}, "Policy.KeepWeekly -4"},
		{"negative monthly", Policy{KeepMonthly: -5}, "Policy.KeepMonthly -5"},
		{"negative yearly", Policy{KeepYearly: -6}, "Policy.KeepYearly -6"},
		{"negative within", Policy{KeepWithin: Duration{Hours: -36}, KeepLast: 1}, "Policy.KeepWithin -36h: give a positive duration"},
		{"unknown zone", Policy{KeepLast: 1, TimeZone: "Mars/Olympus_Mons"}, `time zone "Mars/Olympus_Mons" is unknown: give an IANA name`},
		{"local zone", Policy{KeepLast: 1, TimeZone: "Local"}, `time zone "Local" is unknown`},
		{"path zone", Policy{KeepLast: 1, TimeZone: "../../etc/passwd"}, `time zone "../../etc/passwd" is unknown`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Validate() = %q, want it to contain %q", err, tt.want)
			}
			if err != nil {
				if msg := err.Error(); strings.Contains(msg, "\n") || msg != strings.ToLower(msg[:1])+msg[1:] {
					t.Errorf("error %q is not one lower-case line", msg)
				}
				if _, nerr := New(tt.p, []Snapshot{{ID: "a", Time: time.Now()}}, Options{}); nerr == nil {
					t.Errorf("New accepted the invalid policy")
				}
			}
		})
	}
}

func TestIsZero(t *testing.T) {
	if !(Policy{}).IsZero() {
		t.Error("Policy{}.IsZero() = false")
	}
	for _, p := range []Policy{{KeepLast: 1}, {TimeZone: "UTC"}, {KeepWithin: Duration{Hours: 1}}, {KeepYearly: -1}} {
		if p.IsZero() {
			t.Errorf("%+v.IsZero() = true", p)
		}
	}
}

func TestDescribe(t *testing.T) {
	gfs, _ := Preset("gfs")
	tests := []struct {
		p    Policy
		want string
	}{
		{Policy{KeepWithin: Duration{Days: 7}, KeepLast: 1, KeepDaily: 30, KeepWeekly: 8, KeepMonthly: 12, KeepYearly: 7, TimeZone: "Europe/Berlin"},
			"Keeps every snapshot from the last 7 days, the newest 1, and the newest of each of 30 days, 8 ISO weeks, 12 months and 7 years (calendar in Europe/Berlin)."},
		{Policy{KeepLast: 3}, "Keeps the newest 3."},
		{Policy{KeepWithin: Duration{Hours: 36}}, "Keeps every snapshot from the last 36 hours."},
		{Policy{KeepWithin: Duration{Days: 14}, KeepLast: 1}, "Keeps every snapshot from the last 14 days and the newest 1."},
		{Policy{KeepHourly: 1, KeepDaily: 1}, "Keeps the newest of each of 1 hour and 1 day (calendar in UTC)."},
		{gfs, "Keeps the newest 1 and the newest of each of 30 days, 8 ISO weeks, 12 months and 7 years (calendar in UTC)."},
		{Policy{}, "Invalid: retention policy keeps nothing: give at least one of Policy.KeepLast, Policy.KeepWithin, Policy.KeepHourly, Policy.KeepDaily, Policy.KeepWeekly, Policy.KeepMonthly, Policy.KeepYearly, or Change.Preset."},
	}
	for _, tt := range tests {
		if got := tt.p.Describe(); got != tt.want {
			t.Errorf("Describe(%+v)\n got %q\nwant %q", tt.p, got, tt.want)
		}
	}
}

func TestPreset(t *testing.T) {
	want := map[string]Policy{
		"7d":  {KeepWithin: Duration{Days: 7}, KeepLast: 1},
		"14d": {KeepWithin: Duration{Days: 14}, KeepLast: 1},
		"30d": {KeepWithin: Duration{Days: 30}, KeepLast: 1},
		"90d": {KeepWithin: Duration{Days: 90}, KeepLast: 1},
		"1y":  {KeepWithin: Duration{Years: 1}, KeepLast: 1},
		"gfs": {KeepLast: 1, KeepDaily: 30, KeepWeekly: 8, KeepMonthly: 12, KeepYearly: 7},
	}
	names := PresetNames()
	if len(names) != len(want) {
		t.Fatalf("PresetNames() = %v, want %d names", names, len(want))
	}
	for _, name := range names {
		p, err := Preset(name)
		if err != nil {
			t.Fatalf("Preset(%q): %v", name, err)
		}
		if p != want[name] {
			t.Errorf("Preset(%q) = %+v, want %+v", name, p, want[name])
		}
		if p.KeepLast != 1 {
			t.Errorf("Preset(%q) has KeepLast %d, want 1: every preset keeps the newest snapshot", name, p.KeepLast)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("Preset(%q) is invalid: %v", name, err)
		}
	}
	if p, err := Preset("GFS"); err != nil || p != want["gfs"] {
		t.Errorf("Preset(\"GFS\") = %+v, %v", p, err)
	}
	names[0] = "changed"
	if PresetNames()[0] != "7d" {
		t.Error("PresetNames returned its internal slice")
	}
	_, err := Preset("6d")
	if err == nil || err.Error() != `unknown retention preset "6d": use one of 7d, 14d, 30d, 90d, 1y, gfs` {
		t.Errorf("Preset(\"6d\") error = %v", err)
	}
}
