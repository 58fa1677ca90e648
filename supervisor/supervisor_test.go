package supervisor_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/supervisor"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

// env is a real database and a private systemd manager, with a supervisor config over them.
type env struct {
	dir string // reachable by units running as nobody
	st  *store.Store
	mgr *testenv.Manager
	cfg supervisor.Config
}

// start builds a supervisor of e.cfg and starts it; it is stopped when the test ends.
func (e env) start(t *testing.T) *supervisor.Supervisor {
	t.Helper()
	sup, err := supervisor.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Stop)
	return sup
}

func newEnv(t *testing.T) env {
	t.Helper()
	ctx := context.Background()
	dir := testenv.SharedDir(t) // first: removed after the manager stopped its units
	dsn := storetest.Migrated(t)
	mgr := testenv.PrivateSystemd(t)
	cfg := supervisor.Defaults()
	cfg.Database = store.Config{Address: store.Address{DSN: dsn}}
	cfg.Systemd = systemd.Config{Address: mgr.Address}
	// The test's own store is not the supervisor's: a query of the supervisor's that its Stop
	// cancels sends PostgreSQL a cancel request for the connection's backend, which can arrive
	// after the connection went back to its pool and cancel the next statement there, the test's.
	st, err := store.New(ctx, cfg.Database)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	supStore, err := store.New(ctx, cfg.Database)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(supStore.Close)
	rn, err := systemd.New(ctx, cfg.Systemd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rn.Close)
	cfg.Store, cfg.Runner, cfg.Reconcile.StateDir = supStore, rn, filepath.Join(dir, "state")
	cfg.Reconcile.Binary, cfg.Reconcile.ResticBinary = testenv.HoldfastBinary(t), testenv.Restic(t)
	cfg.Reconcile.AllowCommandJobs = true
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return env{dir: dir, st: st, mgr: mgr, cfg: cfg}
}

// job creates a command job running argv.
func (e env) job(t *testing.T, name string, argv ...string) {
	t.Helper()
	e.createJob(t, model.Job{Name: name, Engine: "command", Command: argv})
}

// createJob creates j, failing the test on error.
func (e env) createJob(t *testing.T, j model.Job) {
	t.Helper()
	if _, err := e.st.JobCreate(context.Background(), j); err != nil {
		t.Fatal(err)
	}
}

// scheduled creates a command job on schedule whose first slot is first.
func (e env) scheduled(t *testing.T, name, schedule string, first time.Time, argv ...string) {
	t.Helper()
	e.scheduledJob(t, model.Job{Name: name, Engine: "command", Command: argv, Schedule: schedule}, first)
}

// scheduledJob creates j, a job with a schedule, whose first slot is first.
func (e env) scheduledJob(t *testing.T, j model.Job, first time.Time) {
	t.Helper()
	e.createJob(t, j)
	if _, err := e.st.JobUpdate(context.Background(), j.Name, func(j *model.Job) error { j.NextRunAt = &first; return nil }); err != nil {
		t.Fatal(err)
	}
}

// nextSecond is the start of the coming second: a first slot a moment from now.
func nextSecond() time.Time { return time.Now().Add(time.Second).Truncate(time.Second) }

// admit admits a manual backup run of job.
func (e env) admit(t *testing.T, job string) model.Run {
	t.Helper()
	run, err := e.st.RunAdmit(context.Background(), store.RunAdmitParams{Job: job, Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// waitEnded polls the record (the test's own view, not the daemon's) until the run is final.
func (e env) waitEnded(t *testing.T, id string, within time.Duration) model.Run {
	t.Helper()
	run, err := e.st.RunResolve(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(within)
	for {
		r, err := e.st.RunGet(context.Background(), run)
		if err != nil {
			t.Fatal(err)
		}
		if !model.Live(r.Status) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after %s", id, r.Status, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkInvariants fails the test if a store invariant is violated (what `holdfast check` runs).
func (e env) checkInvariants(t *testing.T) {
	t.Helper()
	violations, err := e.st.InvariantViolations(context.Background())
	if err != nil || len(violations) > 0 {
		t.Fatalf("invariants: %v %v", violations, err)
	}
}

// With an hour between passes, a run is spawned because its admission notifies, which names the
// run (the spawn is the named one's, not only the pass's it wakes), and recorded final within
// seconds because its unit's exit marker closes it by name (not only at the pass it wakes): no
// interval is waited for.
func TestUnitEndWakesSweep(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cfg.SweepInterval = time.Hour
	log := &syncBuffer{}
	e.cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sup := e.start(t)
	e.job(t, "quick", "/bin/sleep", "0.3")
	// The daemon's first pass runs at its start, whatever the interval: a run admitted before it
	// ended may be spawned by it instead of by its name, on a slow machine.
	if !testenv.Eventually(time.Minute, func() bool { return supervisor.SweepPasses(sup) > 0 }) {
		t.Fatal("the daemon's first pass did not end")
	}
	for i := range 3 {
		run := e.admit(t, "quick")
		start := time.Now()
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		r, attempts, err := runctl.WaitRun(waitCtx, e.st, run.ID, func(model.Run, *model.Progress) {})
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if r.Status != model.StatusSucceeded {
			t.Fatalf("run %d: %s (%s), want succeeded", i, r.Status, r.Reason)
		}
		t.Logf("run %d: admitted to recorded final in %s", i, time.Since(start).Round(time.Millisecond))
		if mk, err := systemd.ReadMarker(e.cfg.Reconcile.StateDir, run.ID, 1); err == nil && len(attempts) == 1 && attempts[0].SpawnClaimedAt != nil && attempts[0].EndedAt != nil {
			a := attempts[0]
			t.Logf("  claimed +%s, marker +%s, ended +%s", a.SpawnClaimedAt.Sub(start).Round(time.Millisecond),
				mk.At.Sub(start).Round(time.Millisecond), a.EndedAt.Sub(start).Round(time.Millisecond))
		}
		if len(attempts) != 1 {
			t.Fatalf("run %d: %d attempts, want one", i, len(attempts))
		}
		if !regexp.MustCompile(`run=` + run.ID.String() + ` attempt=1 action=spawn row=(?:"[^"]*"|\S+) named=true`).MatchString(log.String()) {
			t.Fatalf("run %d: no spawn by its notification's name in the log:\n%s", i, log.String())
		}
		if !regexp.MustCompile(`run=` + run.ID.String() + ` attempt=1 action=finish row=(?:"[^"]*"|\S+) named=true`).MatchString(log.String()) {
			t.Fatalf("run %d: not closed by its exit marker's name in the log:\n%s", i, log.String())
		}
	}
	e.checkInvariants(t)
}

// An idle daemon's sweep does not pass every interval: with nothing live and no other host, it
// waits for a wake (here the admission's notification) or PollBackstop. A run admitted is
// spawned and recorded final all the same, and once it ended the sweep waits again.
func TestIdleSweepWaits(t *testing.T) {
	e := newEnv(t)
	e.cfg.SweepInterval = 100 * time.Millisecond
	sup := e.start(t)
	e.job(t, "quick", "/bin/true")
	// The first passes may come before the daemon listens, at the interval.
	quiet := func(what string) {
		t.Helper()
		time.Sleep(time.Second)
		from := supervisor.SweepPasses(sup)
		time.Sleep(3 * time.Second) // 30 intervals
		if n := supervisor.SweepPasses(sup) - from; n > 2 {
			t.Fatalf("%s: %d sweep passes in 3s at an interval of 100ms, want 2 at most", what, n)
		}
	}
	quiet("idle")
	run := e.admit(t, "quick")
	if r := e.waitEnded(t, run.ID.String(), time.Minute); r.Status != model.StatusSucceeded {
		t.Fatalf("run %s (%s), want succeeded", r.Status, r.Reason)
	}
	quiet("idle again after the run")
	e.checkInvariants(t)
}

// Start and Stop may be called more than once; after Stop no service acts (an admitted run stays
// queued with no unit), and a new Start picks the run up.
func TestStartStop(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cfg.SweepInterval = 50 * time.Millisecond
	// Only the services of the Start after Stop may spawn: whatever the services started before
	// Stop do, before or after that Start, is seen (their contexts carry their Start's).
	type startKey struct{}
	before, after := context.WithValue(ctx, startKey{}, "before Stop"), context.WithValue(ctx, startKey{}, "after Stop")
	supervisor.SetSpawnHook(&e.cfg, func(ctx context.Context, run uuid.UUID) {
		if got := ctx.Value(startKey{}); got != "after Stop" {
			t.Errorf("run %s spawned by the services of a Start %v", run, got)
		}
	})
	sup, err := supervisor.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range sup.Services() {
		names = append(names, svc.Name())
	}
	if got, want := strings.Join(names, ","), "host lease,notifications,unit ends,runaway watch,spawning,repairs,sweep,named spawns,admission,run files,history,watch,delivery,snapshot catalogs,Btrfs snapshots,control socket"; got != want {
		t.Fatalf("services %s, want %s", got, want)
	}
	sup.Stop() // never started: nothing to do
	for range 2 {
		if err := sup.Start(before); err != nil {
			t.Fatal(err)
		}
	}
	stopped := make(chan struct{})
	go func() { sup.Stop(); sup.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("Stop did not return")
	}
	e.job(t, "later", "/bin/true")
	// The admission is announced, as to a daemon that listens: a supervisor still listening would
	// be woken by it and spawn the run.
	wakes := make(chan struct{}, 16)
	listenCtx, cancelListen := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		_ = e.st.Listen(listenCtx, store.Wakes{Host: "h", Deliveries: func() {}, Runs: func() {
			select {
			case wakes <- struct{}{}:
			default: // the wakes after the admission's are not waited for
			}
		}})
	}()
	defer func() { cancelListen(); <-listened }()
	woken := func(what string) {
		t.Helper()
		select {
		case <-wakes:
		case <-time.After(time.Minute):
			t.Fatalf("%s: no notification", what)
		}
	}
	woken("listening")
	run := e.admit(t, "later")
	woken("admission")
	attempts, err := e.st.AttemptList(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 1 || attempts[0].Unit != "" {
		t.Fatalf("a stopped supervisor spawned the run: %+v", attempts)
	}
	if err := sup.Start(after); err != nil {
		t.Fatal(err)
	}
	defer sup.Stop()
	if r := e.waitEnded(t, run.ID.String(), time.Minute); r.Status != model.StatusSucceeded {
		t.Fatalf("run %s (%s), want succeeded", r.Status, r.Reason)
	}
	// A context that ends stops the services too; Stop then only waits for them.
	ctx2, cancel := context.WithCancel(ctx)
	sup.Stop()
	if err := sup.Start(ctx2); err != nil {
		t.Fatal(err)
	}
	cancel()
	sup.Stop()
}

// Validate refuses each bad setting in one line that names it by its path in Config, as package
// setting renders it (the holdfast binary names its flags there, and exits 78 on the error).
func TestValidate(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	restic := testenv.Restic(t) // Validate asks it its version
	authFile := filepath.Join(t.TempDir(), "web.auth")
	if err := os.WriteFile(authFile, []byte("bearer s3cret-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(*supervisor.Config)
		want string
	}{
		{"defaults", func(*supervisor.Config) {}, ""},
		{"zero sweep interval", func(c *supervisor.Config) { c.SweepInterval = 0 }, "SweepInterval 0s must be positive"},
		{"negative spawn grace", func(c *supervisor.Config) { c.Reconcile.SpawnGrace = -time.Second }, "Reconcile.SpawnGrace -1s must be positive"},
		{"listen without credentials", func(c *supervisor.Config) { c.Listen = "127.0.0.1:9750" },
			"Listen 127.0.0.1:9750 serves only with credentials, and no WebAuthFile is given nor /etc/holdfast/web.auth there: run holdfast setup"},
		{"listen with credentials", func(c *supervisor.Config) { c.Listen, c.WebAuthFile = "127.0.0.1:9750", authFile }, ""},
		{"an auth file others read", func(c *supervisor.Config) { c.Listen, c.WebAuthFile = "127.0.0.1:9750", plain }, "has mode 0644"},
		{"listen off localhost without TLS", func(c *supervisor.Config) { c.Listen, c.WebAuthFile = "0.0.0.0:9750", authFile },
			"Listen 0.0.0.0:9750 is reachable from elsewhere: give TLSCert and TLSKey"},
		{"a certificate without its key", func(c *supervisor.Config) { c.Listen, c.WebAuthFile, c.TLSCert = "0.0.0.0:9750", authFile, plain },
			"TLSCert and TLSKey go together"},
		{"a certificate that is none", func(c *supervisor.Config) {
			c.Listen, c.WebAuthFile, c.TLSCert, c.TLSKey = "0.0.0.0:9750", authFile, plain, authFile
		}, "failed to find any PEM data in certificate input"},
		{"a bad web host", func(c *supervisor.Config) {
			c.Listen, c.WebAuthFile, c.WebHosts = "127.0.0.1:9750", authFile, []string{"a/b"}
		}, "WebHosts"},
		{"notify commands as nobody", func(c *supervisor.Config) { c.Notify.AllowCommands = true }, ""},
		{"notify commands as an unknown user", func(c *supervisor.Config) { c.Notify.AllowCommands, c.Notify.CommandUser = true, "no-such-user-here" },
			`Notify.CommandUser "no-such-user-here": no such user`},
		{"listen without a port", func(c *supervisor.Config) { c.Listen = "localhost" }, `Listen "localhost": want HOST:PORT`},
		{"notify lease within a send", func(c *supervisor.Config) { c.Notify.Lease, c.Notify.Timeout = time.Second, 2*time.Second },
			"Notify.Lease 1s must be longer than Notify.Timeout 2s"},
		{"zero run budget", func(c *supervisor.Config) { c.Reconcile.RunBudget = 0 }, "Reconcile.RunBudget 0s must be positive"},
		{"zero depends wait", func(c *supervisor.Config) { c.Reconcile.DependsWait = 0 }, "Reconcile.DependsWait 0s must be positive"},
		{"keep run files zero", func(c *supervisor.Config) { c.KeepRunFiles = "0d" }, `KeepRunFiles "0d": give a positive duration`},
		{"keep run files bad", func(c *supervisor.Config) { c.KeepRunFiles = "soon" }, `KeepRunFiles "soon"`},
		{"keep history too short", func(c *supervisor.Config) { c.KeepHistory = "30d" }, `KeepHistory "30d": give a duration of 35 days or more`},
		{"keep history bad", func(c *supervisor.Config) { c.KeepHistory = "forever" }, `KeepHistory "forever"`},
		{"keep history shorter than run files", func(c *supervisor.Config) { c.KeepHistory, c.KeepRunFiles = "40d", "60d" },
			"KeepHistory 40d is shorter than KeepRunFiles 60d"},
		{"run files every zero", func(c *supervisor.Config) { c.RunFilesEvery = 0 }, "RunFilesEvery must be positive"},
		{"negative pass timeout", func(c *supervisor.Config) { c.Reconcile.PassTimeout = -time.Second }, "Reconcile.PassTimeout -1s must be positive, e.g. 2m"},
		{"zero pass timeout is the default", func(c *supervisor.Config) { c.Reconcile.PassTimeout = 0 }, ""},
		{"zero takeover grace", func(c *supervisor.Config) { c.Reconcile.TakeoverGrace = 0 }, "Reconcile.TakeoverGrace 0s must be positive, e.g. 30s"},
		{"negative start lead", func(c *supervisor.Config) { c.Reconcile.StartLead = -time.Second }, "Reconcile.StartLead -1s is negative"},
		{"bad host", func(c *supervisor.Config) { c.Reconcile.Host = "a/b" }, `Reconcile.Host: invalid host name "a/b"`},
		{"unknown user", func(c *supervisor.Config) { c.Reconcile.AllowUsers = []string{"no-such-user-here"} }, "Reconcile.AllowUsers"},
		{"negative late grace", func(c *supervisor.Config) { c.LateGrace = -time.Minute }, "LateGrace -1m0s is negative"},
		{"zero workers", func(c *supervisor.Config) { c.Reconcile.Workers = 0 }, "Reconcile.Workers 0 is out of range"},
		{"zero attempts", func(c *supervisor.Config) { c.Reconcile.MaxAttempts = 0 }, "Reconcile.MaxAttempts 0 is out of range"},
		{"negative attempts", func(c *supervisor.Config) { c.Reconcile.MaxAttempts = -1 }, "Reconcile.MaxAttempts -1 is out of range: give at least 1"},
		{"negative max running", func(c *supervisor.Config) { c.Reconcile.Limits.MaxRunning = -1 }, "Reconcile.Limits.MaxRunning -1 is out of range"},
		{"negative max running host", func(c *supervisor.Config) { c.Reconcile.Limits.MaxRunningHost = -1 }, "Reconcile.Limits.MaxRunningHost -1 is out of range"},
		{"relative binary", func(c *supervisor.Config) { c.Reconcile.Binary = "holdfast" }, `Reconcile.Binary "holdfast" is a relative path`},
		{"missing restic", func(c *supervisor.Config) { c.Reconcile.ResticBinary = "/nonexistent/restic" }, "Reconcile.ResticBinary /nonexistent/restic: no such file or directory"},
		{"restic not executable", func(c *supervisor.Config) { c.Reconcile.ResticBinary = plain }, "is not an executable file"},
		{"restic that is not restic", func(c *supervisor.Config) { c.Reconcile.ResticBinary = "/bin/true" }, "Reconcile.ResticBinary: restic /bin/true: `version` printed"},
		{"bad window", func(c *supervisor.Config) { c.Reconcile.Windows = []string{"Someday 25:00-26:00"} }, "Someday"},
		{"unknown zone", func(c *supervisor.Config) { c.Reconcile.WindowZone = "Mars/Olympus" }, "Reconcile.WindowZone"},
		{"unknown manager", func(c *supervisor.Config) { c.Systemd.Manager = "pid1" }, "pid1"},
		{"statement timeout under 1ms", func(c *supervisor.Config) { c.Database.StatementTimeout = time.Microsecond }, "statement timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := supervisor.Defaults()
			cfg.Database.DSN = "postgres:///unused"
			cfg.Reconcile.Binary, cfg.Reconcile.ResticBinary = "/bin/true", restic
			c.edit(&cfg)
			err := cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Validate: %v, want an error with %q", err, c.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("Validate: %q, want one line", err)
			}
		})
	}
}

// A queued run that may not start before a time (a retry's delay) starts at that time, not at
// the next interval: admission, asleep until then, wakes the sweep. The retry is made only once
// the supervisor has made a pass, and the next interval is an hour away: within the test's
// wait, only that wake can spawn it.
func TestNotBeforeWakesSweep(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cfg.SweepInterval = time.Hour
	e.cfg.Reconcile.StartLead = 0 // started at its time, not armed ahead (TestScheduledStartsOnTime)
	e.job(t, "retried", "/bin/true")
	first := e.admit(t, "retried")
	// The first pass hands the first run over; its spawn waits until the test has ended it,
	// and then claims nothing.
	handed, ended := make(chan struct{}), make(chan struct{})
	var once sync.Once
	supervisor.SetSpawnHook(&e.cfg, func(ctx context.Context, run uuid.UUID) {
		if run != first.ID {
			return
		}
		once.Do(func() { close(handed) })
		select {
		case <-ended:
		case <-ctx.Done():
		}
	})
	e.start(t)
	select {
	case <-handed:
	case <-time.After(time.Minute):
		t.Fatal("no pass handed the first run over")
	}
	retry := model.Retry{ID: uuid.New(), Number: 1, Delay: 2 * time.Second, Why: "waiting: a retry"} // AttemptFinish sets its NotBefore
	if ok, err := e.st.AttemptFinish(ctx, model.Lease{Host: "h"}, model.Ending{RunID: first.ID, Attempt: 1, At: time.Now(), Status: model.StatusFailed,
		Reason: "failed by the test", FailureClass: "transient", Retry: &retry}); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	close(ended)
	r := e.waitEnded(t, retry.ID.String(), time.Minute)
	attempts, err := e.st.AttemptList(ctx, retry.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != model.StatusSucceeded || len(attempts) != 1 || attempts[0].SpawnClaimedAt == nil {
		t.Fatalf("retry %s (%s) with %+v, want succeeded", r.Status, r.Reason, attempts)
	}
	if at := *attempts[0].SpawnClaimedAt; at.Before(retry.NotBefore) {
		t.Fatalf("retry spawned at %s, before its not-before %s", at, retry.NotBefore)
	}
	t.Logf("retry spawned %s after its not-before", attempts[0].SpawnClaimedAt.Sub(retry.NotBefore).Round(time.Millisecond))
	if attempts, err := e.st.AttemptList(ctx, first.ID); err != nil || len(attempts) != 1 || attempts[0].Unit != "" {
		t.Fatalf("first run's attempts %+v (%v), want one that never had a unit", attempts, err)
	}
}

// The sweep hands a spawn over and goes on: while one run's spawn is held, another run is
// spawned and its end recorded, and the held run is not handed over twice. Stop waits for the
// spawn begun, which then completes; a new Start finishes the run.
func TestSpawnDoesNotBlockSweep(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cfg.SweepInterval = 50 * time.Millisecond
	e.job(t, "held", "/bin/true")
	e.job(t, "free", "/bin/true")
	held := e.admit(t, "held")
	var calls atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	supervisor.SetSpawnHook(&e.cfg, func(ctx context.Context, run uuid.UUID) {
		if run != held.ID {
			return
		}
		if calls.Add(1) == 1 {
			close(entered)
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	sup := e.start(t)
	defer letGo() // before the cleanup: a failure lets the spawn go before Stop waits for it
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the held run was not handed to the spawner")
	}
	free := e.admit(t, "free")
	if r := e.waitEnded(t, free.ID.String(), time.Minute); r.Status != model.StatusSucceeded {
		t.Fatalf("free run %s (%s), want succeeded", r.Status, r.Reason)
	}

	stopped := make(chan struct{})
	go func() { sup.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a spawn was held")
	case <-time.After(300 * time.Millisecond):
	}
	letGo()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("Stop did not return after the spawn was let go")
	}
	attempts, err := e.st.AttemptList(ctx, held.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 1 || attempts[0].Unit == "" {
		t.Fatalf("the spawn begun before Stop did not complete: %+v", attempts)
	}

	if err := sup.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r := e.waitEnded(t, held.ID.String(), time.Minute); r.Status != model.StatusSucceeded {
		t.Fatalf("held run %s (%s), want succeeded", r.Status, r.Reason)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the held run was spawned %d times, want once", n)
	}
	e.checkInvariants(t)
}
