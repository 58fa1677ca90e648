package watch

import (
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
)

func TestJudge(t *testing.T) {
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := created.Add(d); return &t }
	daily := model.WatchJob{Name: "d", Schedule: "0 2 * * *", CreatedAt: created, AlertFailures: 2}
	// Backed up hourly (never overdue for that here), verified weekly since its creation.
	weeklyVerify := model.WatchJob{Name: "v", Schedule: "@hourly", CreatedAt: created, VerifySchedule: "@weekly", VerifySince: at(0)}
	for _, tc := range []struct {
		name    string
		f       model.WatchFacts
		now     time.Duration // after created
		overdue bool
		since   time.Duration
		reason  string
	}{
		{"daily, before the first slot's grace", model.WatchFacts{Job: daily}, 25 * time.Hour, false, 0, ""},
		{"daily, a day after the first slot without a success", model.WatchFacts{Job: daily}, 26 * time.Hour, true, 26 * time.Hour,
			"no successful run for the slot of 2026-12-01T02:00:00Z or later, 24h0m0s after it (since its creation)"},
		{"daily, succeeded at the slot", model.WatchFacts{Job: daily, LastSuccess: at(2*time.Hour + time.Minute),
			Recent: []string{"succeeded"}, RecentEnd: at(2*time.Hour + time.Minute)}, 27 * time.Hour, false, 0, ""},
		{"daily, --alert-after 3h", model.WatchFacts{Job: func() model.WatchJob { j := daily; j.AlertAfter = 3 * time.Hour; return j }()},
			5 * time.Hour, true, 5 * time.Hour, "3h0m0s after it"},
		{"the last two runs failed", model.WatchFacts{Job: daily, LastSuccess: at(time.Hour),
			Recent: []string{"failed", "partial"}, RecentEnd: at(90 * time.Minute)}, 2 * time.Hour, true, 90 * time.Minute,
			"the last 2 runs did not succeed (failed, partial)"},
		{"one failure is not yet two", model.WatchFacts{Job: daily, LastSuccess: at(time.Hour),
			Recent: []string{"failed", "succeeded"}, RecentEnd: at(90 * time.Minute)}, 2 * time.Hour, false, 0, ""},
		{"--alert-failures 0: failures alone never", model.WatchFacts{Job: func() model.WatchJob { j := daily; j.AlertFailures = 0; return j }(),
			LastSuccess: at(time.Hour), Recent: nil, RecentEnd: at(90 * time.Minute)}, 2 * time.Hour, false, 0, ""},
		{"manual, no expectation", model.WatchFacts{Job: model.WatchJob{Name: "m", CreatedAt: created}}, 1000 * time.Hour, false, 0, ""},
		{"manual, --expect-every 168h passed", model.WatchFacts{Job: model.WatchJob{Name: "m", CreatedAt: created, ExpectEvery: 168 * time.Hour},
			LastSuccess: at(time.Hour)}, 170 * time.Hour, true, 169 * time.Hour, "expected every 168h0m0s"},
		{"weekly verify, verified 20 days ago: two periods passed", model.WatchFacts{Job: weeklyVerify, LastSuccess: at(20*24*time.Hour - time.Hour),
			LastVerified: at(time.Hour)}, 20 * 24 * time.Hour, true, 14*24*time.Hour + time.Hour, "verification overdue"},
		{"weekly verify, verified 10 days ago", model.WatchFacts{Job: weeklyVerify, LastSuccess: at(10*24*time.Hour - time.Hour),
			LastVerified: at(time.Hour)}, 10 * 24 * time.Hour, false, 0, ""},
		{"weekly verify, never verified, set 15 days ago", model.WatchFacts{Job: weeklyVerify, LastSuccess: at(15*24*time.Hour - time.Hour)},
			15 * 24 * time.Hour, true, 14 * 24 * time.Hour, "since its verify schedule was set"},
		{"--verify-alert-after 48h", model.WatchFacts{Job: func() model.WatchJob { j := weeklyVerify; j.VerifyAlertAfter = 48 * time.Hour; return j }(),
			LastSuccess: at(3*24*time.Hour - time.Hour), LastVerified: at(time.Hour)}, 3 * 24 * time.Hour, true, 49 * time.Hour, "for 48h0m0s"},
		{"@every 3s, failing since its creation", model.WatchFacts{Job: model.WatchJob{Name: "e", Schedule: "@every 3s", CreatedAt: created}},
			6 * time.Second, true, 6 * time.Second, "3s after it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Judge(tc.f, created.Add(tc.now))
			if err != nil {
				t.Fatal(err)
			}
			if v.Overdue != tc.overdue || tc.overdue && (!v.Since.Equal(created.Add(tc.since)) || !strings.Contains(v.Reason, tc.reason)) {
				t.Fatalf("Judge = %+v; want overdue %v since +%s, reason with %q", v, tc.overdue, tc.since, tc.reason)
			}
		})
	}
	if _, err := Judge(model.WatchFacts{Job: model.WatchJob{Name: "bad", Schedule: "not a schedule"}}, created); err == nil {
		t.Fatal("a job with a schedule that does not parse was judged")
	}
}
