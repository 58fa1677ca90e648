package retention

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
)

// checkPlan checks what must hold for every plan New makes for these
// arguments, whatever the policy, and returns the first violation.
func checkPlan(p Policy, snaps []Snapshot, opt Options, plan Plan) error {
	at := opt.At
	if at.IsZero() {
		at = plan.At
	}
	if len(plan.Decisions) != len(snaps) {
		return fmt.Errorf("%d decisions for %d snapshots", len(plan.Decisions), len(snaps))
	}
	byID := make(map[string]*Snapshot, len(snaps))
	for i := range snaps {
		byID[snaps[i].ID] = &snaps[i]
	}
	seen := make(map[string]bool, len(snaps))
	var kept, deletable, protected, outside int
	var bytes int64
	var newest *Snapshot
	for i, d := range plan.Decisions {
		s := byID[d.SnapshotID]
		if s == nil || seen[d.SnapshotID] {
			return fmt.Errorf("decision %d for %q is not one of the input snapshots, or repeats one", i, d.SnapshotID)
		}
		seen[d.SnapshotID] = true
		if !d.Time.Equal(s.Time) || d.Bytes != s.Bytes {
			return fmt.Errorf("decision for %s has time %v bytes %d, snapshot has %v %d", s.ID, d.Time, d.Bytes, s.Time, s.Bytes)
		}
		if i > 0 {
			prev := plan.Decisions[i-1]
			if c := prev.Time.Compare(d.Time); c < 0 || c == 0 && prev.SnapshotID > d.SnapshotID {
				return fmt.Errorf("decisions %d and %d are not newest first, ties by id", i-1, i)
			}
		}
		if d.Reason == "" || strings.Contains(d.Reason, "\n") {
			return fmt.Errorf("decision for %s has reason %q, want one non-empty line", s.ID, d.Reason)
		}
		in := inScope(s, opt.Scope)
		if d.OutsideScope == in {
			return fmt.Errorf("%s: outside scope = %v, but the scope says in = %v", s.ID, d.OutsideScope, in)
		}
		switch {
		case !in:
			outside++
			if !d.Keep || d.Protected {
				return fmt.Errorf("%s is outside the scope but keep=%v protected=%v", s.ID, d.Keep, d.Protected)
			}
			continue
		case newest == nil:
			newest = s
			if !d.Keep {
				return fmt.Errorf("the newest in-scope snapshot %s is deleted", s.ID)
			}
		}
		if !d.Keep && (s.LegalHold || s.DependedOn || s.ImmutableUntil != nil && s.ImmutableUntil.After(at)) {
			return fmt.Errorf("protected snapshot %s is deleted (%q)", s.ID, d.Reason)
		}
		if d.Protected && !d.Keep {
			return fmt.Errorf("%s is protected but deleted", s.ID)
		}
		if d.Keep {
			kept++
		} else {
			deletable++
			bytes += max(s.Bytes, 0)
		}
		if d.Protected {
			protected++
		}
	}
	if plan.Kept != kept || plan.Deletable != deletable || plan.Protected != protected || plan.OutsideScope != outside || plan.ReclaimableBytes != bytes {
		return fmt.Errorf("plan counts kept %d deletable %d protected %d outside %d bytes %d; decisions say %d %d %d %d %d",
			plan.Kept, plan.Deletable, plan.Protected, plan.OutsideScope, plan.ReclaimableBytes, kept, deletable, protected, outside, bytes)
	}
	var del []string
	for _, d := range plan.Decisions {
		if !d.Keep {
			del = append(del, d.SnapshotID)
		}
	}
	if got := plan.DeleteIDs(); !slices.Equal(got, del) {
		return fmt.Errorf("DeleteIDs() = %q, want %q", got, del)
	}

	// Planning again on what the plan keeps deletes nothing more.
	var rest []Snapshot
	for _, d := range plan.Decisions {
		if d.Keep {
			rest = append(rest, *byID[d.SnapshotID])
		}
	}
	opt.At = at
	again, err := New(p, rest, opt)
	if err != nil {
		return fmt.Errorf("planning again on the kept snapshots: %v", err)
	}
	if again.Deletable != 0 {
		return fmt.Errorf("planning again on the %d kept snapshots deletes %q", len(rest), again.DeleteIDs())
	}
	return nil
}

// inScope is the scope rule, written independently of New.
func inScope(s *Snapshot, sc Scope) bool {
	if sc.Job != "" && !slices.Contains(s.Tags, "holdfast-job="+sc.Job) {
		return false
	}
	if sc.Host != "" && s.Host != sc.Host {
		return false
	}
	for _, t := range sc.Tags {
		if !slices.Contains(s.Tags, t) {
			return false
		}
	}
	return true
}

// referenceKeep is a deliberately plain second implementation of the keep
// rules (restic's algorithm, with string bucket keys): it returns the ids the
// plan must keep among the in-scope snapshots.
func referenceKeep(p Policy, snaps []Snapshot, opt Options) map[string]bool {
	loc := time.UTC
	if p.TimeZone != "" {
		loc, _ = time.LoadLocation(p.TimeZone)
	}
	var list []Snapshot
	for _, s := range snaps {
		if inScope(&s, opt.Scope) {
			list = append(list, s)
		}
	}
	slices.SortStableFunc(list, func(a, b Snapshot) int {
		if a.Time.Equal(b.Time) {
			return strings.Compare(a.ID, b.ID)
		}
		if a.Time.After(b.Time) {
			return -1
		}
		return 1
	})
	keep := map[string]bool{}
	if len(list) == 0 {
		return keep
	}
	keep[list[0].ID] = true
	for i := 0; i < p.KeepLast && i < len(list); i++ {
		keep[list[i].ID] = true
	}
	if !p.KeepWithin.IsZero() {
		var ref *time.Time
		if opt.WithinFrom == WithinFromNow {
			ref = &opt.At
		} else {
			for i := range list {
				if !list[i].Time.After(opt.At) {
					ref = &list[i].Time
					break
				}
			}
		}
		for _, s := range list {
			if ref == nil || s.Time.After(p.KeepWithin.Before(*ref)) {
				keep[s.ID] = true
			}
		}
	}
	for _, r := range []struct {
		n   int
		key func(time.Time) string
	}{
		{p.KeepHourly, func(t time.Time) string { return t.Format("2006-01-02 15") }},
		{p.KeepDaily, func(t time.Time) string { return t.Format("2006-01-02") }},
		{p.KeepWeekly, func(t time.Time) string { y, w := t.ISOWeek(); return fmt.Sprint(y, "-", w) }},
		{p.KeepMonthly, func(t time.Time) string { return t.Format("2006-01") }},
		{p.KeepYearly, func(t time.Time) string { return strconv.Itoa(t.Year()) }},
	} {
		last, used := "", 0
		for _, s := range list {
			if used == r.n {
				break
			}
			if k := r.key(s.Time.In(loc)); used == 0 || k != last {
				keep[s.ID] = true
				last = k
				used++
			}
		}
	}
	for _, s := range list {
		if s.DependedOn || s.LegalHold || s.ImmutableUntil != nil && s.ImmutableUntil.After(opt.At) {
			keep[s.ID] = true
		}
	}
	return keep
}

var zones = []string{"", "UTC", "Europe/Berlin", "America/New_York", "Pacific/Apia", "Australia/Lord_Howe", "Asia/Kathmandu", "America/Havana"}

// randomCase makes a random policy, snapshot set and options. Some policies
// are invalid; some snapshots share a time, lie after At, or are out of scope.
func randomCase(rng *rand.Rand) (Policy, []Snapshot, Options) {
	count := func() int {
		if rng.IntN(2) == 0 {
			return 0
		}
		return 1 + rng.IntN(12)
	}
	p := Policy{
		KeepLast: count(), KeepHourly: count(), KeepDaily: count(), KeepWeekly: count(),
		KeepMonthly: count(), KeepYearly: count(), TimeZone: zones[rng.IntN(len(zones))],
	}
	if rng.IntN(2) == 0 {
		p.KeepWithin = Duration{Months: rng.IntN(3), Days: rng.IntN(30), Hours: rng.IntN(24)}
		if p.KeepWithin.IsZero() {
			p.KeepWithin.Hours = 1
		}
	}
	if rng.IntN(40) == 0 {
		p.KeepDaily = -1
	}
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(400 * day))))
	opt := Options{At: at, WithinFrom: WithinFrom(rng.IntN(2))}
	switch rng.IntN(4) {
	case 0:
		opt.Scope = Scope{Job: "a"}
	case 1:
		opt.Scope = Scope{Job: "a", Host: "h1"}
	case 2:
		opt.Scope = Scope{Job: "a", Tags: []string{"x"}}
	}

	n := rng.IntN(80)
	spread := []time.Duration{6 * time.Hour, 3 * day, 60 * day, 3 * 365 * day}[rng.IntN(4)]
	snaps := make([]Snapshot, n)
	for i := range snaps {
		s := &snaps[i]
		s.ID = fmt.Sprintf("%08x", rng.Uint32())
		if i > 0 && rng.IntN(10) == 0 {
			s.Time = snaps[rng.IntN(i)].Time
		} else {
			s.Time = at.Add(-time.Duration(rng.Int64N(int64(spread)))).Truncate(time.Duration(1+rng.IntN(3600)) * time.Second)
		}
		if rng.IntN(30) == 0 {
			s.Time = at.Add(time.Duration(rng.Int64N(int64(day))))
		}
		s.Host = "h1"
		if rng.IntN(8) == 0 {
			s.Host = "h2"
		}
		s.Tags = []string{engine.JobTagPrefix + "a"}
		if rng.IntN(8) == 0 {
			s.Tags = []string{engine.JobTagPrefix + "b"}
		}
		if rng.IntN(3) > 0 {
			s.Tags = append(s.Tags, "x")
		}
		s.Bytes = rng.Int64N(1 << 30)
		s.LegalHold = rng.IntN(15) == 0
		s.DependedOn = rng.IntN(15) == 0
		if rng.IntN(10) == 0 {
			u := at.Add(time.Duration(rng.Int64N(int64(20*day))) - 10*day)
			s.ImmutableUntil = &u
		}
	}
	for i := range snaps { // ids must be unique
		snaps[i].ID += strconv.Itoa(i)
	}
	return p, snaps, opt
}

func TestProperties(t *testing.T) {
	const seed = 20261128
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range 500 {
		p, snaps, opt := randomCase(rng)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, case %d, policy %+v, options %+v, %d snapshots: %s", seed, i, p, opt, len(snaps), fmt.Sprintf(format, args...))
		}
		plan, err := New(p, snaps, opt)
		if verr := p.Validate(); verr != nil {
			if err == nil {
				fail("New accepted an invalid policy (%v)", verr)
			}
			continue
		}
		if err != nil {
			fail("New: %v", err)
		}
		if err := checkPlan(p, snaps, opt, plan); err != nil {
			fail("%v", err)
		}
		want := referenceKeep(p, snaps, opt)
		for _, d := range plan.Decisions {
			if !d.OutsideScope && d.Keep != want[d.SnapshotID] {
				fail("%s at %v: keep=%v (%s), the reference implementation says %v", d.SnapshotID, d.Time, d.Keep, d.Reason, want[d.SnapshotID])
			}
		}
	}
}
