package retention

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
)

// ts parses an RFC 3339 time.
func ts(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// snapsAt returns in-scope snapshots of job a on host h1, named by their
// times, so expectations can name what is kept.
func snapsAt(t testing.TB, times ...string) []Snapshot {
	t.Helper()
	s := make([]Snapshot, len(times))
	for i, v := range times {
		s[i] = Snapshot{ID: v, Time: ts(t, v), Host: "h1", Tags: []string{engine.JobTagPrefix + "a"}}
	}
	return s
}

func keptIDs(p Plan) []string {
	var ids []string
	for _, d := range p.Decisions {
		if d.Keep {
			ids = append(ids, d.SnapshotID)
		}
	}
	return ids
}

func decision(p Plan, id string) Decision {
	for _, d := range p.Decisions {
		if d.SnapshotID == id {
			return d
		}
	}
	return Decision{}
}

func TestNewRules(t *testing.T) {
	tests := []struct {
		name    string
		p       Policy
		at      string
		from    WithinFrom
		times   []string
		keep    []string          // ids kept, newest first
		reasons map[string]string // id → exact reason
	}{
		{
			name:  "keep last",
			p:     Policy{KeepLast: 3},
			times: []string{"2026-11-01T10:00:00Z", "2026-11-02T10:00:00Z", "2026-11-03T10:00:00Z", "2026-11-04T10:00:00Z", "2026-11-05T10:00:00Z"},
			keep:  []string{"2026-11-05T10:00:00Z", "2026-11-04T10:00:00Z", "2026-11-03T10:00:00Z"},
			reasons: map[string]string{
				"2026-11-04T10:00:00Z": "one of the last 3 (2/3)",
				"2026-11-02T10:00:00Z": "no rule keeps it",
			},
		},
		{
			name:  "keep last more than there are",
			p:     Policy{KeepLast: 10},
			times: []string{"2026-11-01T10:00:00Z", "2026-11-02T10:00:00Z"},
			keep:  []string{"2026-11-02T10:00:00Z", "2026-11-01T10:00:00Z"},
		},
		{
			name: "within from now is strict",
			p:    Policy{KeepWithin: Duration{Days: 7}},
			at:   "2026-11-28T12:00:00Z",
			// exactly 7d before At is not "within", as in restic
			times: []string{"2026-11-27T12:00:00Z", "2026-11-21T12:00:01Z", "2026-11-21T12:00:00Z", "2026-11-20T12:00:00Z"},
			keep:  []string{"2026-11-27T12:00:00Z", "2026-11-21T12:00:01Z"},
			reasons: map[string]string{
				"2026-11-21T12:00:01Z": "within 7d of the plan time 2026-11-28T12:00:00Z",
			},
		},
		{
			name:  "within from latest",
			p:     Policy{KeepWithin: Duration{Days: 2}},
			at:    "2026-11-28T12:00:00Z",
			from:  WithinFromLatest,
			times: []string{"2026-11-20T12:00:00Z", "2026-11-18T12:00:01Z", "2026-11-18T12:00:00Z"},
			keep:  []string{"2026-11-20T12:00:00Z", "2026-11-18T12:00:01Z"},
			reasons: map[string]string{
				"2026-11-20T12:00:00Z": "within 2d of the newest snapshot 2026-11-20T12:00:00Z",
			},
		},
		{
			name:  "within from latest ignores snapshots after the plan time",
			p:     Policy{KeepWithin: Duration{Days: 1}},
			at:    "2026-11-28T12:00:00Z",
			from:  WithinFromLatest,
			times: []string{"2026-12-30T00:00:00Z", "2026-11-28T00:00:00Z", "2026-11-27T00:00:01Z", "2026-11-26T00:00:00Z"},
			keep:  []string{"2026-12-30T00:00:00Z", "2026-11-28T00:00:00Z", "2026-11-27T00:00:01Z"},
		},
		{
			name:  "within from latest with every snapshot after the plan time keeps all",
			p:     Policy{KeepWithin: Duration{Days: 1}},
			at:    "2026-11-28T12:00:00Z",
			from:  WithinFromLatest,
			times: []string{"2026-12-30T00:00:00Z", "2026-12-01T00:00:00Z"},
			keep:  []string{"2026-12-30T00:00:00Z", "2026-12-01T00:00:00Z"},
		},
		{
			name:  "hourly",
			p:     Policy{KeepHourly: 2},
			times: []string{"2026-11-28T10:05:00Z", "2026-11-28T10:55:00Z", "2026-11-28T09:59:59Z", "2026-11-28T09:00:00Z", "2026-11-28T07:30:00Z"},
			keep:  []string{"2026-11-28T10:55:00Z", "2026-11-28T09:59:59Z"},
			reasons: map[string]string{
				"2026-11-28T10:55:00Z": "newest of its hour 2026-11-28 10:00 (1/2)",
				"2026-11-28T09:59:59Z": "newest of its hour 2026-11-28 09:00 (2/2)",
			},
		},
		{
			name: "daily skips days without snapshots",
			p:    Policy{KeepDaily: 3},
			times: []string{
				"2026-11-28T23:59:59Z", "2026-11-28T00:00:00Z", "2026-11-27T12:00:00Z",
				"2026-11-20T08:00:00Z", "2026-11-20T07:00:00Z", "2026-11-19T08:00:00Z",
			},
			keep: []string{"2026-11-28T23:59:59Z", "2026-11-27T12:00:00Z", "2026-11-20T08:00:00Z"},
			reasons: map[string]string{
				"2026-11-20T08:00:00Z": "newest of its day 2026-11-20 (3/3)",
			},
		},
		{
			name: "weekly across the 2020/2021 boundary: Dec 28 2020 to Jan 3 2021 is 2020-W53",
			p:    Policy{KeepWeekly: 10},
			times: []string{
				"2021-01-04T10:00:00Z", "2021-01-03T10:00:00Z", "2021-01-01T10:00:00Z",
				"2020-12-31T10:00:00Z", "2020-12-30T10:00:00Z", "2020-12-27T10:00:00Z",
			},
			keep: []string{"2021-01-04T10:00:00Z", "2021-01-03T10:00:00Z", "2020-12-27T10:00:00Z"},
			reasons: map[string]string{
				"2021-01-04T10:00:00Z": "newest of its ISO week 2021-W01 (1/10)",
				"2021-01-03T10:00:00Z": "newest of its ISO week 2020-W53 (2/10)",
				"2020-12-27T10:00:00Z": "newest of its ISO week 2020-W52 (3/10)",
			},
		},
		{
			name:  "weekly: Dec 30 2024 is 2025-W01",
			p:     Policy{KeepWeekly: 2},
			times: []string{"2025-01-02T10:00:00Z", "2024-12-30T10:00:00Z", "2024-12-29T10:00:00Z"},
			keep:  []string{"2025-01-02T10:00:00Z", "2024-12-29T10:00:00Z"},
			reasons: map[string]string{
				"2025-01-02T10:00:00Z": "newest of its ISO week 2025-W01 (1/2)",
				"2024-12-29T10:00:00Z": "newest of its ISO week 2024-W52 (2/2)",
			},
		},
		{
			name:  "monthly",
			p:     Policy{KeepMonthly: 2},
			times: []string{"2026-11-02T00:00:00Z", "2026-11-01T00:00:00Z", "2026-10-31T23:59:59Z", "2026-10-01T00:00:00Z", "2026-09-30T00:00:00Z"},
			keep:  []string{"2026-11-02T00:00:00Z", "2026-10-31T23:59:59Z"},
			reasons: map[string]string{
				"2026-10-31T23:59:59Z": "newest of its month 2026-10 (2/2)",
			},
		},
		{
			name:  "yearly",
			p:     Policy{KeepYearly: 3},
			times: []string{"2026-01-05T00:00:00Z", "2025-12-31T23:00:00Z", "2025-01-01T00:00:00Z", "2023-06-01T00:00:00Z", "2022-06-01T00:00:00Z"},
			keep:  []string{"2026-01-05T00:00:00Z", "2025-12-31T23:00:00Z", "2023-06-01T00:00:00Z"},
			reasons: map[string]string{
				"2023-06-01T00:00:00Z": "newest of its year 2023 (3/3)",
			},
		},
		{
			name: "combination: every rule uses its own count, even on snapshots others keep",
			p:    Policy{KeepLast: 2, KeepDaily: 2, KeepMonthly: 2},
			times: []string{
				"2026-11-28T12:00:00Z", "2026-11-28T06:00:00Z", "2026-11-27T12:00:00Z",
				"2026-11-26T12:00:00Z", "2026-10-15T12:00:00Z", "2026-10-01T12:00:00Z", "2026-09-01T12:00:00Z",
			},
			// last: 28T12, 28T06; daily: 28T12, 27T12; monthly: 28T12, 10-15
			keep: []string{"2026-11-28T12:00:00Z", "2026-11-28T06:00:00Z", "2026-11-27T12:00:00Z", "2026-10-15T12:00:00Z"},
			reasons: map[string]string{
				"2026-11-28T12:00:00Z": "one of the last 2 (1/2); also daily, monthly",
				"2026-11-27T12:00:00Z": "newest of its day 2026-11-27 (2/2)",
				"2026-10-15T12:00:00Z": "newest of its month 2026-10 (2/2)",
			},
		},
		{
			name: "time zone: 00:30 in Berlin belongs to its local day",
			p:    Policy{KeepDaily: 2, TimeZone: "Europe/Berlin"},
			// 23:30Z on the 27th is 00:30 on the 28th in Berlin (CET, +01:00)
			times: []string{"2026-11-27T23:30:00Z", "2026-11-27T22:00:00Z", "2026-11-27T10:00:00Z"},
			keep:  []string{"2026-11-27T23:30:00Z", "2026-11-27T22:00:00Z"},
			reasons: map[string]string{
				"2026-11-27T23:30:00Z": "newest of its day 2026-11-28 (1/2)",
				"2026-11-27T22:00:00Z": "newest of its day 2026-11-27 (2/2)",
			},
		},
		{
			name:  "the same snapshots in UTC fall on one day",
			p:     Policy{KeepDaily: 2},
			times: []string{"2026-11-27T23:30:00Z", "2026-11-27T22:00:00Z", "2026-11-27T10:00:00Z"},
			keep:  []string{"2026-11-27T23:30:00Z"},
		},
		{
			name: "time zone: the repeated hour when summer time ends is one hourly bucket",
			p:    Policy{KeepHourly: 2, TimeZone: "Europe/Berlin"},
			// 00:30Z is 02:30 CEST, 01:10Z is 02:10 CET: both local hour 02
			times: []string{"2026-10-25T01:10:00Z", "2026-10-25T00:30:00Z", "2026-10-24T23:30:00Z"},
			keep:  []string{"2026-10-25T01:10:00Z", "2026-10-24T23:30:00Z"},
			reasons: map[string]string{
				"2026-10-24T23:30:00Z": "newest of its hour 2026-10-25 01:00 (2/2)",
			},
		},
		{
			name: "outage: preset 7d after three weeks without a backup keeps the last one",
			p:    Policy{KeepWithin: Duration{Days: 7}, KeepLast: 1},
			at:   "2026-11-28T12:00:00Z",
			times: []string{
				"2026-11-07T02:00:00Z", "2026-11-06T02:00:00Z", "2026-11-05T02:00:00Z",
			},
			keep:    []string{"2026-11-07T02:00:00Z"},
			reasons: map[string]string{"2026-11-07T02:00:00Z": "one of the last 1 (1/1)"},
		},
		{
			name:    "the newest is kept even if no rule keeps it",
			p:       Policy{KeepWithin: Duration{Days: 1}},
			at:      "2026-11-28T12:00:00Z",
			times:   []string{"2026-11-07T02:00:00Z", "2026-11-06T02:00:00Z"},
			keep:    []string{"2026-11-07T02:00:00Z"},
			reasons: map[string]string{"2026-11-07T02:00:00Z": "newest snapshot of the job: always kept"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := "2026-12-31T00:00:00Z"
			if tt.at != "" {
				at = tt.at
			}
			snaps := snapsAt(t, tt.times...)
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(snaps), func(i, j int) { snaps[i], snaps[j] = snaps[j], snaps[i] })
			opt := Options{At: ts(t, at), WithinFrom: tt.from, Scope: Scope{Job: "a"}}
			plan, err := New(tt.p, snaps, opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := keptIDs(plan); !slices.Equal(got, tt.keep) {
				t.Errorf("kept %q\nwant %q", got, tt.keep)
				for _, d := range plan.Decisions {
					t.Logf("%s keep=%v %s", d.SnapshotID, d.Keep, d.Reason)
				}
			}
			for id, want := range tt.reasons {
				if got := decision(plan, id).Reason; got != want {
					t.Errorf("reason for %s = %q, want %q", id, got, want)
				}
			}
			if err := checkPlan(tt.p, snaps, opt, plan); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestNewEqualTimestamps(t *testing.T) {
	at := ts(t, "2026-11-28T12:00:00Z")
	mk := func(ids ...string) []Snapshot {
		s := make([]Snapshot, len(ids))
		for i, id := range ids {
			s[i] = Snapshot{ID: id, Time: at.Add(-time.Hour)}
		}
		return s
	}
	p := Policy{KeepLast: 2}
	first, err := New(p, mk("c", "a", "d", "b"), Options{At: at})
	if err != nil {
		t.Fatal(err)
	}
	if got := keptIDs(first); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("kept %q, want [a b]: equal times are ordered by id", got)
	}
	for _, order := range [][]string{{"a", "b", "c", "d"}, {"d", "c", "b", "a"}, {"b", "d", "a", "c"}} {
		again, err := New(p, mk(order...), Options{At: at})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, again) {
			t.Errorf("plan for input order %q differs from the plan for [c a d b]", order)
		}
	}
}

func TestNewProtections(t *testing.T) {
	at := ts(t, "2026-11-28T12:00:00Z")
	later, earlier := at.Add(time.Hour), at.Add(-time.Hour)
	snaps := []Snapshot{
		{ID: "newest", Time: at.Add(-1 * day)},
		{ID: "hold", Time: at.Add(-2 * day), LegalHold: true, Bytes: 100},
		{ID: "immutable", Time: at.Add(-3 * day), ImmutableUntil: &later, Bytes: 100},
		{ID: "expired", Time: at.Add(-4 * day), ImmutableUntil: &earlier, Bytes: 100},
		{ID: "expires-now", Time: at.Add(-5 * day), ImmutableUntil: &at, Bytes: 100},
		{ID: "parent", Time: at.Add(-6 * day), DependedOn: true, Bytes: 100},
		{ID: "parent-hold", Time: at.Add(-7 * day), DependedOn: true, LegalHold: true},
		{ID: "plain", Time: at.Add(-8 * day), Bytes: 1 << 30},
	}
	plan, err := New(Policy{KeepLast: 1}, snaps, Options{At: at})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		keep, protected bool
		reason          string
	}{
		"newest":      {true, false, "one of the last 1 (1/1)"},
		"hold":        {true, true, "would be deleted, but under legal hold"},
		"immutable":   {true, true, "would be deleted, but immutable until 2026-11-28T13:00:00Z"},
		"expired":     {false, false, "no rule keeps it"},
		"expires-now": {false, false, "no rule keeps it"},
		"parent":      {true, false, "another snapshot depends on it"},
		"parent-hold": {true, false, "another snapshot depends on it"},
		"plain":       {false, false, "no rule keeps it"},
	}
	for _, d := range plan.Decisions {
		w := want[d.SnapshotID]
		if d.Keep != w.keep || d.Protected != w.protected || d.Reason != w.reason {
			t.Errorf("%s: keep=%v protected=%v %q; want keep=%v protected=%v %q", d.SnapshotID, d.Keep, d.Protected, d.Reason, w.keep, w.protected, w.reason)
		}
	}
	if plan.Kept != 5 || plan.Deletable != 3 || plan.Protected != 2 || plan.ReclaimableBytes != 1<<30+200 {
		t.Errorf("kept %d deletable %d protected %d reclaimable %d; want 5 3 2 %d", plan.Kept, plan.Deletable, plan.Protected, plan.ReclaimableBytes, 1<<30+200)
	}
	if got, want := plan.DeleteIDs(), []string{"expired", "expires-now", "plain"}; !slices.Equal(got, want) {
		t.Errorf("DeleteIDs() = %q, want %q", got, want)
	}
	if want := "deletes 3 of 8 snapshots (2 more are protected); reclaims ~1.0 GiB"; plan.Summary != want {
		t.Errorf("summary %q, want %q", plan.Summary, want)
	}

	// A protected snapshot the rules keep anyway is not counted as protected.
	plan, err = New(Policy{KeepLast: 3}, snaps, Options{At: at})
	if err != nil {
		t.Fatal(err)
	}
	if d := decision(plan, "hold"); d.Protected || d.Reason != "one of the last 3 (2/3)" {
		t.Errorf("hold kept by keep-last: protected=%v %q", d.Protected, d.Reason)
	}
	if plan.Protected != 0 {
		t.Errorf("protected = %d, want 0", plan.Protected)
	}
}

func TestNewScope(t *testing.T) {
	at := ts(t, "2026-11-28T12:00:00Z")
	job := func(j string) string { return engine.JobTagPrefix + j }
	snaps := []Snapshot{
		{ID: "foreign-newest", Time: at.Add(-1 * time.Hour), Host: "h1", Tags: []string{job("b")}},
		{ID: "other-host", Time: at.Add(-2 * time.Hour), Host: "h2", Tags: []string{job("a"), "x"}},
		{ID: "untagged", Time: at.Add(-3 * time.Hour), Host: "h1"},
		{ID: "no-x", Time: at.Add(-4 * time.Hour), Host: "h1", Tags: []string{job("a")}},
		{ID: "a1", Time: at.Add(-5 * time.Hour), Host: "h1", Tags: []string{"x", job("a")}},
		{ID: "a2", Time: at.Add(-6 * time.Hour), Host: "h1", Tags: []string{job("a"), "x"}},
		{ID: "a3", Time: at.Add(-7 * time.Hour), Host: "h1", Tags: []string{job("a"), "x"}},
	}
	p := Policy{KeepWithin: Duration{Hours: 1}}
	tests := []struct {
		scope   Scope
		reasons map[string]string
		summary string
	}{
		{
			scope: Scope{Job: "a", Host: "h1", Tags: []string{"x"}},
			reasons: map[string]string{
				"foreign-newest": "outside scope: not tagged holdfast-job=a",
				"other-host":     `outside scope: made on host "h2", not "h1"`,
				"untagged":       "outside scope: not tagged holdfast-job=a",
				"no-x":           "outside scope: lacks tag x",
				"a1":             "newest snapshot of the job: always kept",
				"a2":             "no rule keeps it",
				"a3":             "no rule keeps it",
			},
			summary: "deletes 2 of 3 snapshots of job a (4 outside scope untouched); reclaimed space unknown",
		},
		{
			scope: Scope{Job: "a"},
			reasons: map[string]string{
				"foreign-newest": "outside scope: not tagged holdfast-job=a",
				"other-host":     "newest snapshot of the job: always kept",
				"untagged":       "outside scope: not tagged holdfast-job=a",
				"no-x":           "no rule keeps it",
			},
			summary: "deletes 4 of 5 snapshots of job a (2 outside scope untouched); reclaimed space unknown",
		},
		{
			scope: Scope{},
			reasons: map[string]string{
				"foreign-newest": "newest snapshot in scope: always kept",
				"untagged":       "no rule keeps it",
			},
			summary: "deletes 6 of 7 snapshots; reclaimed space unknown",
		},
		{
			scope:   Scope{Job: "c"},
			summary: "deletes nothing: job c has no snapshots in scope (7 outside scope untouched)",
		},
	}
	for _, tt := range tests {
		opt := Options{At: at, Scope: tt.scope}
		plan, err := New(p, snaps, opt)
		if err != nil {
			t.Fatal(err)
		}
		for id, want := range tt.reasons {
			if got := decision(plan, id).Reason; got != want {
				t.Errorf("scope %+v: %s reason %q, want %q", tt.scope, id, got, want)
			}
		}
		if plan.Summary != tt.summary {
			t.Errorf("scope %+v: summary %q, want %q", tt.scope, plan.Summary, tt.summary)
		}
		if err := checkPlan(p, snaps, opt, plan); err != nil {
			t.Error(err)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	at := ts(t, "2026-11-28T12:00:00Z")
	tests := []struct {
		name  string
		p     Policy
		snaps []Snapshot
		want  string
	}{
		{"empty policy", Policy{}, nil, "retention policy keeps nothing"},
		{"negative", Policy{KeepLast: 1, KeepDaily: -1}, nil, "Policy.KeepDaily -1"},
		{"empty id", Policy{KeepLast: 1}, []Snapshot{{ID: "a", Time: at}, {Time: at}}, "snapshot from 2026-11-28T12:00:00Z has no id"},
		{"duplicate id", Policy{KeepLast: 1}, []Snapshot{{ID: "a", Time: at}, {ID: "b", Time: at}, {ID: "a", Time: at.Add(-day)}}, `snapshot id "a" appears twice`},
	}
	for _, tt := range tests {
		plan, err := New(tt.p, tt.snaps, Options{At: at})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New() error = %v, want %q", tt.name, err, tt.want)
		}
		if len(plan.DeleteIDs()) != 0 {
			t.Errorf("%s: refused plan deletes %q", tt.name, plan.DeleteIDs())
		}
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		p       Plan
		job     string
		unknown bool
		want    string
	}{
		{Plan{Kept: 25, Deletable: 12, Protected: 3, OutsideScope: 2, ReclaimableBytes: 1288490189}, "web", false,
			"deletes 12 of 37 snapshots of job web (3 more are protected; 2 outside scope untouched); reclaims ~1.2 GiB"},
		{Plan{Kept: 39, Deletable: 1, Protected: 1, ReclaimableBytes: 512}, "web", true,
			"deletes 1 of 40 snapshots of job web (1 more is protected); reclaims at least ~512 B"},
		{Plan{Kept: 40}, "web", false, "deletes nothing: all 40 snapshots of job web are kept"},
		{Plan{Kept: 40, Protected: 3}, "", false, "deletes nothing: all 40 snapshots are kept (3 only because protected)"},
		{Plan{Kept: 1}, "web", false, "deletes nothing: the only snapshot of job web is kept"},
		{Plan{}, "", false, "deletes nothing: no snapshots in scope"},
		{Plan{Kept: 1, Deletable: 1}, "", true, "deletes 1 of 2 snapshots; reclaimed space unknown"},
	}
	for _, tt := range tests {
		if got := summary(tt.p, tt.job, tt.unknown); got != tt.want {
			t.Errorf("summary(%+v)\n got %q\nwant %q", tt.p, got, tt.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1288490189: "1.2 GiB",
		1 << 50: "1.0 PiB", 1<<63 - 1: "8.0 EiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestNewDefaultAt(t *testing.T) {
	before := time.Now()
	plan, err := New(Policy{KeepLast: 1}, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.At.Before(before) || plan.At.After(time.Now()) {
		t.Errorf("At = %v, want about now", plan.At)
	}
	if plan.Decisions == nil || len(plan.DeleteIDs()) != 0 {
		t.Errorf("empty plan: decisions %v, deletes %v", plan.Decisions, plan.DeleteIDs())
	}
	var refused *RefusedError
	if errors.As(Guardrail{}.Check(plan), &refused) {
		t.Error("guardrail refused an empty plan")
	}
}

// A calendar rule with fewer buckets than it keeps keeps the oldest snapshot too when the plan
// follows restic 0.16 and later, and says why; restic 0.14's rules delete it.
func TestNewKeepsOldestOfUnfilledRule(t *testing.T) {
	snaps := snapsAt(t, "2026-03-02T10:00:00Z", "2026-03-01T18:00:00Z", "2026-03-01T09:00:00Z")
	p := Policy{KeepDaily: 5}
	at := ts(t, "2026-03-03T00:00:00Z")
	for _, keepOldest := range []bool{false, true} {
		plan, err := New(p, snaps, Options{At: at, Scope: Scope{Job: "a"}, KeepOldestOfUnfilledRule: keepOldest})
		if err != nil {
			t.Fatal(err)
		}
		oldest := decision(plan, "2026-03-01T09:00:00Z")
		want := Decision{SnapshotID: oldest.SnapshotID, Time: oldest.Time, Reason: reasonDelete}
		if keepOldest {
			want.Keep, want.Reason = true, "oldest snapshot, kept because the daily rule is not filled (3/5), as restic forget 0.16 and later keep it"
		}
		if oldest != want {
			t.Errorf("KeepOldestOfUnfilledRule=%v: oldest %+v, want %+v", keepOldest, oldest, want)
		}
		if d := decision(plan, "2026-03-01T18:00:00Z"); !d.Keep || d.Reason != "newest of its day 2026-03-01 (2/5)" {
			t.Errorf("KeepOldestOfUnfilledRule=%v: the day's newest %+v", keepOldest, d)
		}
	}
	// A rule that is filled keeps nothing more.
	plan, err := New(Policy{KeepDaily: 2}, snaps, Options{At: at, Scope: Scope{Job: "a"}, KeepOldestOfUnfilledRule: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := decision(plan, "2026-03-01T09:00:00Z"); d.Keep {
		t.Errorf("a filled rule kept the oldest: %+v", d)
	}
}
