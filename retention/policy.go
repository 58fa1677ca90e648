// Package retention decides which snapshots of a backup job are kept and
// which may be deleted.
//
// It is pure computation: a Policy and a list of Snapshots go in, a Plan comes
// out, with one Decision and a one-line reason for every snapshot. Nothing
// here reads a database or calls an engine; applying a plan is the caller's
// business.
//
// The contract, which the tests try to break: a plan never deletes the newest
// snapshot in scope, a snapshot under legal hold or still immutable, a
// snapshot another one depends on, or anything outside the Scope; and New
// refuses a policy that is empty or invalid instead of treating it as "keep
// nothing". When in doubt a snapshot is kept: a wrong keep costs space, a
// wrong delete costs the backup.
//
// For the rules restic also has (keep-last, keep-hourly … keep-yearly, and
// keep-within measured from the newest snapshot) a plan keeps exactly what
// `restic forget` keeps: calendar buckets are filled newest first, a
// snapshot is kept by a bucket rule when its bucket differs from the bucket of
// the last snapshot that rule kept, weeks are ISO weeks (ISO year and week
// number), and keep-within keeps snapshots strictly newer than the reference
// time minus the duration. restic 0.16 and later also keep the oldest snapshot
// for a bucket rule that is not filled: Options.KeepOldestOfUnfilledRule, which
// the caller sets from the restic it runs (engine.ResticTraits). Unlike restic, calendar buckets are computed in the
// policy's time zone rather than in the zone each snapshot was recorded in.
package retention

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-backup/holdfast/setting"
)

// Policy says which snapshots to keep. Every rule that is zero is off; a
// policy whose rules are all off keeps nothing and is invalid.
type Policy struct {
	// KeepWithin keeps every snapshot younger than this, measured back on the
	// calendar from the plan's reference time (see WithinFrom), as restic does.
	KeepWithin Duration `json:"keep_within,omitzero"`
	// KeepLast keeps the n newest snapshots.
	KeepLast int `json:"keep_last,omitempty"`
	// KeepHourly … KeepYearly keep the newest snapshot of each of the n newest
	// hours, days, ISO weeks, months and years that have a snapshot.
	KeepHourly  int `json:"keep_hourly,omitempty"`
	KeepDaily   int `json:"keep_daily,omitempty"`
	KeepWeekly  int `json:"keep_weekly,omitempty"`
	KeepMonthly int `json:"keep_monthly,omitempty"`
	KeepYearly  int `json:"keep_yearly,omitempty"`
	// TimeZone is the IANA zone in which hours, days, weeks, months and years
	// begin; "" means UTC. Without it a backup at 00:30 in Berlin would belong
	// to the previous day.
	TimeZone string `json:"time_zone,omitempty"`
}

// IsZero reports whether no field of p is set.
func (p Policy) IsZero() bool { return p == Policy{} }

// Validate reports what is wrong with p, or nil. A policy must keep something,
// its numbers and its duration must not be negative, and its time zone must
// be a known IANA name.
func (p Policy) Validate() error {
	_, err := p.check()
	return err
}

// check validates p and returns its time zone, loaded once.
func (p Policy) check() (*time.Location, error) {
	keeps := !p.KeepWithin.IsZero()
	for _, r := range p.counts() {
		if r.n < 0 {
			return nil, fmt.Errorf("retention policy has %s %d: give 0 or more", setting.Render(r.name), r.n)
		}
		keeps = keeps || r.n > 0
	}
	if p.KeepWithin.negative() {
		return nil, setting.Errorf("retention policy has {Policy.KeepWithin} %s: give a positive duration such as 7d, or leave it out", FormatDuration(p.KeepWithin))
	}
	loc := time.UTC
	if p.TimeZone != "" {
		var err error
		// "Local" would mean a different zone on every host of a fleet.
		if p.TimeZone == "Local" {
			err = errors.New("not an IANA name")
		} else {
			loc, err = time.LoadLocation(p.TimeZone)
		}
		if err != nil {
			return nil, fmt.Errorf("retention policy time zone %q is unknown: give an IANA name such as Europe/Berlin, or leave it empty for UTC", p.TimeZone)
		}
	}
	if !keeps {
		return nil, setting.Errorf("retention policy keeps nothing: give at least one of {Policy.KeepLast}, {Policy.KeepWithin}, {Policy.KeepHourly}, {Policy.KeepDaily}, {Policy.KeepWeekly}, {Policy.KeepMonthly}, {Policy.KeepYearly}, or {Change.Preset}")
	}
	return loc, nil
}

type countRule struct {
	name string // a placeholder of package setting
	n    int
}

func (p Policy) counts() [6]countRule {
	return [6]countRule{
		{"{Policy.KeepLast}", p.KeepLast},
		{"{Policy.KeepHourly}", p.KeepHourly},
		{"{Policy.KeepDaily}", p.KeepDaily},
		{"{Policy.KeepWeekly}", p.KeepWeekly},
		{"{Policy.KeepMonthly}", p.KeepMonthly},
		{"{Policy.KeepYearly}", p.KeepYearly},
	}
}

// Describe says in one English sentence what p keeps.
func (p Policy) Describe() string {
	if err := p.Validate(); err != nil {
		return "Invalid: " + err.Error() + "."
	}
	var parts []string
	if !p.KeepWithin.IsZero() {
		parts = append(parts, "every snapshot from the last "+p.KeepWithin.Words())
	}
	if p.KeepLast > 0 {
		parts = append(parts, "the newest "+strconv.Itoa(p.KeepLast))
	}
	var buckets []string
	for _, b := range []struct {
		n          int
		one, other string
	}{
		{p.KeepHourly, "hour", "hours"},
		{p.KeepDaily, "day", "days"},
		{p.KeepWeekly, "ISO week", "ISO weeks"},
		{p.KeepMonthly, "month", "months"},
		{p.KeepYearly, "year", "years"},
	} {
		if b.n > 0 {
			buckets = append(buckets, plural(b.n, b.one, b.other))
		}
	}
	if len(buckets) > 0 {
		parts = append(parts, "the newest of each of "+joinAnd(buckets, false))
	}
	s := "Keeps " + joinAnd(parts, true)
	if len(buckets) > 0 {
		zone := p.TimeZone
		if zone == "" {
			zone = "UTC"
		}
		s += " (calendar in " + zone + ")"
	}
	return s + "."
}

// joinAnd joins "a", "b", "c" as "a, b and c", or "a, b, and c" with the
// serial comma, which keeps lists that contain lists readable.
func joinAnd(s []string, serial bool) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	case 2:
		return s[0] + " and " + s[1]
	}
	last := " and "
	if serial {
		last = ", and "
	}
	return strings.Join(s[:len(s)-1], ", ") + last + s[len(s)-1]
}

func plural(n int, one, other string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + other
}

// The presets. Every one of them also keeps the newest snapshot: without
// that, "7d" on a host that has not backed up for three weeks would delete
// every snapshot it has, exactly when they are needed.
var presets = []struct {
	name string
	p    Policy
}{
	{"7d", Policy{KeepWithin: Duration{Days: 7}, KeepLast: 1}},
	{"14d", Policy{KeepWithin: Duration{Days: 14}, KeepLast: 1}},
	{"30d", Policy{KeepWithin: Duration{Days: 30}, KeepLast: 1}},
	{"90d", Policy{KeepWithin: Duration{Days: 90}, KeepLast: 1}},
	{"1y", Policy{KeepWithin: Duration{Years: 1}, KeepLast: 1}},
	{"gfs", Policy{KeepLast: 1, KeepDaily: 30, KeepWeekly: 8, KeepMonthly: 12, KeepYearly: 7}},
}

// Preset returns the named preset policy: 7d, 14d, 30d, 90d and 1y keep
// everything that young, gfs keeps 30 daily, 8 weekly, 12 monthly and 7
// yearly snapshots. Each also keeps the newest snapshot. Names are matched
// without regard to case.
func Preset(name string) (Policy, error) {
	for _, pr := range presets {
		if strings.EqualFold(pr.name, name) {
			return pr.p, nil
		}
	}
	return Policy{}, fmt.Errorf("unknown retention preset %q: use one of %s", name, strings.Join(PresetNames(), ", "))
}

// PresetNames returns the names Preset knows, in display order.
func PresetNames() []string {
	names := make([]string, len(presets))
	for i, pr := range presets {
		names[i] = pr.name
	}
	return names
}
