// Package bench measures holdfast against baselines taken in the same run, because these
// machines are noisy: every figure is reported next to its baseline and as a ratio.
package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/spawn"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

func waitActive(b *testing.B, r *systemd.Client, unit string) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		alive, st, err := r.Alive(context.Background(), unit)
		if err == nil && alive && st.ActiveState == "active" {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("unit %s never became active (last %+v, %v)", unit, st, err)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitGone(b *testing.B, r *systemd.Client, unit string) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		alive, _, err := r.Alive(context.Background(), unit)
		if err == nil && !alive {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("unit %s did not go away", unit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// benchEnv is one holdfast installation for a benchmark: a database with the schema, a private
// systemd manager, the built binary and a state directory units can reach.
type benchEnv struct {
	dir, state, dsn, bin string
	mgr                  *testenv.Manager
	st                   *store.Store
	r                    *systemd.Client
}

func newBenchEnv(b *testing.B) *benchEnv {
	ctx := context.Background()
	e := &benchEnv{dir: testenv.SharedDir(b)} // first: removed after the manager stopped its units
	e.state = filepath.Join(e.dir, "state")
	e.dsn = testenv.Postgres(b)
	e.mgr = testenv.PrivateSystemd(b)
	e.bin = testenv.HoldfastBinary(b)
	if _, err := migrations.Apply(ctx, e.dsn); err != nil {
		b.Fatal(err)
	}
	var err error
	if e.st, err = store.Open(ctx, e.dsn); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.st.Close)
	if e.r, err = systemd.New(ctx, systemd.Config{Address: e.mgr.Address}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.r.Close)
	return e
}

// env is the environment of holdfast commands and daemons against this installation.
func (e *benchEnv) env() []string {
	return append(os.Environ(), "HOLDFAST_DSN="+e.dsn, "HOLDFAST_SYSTEMD_ADDRESS="+e.mgr.Address, "HOLDFAST_STATE_DIR="+e.state)
}

// daemon starts `holdfast daemon` against the environment until the benchmark ends; its log is
// written to $HOLDFAST_BENCH_LOG when that is set, and shown if the benchmark fails.
func (e *benchEnv) daemon(b *testing.B, args ...string) *exec.Cmd {
	cmd := exec.Command(e.bin, append([]string{"daemon", "--allow-command-jobs"}, args...)...) // the benchmarks run command jobs
	cmd.Env = e.env()
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if path := os.Getenv("HOLDFAST_BENCH_LOG"); path != "" {
			_ = os.WriteFile(path, log.Bytes(), 0o644)
		}
		if b.Failed() {
			b.Logf("daemon log:\n%s", log.String())
		}
	})
	return cmd
}

// median is the middle value, or the mean of the two middle ones.
func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// BenchmarkStartLatency compares holdfast's start latency — a run admitted as `run start` admits
// it, until its unit is active — with a raw StartTransientUnit of the same unit (same command,
// same properties) measured alternately in the same run. Target: holdfast/raw <= 2.
func BenchmarkStartLatency(b *testing.B) {
	ctx := context.Background()
	e := newBenchEnv(b)
	dir, st, r, bin, state := e.dir, e.st, e.r, e.bin, e.state

	repo, pw, data := filepath.Join(dir, "repo"), filepath.Join(dir, "pw"), filepath.Join(dir, "data")
	if err := os.WriteFile(pw, []byte("bench\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "f"), bytes.Repeat([]byte("x"), 1<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("restic", "--repo", repo, "--password-file", pw, "init").CombinedOutput(); err != nil {
		b.Fatalf("restic init: %v\n%s", err, out)
	}
	job, err := st.JobCreate(ctx, model.Job{Name: "bench", Engine: "restic", Repository: repo, PasswordFile: pw, Paths: []string{data}})
	if err != nil {
		b.Fatal(err)
	}
	restic := testenv.Restic(b)

	e.daemon(b, "--sweep-interval", "200ms", "--spawn-grace", "30s")
	time.Sleep(500 * time.Millisecond) // the daemon's boot pass and LISTEN

	cfg := jobunit.Config{StateDir: state, Binary: bin, ResticBinary: restic}
	var raw, holdfast []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Raw: the very unit the daemon would start, started directly.
		spec := spawn.UnitSpec(cfg, job, model.Run{ID: uuid.New(), Kind: model.KindBackup}, 1)
		if err := os.MkdirAll(filepath.Dir(jobunit.JournalPath(state, uuid.New(), 1)), 0o755); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := r.Start(ctx, spec); err != nil {
			b.Fatal(err)
		}
		waitActive(b, r, spec.Name)
		raw = append(raw, time.Since(start))
		if err := r.Stop(ctx, spec.Name); err != nil {
			b.Fatal(err)
		}
		waitGone(b, r, spec.Name)

		// holdfast: admitted as `run start` does, spawned by the daemon on NOTIFY.
		start = time.Now()
		run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "bench", Trigger: "manual", Kind: model.KindBackup})
		if err != nil {
			b.Fatal(err)
		}
		unit := systemd.UnitName("bench", run.ID, 1)
		waitActive(b, r, unit)
		holdfast = append(holdfast, time.Since(start))
		if _, err := st.RunRequestStop(ctx, run.ID); err != nil {
			b.Fatal(err)
		}
		if err := r.Stop(ctx, unit); err != nil {
			b.Fatal(err)
		}
		for {
			got, err := st.RunGet(ctx, run.ID)
			if err != nil {
				b.Fatal(err)
			}
			if !model.Live(got.Status) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	b.StopTimer()
	rawMed, hfMed := median(raw), median(holdfast)
	b.ReportMetric(float64(rawMed.Microseconds())/1000, "raw-ms")
	b.ReportMetric(float64(hfMed.Microseconds())/1000, "holdfast-ms")
	b.ReportMetric(float64((hfMed-rawMed).Microseconds())/1000, "overhead-ms")
	b.ReportMetric(float64(hfMed)/float64(rawMed), "holdfast/raw")
	b.ReportMetric(0, "ns/op")
}
