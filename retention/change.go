package retention

import "github.com/holdfast-backup/holdfast/setting"

// Change is an operator's change to a policy; a nil field leaves its setting as it is. A preset
// replaces the policy's rules (its time zone stays); then each rule given replaces that rule.
type Change struct {
	Preset                                                               *string
	KeepLast, KeepHourly, KeepDaily, KeepWeekly, KeepMonthly, KeepYearly *int
	KeepWithin                                                           *string // as restic reads it: 36h, 7d, 6m, 1y
	TimeZone                                                             *string
}

// Apply returns base changed by c, validated.
func (c Change) Apply(base Policy) (Policy, error) {
	p := base
	if c.Preset != nil {
		preset, err := Preset(*c.Preset)
		if err != nil {
			return p, err
		}
		preset.TimeZone = p.TimeZone
		p = preset
	}
	for _, r := range []struct {
		to   *int
		from *int
	}{
		{&p.KeepLast, c.KeepLast}, {&p.KeepHourly, c.KeepHourly}, {&p.KeepDaily, c.KeepDaily},
		{&p.KeepWeekly, c.KeepWeekly}, {&p.KeepMonthly, c.KeepMonthly}, {&p.KeepYearly, c.KeepYearly},
	} {
		if r.from != nil {
			*r.to = *r.from
		}
	}
	if c.TimeZone != nil {
		p.TimeZone = *c.TimeZone
	}
	if c.KeepWithin != nil {
		d, err := ParseDuration(*c.KeepWithin)
		if err != nil {
			return p, setting.Errorf("{Change.KeepWithin}: %w", err)
		}
		p.KeepWithin = d
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}
