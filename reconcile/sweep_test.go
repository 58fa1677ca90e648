package reconcile_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

// sweepEnv is a store's bundle (storetest.Setup), a private systemd manager and a reconciler
// over them.
type sweepEnv struct {
	*storetest.Bundle
	st  *store.Store
	r   *systemd.Client
	mgr *testenv.Manager
	rec *reconcile.Reconciler
}

func newSweepEnv(t *testing.T, cfg reconcile.Config) sweepEnv {
	t.Helper()
	ctx := context.Background()
	dir := testenv.SharedDir(t) // first: removed after the manager stopped its units
	b := storetest.Setup(t)
	e := sweepEnv{Bundle: b, st: b.Store, mgr: testenv.PrivateSystemd(t)}
	var err error
	if e.r, err = systemd.New(ctx, systemd.Config{Address: e.mgr.Address, CallTimeout: testenv.Patience}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.r.Close)
	cfg.Store, cfg.Runner, cfg.Inventory, cfg.StateDir = e.st, e.r, e.st, filepath.Join(dir, "state")
	cfg.Binary = testenv.HoldfastBinary(t)
	if cfg.RunBudget == 0 {
		cfg.RunBudget = testenv.Patience
	}
	if cfg.PassTimeout == 0 {
		cfg.PassTimeout = 2 * testenv.Patience
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if e.rec, err = reconcile.New(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// claimPastGrace claims the spawn of the run's attempt 1 as unit, dated two hours back: past
// any spawn grace the tests give.
func (e sweepEnv) claimPastGrace(t *testing.T, run uuid.UUID, unit string) {
	t.Helper()
	ctx := context.Background()
	if ok, _, err := e.st.AttemptClaimSpawn(ctx, model.Lease{Host: e.rec.Host()}, model.SpawnClaim{Attempt: model.AttemptRef{Run: run, No: 1}, Unit: unit}); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if _, err := e.DB.Exec(ctx, `UPDATE attempts SET spawn_claimed_at = spawn_claimed_at - interval '2 hours'
		WHERE run_id = $1 AND attempt_no = 1`, run); err != nil {
		t.Fatal(err)
	}
}

// A failed unit the manager did not collect, with no marker (its ExecStopPost never ran), is
// reset so its name is free, and the run is restarted once its spawn grace is over and then
// finishes in attempt 2.
func TestFailedUnitIsResetAndRunRestarted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A grace long enough that attempt 2's unit, started under load, is never taken for gone
	// before its marker is written; attempt 1's is over, its claim dated back past it.
	e := newSweepEnv(t, reconcile.Config{SpawnGrace: time.Hour, AllowCommandJobs: true})
	st, r, mgr, rec := e.st, e.r, e.mgr, e.rec
	if _, err := st.JobCreate(ctx, model.Job{Name: "flaky", Engine: "command", Repository: "-", PasswordFile: "-",
		Command: []string{"/bin/true"}}); err != nil {
		t.Fatal(err)
	}
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "flaky", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	unit := systemd.UnitName("flaky", run.ID, 1)
	e.claimPastGrace(t, run.ID, unit)
	// Started behind holdfast's back with systemd's default CollectMode and no ExecStopPost.
	conn := mgr.Conn(t)
	props := []sddbus.Property{sddbus.PropType("exec"), sddbus.PropExecStart([]string{"/bin/false"}, false)}
	if _, err := conn.StartTransientUnitContext(ctx, unit, "replace", props, make(chan string, 1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testenv.Patience)
	for {
		_, state, err := r.Alive(ctx, unit)
		if err == nil && state.ActiveState == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unit never failed: %+v %v", state, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	for deadline := time.Now().Add(testenv.Patience); time.Now().Before(deadline); {
		stats, err := rec.Sweep(ctx)
		if err != nil || stats.Errors > 0 {
			t.Fatalf("sweep: %+v %v", stats, err)
		}
		got, err := st.RunGet(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !model.Live(got.Status) {
			attempts, err := st.AttemptList(ctx, run.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != model.StatusSucceeded || len(attempts) != 2 {
				t.Fatalf("run = %+v with %d attempts, want succeeded in attempt 2", got, len(attempts))
			}
			if _, state, err := r.Alive(ctx, unit); err != nil || state.LoadState != "not-found" {
				t.Fatalf("the failed unit was not reset: %+v %v", state, err)
			}
			violations, err := st.InvariantViolations(ctx)
			if err != nil || len(violations) > 0 {
				t.Fatalf("invariants: %v %v", violations, err)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the run never ended")
}

// Many runs reconciled by one pass's workers at once (run under -race): every run is spawned
// once and finishes, and the invariants hold.
func TestConcurrentSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSweepEnv(t, reconcile.Config{Workers: 8, SpawnGrace: time.Hour, AllowCommandJobs: true})
	st, rec := e.st, e.rec
	const n = 24
	for i := range n {
		name := "many" + string(rune('a'+i))
		storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: name, Engine: "command"}})
	}
	deadline := time.Now().Add(testenv.Patience)
	for {
		stats, err := rec.Sweep(ctx)
		if err != nil || stats.Errors > 0 {
			t.Fatalf("sweep: %+v %v", stats, err)
		}
		if stats.Runs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs still live", stats.Runs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	runs, err := st.RunList(ctx, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range runs {
		attempts, err := st.AttemptList(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if run.Status != model.StatusSucceeded || len(attempts) != 1 {
			t.Fatalf("run %+v with %d attempts, want succeeded in one", run, len(attempts))
		}
	}
	if len(runs) != n {
		t.Fatalf("%d runs, want %d", len(runs), n)
	}
	violations, err := st.InvariantViolations(ctx)
	if err != nil || len(violations) > 0 {
		t.Fatalf("invariants: %v %v", violations, err)
	}
}

// A pass after one that had units asks systemd about all of holdfast's units as it reads the
// runs: a unit it lists is alive and runs on, and a recorded unit it does not list is gone and,
// past the spawn grace and without a marker, restarted, as when asked about by name.
func TestUnitsAskedAsRunsAreRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSweepEnv(t, reconcile.Config{SpawnGrace: time.Hour, AllowCommandJobs: true})
	st, r, rec := e.st, e.r, e.rec
	for _, name := range []string{"long", "lost"} {
		if _, err := st.JobCreate(ctx, model.Job{Name: name, Engine: "command", Command: []string{"/bin/sleep", "600"}}); err != nil {
			t.Fatal(err)
		}
	}
	long, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "long", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	longUnit := systemd.UnitName("long", long.ID, 1)
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(50 * time.Millisecond) {
		if _, err := rec.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if alive, _, err := r.Alive(ctx, longUnit); err == nil && alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the long run's unit never started")
		}
	}
	if _, err := rec.Sweep(ctx); err != nil { // a pass that asks about the long run's unit
		t.Fatal(err)
	}
	// A claim dated back past the grace whose unit systemd never had.
	lost, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "lost", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	e.claimPastGrace(t, lost.ID, systemd.UnitName("lost", lost.ID, 1))
	if n := reconcile.UnitsLastPass(rec); n == 0 {
		t.Fatal("the last pass asked about no unit: the next would not ask as it reads the runs")
	}
	if stats, err := rec.Sweep(ctx); err != nil || stats.Errors > 0 {
		t.Fatalf("sweep: %+v %v", stats, err)
	}
	lostAttempts, err := st.AttemptList(ctx, lost.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(lostAttempts) != 2 || lostAttempts[0].EndedAt == nil {
		t.Fatalf("the run whose unit systemd never had has %d attempts (first ended: %v), want it restarted in attempt 2",
			len(lostAttempts), lostAttempts[0].EndedAt != nil)
	}
	longAttempts, err := st.AttemptList(ctx, long.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(longAttempts) != 1 || longAttempts[0].EndedAt != nil {
		t.Fatalf("the run whose unit is alive has %d attempts (first ended: %v), want attempt 1 live", len(longAttempts), longAttempts[0].EndedAt != nil)
	}
	if alive, _, err := r.Alive(ctx, longUnit); err != nil || !alive {
		t.Fatalf("the long run's unit is no longer alive: %v", err)
	}
}

// SpawnNamed spawns at once the runs named that the pass would spawn now, and nothing else: a
// run of another host, a run asked to stop and a run not named wait for the pass, which then
// ends or spawns them, and spawns no run twice. While places are limited it leaves every run to
// the pass, which hands them over in priority order.
func TestSpawnNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSweepEnv(t, reconcile.Config{SpawnGrace: time.Hour, AllowCommandJobs: true})
	st, rec := e.st, e.rec
	command := func(name, host string) *storetest.RunOpts {
		return &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: name, Engine: "command", Host: host}}
	}
	named := storetest.Run(t, st, command("named", ""))
	elsewhere := storetest.Run(t, st, command("elsewhere", "h9"))
	stopped := storetest.Run(t, st, command("stopped", ""))
	if _, err := st.RunRequestStop(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	unnamed := storetest.Run(t, st, command("unnamed", ""))
	unit := func(id uuid.UUID) string {
		t.Helper()
		attempts, err := st.AttemptList(ctx, id)
		if err != nil || len(attempts) != 1 {
			t.Fatalf("run %s: attempts %+v %v, want one", id, attempts, err)
		}
		return attempts[0].Unit
	}
	// Four runs named (one twice, one unknown): one spawned, three left to the pass.
	left, err := rec.SpawnNamed(ctx, []uuid.UUID{named.ID, named.ID, elsewhere.ID, stopped.ID, uuid.New()})
	if err != nil || left != 3 {
		t.Fatalf("SpawnNamed: %d left, %v; want 3 left", left, err)
	}
	if got := unit(named.ID); got != systemd.UnitName("named", named.ID, 1) {
		t.Fatalf("the named run's unit: %q, want it spawned", got)
	}
	for _, r := range []model.Run{elsewhere, stopped, unnamed} {
		if got := unit(r.ID); got != "" {
			t.Fatalf("run of %s spawned as %s; want it left to the pass", r.JobName, got)
		}
		if got, err := st.RunGet(ctx, r.ID); err != nil || got.Status != model.StatusQueued {
			t.Fatalf("run of %s: %s %v, want still queued", r.JobName, got.Status, err)
		}
	}
	// The pass ends the stopped run and spawns the one not named; the named one runs on and ends.
	for deadline := time.Now().Add(testenv.Patience); ; {
		if _, err := rec.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		done := true
		for _, r := range []model.Run{named, stopped, unnamed} {
			got, err := st.RunGet(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			done = done && !model.Live(got.Status)
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the runs never ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for r, want := range map[uuid.UUID]string{named.ID: model.StatusSucceeded, stopped.ID: model.StatusStopped, unnamed.ID: model.StatusSucceeded} {
		if got, err := st.RunGet(ctx, r); err != nil || got.Status != want {
			t.Fatalf("run %s: %s %v, want %s", r, got.Status, err, want)
		}
		unit(r) // one attempt each
	}
	if violations, err := st.InvariantViolations(ctx); err != nil || len(violations) > 0 {
		t.Fatalf("invariants: %v %v", violations, err)
	}

	limited := newSweepEnv(t, reconcile.Config{SpawnGrace: time.Hour, AllowCommandJobs: true, Limits: model.RunningLimits{MaxRunning: 4}})
	r := storetest.Run(t, limited.st, command("limited", ""))
	if left, err := limited.rec.SpawnNamed(ctx, []uuid.UUID{r.ID}); err != nil || left != 1 {
		t.Fatalf("SpawnNamed with places limited: %d left, %v; want 1", left, err)
	}
	attempts, err := limited.st.AttemptList(ctx, r.ID)
	if err != nil || len(attempts) != 1 || attempts[0].Unit != "" {
		t.Fatalf("with places limited: %+v %v, want the run left to the pass", attempts, err)
	}
}

// EndNamed closes at once the runs named whose units systemd said are gone, from their exit
// markers, and nothing else: a run whose unit still runs, a run whose unit systemd was not
// asked about and a run not named are left to the pass, which then closes the two that ended
// and leaves the running one be; no run is closed twice.
func TestEndNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSweepEnv(t, reconcile.Config{SpawnGrace: time.Hour, AllowCommandJobs: true})
	st, r, rec := e.st, e.r, e.rec
	runs := map[string]model.Run{}
	for name, command := range map[string][]string{"named": {"/bin/true"}, "unasked": {"/bin/true"}, "unnamed": {"/bin/true"},
		"long": {"/bin/sleep", "600"}} {
		if _, err := st.JobCreate(ctx, model.Job{Name: name, Engine: "command", Command: command}); err != nil {
			t.Fatal(err)
		}
		run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: name, Trigger: "manual", Kind: model.KindBackup})
		if err != nil {
			t.Fatal(err)
		}
		runs[name] = run
	}
	unit := func(name string) string { return systemd.UnitName(name, runs[name].ID, 1) }
	status := func(name string) string {
		t.Helper()
		got, err := st.RunGet(ctx, runs[name].ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Status
	}
	// One pass spawns them all; then the short ones' units end and go, the long one's runs on.
	if stats, err := rec.Sweep(ctx); err != nil || stats.Errors > 0 {
		t.Fatalf("sweep: %+v %v", stats, err)
	}
	var states map[string]systemd.State
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if states, err = r.States(ctx, []string{unit("named"), unit("unasked"), unit("unnamed"), unit("long")}); err != nil {
			t.Fatal(err)
		}
		if !states[unit("named")].Alive() && !states[unit("unasked")].Alive() && !states[unit("unnamed")].Alive() && states[unit("long")].Alive() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("units: %+v, want the short ones gone and the long one running", states)
		}
	}
	for _, name := range []string{"named", "unasked", "unnamed", "long"} {
		if got := status(name); got != model.StatusRunning {
			t.Fatalf("run of %s %s before EndNamed, want running: no pass has seen an end", name, got)
		}
	}
	delete(states, unit("unasked"))
	// The long run's unit is alive: EndNamed leaves it to the pass, and says so.
	if left, err := rec.EndNamed(ctx, []uuid.UUID{runs["named"].ID, runs["named"].ID, runs["unasked"].ID, runs["long"].ID, uuid.New()}, states); err != nil || left != 1 {
		t.Fatalf("EndNamed: %d left, %v; want 1 (the long run)", left, err)
	}
	for name, want := range map[string]string{"named": model.StatusSucceeded, "unasked": model.StatusRunning, "unnamed": model.StatusRunning, "long": model.StatusRunning} {
		if got := status(name); got != want {
			t.Fatalf("after EndNamed, run of %s %s, want %s", name, got, want)
		}
	}
	if stats, err := rec.Sweep(ctx); err != nil || stats.Errors > 0 {
		t.Fatalf("sweep: %+v %v", stats, err)
	}
	for name, want := range map[string]string{"named": model.StatusSucceeded, "unasked": model.StatusSucceeded, "unnamed": model.StatusSucceeded, "long": model.StatusRunning} {
		if got := status(name); got != want {
			t.Fatalf("after the pass, run of %s %s, want %s", name, got, want)
		}
		if attempts, err := st.AttemptList(ctx, runs[name].ID); err != nil || len(attempts) != 1 {
			t.Fatalf("run of %s: attempts %+v %v, want one", name, attempts, err)
		}
	}
	if violations, err := st.InvariantViolations(ctx); err != nil || len(violations) > 0 {
		t.Fatalf("invariants: %v %v", violations, err)
	}
}

// MayWait says whether an end wants a pass for a run that may be waiting for what it frees: until
// a pass has read the live runs, after a pass that read a run not spawned, and after a named
// spawn left a run, until a pass that began after that; not after a pass that read only runs
// with their units.
func TestMayWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSweepEnv(t, reconcile.Config{SpawnGrace: time.Hour, AllowCommandJobs: true})
	st, rec := e.st, e.rec
	sweep := func() {
		t.Helper()
		if stats, err := rec.Sweep(ctx); err != nil || stats.Errors > 0 {
			t.Fatalf("sweep: %+v %v", stats, err)
		}
	}
	if !rec.MayWait() {
		t.Fatal("MayWait false before any pass read the live runs")
	}
	sweep()
	if rec.MayWait() {
		t.Fatal("MayWait true after a pass that read no live run")
	}
	if _, err := st.JobCreate(ctx, model.Job{Name: "sleeper", Engine: "command", Command: []string{"/bin/sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "sleeper", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	sweep() // reads the run queued, and spawns it
	if !rec.MayWait() {
		t.Fatal("MayWait false after a pass that read a run not spawned yet")
	}
	sweep()
	if rec.MayWait() {
		t.Fatal("MayWait true after a pass that read only a run with its unit")
	}
	// The run has its unit: a notification naming it (a stop asked for) is the pass's.
	if left, err := rec.SpawnNamed(ctx, []uuid.UUID{run.ID}); err != nil || left != 1 {
		t.Fatalf("SpawnNamed of a run with its unit: %d left, %v; want 1", left, err)
	}
	if !rec.MayWait() {
		t.Fatal("MayWait false after a named spawn left a run")
	}
	sweep()
	if rec.MayWait() {
		t.Fatal("MayWait true after the pass that followed")
	}
}
