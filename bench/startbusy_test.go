package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// busyRuns is how many live runs BenchmarkStartBusy gives the daemon's host.
const busyRuns = 2000

// BenchmarkStartBusy: how long a run admitted waits for its spawn's claim (from the run's
// creation to its claim, both on the database's clock) on an idle daemon warmed by five claims
// not counted, then on the same daemon once busyRuns runs of its host are live (their units
// sleep), medians of 15 each. The daemon spawns the run an admission's notification names
// without waiting for its pass over every live run, and its claim finds the runs that share its
// repository through their jobs, not among every live attempt: busy/idle stays near 1 however
// many runs the host has. Target: busy/idle <= 1.5.
func BenchmarkStartBusy(b *testing.B) {
	ctx := context.Background()
	e := newBenchEnv(b)
	e.daemon(b)
	if _, err := e.st.JobCreate(ctx, model.Job{Name: "probe", Engine: "command", Command: []string{"/bin/true"}}); err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Second) // the daemon's boot pass and LISTEN
	claims := func(n int) []time.Duration {
		var d []time.Duration
		for range n {
			run, err := e.st.RunAdmit(ctx, store.RunAdmitParams{Job: "probe", Trigger: "manual", Kind: model.KindBackup})
			if err != nil {
				b.Fatal(err)
			}
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Millisecond) {
				r, err := e.st.RunGet(ctx, run.ID)
				if err != nil {
					b.Fatal(err)
				}
				if !model.Live(r.Status) {
					if r.Status != model.StatusSucceeded {
						b.Fatalf("probe run: %s (%s)", r.Status, r.Reason)
					}
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("probe run still %s after a minute", r.Status)
				}
			}
			attempts, err := e.st.AttemptList(ctx, run.ID)
			if err != nil || len(attempts) != 1 || attempts[0].SpawnClaimedAt == nil {
				b.Fatalf("probe run: attempts %+v %v, want one claimed", attempts, err)
			}
			d = append(d, attempts[0].SpawnClaimedAt.Sub(run.CreatedAt))
		}
		return d
	}
	// The daemon's first claims run on connections that have not planned its statements yet
	// (custom plans, then the server's choice after five executions): discarded, so that the
	// idle figure is the warm daemon's, as the busy one is.
	claims(5)
	idle := claims(15)

	// busyRuns runs whose units sleep, spawned by the daemon, admitted 8 at a time.
	next := make(chan int)
	var wg sync.WaitGroup
	errs := make([]error, busyRuns)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				name := fmt.Sprintf("sleeper%d", i)
				if _, err := e.st.JobCreate(ctx, model.Job{Name: name, Engine: "command", Command: []string{"/bin/sleep", "3600"}}); err != nil {
					errs[i] = err
					continue
				}
				_, errs[i] = e.st.RunAdmit(ctx, store.RunAdmitParams{Job: name, Trigger: "manual", Kind: model.KindBackup})
			}
		})
	}
	for i := range busyRuns {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Second) {
		live, err := e.st.RunListLive(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		running := 0
		for _, l := range live {
			if l.Run.Status == model.StatusRunning {
				running++
			}
		}
		if running == busyRuns {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d runs running after 5 minutes", running, busyRuns)
		}
	}
	busy := claims(15)
	b.Logf("idle: %v", idle)
	b.Logf("busy: %v", busy)
	b.ReportMetric(float64(median(idle).Microseconds())/1000, "claim-ms-idle")
	b.ReportMetric(float64(median(busy).Microseconds())/1000, fmt.Sprintf("claim-ms-%d-live", busyRuns))
	b.ReportMetric(float64(median(busy))/float64(median(idle)), "busy/idle")
	b.ReportMetric(0, "ns/op")
}
