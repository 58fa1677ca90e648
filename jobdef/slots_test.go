package jobdef

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
)

func TestNewDefaults(t *testing.T) {
	j := New("web")
	if j.Name != "web" || j.RetryBackoff != DefaultRetryBackoff || j.Retention.MaxDelete != retention.DefaultMaxDeleteShare ||
		j.Retention.MinKeep != retention.DefaultMinKeep {
		t.Errorf("New = %+v, want the stated defaults", j)
	}
}

func TestSlots(t *testing.T) {
	now := time.Date(2026, 3, 28, 12, 30, 0, 0, time.UTC)
	at := func(s string) *time.Time {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			panic(err)
		}
		return &t
	}
	old := at("2020-01-01T00:00:00Z")
	restic := func(sched, tz, prune string) model.Job {
		return model.Job{Name: "web", Engine: engine.NameRestic, Schedule: sched, TimeZone: tz, NextRunAt: old,
			Prune: model.PruneSettings{Schedule: prune, NextAt: old}}
	}
	for _, c := range []struct {
		name      string
		j         model.Job
		before    *model.Job
		next      *time.Time
		nextPrune *time.Time
		err       string
	}{
		{name: "new, manual: no slots", j: restic("", "", ""), next: nil, nextPrune: nil},
		{name: "new, daily in its zone", j: restic("0 2 * * *", "Europe/Berlin", ""),
			next: at("2026-03-29T01:00:00Z")}, // 02:00 is skipped that night: it runs right after the jump, 03:00 CEST
		{name: "new, with a prune schedule", j: restic("@daily", "", "0 4 * * 0"),
			next: at("2026-03-29T00:00:00Z"), nextPrune: at("2026-03-29T04:00:00Z")},
		{name: "new, interval", j: restic("@every 6h", "", ""), next: at("2026-03-28T18:30:00Z")},
		{name: "edit, nothing of the schedules changed: slots kept", j: restic("@daily", "", "@weekly"),
			before: ptrJob(restic("@daily", "", "@weekly")), next: old, nextPrune: old},
		{name: "edit, schedule changed", j: restic("@hourly", "", "@weekly"),
			before: ptrJob(restic("@daily", "", "@weekly")), next: at("2026-03-28T13:00:00Z"), nextPrune: old},
		{name: "edit, prune schedule removed", j: restic("@daily", "", ""),
			before: ptrJob(restic("@daily", "", "@weekly")), next: old, nextPrune: nil},
		{name: "edit, zone changed: both again", j: restic("0 13 * * *", "Asia/Tokyo", "0 14 * * *"),
			before: ptrJob(restic("0 13 * * *", "", "0 14 * * *")), next: at("2026-03-29T04:00:00Z"), nextPrune: at("2026-03-29T05:00:00Z")},
		{name: "edit, schedule made manual", j: restic("", "", ""),
			before: ptrJob(restic("@daily", "", "")), next: nil, nextPrune: old},
		{name: "a command job is not pruned", j: model.Job{Name: "dump", Engine: engine.NameCommand, Prune: model.PruneSettings{Schedule: "@weekly"}},
			err: "Job.Prune.Schedule: job dump uses the command engine; only restic repositories are pruned"},
		{name: "a bad prune schedule", j: restic("", "", "every sunday"), err: "Job.Prune.Schedule: schedule \"every sunday\""},
		{name: "a bad schedule", j: restic("@every 1ms", "", ""), err: "the interval must be at least"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := c.j
			err := Slots(&j, c.before, now)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Slots = %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !sameTime(j.NextRunAt, c.next) || !sameTime(j.Prune.NextAt, c.nextPrune) {
				t.Errorf("next run %v, next prune %v; want %v, %v", j.NextRunAt, j.Prune.NextAt, c.next, c.nextPrune)
			}
		})
	}
}

func ptrJob(j model.Job) *model.Job { return &j }

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func TestPolicyAndGuardrail(t *testing.T) {
	p := retention.Policy{KeepLast: 3, KeepDaily: 7}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		stored []byte
		ok     bool
		err    string
	}{
		{"none", nil, false, ""},
		{"stored", raw, true, ""},
		{"unreadable", []byte("{"), false, "job web: stored retention policy unreadable"},
	} {
		got, ok, err := Policy(model.Job{Name: "web", Retention: model.RetentionSettings{Policy: c.stored}})
		if ok != c.ok || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: Policy = %v, %v; want %v, %q", c.name, ok, err, c.ok, c.err)
		}
		if ok && (got.KeepLast != 3 || got.KeepDaily != 7) {
			t.Errorf("%s: Policy = %+v, want %+v", c.name, got, p)
		}
	}
	g := Guardrail(model.Job{Retention: model.RetentionSettings{MaxDelete: 0.25, MinKeep: 4}})
	if g.MaxDeleteShare != 0.25 || g.MinKeep != 4 {
		t.Errorf("Guardrail = %+v", g)
	}
}
