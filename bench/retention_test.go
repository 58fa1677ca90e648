package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/retention"
)

// BenchmarkRetentionPlan plans the GFS preset (in Europe/Berlin) over 100,000
// snapshots, about one an hour for eleven years with a few gaps of weeks, in
// the random order an engine may list them. It also plans the newest 12,500,
// 25,000 and 50,000 of them in the same run and reports how the time grows
// from 12.5k to 100k next to the n·log n ratio. Target: plan-100k-ms <= 200.
// It needs neither PostgreSQL nor systemd.
func BenchmarkRetentionPlan(b *testing.B) {
	const total = 100_000
	rng := rand.New(rand.NewPCG(11, 100_000))
	newest := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	snaps := make([]retention.Snapshot, total) // newest first
	t := newest
	for i := range snaps {
		snaps[i] = retention.Snapshot{
			ID:    fmt.Sprintf("%016x%016x%016x%016x", rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64()),
			Time:  t,
			Host:  "h1",
			Tags:  []string{engine.JobTag("web")},
			Paths: []string{"/srv"},
			Bytes: 1<<20 + rng.Int64N(1<<24),
		}
		t = t.Add(-50*time.Minute - time.Duration(rng.Int64N(int64(10*time.Minute))))
		if rng.IntN(20_000) == 0 {
			t = t.Add(-time.Duration(7+rng.IntN(14)) * 24 * time.Hour)
		}
	}
	policy, err := retention.Preset("gfs")
	if err != nil {
		b.Fatal(err)
	}
	policy.TimeZone = "Europe/Berlin"
	opt := retention.Options{At: newest.Add(time.Hour), Scope: retention.Scope{Job: "web", Host: "h1"}}

	sizes := []int{12_500, 25_000, 50_000, total}
	inputs := make([][]retention.Snapshot, len(sizes))
	for i, n := range sizes {
		inputs[i] = slices.Clone(snaps[:n])
		rng.Shuffle(n, func(x, y int) { inputs[i][x], inputs[i][y] = inputs[i][y], inputs[i][x] })
	}
	const reps = 5
	times := make([][]time.Duration, len(sizes))
	b.ResetTimer()
	for range b.N {
		for rep := 0; rep < reps; rep++ {
			for i, in := range inputs {
				runtime.GC() // each plan pays only for its own garbage
				start := time.Now()
				plan, err := retention.New(policy, in, opt)
				times[i] = append(times[i], time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if plan.Kept+plan.Deletable != len(in) || plan.Kept > 1+30+8+12+7 || plan.Deletable == 0 {
					b.Fatalf("%d snapshots: kept %d, deletes %d", len(in), plan.Kept, plan.Deletable)
				}
			}
		}
	}
	b.StopTimer()
	small, large := median(times[0]), median(times[len(sizes)-1])
	nlogn := func(n int) float64 { return float64(n) * math.Log(float64(n)) }
	for i, n := range sizes[:len(sizes)-1] {
		b.Logf("plan of %d snapshots: %v", n, median(times[i]))
	}
	b.ReportMetric(float64(large.Microseconds())/1000, "plan-100k-ms")
	b.ReportMetric(float64(large)/float64(small), "growth-x")
	b.ReportMetric(nlogn(total)/nlogn(sizes[0]), "nlogn-x")
	b.ReportMetric(0, "ns/op")
}
