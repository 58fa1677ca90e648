package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
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
// many runs the host has. Also the daemon's CPU per probe run, idle and busy: a probe's admission
// and end wake no pass over the host's live runs where the daemon has nothing else to do for
// them. Target: busy/idle <= 1.5.
func BenchmarkStartBusy(b *testing.B) {
	ctx := context.Background()
	e := newBenchEnv(b)
	daemon := e.daemon(b)
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
	cpuBefore := processCPUOf(b, daemon.Process.Pid)
	idle := claims(15)
	idleCPU := processCPUOf(b, daemon.Process.Pid) - cpuBefore

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
	cpuBefore = processCPUOf(b, daemon.Process.Pid)
	busy := claims(15)
	busyCPU := processCPUOf(b, daemon.Process.Pid) - cpuBefore
	b.Logf("idle: %v", idle)
	b.Logf("busy: %v", busy)
	b.ReportMetric(float64(median(idle).Microseconds())/1000, "claim-ms-idle")
	b.ReportMetric(float64(median(busy).Microseconds())/1000, fmt.Sprintf("claim-ms-%d-live", busyRuns))
	b.ReportMetric(float64(median(busy))/float64(median(idle)), "busy/idle")
	// The daemon's CPU for each probe, from its admission to its end, the backstop passes that
	// came meanwhile included: what a run costs the daemon beside its host's live runs.
	b.ReportMetric(float64(idleCPU.Microseconds())/1000/15, "daemon-cpu-ms/run-idle")
	b.ReportMetric(float64(busyCPU.Microseconds())/1000/15, fmt.Sprintf("daemon-cpu-ms/run-%d-live", busyRuns))
	b.ReportMetric(0, "ns/op")
}

// processCPUOf is the CPU time process pid has spent, user and system (/proc/PID/stat, in the
// kernel's clock ticks of 1/100 s).
func processCPUOf(b *testing.B, pid int) time.Duration {
	b.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	var utime, stime int64
	if _, err := fmt.Sscan(fields[11], &utime); err != nil {
		b.Fatal(err)
	}
	if _, err := fmt.Sscan(fields[12], &stime); err != nil {
		b.Fatal(err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
