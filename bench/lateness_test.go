package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/spawn"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// mainStart asks systemd when the unit's main process started.
func mainStart(b *testing.B, conn *sdbus.Conn, unit string) time.Time {
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := conn.GetServicePropertyContext(context.Background(), unit, "ExecMainStartTimestamp")
		if err == nil {
			if us, ok := p.Value.Value().(uint64); ok && us > 0 {
				return time.UnixMicro(int64(us))
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("unit %s never started (%v)", unit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkLateness: 1,000 jobs due in the same second, admitted and spawned by a real daemon;
// lateness is systemd's start of each unit's main process minus the planned slot. The baseline,
// measured first in the same run, is 1,000 StartTransientUnit calls of the same units issued at
// one instant, 8 at a time like the daemon's workers. Target: holdfast p99 / raw p99 <= 1.1
// (goal 1.0).
func BenchmarkLateness(b *testing.B) {
	const jobs = 1000
	ctx := context.Background()
	e := newBenchEnv(b)
	st, mgr, bin, state := e.st, e.mgr, e.bin, e.state

	// Baseline: the same units started directly, 8 at a time, all at one instant, on a
	// manager of its own so that neither phase pays for the other's units.
	baseMgr := testenv.PrivateSystemd(b)
	baseRunner, err := systemd.New(ctx, systemd.Config{Address: baseMgr.Address})
	if err != nil {
		b.Fatal(err)
	}
	cfg := jobunit.Config{StateDir: state, Binary: bin}
	job := model.Job{Name: "due0", Engine: "command", Command: []string{"/bin/sleep", "600"}}
	specs := make([]systemd.Spec, jobs)
	for i := range specs {
		specs[i] = spawn.UnitSpec(cfg, job, model.Run{ID: uuid.New(), Kind: model.KindBackup}, 1)
		specs[i].Name = fmt.Sprintf("raw-%d-%s", i, specs[i].Name)
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	next := make(chan systemd.Spec)
	for range 8 {
		wg.Go(func() {
			for spec := range next {
				if _, err := baseRunner.Start(ctx, spec); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for _, spec := range specs {
		next <- spec
	}
	close(next)
	wg.Wait()
	var raw []time.Duration
	baseConn := baseMgr.Conn(b)
	for _, spec := range specs {
		raw = append(raw, mainStart(b, baseConn, spec.Name).Sub(t0))
	}
	baseRunner.Close()
	baseMgr.Exit(b)

	// The jobs and the daemon are ready first; then every job gets the same slot, a few seconds on.
	for i := range jobs {
		if _, err := st.JobCreate(ctx, model.Job{Name: fmt.Sprintf("due%d", i), Engine: "command",
			Command: []string{"/bin/sleep", "600"}, Schedule: "@every 1h", RetryBackoff: time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
	e.daemon(b, "--sweep-interval", "1s", "--workers", "8")
	time.Sleep(time.Second)
	// A second of lead per 200 jobs to set them all, 8 at a time.
	planned := time.Now().Add(4*time.Second + jobs*5*time.Millisecond).Truncate(time.Second)
	due := make(chan int)
	var setting sync.WaitGroup
	for range 8 {
		setting.Go(func() {
			for i := range due {
				if _, err := st.JobUpdate(ctx, fmt.Sprintf("due%d", i), func(j *model.Job) error {
					j.NextRunAt = &planned
					return nil
				}); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range jobs {
		due <- i
	}
	close(due)
	setting.Wait()
	if b.Failed() {
		b.FailNow()
	}
	if time.Until(planned) < time.Second {
		b.Fatalf("setting the slot took too long: only %s left before it", time.Until(planned))
	}
	// Nothing asks the manager or polls hard while the daemon spawns: the measurement waits,
	// with one query a second, until every run is running, then reads the start times (listing
	// 1,000 runs costs the database milliseconds, which the baseline's phase does not pay).
	var runs []model.Run
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		var err error
		if runs, err = st.RunList(ctx, "", 2*jobs); err != nil {
			b.Fatal(err)
		}
		if len(runs) == jobs && !slices.ContainsFunc(runs, func(r model.Run) bool { return r.StartedAt == nil }) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("after 3 minutes, %d of %d jobs have a run, not all of them running", len(runs), jobs)
		}
	}
	// A run's unit is its last attempt's: an attempt whose timer was armed after its instant
	// never starts, and the next one does (its lateness counts from the slot all the same).
	var holdfast []time.Duration
	conn := mgr.Conn(b)
	restarted := 0
	for _, run := range runs {
		attempts, err := st.AttemptList(ctx, run.ID)
		if err != nil || len(attempts) == 0 {
			b.Fatalf("run %s: attempts %v, %v", run.ID, attempts, err)
		}
		last := attempts[len(attempts)-1].No
		if last > 1 {
			restarted++
		}
		started := mainStart(b, conn, systemd.UnitName(run.JobName, run.ID, last))
		holdfast = append(holdfast, started.Sub(planned))
	}

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(percentile(holdfast, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(holdfast, 0.99)), "p99-ms")
	b.ReportMetric(ms(slices.Max(holdfast)), "max-ms")
	b.ReportMetric(ms(percentile(raw, 0.5)), "raw-p50-ms")
	b.ReportMetric(ms(percentile(raw, 0.99)), "raw-p99-ms")
	b.ReportMetric(float64(percentile(holdfast, 0.99))/float64(percentile(raw, 0.99)), "p99/raw-p99")
	b.ReportMetric(float64(restarted), "restarted-runs")
	b.ReportMetric(0, "ns/op")
}
