package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/spawn"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

type sweepWorld struct {
	st    *store.Store
	r     *systemd.Client
	rec   *reconcile.Reconciler
	cfg   reconcile.Config
	state string
	jobs  int
	// lastSystemd is how long the last sweep waited for systemd's answer once it had read the runs.
	lastSystemd time.Duration
}

func newSweepWorld(b *testing.B, spawnGrace time.Duration) *sweepWorld {
	e := newBenchEnv(b)
	w := &sweepWorld{st: e.st, r: e.r, state: e.state}
	w.cfg = reconcile.Config{AllowCommandJobs: true, Store: e.st, Runner: e.r, Inventory: e.st, StateDir: e.state, Binary: e.bin, SpawnGrace: spawnGrace,
		Host: "bench", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var err error
	if w.rec, err = reconcile.New(w.cfg); err != nil {
		b.Fatal(err)
	}
	return w
}

// addCommandRuns admits n runs of new command-engine jobs running argv and records each as
// spawned with the unit name the daemon would give it, without starting anything; then calls
// each (nil: nothing) with each run. It adds 8 runs at a time.
func (w *sweepWorld) addCommandRuns(b *testing.B, n int, argv []string, each func(model.Run) error) []model.Run {
	ctx := context.Background()
	runs := make([]model.Run, n)
	first := w.jobs
	w.jobs += n
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				errs[i] = w.addCommandRun(ctx, first+i, argv, &runs[i], each)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	return runs
}

// addCommandRun is addCommandRuns' for the job numbered i, whose run it sets in run.
func (w *sweepWorld) addCommandRun(ctx context.Context, i int, argv []string, run *model.Run, each func(model.Run) error) error {
	name := fmt.Sprintf("job%d", i)
	// Jobs run as a user, whose journals the sweep checks are owned by it.
	if _, err := w.st.JobCreate(ctx, model.Job{Name: name, Engine: "command", Repository: "-", PasswordFile: "-", Command: argv, User: "nobody"}); err != nil {
		return err
	}
	r, err := w.st.RunAdmit(ctx, store.RunAdmitParams{Job: name, Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		return err
	}
	if ok, _, err := w.st.AttemptClaimSpawn(ctx, model.Lease{Host: "bench"}, model.SpawnClaim{Attempt: model.AttemptRef{Run: r.ID, No: 1}, Unit: systemd.UnitName(name, r.ID, 1)}); err != nil || !ok {
		return fmt.Errorf("claim of %s: %v %v", name, ok, err)
	}
	*run = r
	if each != nil {
		return each(r)
	}
	return nil
}

// nobody is the uid the benchmark's jobs run as (user nobody) and their group's.
const nobody = 65534

// addSleepingRuns adds n live runs whose real units run sleep, each with the directories a spawn
// prepares and a journal holding the progress line a unit would have written by then (the next
// sweep drains it).
func (w *sweepWorld) addSleepingRuns(b *testing.B, n int) {
	ctx := context.Background()
	w.addCommandRuns(b, n, []string{"/bin/sleep", "3600"}, func(run model.Run) error { return w.startSleeping(ctx, run) })
}

// startSleeping prepares the run's files and starts its unit, as a spawn would, and records it
// started.
func (w *sweepWorld) startSleeping(ctx context.Context, run model.Run) error {
	journalPath := jobunit.JournalPath(w.state, run.ID, 1)
	for _, dir := range []string{filepath.Dir(journalPath), filepath.Dir(systemd.MarkerPath(w.state, run.ID, 1))} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	j, err := journal.Create(journalPath, run.ID, 1)
	if err != nil {
		return err
	}
	if err := j.Append(engine.TypeProgress, engine.Progress{PercentDone: 0.5, FilesDone: 10, TotalFiles: 20}); err != nil {
		j.Close()
		return err
	}
	if err := j.Close(); err != nil {
		return err
	}
	if err := os.Chown(journalPath, nobody, nobody); err != nil {
		return err
	}
	name := systemd.UnitName(run.JobName, run.ID, 1)
	if _, err := w.r.Start(ctx, systemd.Spec{Name: name, ExecStart: []string{"/bin/sleep", "3600"}}); err != nil {
		return err
	}
	return w.st.AttemptMarkStarted(ctx, model.Lease{Host: "bench"}, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: run.ID, No: 1}, At: time.Now()})
}

func (w *sweepWorld) sweep(b *testing.B) reconcile.SweepStats {
	stats, err := w.rec.Sweep(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	w.lastSystemd = stats.SystemdDuration
	if stats.Errors > 0 {
		b.Fatalf("%d runs could not be reconciled", stats.Errors)
	}
	return stats
}

// BenchmarkSweep times a sweep over 100, then 1,000, then 10,000 live runs whose real units run
// sleep (systemd is asked, journals and markers are read), and reports the time per run at each
// size: per-run-1000/per-run-100 and per-run-10000/per-run-1000 near 1 mean the sweep grows
// linearly. The CPU the benchmark's process spent per sweep (the daemon's share, without
// PostgreSQL's and systemd's) holds better than the time on a loaded machine. Target: a sweep
// of 10,000 runs within 400 ms (goal 200).
func BenchmarkSweep(b *testing.B) {
	w := newSweepWorld(b, time.Minute)
	perRun := map[int]time.Duration{}
	for _, size := range []int{100, 1000, 10000} {
		w.addSleepingRuns(b, size-w.jobs)
		w.sweep(b) // warm the pool and the connection; drains the journals
		var durations, cpu []time.Duration
		for range min(15, 150000/size) {
			before := processCPU(b)
			stats := w.sweep(b)
			cpu = append(cpu, processCPU(b)-before)
			if stats.Runs != size {
				b.Fatalf("swept %d runs, want %d", stats.Runs, size)
			}
			durations = append(durations, stats.Duration)
		}
		d := median(durations)
		perRun[size] = d / time.Duration(size)
		b.ReportMetric(float64(d.Microseconds())/1000, fmt.Sprintf("ms/sweep-%d", size))
		b.ReportMetric(float64(median(cpu).Microseconds())/1000, fmt.Sprintf("cpu-ms/sweep-%d", size))
		b.ReportMetric(float64(perRun[size].Microseconds()), fmt.Sprintf("µs/run-%d", size))
		b.ReportMetric(float64(w.lastSystemd.Microseconds())/1000, fmt.Sprintf("ms/systemd-%d", size))
	}
	b.ReportMetric(float64(perRun[1000])/float64(perRun[100]), "per-run-1000/per-run-100")
	b.ReportMetric(float64(perRun[10000])/float64(perRun[1000]), "per-run-10000/per-run-1000")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the CPU time this process has spent, user and system.
func processCPU(b *testing.B) time.Duration {
	var u unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// BenchmarkBootPass times the first pass after a reboot over 200 runs whose units vanished
// without a marker (each is restarted as attempt 2), and the pass after it, which spawns the 200
// new attempts as real units (a command that exits at once), against a sweep that changes nothing.
func BenchmarkBootPass(b *testing.B) {
	w := newSweepWorld(b, time.Millisecond)
	w.addCommandRuns(b, 200, []string{"/bin/true"}, nil)
	time.Sleep(10 * time.Millisecond) // past the spawn grace
	boot := w.sweep(b)
	live, err := w.st.RunListLive(context.Background(), "")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range live {
		if l.Attempt.No != 2 || l.Attempt.Unit != "" {
			b.Fatalf("after the boot pass run %s is at attempt %d unit %q, want attempt 2 not yet spawned", l.Run.ID, l.Attempt.No, l.Attempt.Unit)
		}
	}
	spawnPass := w.sweep(b)
	live, err = w.st.RunListLive(context.Background(), "")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range live {
		if l.Attempt.Unit == "" {
			b.Fatalf("run %s was not spawned", l.Run.ID)
		}
	}
	// Baseline: as many StartTransientUnit calls of the very units the daemon starts.
	job, err := w.st.JobGet(context.Background(), "job0")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for range 200 {
		if _, err := w.r.Start(context.Background(), spawn.UnitSpec(jobunit.Config{Runner: w.r, StateDir: w.cfg.StateDir, Binary: w.cfg.Binary}, job, model.Run{ID: uuid.New(), Kind: model.KindBackup}, 1)); err != nil {
			b.Fatal(err)
		}
	}
	raw := time.Since(start)
	b.ReportMetric(float64(boot.Duration.Microseconds())/1000, "ms/boot-pass-200")
	b.ReportMetric(float64(spawnPass.Duration.Microseconds())/1000, "ms/spawn-pass-200")
	b.ReportMetric(float64(raw.Microseconds())/1000, "ms/raw-starts-200")
	b.ReportMetric(float64(spawnPass.Duration)/float64(raw), "spawn-pass/raw-starts")
	b.ReportMetric(0, "ns/op")
}
