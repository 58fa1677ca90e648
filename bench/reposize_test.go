package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/ledger"
)

// BenchmarkRepoSize: what measuring a local repository costs, of a terabyte (65,536 packs of
// 16 MiB in restic's 256 data directories, sparse, so the disk holds none of it) and as restic
// init leaves it (the 256 directories, empty). A run that adds to a local repository measures it
// as its unit starts and as it ends, root-side evidence of what it added.
// Baseline: `du -s --apparent-size` over the same tree, in the same run, the tool an operator
// would measure it with. Medians of 9, each way in turn.
func BenchmarkRepoSize(b *testing.B) {
	tb, tdu := measureRepo(b, 256)
	fb, fdu := measureRepo(b, 0)
	b.ReportMetric(ms(tb), "walk-ms")
	b.ReportMetric(ms(tdu), "du-ms")
	b.ReportMetric(float64(tb)/float64(tdu), "walk/du")
	b.ReportMetric(ms(fb), "fresh-walk-ms")
	b.ReportMetric(ms(fdu), "fresh-du-ms")
	b.ReportMetric(float64(fb)/float64(fdu), "fresh-walk/du")
	b.ReportMetric(0, "ns/op")
}

// measureRepo lays out a repository of packs 16 MiB packs in each of restic's 256 data
// directories and returns the medians of RepoSize's time and du's over it.
func measureRepo(b *testing.B, packs int) (walkTime, duTime time.Duration) {
	repo := filepath.Join(b.TempDir(), "repo")
	const dirs, packSize = 256, 16 << 20
	for i := range dirs {
		dir := filepath.Join(repo, "data", fmt.Sprintf("%02x", i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		for j := range packs {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%02x%062x", i, j)))
			if err == nil {
				err = f.Truncate(packSize)
				err = joinClose(err, f)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, d := range []string{"index", "snapshots", "keys", "locks"} {
		if err := os.MkdirAll(filepath.Join(repo, d), 0o700); err != nil {
			b.Fatal(err)
		}
	}
	want := int64(dirs*packs) * packSize
	var walk, du []time.Duration
	b.ResetTimer()
	for i := range 9 {
		measure := func() {
			start := time.Now()
			got, err := ledger.RepoSize(repo)
			walk = append(walk, time.Since(start))
			if err != nil || got != want {
				b.Fatalf("RepoSize = %d, %v; want %d", got, err, want)
			}
		}
		baseline := func() {
			start := time.Now()
			out, err := exec.Command("du", "-s", "--apparent-size", "-B1", filepath.Join(repo, "data")).Output()
			du = append(du, time.Since(start))
			if err != nil {
				b.Fatalf("du: %v", err)
			}
			if n, err := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64); err != nil || n < want {
				b.Fatalf("du says %q; want at least %d", out, want)
			}
		}
		if i%2 == 0 {
			measure()
			baseline()
		} else {
			baseline()
			measure()
		}
	}
	b.StopTimer()
	b.Logf("%d packs: RepoSize %v", dirs*packs, walk)
	b.Logf("%d packs: du       %v", dirs*packs, du)
	return median(walk), median(du)
}

func joinClose(err error, f *os.File) error {
	if cerr := f.Close(); err == nil {
		return cerr
	}
	return err
}
