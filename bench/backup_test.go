package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/spawn"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
	"github.com/holdfast-backup/holdfast/unitcmd"
)

// writeData fills dir with files of fresh pseudo-random bytes, size in all: incompressible, and
// new to every repository, so each backup of it uploads all of it.
func writeData(b *testing.B, dir string, files int, size int64, seed uint64) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})
	buf := make([]byte, 1<<20)
	for i := range files {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		for left := size / int64(files); left > 0; left -= int64(len(buf)) {
			n := min(left, int64(len(buf)))
			_, _ = rng.Read(buf[:n])
			if _, err := f.Write(buf[:n]); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// backupPair measures n backups of fresh data of the given size each way: restic alone, with
// the very command line a run's unit gets (into a repository and cache of its own), and
// `holdfast run start --wait` against a real daemon with its default settings, from the
// command's start to its exit. With unitAlone, also a third way: the unit the daemon would start
// for the run (its sandbox, credentials, holdfast exec and ExecStopPost), started directly over
// D-Bus and waited for until it is gone, without the daemon, the CLI or the database: what systemd
// costs, apart from what holdfast adds. The ways take turns going first, over the same bytes, so
// noise hits each.
func backupPair(b *testing.B, n, files int, size int64, unitAlone bool) (restic, holdfast, unit []time.Duration, phases []runPhases) {
	ctx := context.Background()
	e := newBenchEnv(b)
	resticBin := testenv.Restic(b)
	pw, data := filepath.Join(e.dir, "pw"), filepath.Join(e.dir, "data")
	if err := os.WriteFile(pw, []byte("bench\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	rawRepo, hfRepo := filepath.Join(e.dir, "repo-restic"), filepath.Join(e.dir, "repo-holdfast")
	if out, err := exec.Command(resticBin, "--repo", rawRepo, "--password-file", pw, "init").CombinedOutput(); err != nil {
		b.Fatalf("restic init: %v\n%s", err, out)
	}
	// A copy, not a second init: restic sizes its key derivation (scrypt's N and p) to the
	// machine's load at init, and two inits here often differ by a factor of two to four, which
	// every backup pays again on opening its repository (tenths of a second on two cores).
	unitRepo := filepath.Join(e.dir, "repo-unit")
	for _, repo := range []string{hfRepo, unitRepo} {
		if out, err := exec.Command("cp", "-a", rawRepo, repo).CombinedOutput(); err != nil {
			b.Fatalf("copy the repository: %v\n%s", err, out)
		}
	}
	// A ceiling above what the runs add, so that no hold ever stops one (the budget from history,
	// twice the most a recent run added, is not what is measured here).
	budget := 2*int64(n)*size + 1<<30
	if _, err := e.st.JobCreate(ctx, model.Job{Name: "bench", Engine: "restic", Repository: hfRepo, PasswordFile: pw, Paths: []string{data},
		MaxAdded: &budget}); err != nil {
		b.Fatal(err)
	}
	// The unit alone backs up into a repository of its own, as a job of its own that the daemon
	// never runs (nothing admits a run of it).
	unitJob, err := e.st.JobCreate(ctx, model.Job{Name: "bench-unit", Engine: "restic", Repository: unitRepo, PasswordFile: pw,
		Paths: []string{data}, MaxAdded: &budget})
	if err != nil {
		b.Fatal(err)
	}
	if err := jobunit.PrepareCache(e.state, unitJob); err != nil {
		b.Fatal(err)
	}
	unitCfg := jobunit.Config{StateDir: e.state, Binary: unitcmd.Binary(e.bin), ResticBinary: resticBin}
	raw := engine.Restic{Binary: resticBin}.BackupArgv(engine.Job{Name: "bench", Repository: rawRepo, PasswordFile: pw,
		Paths: []string{data}, CacheDir: filepath.Join(e.dir, "cache-restic")}, uuid.New())
	e.daemon(b)
	time.Sleep(time.Second) // the daemon's boot pass and LISTEN

	b.ResetTimer()
	for i := range n {
		writeData(b, data, files, size, uint64(i))
		// The written data on disk before either side reads it: a gigabyte of writeback would
		// otherwise slow whichever backup runs first.
		syscall.Sync()
		rawBackup := func() {
			start := time.Now()
			if out, err := exec.Command(raw[0], raw[1:]...).CombinedOutput(); err != nil {
				b.Fatalf("restic backup: %v\n%s", err, lastLines(out))
			}
			restic = append(restic, time.Since(start))
		}
		holdfastBackup := func() {
			start := time.Now()
			cmd := exec.Command(e.bin, "run", "start", "bench", "--wait", "--json")
			cmd.Env = e.env()
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			end := time.Now()
			holdfast = append(holdfast, end.Sub(start))
			var run struct {
				ID         uuid.UUID `json:"id"`
				Status     string    `json:"status"`
				BytesAdded *int64    `json:"bytes_added"`
			}
			if err != nil || json.Unmarshal(stdout.Bytes(), &run) != nil || run.Status != "succeeded" || run.BytesAdded == nil || *run.BytesAdded < size*9/10 {
				b.Fatalf("holdfast run start --wait: %v, run %+v\n%s\n%s", err, run, stdout.Bytes(), lastLines(stderr.Bytes()))
			}
			phases = append(phases, e.phasesOf(b, run.ID, start, end))
		}
		unitBackup := func() {
			id := uuid.New()
			spec := spawn.UnitSpec(unitCfg, unitJob, model.Run{ID: id, Kind: model.KindBackup}, 1)
			start := time.Now()
			// What the daemon does between its claim and the start: the attempt's directories,
			// the unit's paths checked and its credentials staged.
			if err := os.MkdirAll(filepath.Dir(jobunit.JournalPath(e.state, id, 1)), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := jobunit.Guard(unitCfg, unitJob, &spec, credentials.AttemptKey(id, 1)); err != nil {
				b.Fatal(err)
			}
			if _, err := e.r.Start(ctx, spec); err != nil {
				b.Fatal(err)
			}
			m := waitEnded(b, e.r, e.state, id, spec.Name)
			unit = append(unit, time.Since(start))
			if m.ServiceResult != "success" {
				b.Fatalf("the unit alone ended %+v", m)
			}
		}
		// Each goes first in turn: the later ones read what the first left in the page cache, and
		// the machine's state drifts between them.
		sides := []func(){rawBackup, holdfastBackup}
		if unitAlone {
			sides = append(sides, unitBackup)
		}
		for k := range sides {
			sides[(i+k)%len(sides)]()
		}
	}
	b.StopTimer()
	return restic, holdfast, unit, phases
}

// waitEnded waits until the attempt's exit marker is there and its unit gone, as the daemon
// does before it closes a run, and returns the marker.
func waitEnded(b *testing.B, r *systemd.Client, state string, run uuid.UUID, unit string) systemd.Marker {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var m systemd.Marker
	for {
		var err error
		if m, err = systemd.ReadMarker(state, run, 1); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("unit %s wrote no exit marker: %v", unit, err)
		}
		time.Sleep(time.Millisecond)
	}
	for {
		alive, _, err := r.Alive(context.Background(), unit)
		if err == nil && !alive {
			return m
		}
		if time.Now().After(deadline) {
			b.Fatalf("unit %s did not go away (%v)", unit, err)
		}
		time.Sleep(time.Millisecond)
	}
}

func lastLines(out []byte) []byte {
	if len(out) > 2000 {
		return out[len(out)-2000:]
	}
	return out
}

// runPhases is where the time of one `run start --wait` went, from the command's start to its
// exit, by the timestamps the run left: the database's for the admission (the run's creation),
// the daemon's claim of the spawn, the unit's start as the daemon recorded it and the run's end;
// the exit marker's, written by the unit's ExecStopPost. One clock: all of them on this machine.
type runPhases struct {
	Admit  time.Duration // command start -> run created (the CLI's start, connection, admission)
	Claim  time.Duration // run created -> spawn claimed (the daemon's wake and pass)
	Start  time.Duration // spawn claimed -> unit started (StartTransientUnit and its record)
	Unit   time.Duration // unit started -> exit marker (the unit's run, restic's included)
	Finish time.Duration // exit marker -> run finished (the end noticed and recorded)
	Wake   time.Duration // run finished -> command's exit (the CLI's wake and output)
	// Unit in three, where the file system keeps birth times (split is false where not): unit
	// started -> run journal created (systemd's start of the unit, its sandbox, holdfast exec's
	// own start), -> the engine's exit event in the journal (restic's start and run), -> exit
	// marker (holdfast exec's end, the unit's teardown, ExecStopPost's start).
	UnitStart, Engine, UnitEnd time.Duration
	split                      bool
}

func (e *benchEnv) phasesOf(b *testing.B, id uuid.UUID, start, end time.Time) runPhases {
	b.Helper()
	ctx := context.Background()
	run, err := e.st.RunGet(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	attempts, err := e.st.AttemptList(ctx, id)
	if err != nil || len(attempts) != 1 {
		b.Fatalf("run %s: attempts %+v, %v: want one", id, attempts, err)
	}
	a := attempts[0]
	m, err := systemd.ReadMarker(e.state, id, a.No)
	if err != nil || a.SpawnClaimedAt == nil || a.StartedAt == nil || run.FinishedAt == nil {
		b.Fatalf("run %s: marker %v, attempt %+v, finished %v", id, err, a, run.FinishedAt)
	}
	p := runPhases{
		Admit:  run.CreatedAt.Sub(start),
		Claim:  a.SpawnClaimedAt.Sub(run.CreatedAt),
		Start:  a.StartedAt.Sub(*a.SpawnClaimedAt),
		Unit:   m.At.Sub(*a.StartedAt),
		Finish: run.FinishedAt.Sub(m.At),
		Wake:   end.Sub(*run.FinishedAt),
	}
	if born, exited, ok := e.journalTimes(b, id, a.No); ok {
		p.UnitStart, p.Engine, p.UnitEnd, p.split = born.Sub(*a.StartedAt), exited.Sub(born), m.At.Sub(exited), true
	}
	return p
}

// journalTimes returns when an attempt's run journal was created (its birth time: holdfast exec
// creates it before it starts the engine) and the time of its exit event (the engine's exit);
// ok is false where the file system keeps no birth times.
func (e *benchEnv) journalTimes(b *testing.B, id uuid.UUID, attempt int) (born, exited time.Time, ok bool) {
	b.Helper()
	path := jobunit.JournalPath(e.state, id, attempt)
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &st); err != nil {
		b.Fatalf("run %s: stat its journal: %v", id, err)
	}
	if st.Mask&unix.STATX_BTIME == 0 {
		return born, exited, false
	}
	born = time.Unix(st.Btime.Sec, int64(st.Btime.Nsec))
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		var ev journal.Event
		if json.Unmarshal(line, &ev) == nil && ev.Type == engine.TypeExit {
			return born, ev.Time, true
		}
	}
	b.Fatalf("run %s: no exit event in its journal", id)
	return born, exited, false
}

func reportPair(b *testing.B, restic, holdfast, unit []time.Duration) {
	b.Logf("restic alone: %v", restic)
	b.Logf("holdfast:     %v", holdfast)
	if len(unit) > 0 {
		b.Logf("unit alone:   %v", unit)
		// What systemd adds to restic (the unit's start, sandbox and end), and what holdfast adds
		// to that unit (the CLI, the database, the daemon's claim, start and finish), each the
		// median of the rounds' differences.
		unitExtra, overUnit := make([]time.Duration, len(unit)), make([]time.Duration, len(unit))
		for i := range unit {
			unitExtra[i], overUnit[i] = unit[i]-restic[i], holdfast[i]-unit[i]
		}
		b.ReportMetric(float64(median(unit).Microseconds())/1000, "unit-alone-ms")
		b.ReportMetric(float64(median(unitExtra).Microseconds())/1000, "unit-alone-extra-ms")
		b.ReportMetric(float64(median(overUnit).Microseconds())/1000, "holdfast-over-unit-ms")
	}
	r, h := median(restic), median(holdfast)
	b.ReportMetric(float64(r.Microseconds())/1000, "restic-ms")
	b.ReportMetric(float64(h.Microseconds())/1000, "holdfast-ms")
	b.ReportMetric(float64(h)/float64(r), "holdfast/restic")
	// Each round's two runs read the same bytes on the same machine state: the median of their
	// differences is the steadier figure of what holdfast adds when restic's own time drifts.
	diffs := make([]time.Duration, len(restic))
	for i := range restic {
		diffs[i] = holdfast[i] - restic[i]
	}
	b.ReportMetric(float64(median(diffs).Microseconds())/1000, "paired-extra-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkBackupSmall: a 1 MB backup through `holdfast run start --wait` against restic alone,
// medians of 20. Target: holdfast/restic <= 1.10 (goal 1.05), a fixed cost (the paired
// difference) of 100 ms at most (goal 50), and a unit's end recorded within 50 ms p99 (goal 10).
func BenchmarkBackupSmall(b *testing.B) {
	restic, holdfast, unit, phases := backupPair(b, 20, 1, 1<<20, true)
	reportPair(b, restic, holdfast, unit)
	reportPhases(b, restic, phases)
}

// BenchmarkBackupLarge: a 1 GB backup (16 files), holdfast against restic alone, medians of 6
// (about 8s each on two cores); HOLDFAST_BENCH_LARGE_RUNS asks for another number. Target:
// holdfast/restic <= 1.05 (goal 1.02).
func BenchmarkBackupLarge(b *testing.B) {
	n := 6
	if v := os.Getenv("HOLDFAST_BENCH_LARGE_RUNS"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
			b.Fatalf("HOLDFAST_BENCH_LARGE_RUNS=%q: want a positive number", v)
		}
	}
	restic, holdfast, _, phases := backupPair(b, n, 16, 1<<30, false)
	reportPair(b, restic, holdfast, nil)
	reportPhases(b, restic, phases)
}

// reportPhases reports the median of each phase, and the unit's run less restic's own time in
// the same round: what the unit adds around restic (its start, the journal, ExecStopPost); and
// the 99th percentile of the finish.
func reportPhases(b *testing.B, restic []time.Duration, phases []runPhases) {
	pick := func(f func(runPhases) time.Duration) []time.Duration {
		var d []time.Duration
		for _, p := range phases {
			d = append(d, f(p))
		}
		return d
	}
	unitExtra := pick(func(p runPhases) time.Duration { return p.Unit })
	engineExtra := pick(func(p runPhases) time.Duration { return p.Engine })
	for i := range unitExtra {
		unitExtra[i] -= restic[i]
		engineExtra[i] -= restic[i]
	}
	type phase struct {
		name string
		d    []time.Duration
	}
	all := []phase{
		{"admit", pick(func(p runPhases) time.Duration { return p.Admit })},
		{"claim", pick(func(p runPhases) time.Duration { return p.Claim })},
		{"start", pick(func(p runPhases) time.Duration { return p.Start })},
		{"unit-extra", unitExtra},
		{"finish", pick(func(p runPhases) time.Duration { return p.Finish })},
		{"wake", pick(func(p runPhases) time.Duration { return p.Wake })},
	}
	// The unit's part in three; restic's own time in the unit less restic alone in the same round
	// (engine-extra) is mostly restic's noise: what the unit adds is unit-start and unit-end.
	if !slices.ContainsFunc(phases, func(p runPhases) bool { return !p.split }) {
		all = append(all, phase{"unit-start", pick(func(p runPhases) time.Duration { return p.UnitStart })},
			phase{"engine-extra", engineExtra}, phase{"unit-end", pick(func(p runPhases) time.Duration { return p.UnitEnd })},
			// Each round's time outside the engine, from the command's start to its exit: the fixed
			// cost without restic's own noise, which the paired difference carries.
			phase{"outside-engine", pick(func(p runPhases) time.Duration {
				return p.Admit + p.Claim + p.Start + p.Unit - p.Engine + p.Finish + p.Wake
			})})
	} else {
		b.Logf("the unit's phases are not split: this file system keeps no birth times")
	}
	for _, ph := range all {
		b.Logf("%-10s %v", ph.name, ph.d)
		b.ReportMetric(float64(median(ph.d).Microseconds())/1000, ph.name+"-ms")
	}
	// The end of a unit (its marker, written last) until its run is recorded final.
	b.ReportMetric(ms(percentile(pick(func(p runPhases) time.Duration { return p.Finish }), 0.99)), "finish-p99-ms")
}
