package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

// BenchmarkStopLatency measures how long a stop takes to reach restic: from `holdfast run stop`
// (started; and, after-return-ms, returned) to restic's "signal interrupt received" in the
// manager's journal, against a raw StopUnit of a transient unit that runs the same restic backup
// itself with KillSignal=SIGINT, taking turns in the same run. Both backups crawl
// (--limit-upload 16) so that only the stop ends them. Target: after-return-ms under 1000 (the
// stop reaches restic within a second of the command's return).
func BenchmarkStopLatency(b *testing.B) {
	ctx := context.Background()
	e := newBenchEnv(b)
	repo, pw, data := filepath.Join(e.dir, "repo"), filepath.Join(e.dir, "pw"), filepath.Join(e.dir, "data")
	if err := os.WriteFile(pw, []byte("bench\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	writeData(b, data, 4, 8<<20, 1)
	resticBin := testenv.Restic(b)
	if out, err := exec.Command(resticBin, "--repo", repo, "--password-file", pw, "init").CombinedOutput(); err != nil {
		b.Fatalf("restic init: %v\n%s", err, out)
	}
	const crawl = 16 // KiB/s: 32 MiB would take over half an hour
	if _, err := e.st.JobCreate(ctx, model.Job{Name: "bench", Engine: "restic", Repository: repo, PasswordFile: pw,
		Paths: []string{data}, LimitUploadKiB: crawl}); err != nil {
		b.Fatal(err)
	}
	rawArgv := engine.Restic{Binary: resticBin}.BackupArgv(engine.Job{Name: "bench", Repository: repo, PasswordFile: pw,
		Paths: []string{data}, CacheDir: filepath.Join(e.dir, "cache-raw"), LimitUpload: crawl}, uuid.New())
	e.daemon(b)
	time.Sleep(time.Second) // the daemon's boot pass and LISTEN

	// From the stop asked (the command's start, StopUnit's call) to restic's line; and for
	// holdfast from the command's return, negative where restic had it first.
	var raw, holdfast, afterReturn []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rawStop := func() {
			spec := systemd.Spec{Name: fmt.Sprintf("bench-raw-%d.service", i), Description: "restic alone", ExecStart: rawArgv,
				KillSignal: syscall.SIGINT}
			if _, err := e.r.Start(ctx, spec); err != nil {
				b.Fatal(err)
			}
			waitActive(b, e.r, spec.Name)
			time.Sleep(2 * time.Second) // restic has opened the repository and is backing up
			asked := time.Now()
			if err := e.r.Stop(ctx, spec.Name); err != nil {
				b.Fatal(err)
			}
			raw = append(raw, e.journalFirst(b, spec.Name, "signal interrupt received").Sub(asked))
			waitGone(b, e.r, spec.Name)
		}
		holdfastStop := func() {
			out, err := e.command("run", "start", "bench", "--json")
			var run struct {
				ID string `json:"id"`
			}
			if err != nil || json.Unmarshal(out, &run) != nil {
				b.Fatalf("holdfast run start: %v\n%s", err, out)
			}
			id := uuid.MustParse(run.ID)
			unit := systemd.UnitName("bench", id, 1)
			waitActive(b, e.r, unit)
			time.Sleep(2 * time.Second)
			asked := time.Now()
			if out, err := e.command("run", "stop", run.ID); err != nil {
				b.Fatalf("holdfast run stop: %v\n%s", err, out)
			}
			returned := time.Now()
			reached := e.journalFirst(b, unit, "signal interrupt received")
			holdfast, afterReturn = append(holdfast, reached.Sub(asked)), append(afterReturn, reached.Sub(returned))
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				got, err := e.st.RunGet(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				if got.Status == model.StatusStopped {
					break
				}
				if !model.Live(got.Status) || time.Now().After(deadline) {
					b.Fatalf("run %s after its stop: %s (%s), want stopped", id, got.Status, got.Reason)
				}
			}
		}
		if i%2 == 0 {
			rawStop()
			holdfastStop()
		} else {
			holdfastStop()
			rawStop()
		}
	}
	b.StopTimer()
	b.Logf("raw StopUnit: %v", raw)
	b.Logf("holdfast:     %v (after run stop returned: %v)", holdfast, afterReturn)
	r, h := median(raw), median(holdfast)
	b.ReportMetric(float64(r.Microseconds())/1000, "raw-ms")
	b.ReportMetric(float64(h.Microseconds())/1000, "holdfast-ms")
	b.ReportMetric(float64(median(afterReturn).Microseconds())/1000, "after-return-ms")
	b.ReportMetric(float64(h)/float64(max(r, time.Millisecond)), "holdfast/raw")
	b.ReportMetric(0, "ns/op")
}

// command runs a holdfast command against the installation and returns its standard output.
func (e *benchEnv) command(args ...string) ([]byte, error) {
	cmd := exec.Command(e.bin, args...)
	cmd.Env = e.env()
	return cmd.Output()
}

// journalFirst waits for the first line of unit in the manager's journal that contains text, and
// returns when it was written.
func (e *benchEnv) journalFirst(b *testing.B, unit, text string) time.Time {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if at, ok := testenv.JournalLineAt(b, e.mgr.JournalDir, unit, text); ok {
			return at
		}
	}
	b.Fatalf("unit %s: no %q in the journal after a minute", unit, text)
	return time.Time{}
}
