package reconcile_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/store"
)

// A job whose stored windows or time zone do not parse (written around jobdef.Validate, by SQL)
// is never read as having no window, or as in UTC: a pass holds its queued run back with a reason
// that says why, spawns nothing, and logs it once, however many passes see it; once the job is
// corrected, the next pass starts the run.
func TestStoredWindowsThatDoNotParseHoldTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log lockedBuffer
	e := newSweepEnv(t, reconcile.Config{AllowCommandJobs: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	for _, c := range []struct {
		name, zone string
		windows    []string
		want       string // a part of the waiting reason
	}{
		{"unknown-zone", "Mars/Olympus", []string{"daily 00:00-00:01"}, `time zone "Mars/Olympus" is unknown`},
		{"local-zone", "Local", []string{"Sat 01:00-05:00"}, `time zone "Local" is unknown`},
		{"bad-window", "", []string{"Someday 25:00-26:00"}, `window "Someday 25:00-26:00": `},
		{"one-bad-window", "Europe/Berlin", []string{"Sat 01:00-05:00", "daily 03:00"}, `window "daily 03:00": `},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := e.st.JobCreate(ctx, model.Job{Name: c.name, Engine: "command", Command: []string{"/bin/true"},
				TimeZone: c.zone, Windows: c.windows}); err != nil {
				t.Fatal(err)
			}
			run, err := e.st.RunAdmit(ctx, store.RunAdmitParams{Job: c.name, Trigger: "manual", Kind: model.KindBackup})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				got, attempts := sweepAndRead(t, e, run.ID)
				want := "waiting: the maintenance windows of job " + c.name + " cannot be judged"
				if got.Status != model.StatusQueued || !strings.HasPrefix(got.WaitingReason, want) || !strings.Contains(got.WaitingReason, c.want) ||
					len(attempts) != 1 || attempts[0].SpawnClaimedAt != nil {
					t.Fatalf("run %s, waiting %q, attempts %+v; want it queued, unclaimed, waiting with %q and %q", got.Status, got.WaitingReason, attempts, want, c.want)
				}
			}
			n := 0
			for _, line := range strings.Split(log.String(), "\n") {
				if strings.Contains(line, "maintenance windows or time zone do not parse") && strings.Contains(line, "job="+c.name+" ") {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("the job is logged %d times over three passes, want once:\n%s", n, log.String())
			}
			// Corrected, the run starts at the next pass.
			if _, err := e.st.JobUpdate(ctx, c.name, func(j *model.Job) error { j.TimeZone, j.Windows = "", nil; return nil }); err != nil {
				t.Fatal(err)
			}
			_, attempts := sweepAndRead(t, e, run.ID)
			if len(attempts) != 1 || attempts[0].SpawnClaimedAt == nil {
				t.Fatalf("attempts %+v after the job was corrected, want the run's spawn claimed", attempts)
			}
		})
	}
}

// lockedBuffer is a log the passes' workers write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A job with no window is never held for its zone: there is nothing the zone would judge, and
// its schedule is admission's (a zone this host cannot load is holdfast check's to report).
func TestUnloadableZoneWithoutWindowsHoldsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSweepEnv(t, reconcile.Config{AllowCommandJobs: true})
	if _, err := e.st.JobCreate(ctx, model.Job{Name: "no-windows", Engine: "command", Command: []string{"/bin/true"}, TimeZone: "Mars/Olympus"}); err != nil {
		t.Fatal(err)
	}
	run, err := e.st.RunAdmit(ctx, store.RunAdmitParams{Job: "no-windows", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	got, attempts := sweepAndRead(t, e, run.ID)
	if got.WaitingReason != "" || len(attempts) != 1 || attempts[0].SpawnClaimedAt == nil {
		t.Fatalf("run %s, waiting %q, attempts %+v; want its spawn claimed at the first pass", got.Status, got.WaitingReason, attempts)
	}
}

// sweepAndRead runs one pass, which must report no error, and reads the run and its attempts after it.
func sweepAndRead(t *testing.T, e sweepEnv, run uuid.UUID) (model.Run, []model.Attempt) {
	t.Helper()
	ctx := context.Background()
	if stats, err := e.rec.Sweep(ctx); err != nil || stats.Errors > 0 {
		t.Fatalf("sweep: %+v %v", stats, err)
	}
	got, err := e.st.RunGet(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	attempts, err := e.st.AttemptList(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	return got, attempts
}
