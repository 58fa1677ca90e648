package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/catalog"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/testenv"
)

// BenchmarkSnapshotLs: a snapshot of 200,000 files (200 directories of 1,000), listed by
// `holdfast snapshot ls` at its top and whole (--recursive --json), beside restic's own ls of
// the same run as root without a unit, in turns. Reported: the medians of 5 of each, their ratio,
// and the CLI's peak resident memory for each listing (getrusage of the command): the whole
// listing streams, so its peak stays near the top level's instead of growing with the entries.
// Then both listings from the snapshot's catalog (--catalog), with a restic that cannot run,
// and what making the catalog took.
func BenchmarkSnapshotLs(b *testing.B) {
	const dirs, perDir = 200, 1000
	ctx := context.Background()
	e := newBenchEnv(b)
	resticBin := testenv.Restic(b)
	data := filepath.Join(e.dir, "data")
	for d := range dirs {
		dir := filepath.Join(data, fmt.Sprintf("d%03d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range perDir {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", f)), []byte(fmt.Sprintf("%d/%d\n", d, f)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	pw, repo := filepath.Join(e.dir, "pw"), filepath.Join(e.dir, "repo")
	if err := os.WriteFile(pw, []byte("bench\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	restic := func(args ...string) *exec.Cmd {
		return exec.Command(resticBin, append([]string{"--repo", repo, "--password-file", pw, "--no-cache"}, args...)...)
	}
	for _, args := range [][]string{{"init"}, {"backup", "--tag", "holdfast-job=browse", "--host", "bench", data}} {
		if out, err := restic(args...).CombinedOutput(); err != nil {
			b.Fatalf("restic %s: %v\n%s", args[0], err, lastLines(out))
		}
	}
	if _, err := e.st.JobCreate(ctx, model.Job{Name: "browse", Engine: "restic", Repository: repo, PasswordFile: pw, Paths: []string{data}}); err != nil {
		b.Fatal(err)
	}
	holdfast := func(args ...string) *exec.Cmd {
		cmd := exec.Command(e.bin, args...)
		cmd.Env = e.env()
		return cmd
	}
	if out, err := holdfast("snapshot", "list", "--refresh", "browse", "--restic", resticBin).CombinedOutput(); err != nil {
		b.Fatalf("snapshot list --refresh: %v\n%s", err, out)
	}

	// run runs cmd, counting the lines it prints, and returns its time and its peak memory.
	run := func(cmd *exec.Cmd) (time.Duration, int, int64) {
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		var stderr lineTail
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		lines := 0
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines++
		}
		if err := cmd.Wait(); err != nil {
			b.Fatalf("%v: %v\n%s", cmd.Args, err, stderr)
		}
		return time.Since(start), lines, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	}
	var top, topRaw, whole, wholeRaw []time.Duration
	var topRSS, wholeRSS int64
	b.ResetTimer()
	for i := range 5 {
		sides := []func(){
			func() {
				d, n, rss := run(holdfast("snapshot", "ls", "browse", "latest", data, "--restic", resticBin))
				if n != dirs {
					b.Fatalf("snapshot ls printed %d lines, want %d", n, dirs)
				}
				top, topRSS = append(top, d), max(topRSS, rss)
			},
			func() {
				d, n, _ := run(restic("--no-lock", "ls", "--json", "latest", data))
				if n != dirs+2 { // the snapshot and the directory itself
					b.Fatalf("restic ls printed %d lines, want %d", n, dirs+2)
				}
				topRaw = append(topRaw, d)
			},
			func() {
				d, n, rss := run(holdfast("snapshot", "ls", "browse", "latest", data, "--recursive", "--json", "--restic", resticBin))
				if n != dirs*perDir+dirs {
					b.Fatalf("snapshot ls --recursive printed %d lines, want %d", n, dirs*perDir+dirs)
				}
				whole, wholeRSS = append(whole, d), max(wholeRSS, rss)
			},
			func() {
				d, _, _ := run(restic("--no-lock", "ls", "--json", "--recursive", "latest", data))
				wholeRaw = append(wholeRaw, d)
			},
		}
		for k := range sides {
			sides[(i+k)%len(sides)]()
		}
	}
	// The same listings from the snapshot's catalog (job add --catalog), made here as the
	// daemon makes it after a backup: restic's listing of the whole snapshot, once.
	b.StopTimer()
	snaps, err := e.st.SnapshotList(ctx, repo)
	if err != nil || len(snaps) != 1 {
		b.Fatalf("snapshots: %v %v", snaps, err)
	}
	began := time.Now()
	err = catalog.Write(catalog.DirIn(e.state), "browse", snaps[0].ID, func(each func(engine.Node) error) error {
		return engine.Restic{Binary: resticBin}.Ls(ctx, engine.Job{Repository: repo, PasswordFile: pw}, snaps[0].ID, "/", true, each)
	})
	if err != nil {
		b.Fatal(err)
	}
	made := time.Since(began)
	b.StartTimer()
	var catTop, catWhole []time.Duration
	for range 5 {
		d, n, _ := run(holdfast("snapshot", "ls", "browse", "latest", data, "--restic", "/bin/false"))
		if n != dirs {
			b.Fatalf("snapshot ls from the catalog printed %d lines, want %d", n, dirs)
		}
		catTop = append(catTop, d)
		d, n, _ = run(holdfast("snapshot", "ls", "browse", "latest", data, "--recursive", "--json", "--restic", "/bin/false"))
		if n != dirs*perDir+dirs {
			b.Fatalf("snapshot ls --recursive from the catalog printed %d lines, want %d", n, dirs*perDir+dirs)
		}
		catWhole = append(catWhole, d)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(made), "catalog-made-ms")
	b.ReportMetric(ms(median(catTop)), "catalog-top-ms")
	b.ReportMetric(ms(median(catWhole)), "catalog-whole-ms")
	b.ReportMetric(float64(median(catTop))/float64(median(topRaw)), "catalog-top/restic")
	b.ReportMetric(ms(median(top)), "top-ms")
	b.ReportMetric(ms(median(topRaw)), "restic-top-ms")
	b.ReportMetric(float64(median(top))/float64(median(topRaw)), "top/restic")
	b.ReportMetric(ms(median(whole)), "whole-ms")
	b.ReportMetric(ms(median(wholeRaw)), "restic-whole-ms")
	b.ReportMetric(float64(median(whole))/float64(median(wholeRaw)), "whole/restic")
	b.ReportMetric(float64(topRSS)/(1<<20), "top-maxrss-MiB")
	b.ReportMetric(float64(wholeRSS)/(1<<20), "whole-maxrss-MiB")
	b.ReportMetric(0, "ns/op")
}

// lineTail keeps the end of what a command wrote to its standard error.
type lineTail struct{ buf []byte }

func (t *lineTail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4<<10 {
		t.buf = t.buf[len(t.buf)-4<<10:]
	}
	return len(p), nil
}

func (t *lineTail) String() string { return string(t.buf) }

var _ io.Writer = (*lineTail)(nil)
