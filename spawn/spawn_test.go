package spawn_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/spawn"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// world records, in order, what a spawn asks of the store, of systemd and of its callbacks.
// These fakes check the order of the steps and which failure gives the claim back how; the
// same steps against a real PostgreSQL and systemd are the reconciler's sweep tests and the
// binary's scenarios.
type world struct {
	calls    []string
	held     bool   // the lease
	loseAt   string // the call after which the lease is lost
	startErr error
	armErr   error
	blocked  string // AttemptClaimSpawn's reason a limit holds the run back
	taken    bool   // the attempt was claimed already (AttemptClaimSpawn answers false)
}

// spawner is a Spawner over w (its store and its systemd), which records each start and
// refusal among w's calls.
func (w *world) spawner(t *testing.T) *spawn.Spawner {
	t.Helper()
	s, err := spawn.New(spawn.Config{
		Store: w, Units: w, Jobs: jobunit.Config{StateDir: t.TempDir(), Binary: "/usr/bin/holdfast"},
		Budget:   time.Minute,
		Lease:    func() (model.Lease, bool) { return lease, w.held },
		Starting: func(model.LiveRun) { w.record("Starting") },
		Refused: func(_ context.Context, _ model.LiveRun, reason string) error {
			w.record("Refused %s", reason)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// lease is the host's lease the spawner is given; every fenced write must carry it.
var lease = model.Lease{Host: "h", Holder: "daemon-1", Generation: 7}

func (w *world) fenced(call string, l model.Lease) {
	if l != lease {
		w.record("%s under the wrong lease %+v", call, l)
	}
}

func (w *world) record(format string, args ...any) {
	call := fmt.Sprintf(format, args...)
	w.calls = append(w.calls, call)
	if w.loseAt != "" && strings.HasPrefix(call, w.loseAt) {
		w.held = false
	}
}

func (w *world) AttemptEndingsSinceLastStart(context.Context, string) ([]model.AttemptEnd, error) {
	w.record("AttemptEndingsSinceLastStart")
	return nil, nil
}

func (w *world) AttemptClaimSpawn(_ context.Context, l model.Lease, c model.SpawnClaim) (bool, string, error) {
	w.fenced("AttemptClaimSpawn", l)
	w.record("AttemptClaimSpawn %d armed=%t", c.Attempt.No, c.ArmedFor != nil)
	if w.blocked != "" {
		return false, w.blocked, nil
	}
	return !w.taken, "", nil
}

func (w *world) AttemptReleaseSpawnClaim(_ context.Context, l model.Lease, p store.AttemptReleaseSpawnClaimParams) error {
	w.fenced("AttemptReleaseSpawnClaim", l)
	w.record("AttemptReleaseSpawnClaim %d mayExist=%t", p.Ref.No, p.MayExist)
	return nil
}

func (w *world) AttemptHoldSize(context.Context, model.Lease, store.AttemptHoldSizeParams) (model.SizedHold, error) {
	w.record("AttemptHoldSize")
	return model.SizedHold{}, nil
}

func (w *world) AttemptSetRepoBaseline(context.Context, model.Lease, store.AttemptSetRepoBaselineParams) error {
	w.record("AttemptSetRepoBaseline")
	return nil
}

func (w *world) AttemptMarkStarted(_ context.Context, l model.Lease, p store.AttemptMarkStartedParams) error {
	w.fenced("AttemptMarkStarted", l)
	w.record("AttemptMarkStarted %d", p.Ref.No)
	return nil
}

func (w *world) RunSetWaiting(_ context.Context, p store.RunSetWaitingParams) error {
	w.record("RunSetWaiting %s", p.Reason)
	return nil
}

func (w *world) Start(context.Context, systemd.Spec) (bool, error) {
	w.record("Start")
	return false, w.startErr
}

func (w *world) Arm(context.Context, systemd.Spec, time.Time) (bool, error) {
	w.record("Arm")
	return false, w.armErr
}

var refusal = dbus.Error{Name: "org.freedesktop.DBus.Error.InvalidArgs", Body: []any{"bad property"}}

func TestSpawn(t *testing.T) {
	at := time.Now().Add(time.Hour)
	for _, c := range []struct {
		name  string
		world world
		at    *time.Time
		want  []string
		err   string // what Spawn returns, "" for nil
		armOK bool   // ArmRefused stays false
	}{
		{name: "started: claimed, the guard told, started, then marked running",
			world: world{held: true}, armOK: true,
			want: []string{"AttemptClaimSpawn 1 armed=false", "Starting", "Start", "AttemptMarkStarted 1"}},
		{name: "armed: claimed for its time, the guard told, armed, the run stays queued",
			world: world{held: true}, at: &at, armOK: true,
			want: []string{"AttemptClaimSpawn 1 armed=true", "Starting", "Arm"}},
		{name: "held back by a limit: the run waits with the reason, never started",
			world: world{held: true, blocked: "waiting: 2 runs hold a unit, the global limit is 2"}, armOK: true,
			want: []string{"AttemptClaimSpawn 1 armed=false", "RunSetWaiting waiting: 2 runs hold a unit, the global limit is 2"}},
		{name: "claimed already (another daemon, or a stop): nothing more",
			world: world{held: true, taken: true}, armOK: true,
			want: []string{"AttemptClaimSpawn 1 armed=false"}},
		{name: "no lease: nothing claimed, nothing started",
			world: world{held: false}, armOK: true,
			want: nil},
		{name: "lease lost after the claim: the claim given back, systemd never asked",
			world: world{held: true, loseAt: "AttemptClaimSpawn"}, armOK: true,
			want: []string{"AttemptClaimSpawn 1 armed=false", "AttemptReleaseSpawnClaim 1 mayExist=false"},
			err:  "not started: host lease lost"},
		{name: "systemd cannot be asked: the claim given back, the unit may exist",
			world: world{held: true, startErr: errors.New("connection reset")}, armOK: true,
			want: []string{"AttemptClaimSpawn 1 armed=false", "Starting", "Start", "AttemptReleaseSpawnClaim 1 mayExist=true"},
			err:  "connection reset"},
		{name: "systemd refuses the unit: closed as never run, the claim kept",
			world: world{held: true, startErr: refusal}, armOK: true,
			want: []string{"AttemptClaimSpawn 1 armed=false", "Starting", "Start", "Refused systemd refused to start the unit: bad property"}},
		{name: "systemd refuses the timer: the claim given back, no timers from then on",
			world: world{held: true, armErr: refusal}, at: &at, armOK: false,
			want: []string{"AttemptClaimSpawn 1 armed=true", "Starting", "Arm", "AttemptReleaseSpawnClaim 1 mayExist=true"},
			err:  "bad property"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := c.world
			s := w.spawner(t)
			job := model.Job{Name: "j", Engine: engine.NameCommand, Command: []string{"/bin/true"}}
			l := model.LiveRun{Run: model.Run{ID: uuid.New(), JobName: "j", Kind: model.KindBackup}, Attempt: model.Attempt{No: 1}, JobEngine: engine.NameCommand}
			err := s.Spawn(context.Background(), l, job, c.at) // not started: in the caller
			if (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
				t.Fatalf("Spawn: %v, want an error with %q", err, c.err)
			}
			if !slices.Equal(w.calls, c.want) {
				t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(w.calls, "\n"), strings.Join(c.want, "\n"))
			}
			if s.ArmRefused() == c.armOK {
				t.Fatalf("ArmRefused %t after this spawn, want %t", s.ArmRefused(), !c.armOK)
			}
		})
	}
}

// New refuses a Spawner that could not tell whether it may act, or close a run systemd refused.
func TestNewRefuses(t *testing.T) {
	lease := func() (model.Lease, bool) { return model.Lease{}, true }
	refused := func(context.Context, model.LiveRun, string) error { return nil }
	for _, c := range []struct {
		cfg  spawn.Config
		want string
	}{
		{spawn.Config{Refused: refused, Budget: time.Minute}, "spawn: Lease and Refused are required"},
		{spawn.Config{Lease: lease, Budget: time.Minute}, "spawn: Lease and Refused are required"},
		{spawn.Config{Lease: lease, Refused: refused, Workers: -1, Budget: time.Minute}, "spawn: -1 workers: give at least 1"},
		{spawn.Config{Lease: lease, Refused: refused}, "spawning: task budget 0s: give a positive duration"},
	} {
		if _, err := spawn.New(c.cfg); err == nil || err.Error() != c.want {
			t.Errorf("New: %v, want %q", err, c.want)
		}
	}
}

// The runaway guard is told of the attempt with the baseline this spawn measured, not one an
// earlier start that gave its claim back left on the attempt.
func TestStartingWithThisBaseline(t *testing.T) {
	repo := t.TempDir()
	if err := os.WriteFile(filepath.Join(repo, "config"), make([]byte, 321), 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := ledger.RepoSize(repo)
	if err != nil {
		t.Fatal(err)
	}
	w := world{held: true}
	var told *int64
	s, err := spawn.New(spawn.Config{
		Store: &w, Units: &w, Jobs: jobunit.Config{StateDir: t.TempDir(), Binary: "/usr/bin/holdfast", ResticBinary: "/usr/bin/restic"},
		Budget:   time.Minute,
		Lease:    func() (model.Lease, bool) { return lease, w.held },
		Starting: func(l model.LiveRun) { told = l.Attempt.RepoBytesBefore },
		Refused:  func(context.Context, model.LiveRun, string) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	stale := int64(1 << 40)
	job := model.Job{Name: "j", Engine: engine.NameRestic, Repository: repo, PasswordFile: "/dev/null", Paths: []string{repo}}
	l := model.LiveRun{Run: model.Run{ID: uuid.New(), JobName: "j", Kind: model.KindBackup},
		Attempt: model.Attempt{No: 1, RepoBytesBefore: &stale}, JobEngine: engine.NameRestic, JobRepository: repo}
	if err := s.Spawn(context.Background(), l, job, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(w.calls, "AttemptSetRepoBaseline") || told == nil || *told != want {
		t.Fatalf("calls %v; the guard was told a baseline of %v, want %d", w.calls, told, want)
	}
}

// A restore whose target is no longer the directory its admission checked (replaced since, by
// anyone) is closed as never run with a reason naming the target: systemd is never asked.
func TestSpawnRefusesReplacedTarget(t *testing.T) {
	target := filepath.Join(t.TempDir(), "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(target, &st); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		replace bool
		want    []string
	}{
		{"the same directory: started", false, []string{"AttemptEndingsSinceLastStart", "AttemptClaimSpawn 1 armed=false", "Starting", "Start", "AttemptMarkStarted 1"}},
		{"replaced: refused, never started", true, []string{"AttemptEndingsSinceLastStart", "AttemptClaimSpawn 1 armed=false",
			"Refused refused before the unit started: " + target + " is no longer the directory checked when the run was admitted"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.replace {
				// Moved aside, so that the new directory cannot reuse its inode.
				if err := os.Rename(target, target+".old"); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(target, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			w := &world{held: true}
			s := w.spawner(t)
			job := model.Job{Name: "j", Engine: engine.NameRestic, Repository: "sftp:h:/r", PasswordFile: "/etc/pw"}
			run := model.Run{ID: uuid.New(), JobName: "j", Kind: model.KindRestore,
				Restore: model.Restore{Target: target, Snapshot: strings.Repeat("a", 64), TargetID: &model.FileID{Dev: st.Dev, Ino: st.Ino}}}
			l := model.LiveRun{Run: run, Attempt: model.Attempt{No: 1}, JobEngine: engine.NameRestic}
			if err := s.Spawn(context.Background(), l, job, nil); err != nil {
				t.Fatal(err)
			}
			if len(w.calls) != len(c.want) {
				t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(w.calls, "\n"), strings.Join(c.want, "\n"))
			}
			for i := range c.want {
				if !strings.HasPrefix(w.calls[i], c.want[i]) {
					t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(w.calls, "\n"), strings.Join(c.want, "\n"))
				}
			}
		})
	}
}
