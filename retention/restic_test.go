package retention

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/testenv"
)

// comparisonTimes are the snapshot times (UTC) of the restic comparison: about
// 14 months, with gaps of weeks, several snapshots on some days, and the turn
// of 2025/2026, where 2025-12-29 … 2026-01-04 is ISO week 2026-W01. restic
// 0.14 keys weeks by ISO year and week as we do, so weekly policies may cross
// the year boundary. No two times are equal: restic orders equal times by
// the order it lists them in, we by id. 2026-01-25 07:00 and 2026-02-14 07:00
// lie exactly 30 and 10 days before the newest, 2026-01-24, 2025-08-24 and
// 2025-02-24 07:00 exactly one month, six months and a year: keep-within
// drops them. The
// snapshot of 2099 is in the future: restic measures keep-within from the
// newest snapshot that is not, and so do we with WithinFromLatest and At now.
var comparisonTimes = []string{
	"2025-01-03 08:00:00", "2025-01-17 08:00:00", "2025-02-02 23:59:59", "2025-02-03 00:00:01",
	"2025-03-15 12:00:00", "2025-04-30 23:30:00", "2025-05-01 00:30:00", "2025-06-10 06:00:00",
	"2025-07-20 18:00:00", "2025-08-01 01:00:00", "2025-09-15 10:00:00", "2025-10-26 09:00:00",
	"2025-11-10 09:00:00", "2025-11-24 09:00:00", "2025-12-08 09:00:00", "2025-12-22 09:00:00",
	"2025-12-28 20:00:00", "2025-12-29 10:00:00", "2025-12-31 23:00:00", "2026-01-01 00:30:00",
	"2026-01-01 09:00:00", "2026-01-03 12:00:00", "2026-01-05 08:00:00", "2026-01-25 07:00:00",
	"2026-01-26 08:00:00", "2026-02-14 07:00:00",
	"2026-02-01 10:00:00", "2026-02-01 14:00:00", "2026-02-01 14:30:00", "2026-02-01 15:05:00",
	"2026-02-02 08:00:00", "2026-02-03 08:00:00", "2026-02-04 08:00:00", "2026-02-05 08:00:00",
	"2026-02-05 20:00:00", "2026-02-06 08:00:00", "2026-02-20 08:00:00", "2026-02-21 08:00:00",
	"2026-02-22 08:00:00", "2026-02-22 08:40:00", "2026-02-23 08:00:00", "2026-02-23 09:15:00",
	"2026-02-23 10:20:00", "2026-02-24 07:00:00", "2099-01-01 00:00:00",
	"2026-01-24 07:00:00", "2025-08-24 07:00:00", "2025-02-24 07:00:00",
}

// TestResticForgetAgrees checks that for the rules restic has, a plan keeps
// exactly what `restic forget --dry-run` keeps.
func TestResticForgetAgrees(t *testing.T) {
	restic := testenv.Restic(t)
	dir := t.TempDir()
	pw, data := filepath.Join(dir, "password"), filepath.Join(dir, "data")
	if err := os.WriteFile(pw, []byte(testenv.ResticPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "file"), []byte("some data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(dir, "repo")
	env := []string{"TZ=UTC", "RESTIC_REPOSITORY=" + repo, "RESTIC_PASSWORD_FILE=" + pw}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RESTIC_") && !strings.HasPrefix(kv, "TZ=") {
			env = append(env, kv)
		}
	}
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(restic, append([]string{"--no-cache", "--quiet"}, args...)...)
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("restic %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out
	}

	// Its key is cheap to derive: the 64 restic commands below spend milliseconds each on it.
	testenv.ResticRepo(t, repo)
	// One at a time: restic 0.14, listing the locks as another backup removes its own, retries
	// loading the gone lock file for some 40 s.
	for _, at := range comparisonTimes {
		run("backup", "--time", at, "--host", "h1", "--tag", engine.JobTag("a"), data)
	}
	snaps, err := ParseResticSnapshots(run("snapshots", "--json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != len(comparisonTimes) {
		t.Fatalf("restic lists %d snapshots, want %d", len(snaps), len(comparisonTimes))
	}
	newest := slices.MaxFunc(snaps, func(a, b Snapshot) int { return a.Time.Compare(b.Time) }).Time
	if want := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC); !newest.Equal(want) {
		t.Fatalf("newest snapshot at %v, want %v: did restic read --time as UTC?", newest, want)
	}
	now := time.Now()
	ver, err := engine.ResticVersionOf(t.Context(), restic)
	if err != nil {
		t.Fatal(err)
	}
	keepOldest := ver.Traits().KeepsOldestForUnfilledRule

	policies := []Policy{
		{KeepLast: 5},
		{KeepHourly: 10},
		{KeepDaily: 7},
		{KeepWeekly: 4},
		{KeepWeekly: 10}, // reaches back across the turn of the year
		{KeepMonthly: 6},
		{KeepYearly: 2},
		{KeepWithin: Duration{Days: 30}},
		{KeepWithin: Duration{Days: 10}, KeepLast: 3},
		{KeepWithin: Duration{Hours: 36}, KeepHourly: 3, KeepDaily: 3},
		{KeepWithin: Duration{Months: 1}},
		{KeepWithin: Duration{Months: 6}}, // six months, never six minutes
		{KeepWithin: Duration{Years: 1}},
		{KeepWithin: Duration{Years: 1, Months: 1, Days: 2, Hours: 3}, KeepLast: 2},
		{KeepLast: 1, KeepDaily: 7, KeepWeekly: 5, KeepMonthly: 12, KeepYearly: 3},
		{KeepLast: 2, KeepDaily: 30, KeepWeekly: 8, KeepMonthly: 12, KeepYearly: 7},
		// Rules with fewer buckets than they keep: restic 0.16 and later keep the oldest too.
		{KeepDaily: 100},
		{KeepWeekly: 60, KeepYearly: 10},
		{KeepMonthly: 20},
		{KeepHourly: 200},
	}
	for _, p := range policies {
		t.Run(strings.Join(resticFlags(p), " "), func(t *testing.T) {
			args := append([]string{"forget", "--dry-run", "--json"}, resticFlags(p)...)
			var groups []struct {
				Keep   []struct{ ID string } `json:"keep"`
				Remove []struct{ ID string } `json:"remove"`
			}
			if err := json.Unmarshal(run(args...), &groups); err != nil {
				t.Fatalf("restic forget output: %v", err)
			}
			if len(groups) != 1 {
				t.Fatalf("restic forget made %d groups, want 1", len(groups))
			}
			var resticKeeps, resticRemoves []string
			for _, s := range groups[0].Keep {
				resticKeeps = append(resticKeeps, s.ID)
			}
			for _, s := range groups[0].Remove {
				resticRemoves = append(resticRemoves, s.ID)
			}

			plan, err := New(p, snaps, Options{At: now, WithinFrom: WithinFromLatest, Scope: Scope{Job: "a", Host: "h1"},
				KeepOldestOfUnfilledRule: keepOldest})
			if err != nil {
				t.Fatal(err)
			}
			if len(resticKeeps)+len(resticRemoves) != len(snaps) {
				t.Fatalf("restic decided on %d of %d snapshots", len(resticKeeps)+len(resticRemoves), len(snaps))
			}
			ours := keptIDs(plan)
			slices.Sort(ours)
			slices.Sort(resticKeeps)
			if !slices.Equal(ours, resticKeeps) {
				for _, d := range plan.Decisions {
					t.Logf("%s %s keep=%-5v restic=%-5v %s", d.SnapshotID[:8], d.Time.Format(time.DateTime), d.Keep, slices.Contains(resticKeeps, d.SnapshotID), d.Reason)
				}
				t.Fatalf("we keep %d snapshots, restic keeps %d; they differ", len(ours), len(resticKeeps))
			}
		})
	}
}

// resticFlags writes p as `restic forget` flags.
func resticFlags(p Policy) []string {
	var flags []string
	rules := []string{"last", "hourly", "daily", "weekly", "monthly", "yearly"} // in the order of counts
	for i, r := range p.counts() {
		if r.n > 0 {
			flags = append(flags, "--keep-"+rules[i], strconv.Itoa(r.n))
		}
	}
	if !p.KeepWithin.IsZero() {
		flags = append(flags, "--keep-within", FormatDuration(p.KeepWithin))
	}
	return flags
}
