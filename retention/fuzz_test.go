package retention

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
)

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"7d", "2w", "36h", "1y6m", "6m", "1.5h", "-1d", "", "0", "1y", "99999999999999999999d", "1d1d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if s != "" && !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Errorf("ParseDuration(%q) error %q does not quote the input", s, err)
			}
			return
		}
		if d.negative() {
			t.Fatalf("ParseDuration(%q) = %v, negative", s, d)
		}
		back, err := ParseDuration(FormatDuration(d))
		if err != nil || back != d {
			t.Fatalf("ParseDuration(FormatDuration(%v)) = %v, %v", d, back, err)
		}
	})
}

// FuzzNew builds a policy from small numbers and one snapshot from every 6
// bytes of data: 4 bytes of minutes before the plan time (or after it, when
// the high bit is set), a flag byte and a scope byte.
func FuzzNew(f *testing.F) {
	f.Add(int8(1), int8(0), int8(30), int8(8), int8(12), int8(7), uint32(0), false, uint8(0), uint8(1),
		[]byte("\x00\x00\x00\x10\x00\x00\x00\x00\x05\xa0\x01\x00\x00\x01\x00\x00\x04\x00"))
	f.Add(int8(0), int8(3), int8(0), int8(2), int8(0), int8(0), uint32(24*7), true, uint8(2), uint8(3),
		[]byte("\x80\x00\x00\x10\x00\x00\x00\x00\x05\xa0\x02\x01\x00\x00\x05\xa0\x08\x02"))
	f.Fuzz(func(t *testing.T, last, hourly, daily, weekly, monthly, yearly int8, withinHours uint32, fromLatest bool, zone, scope uint8, data []byte) {
		p := Policy{
			KeepLast: int(last), KeepHourly: int(hourly), KeepDaily: int(daily), KeepWeekly: int(weekly),
			KeepMonthly: int(monthly), KeepYearly: int(yearly),
			KeepWithin: Duration{Hours: int(withinHours % 100000)},
			TimeZone:   zones[int(zone)%len(zones)],
		}
		at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
		opt := Options{At: at}
		if fromLatest {
			opt.WithinFrom = WithinFromLatest
		}
		switch scope % 4 {
		case 1:
			opt.Scope = Scope{Job: "a"}
		case 2:
			opt.Scope = Scope{Job: "a", Host: "h1"}
		case 3:
			opt.Scope = Scope{Job: "a", Tags: []string{"x"}}
		}
		var snaps []Snapshot
		dup := false
		for i := 0; len(data) >= 6 && i < 500; i, data = i+1, data[6:] {
			v := binary.BigEndian.Uint32(data)
			off := time.Duration(v&0x7fffffff) * time.Minute
			if v&0x80000000 != 0 {
				off = -off
			}
			flags, sc := data[4], data[5]
			s := Snapshot{ID: "s" + strconv.Itoa(i), Time: at.Add(-off), Host: "h1", Tags: []string{engine.JobTagPrefix + "a"}, Bytes: int64(flags)}
			if flags&0x80 != 0 && i > 0 {
				s.ID, dup = snaps[0].ID, true
			}
			s.LegalHold = flags&1 != 0
			s.DependedOn = flags&2 != 0
			if flags&4 != 0 {
				u := at.Add(time.Duration(flags>>3)*time.Hour - 8*time.Hour)
				s.ImmutableUntil = &u
			}
			if sc&1 != 0 {
				s.Host = "h2"
			}
			if sc&2 != 0 {
				s.Tags = []string{engine.JobTagPrefix + "b"}
			}
			if sc&4 != 0 {
				s.Tags = append(s.Tags, "x")
			}
			snaps = append(snaps, s)
		}
		plan, err := New(p, snaps, opt)
		if verr := p.Validate(); verr != nil || dup {
			if err == nil {
				t.Fatalf("New accepted an invalid policy or a repeated id")
			}
			return
		}
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if err := checkPlan(p, snaps, opt, plan); err != nil {
			t.Fatal(err)
		}
		want := referenceKeep(p, snaps, opt)
		for _, d := range plan.Decisions {
			if !d.OutsideScope && d.Keep != want[d.SnapshotID] {
				t.Fatalf("%s at %v: keep=%v (%s), the reference implementation says %v", d.SnapshotID, d.Time, d.Keep, d.Reason, want[d.SnapshotID])
			}
		}
	})
}

func FuzzParseResticSnapshots(f *testing.F) {
	f.Add([]byte(`[{"time":"2026-11-28T10:00:00.123456789+01:00","hostname":"h1","paths":["/srv"],"tags":["holdfast-job=a"],"id":"4c791751d38446ef","short_id":"4c791751"}]`))
	f.Add([]byte(`[{"group_key":{"hostname":"h1"},"snapshots":[]}]`))
	f.Add([]byte(`[null]`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		snaps, err := ParseResticSnapshots(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "read restic snapshots: ") {
				t.Errorf("error %q does not say what failed", err)
			}
			return
		}
		for _, s := range snaps {
			if s.ID == "" || s.Time.IsZero() {
				t.Fatalf("parsed a snapshot without id or time: %+v", s)
			}
		}
		opt := Options{At: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC), WithinFrom: WithinFromLatest}
		p := Policy{KeepWithin: Duration{Days: 1}, KeepDaily: 2}
		if plan, err := New(p, snaps, opt); err == nil {
			if err := checkPlan(p, snaps, opt, plan); err != nil {
				t.Fatal(err)
			}
		}
	})
}
