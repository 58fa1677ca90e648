package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
)

// idleWindow is how long the idle daemon is watched: each of its periodic passes falls in it
// (a sweep within 30 s, a watch within a minute), and one tick of the kernel's accounting
// (10 ms) is 0.017% of it; the threads' figure counts nanoseconds.
const idleWindow = time.Minute

// idleSettle is how long the daemon runs before it is watched.
const idleSettle = 20 * time.Second

// BenchmarkIdle: a daemon with its default settings and 1,000 scheduled jobs (half on
// intervals, half on daily cron expressions in a time zone), none due within the hour, watched
// for idleWindow after its first passes. Reported as % of one core, twice:
// from the kernel's tick counts of the process (utime+stime, every thread, dead ones too), and
// from the nanosecond run times of its live threads. Target: <= 0.1% (goal 0.03%).
func BenchmarkIdle(b *testing.B) {
	const jobs = 1000
	ctx := context.Background()
	e := newBenchEnv(b)
	later := time.Now().Add(time.Hour)
	for i := range jobs {
		next := later.Add(time.Duration(i) * time.Second)
		j := model.Job{Name: fmt.Sprintf("idle%d", i), Engine: "command", Command: []string{"/bin/true"},
			Schedule: "@every 2h", NextRunAt: &next}
		if i%2 == 1 {
			j.Schedule, j.TimeZone = fmt.Sprintf("%d %d * * *", i%60, i%24), "Europe/Berlin"
		}
		if _, err := e.st.JobCreate(ctx, j); err != nil {
			b.Fatal(err)
		}
	}
	pid := e.daemon(b).Process.Pid
	// The boot pass and the first admission and watch passes, and the connections they opened
	// closed again (store.DefaultMaxConnIdleTime): what follows is the daemon at rest.
	time.Sleep(idleSettle)

	b.ResetTimer()
	ticks0, ns0 := cpuTicks(b, pid), cpuNanos(b, pid)
	start := time.Now()
	time.Sleep(idleWindow)
	ticks1, ns1 := cpuTicks(b, pid), cpuNanos(b, pid)
	wall := time.Since(start)
	b.StopTimer()

	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	b.ReportMetric(100*float64(time.Duration(ticks1-ticks0)*tick)/float64(wall), "cpu-%")
	b.ReportMetric(100*float64(ns1-ns0)/float64(wall), "cpu-%-threads")
	b.ReportMetric(0, "ns/op")
}

// cpuTicks is the process's user and system time in clock ticks, from /proc/PID/stat.
func cpuTicks(b *testing.B, pid int) int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name may hold spaces: fields are counted after its closing parenthesis.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14 of proc(5)
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	return utime + stime
}

// cpuNanos is the time on a CPU of the process's live threads, in ns, from their schedstat.
func cpuNanos(b *testing.B, pid int) int64 {
	b.Helper()
	paths, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(paths) == 0 {
		b.Fatalf("threads of %d: %v", pid, err)
	}
	var sum int64
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that just ended
		}
		f := strings.Fields(string(raw))
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			sum += n
		}
	}
	return sum
}
