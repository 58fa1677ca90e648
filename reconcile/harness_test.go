package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// The harness: a Reconciler over an in-memory State and Units that record every call, in one
// list, so a test of carryOut sees what one decision did to the database and to systemd, in
// which order, and nothing else. The fakes answer from a few canned fields; a call no case
// expects answers zero values and shows up in the recorded list. The tests against PostgreSQL
// and systemd (sweep_test.go and the rest) stay what proves the store and the systemd client.

// recorder is the one list of calls both fakes append to.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) record(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// fakeState is an in-memory State: it records each call and answers from its fields.
type fakeState struct {
	*recorder
	attempt      model.Attempt // what AttemptGet returns
	job          model.Job     // what JobGet returns
	claimBlocked string        // AttemptClaimSpawn's blocked answer
	claimed      map[int]bool  // attempts claimed: a second claim is not granted, as in the store
	endings      []model.Ending
}

var _ State = (*fakeState)(nil)

func (s *fakeState) RunListLive(context.Context, string) ([]model.LiveRun, error) {
	s.record("RunListLive")
	return nil, nil
}

func (s *fakeState) RunListSpawnable(context.Context, string, []uuid.UUID) ([]model.LiveRun, error) {
	s.record("RunListSpawnable")
	return nil, nil
}

func (s *fakeState) RunListSpawned(context.Context, string, []uuid.UUID) ([]model.LiveRun, error) {
	s.record("RunListSpawned")
	return nil, nil
}

func (s *fakeState) JobListForHost(context.Context, string) ([]model.Job, error) {
	s.record("JobList")
	return []model.Job{s.job}, nil
}

func (s *fakeState) JobGet(_ context.Context, name string) (model.Job, error) {
	s.record("JobGet %s", name)
	if name != s.job.Name {
		return model.Job{}, store.ErrNotFound
	}
	return s.job, nil
}

func (s *fakeState) RunGet(_ context.Context, id uuid.UUID) (model.Run, error) {
	s.record("RunGet")
	return model.Run{ID: id}, nil
}

func (s *fakeState) AttemptGet(_ context.Context, ref model.AttemptRef) (model.Attempt, error) {
	s.record("AttemptGet %d", ref.No)
	return s.attempt, nil
}

func (s *fakeState) AttemptOtherWriter(context.Context, model.AttemptRef) (*uuid.UUID, error) {
	s.record("AttemptOtherWriter")
	return nil, nil
}

func (s *fakeState) SnapshotProtectedAmong(context.Context, store.SnapshotProtectedAmongParams) ([]string, error) {
	s.record("SnapshotProtectedAmong")
	return nil, nil
}

func (s *fakeState) AttemptEndingsSinceLastStart(context.Context, string) ([]model.AttemptEnd, error) {
	s.record("AttemptEndingsSinceLastStart")
	return nil, nil
}

func (s *fakeState) RunListEndedBefore(context.Context, []uuid.UUID, time.Time) ([]uuid.UUID, error) {
	s.record("RunListEndedBefore")
	return nil, nil
}

func (s *fakeState) HostList(context.Context) ([]model.Host, error) {
	s.record("HostList")
	return nil, nil
}

func (s *fakeState) HostListDown(context.Context, string, time.Duration) ([]string, bool, error) {
	s.record("HostListDown")
	return nil, false, nil
}

func (s *fakeState) HostNextDown(context.Context, string, time.Duration) (time.Duration, bool, error) {
	s.record("HostNextDown")
	return 0, false, nil
}

func (s *fakeState) RunListOrphaned(context.Context, string, time.Duration) ([]model.LiveRun, error) {
	s.record("RunListOrphaned")
	return nil, nil
}

func (s *fakeState) AttemptListSuperseded(context.Context, string, time.Duration) ([]model.SupersededAttempt, error) {
	s.record("AttemptListSuperseded")
	return nil, nil
}

func (s *fakeState) AttemptListDeferred(context.Context, string) ([]model.DeferredSettlement, error) {
	s.record("AttemptListDeferred")
	return nil, nil
}

func (s *fakeState) AttemptClaimSpawn(_ context.Context, _ model.Lease, c model.SpawnClaim) (bool, string, error) {
	if c.ArmedFor != nil {
		s.record("AttemptClaimSpawn %d %s armed for %s", c.Attempt.No, c.Unit, c.ArmedFor.Format(time.RFC3339))
	} else {
		s.record("AttemptClaimSpawn %d %s", c.Attempt.No, c.Unit)
	}
	return s.claim(c.Attempt.No)
}

func (s *fakeState) claim(attempt int) (bool, string, error) {
	if s.claimBlocked != "" {
		return false, s.claimBlocked, nil
	}
	if s.claimed[attempt] {
		return false, "", nil
	}
	if s.claimed == nil {
		s.claimed = map[int]bool{}
	}
	s.claimed[attempt] = true
	return true, "", nil
}

func (s *fakeState) AttemptReleaseSpawnClaim(_ context.Context, _ model.Lease, p store.AttemptReleaseSpawnClaimParams) error {
	s.record("AttemptReleaseSpawnClaim %d %s mayExist=%t", p.Ref.No, p.Unit, p.MayExist)
	return nil
}

func (s *fakeState) AttemptHoldSize(context.Context, model.Lease, store.AttemptHoldSizeParams) (model.SizedHold, error) {
	s.record("AttemptHoldSize")
	return model.SizedHold{}, nil
}

func (s *fakeState) AttemptSetRepoBaseline(context.Context, model.Lease, store.AttemptSetRepoBaselineParams) error {
	s.record("AttemptSetRepoBaseline")
	return nil
}

func (s *fakeState) AttemptMarkStarted(_ context.Context, _ model.Lease, p store.AttemptMarkStartedParams) error {
	s.record("AttemptMarkStarted %d dbclock=%t", p.Ref.No, p.At.IsZero())
	return nil
}

func (s *fakeState) RunSetWaiting(_ context.Context, p store.RunSetWaitingParams) error {
	s.record("RunSetWaiting %q until=%t", p.Reason, p.NotBefore != nil)
	return nil
}

func (s *fakeState) AttemptApplyJournal(context.Context, model.Lease, store.AttemptApplyJournalParams) (bool, error) {
	s.record("AttemptApplyJournal")
	return true, nil
}

func (s *fakeState) AttemptQuarantine(_ context.Context, _ model.Lease, p store.AttemptQuarantineParams) error {
	s.record("AttemptQuarantine %d %q", p.Ref.No, p.Reason)
	return nil
}

func (s *fakeState) AttemptFinish(_ context.Context, _ model.Lease, e model.Ending) (bool, error) {
	s.record("AttemptFinish %d %s", e.Attempt, e.Status)
	s.endings = append(s.endings, e)
	return true, nil
}

func (s *fakeState) AttemptRestart(_ context.Context, _ model.Lease, r model.Restarting) (bool, string, error) {
	s.record("AttemptRestart %d", r.Attempt)
	return true, "", nil
}

func (s *fakeState) RunRequestPause(_ context.Context, _ uuid.UUID, reason string) (bool, error) {
	s.record("RunRequestPause %s", reason)
	return true, nil
}

func (s *fakeState) AttemptSettleDeferred(context.Context, model.AttemptRef, ledger.Settlement) error {
	s.record("AttemptSettleDeferred")
	return nil
}

func (s *fakeState) HostNoticeDown(context.Context, string, time.Duration) ([]string, error) {
	s.record("HostNoticeDown")
	return nil, nil
}

func (s *fakeState) RunTakeOver(context.Context, model.Lease, model.TakeOver) (bool, error) {
	s.record("RunTakeOver")
	return false, nil
}

// fakeUnits is an in-memory Units: it records each call; Start fails with startErr.
type fakeUnits struct {
	*recorder
	startErr error
}

var _ Units = (*fakeUnits)(nil)

func (u *fakeUnits) Start(_ context.Context, s systemd.Spec) (bool, error) {
	u.record("Start %s", s.Name)
	return false, u.startErr
}

func (u *fakeUnits) Arm(_ context.Context, s systemd.Spec, at time.Time) (bool, error) {
	u.record("Arm %s %s", s.Name, at.Format(time.RFC3339))
	return false, nil
}

func (u *fakeUnits) States(_ context.Context, names []string) (map[string]systemd.State, error) {
	u.record("States %v", names)
	return nil, nil
}

func (u *fakeUnits) Alive(_ context.Context, name string) (bool, systemd.State, error) {
	u.record("Alive %s", name)
	return false, systemd.State{}, nil
}

func (u *fakeUnits) Stop(_ context.Context, name string) error {
	u.record("Stop %s", name)
	return nil
}

func (u *fakeUnits) ResetFailed(_ context.Context, name string) error {
	u.record("ResetFailed %s", name)
	return nil
}

// SystemManager is false: units are built as for a user manager.
func (u *fakeUnits) SystemManager() bool { return false }

// Stream runs no restic query: it is recorded and refused.
func (u *fakeUnits) Stream(_ context.Context, s systemd.Spec, _ func(io.Reader) error) (systemd.Result, error) {
	u.record("Output %s", s.Name)
	return systemd.Result{}, errors.New("fakeUnits: no query unit")
}

// fakeObserver records the runs the reconciler reports closed.
type fakeObserver struct {
	*recorder
}

func (o fakeObserver) RunEnded(_ model.Run, status string, _ time.Time) {
	o.record("RunEnded %s", status)
}

// harness is a Reconciler over the fakes, and the one live run its cases carry decisions out for.
type harness struct {
	rec   *recorder
	state *fakeState
	units *fakeUnits
	r     *Reconciler
	live  model.LiveRun
	job   model.Job
}

var harnessRun = uuid.MustParse("00000000-0000-0000-0000-0000000000a1")

func newHarness(t *testing.T) *harness {
	t.Helper()
	rec := &recorder{}
	// The job runs as the test's own user, so preparing its directories needs no privilege.
	job := model.Job{Name: "nightly", Engine: engine.NameCommand, Command: []string{"/bin/true"},
		User: strconv.Itoa(os.Getuid())}
	h := &harness{rec: rec, state: &fakeState{recorder: rec, job: job}, units: &fakeUnits{recorder: rec}, job: job}
	cfg := Defaults()
	cfg.Store, cfg.Runner = h.state, h.units
	cfg.StateDir, cfg.Binary = t.TempDir(), "/usr/bin/holdfast"
	cfg.Host, cfg.BootID = "h1", "boot-1"
	cfg.AllowCommandJobs, cfg.AllowUsers = true, []string{AnyUser}
	cfg.StartLead = 10 * time.Second // runs due within it are armed
	cfg.Observer = fakeObserver{rec}
	cfg.Logger = slog.New(slog.DiscardHandler)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	h.state.attempt = model.Attempt{RunID: harnessRun, No: 1}
	h.live = model.LiveRun{
		Run:       model.Run{ID: harnessRun, JobName: job.Name, Kind: model.KindBackup, Status: model.StatusRunning, CreatedAt: t0.Add(-time.Hour)},
		Attempt:   model.Attempt{RunID: harnessRun, No: 1},
		JobEngine: engine.NameCommand,
		JobUser:   job.User,
		ReadAt:    t0,
	}
	return h
}

// carryOutCase is one decision of the table carried out: the facts it is decided on, and the
// calls carrying it out makes, in order.
type carryOutCase struct {
	name  string
	f     facts
	setup func(h *harness, l *model.LiveRun)
	row   string // the table's row the facts select
	act   action
	calls func(h *harness) []string // every call, in order
	err   bool                      // carryOut fails (the next pass decides again)
	check func(t *testing.T, h *harness)
}

func carryOutCases() []carryOutCase {
	success := systemd.Marker{Run: harnessRun, Attempt: 1, Unit: "u.service", ServiceResult: "success", ExitCode: "exited", ExitStatus: "0"}
	spawnUnit := func(h *harness) string { return systemd.UnitName(h.job.Name, harnessRun, 1) }
	queued := func(h *harness, l *model.LiveRun) { l.Run.Status = model.StatusQueued }
	withUnit := func(h *harness, l *model.LiveRun) { l.Attempt.Unit = "u.service"; h.state.attempt.Unit = "u.service" }
	soon := t0.Add(5 * time.Second)
	return []carryOutCase{{
		name:  "marker: finished once with the marker's outcome",
		f:     spawned(facts{marker: markerReadable, ended: success}),
		setup: withUnit,
		row:   "marker", act: actFinish,
		// The attempt is read (its summary, its errors), then the run closed once, then reported once.
		calls: func(*harness) []string {
			return []string{"AttemptGet 1", "AttemptFinish 1 succeeded", "RunEnded succeeded"}
		},
		check: func(t *testing.T, h *harness) {
			e := h.state.endings[0]
			if e.RunID != harnessRun || e.ServiceResult != "success" || e.ExitCode != "exited" || e.ExitStatus != "0" || e.Retry != nil {
				t.Errorf("ending %+v: want the marker's fields, run %s, no retry", e, harnessRun)
			}
		},
	}, {
		name: "marker of an armed queued unit: marked started at its slot, then finished",
		f: func() facts {
			f := spawned(facts{marker: markerReadable, ended: success, armed: true, queued: true})
			return f
		}(),
		setup: func(h *harness, l *model.LiveRun) {
			withUnit(h, l)
			queued(h, l)
			slot := t0.Add(-time.Minute)
			l.Attempt.ArmedFor = &slot
		},
		row: "marker", act: actFinish,
		calls: func(*harness) []string {
			return []string{"AttemptMarkStarted 1 dbclock=false", "AttemptGet 1", "AttemptFinish 1 succeeded", "RunEnded succeeded"}
		},
	}, {
		name:  "alive, stop: the unit is stopped, nothing written",
		f:     spawned(facts{unit: unitAlive, stopRequested: true}),
		setup: withUnit,
		row:   "alive, stop or pause", act: actStop,
		calls: func(*harness) []string { return []string{"Stop u.service"} },
	}, {
		name: "unspawned, stop, armed unit alive: its timer stopped before its service",
		f: func() facts {
			f := unspawned(facts{stopRequested: true, unit: unitAlive, armed: true})
			f.unitName = "u.service"
			return f
		}(),
		setup: queued,
		row:   "unspawned, stop, unit alive", act: actStop,
		calls: func(*harness) []string { return []string{"Stop " + systemd.TimerName("u.service"), "Stop u.service"} },
	}, {
		name:  "unspawned: claimed, then started, then marked running",
		f:     unspawned(facts{}),
		setup: queued,
		row:   "unspawned", act: actSpawn,
		calls: func(h *harness) []string {
			u := spawnUnit(h)
			return []string{"AttemptClaimSpawn 1 " + u, "Start " + u, "AttemptMarkStarted 1 dbclock=true"}
		},
	}, {
		name: "unspawned, claim blocked by a limit: waits, never started",
		f:    unspawned(facts{}),
		setup: func(h *harness, l *model.LiveRun) {
			queued(h, l)
			h.state.claimBlocked = "waiting: --max-running 1 reached"
		},
		row: "unspawned", act: actSpawn,
		calls: func(h *harness) []string {
			return []string{"AttemptClaimSpawn 1 " + spawnUnit(h), `RunSetWaiting "waiting: --max-running 1 reached" until=false`}
		},
	}, {
		name: "unspawned, systemd cannot be asked: the claim is given back, the unit may exist",
		f:    unspawned(facts{}),
		setup: func(h *harness, l *model.LiveRun) {
			queued(h, l)
			h.units.startErr = errors.New("dbus: connection lost")
		},
		row: "unspawned", act: actSpawn,
		calls: func(h *harness) []string {
			u := spawnUnit(h)
			return []string{"AttemptClaimSpawn 1 " + u, "Start " + u, "AttemptReleaseSpawnClaim 1 " + u + " mayExist=true"}
		},
		err: true,
	}, {
		name:  "unspawned, arm ahead: claimed for its slot, then armed, run stays queued",
		f:     unspawned(facts{notBefore: &soon}),
		setup: queued,
		row:   "unspawned, arm ahead", act: actArm,
		calls: func(h *harness) []string {
			u, at := spawnUnit(h), soon.Format(time.RFC3339)
			return []string{"AttemptClaimSpawn 1 " + u + " armed for " + at, "Arm " + u + " " + at}
		},
	}, {
		name:  "alive, not marked running: marked started on the database's clock",
		f:     spawned(facts{unit: unitAlive, queued: true}),
		setup: func(h *harness, l *model.LiveRun) { withUnit(h, l); queued(h, l) },
		row:   "alive, not marked running", act: actMarkRunning,
		calls: func(*harness) []string { return []string{"AttemptMarkStarted 1 dbclock=true"} },
	}, {
		name:  "gone, failed: its name is freed, nothing written",
		f:     spawned(facts{unit: unitGone, unitFailed: true}),
		setup: withUnit,
		row:   "gone, failed", act: actResetFailed,
		calls: func(*harness) []string { return []string{"ResetFailed u.service"} },
	}, {
		name:  "gone: the attempt is read, then restarted, never finished",
		f:     spawned(facts{unit: unitGone}),
		setup: withUnit,
		row:   "gone", act: actRestart,
		calls: func(*harness) []string { return []string{"AttemptGet 1", "AttemptRestart 1"} },
	}, {
		name:  "gone, stop: closed stopped, once",
		f:     spawned(facts{unit: unitGone, stopRequested: true}),
		setup: withUnit,
		row:   "gone, stop", act: actEnd,
		calls: func(*harness) []string {
			return []string{"AttemptGet 1", "AttemptFinish 1 stopped", "RunEnded stopped"}
		},
	}, {
		name:  "journal unreadable: quarantined, the run goes on",
		f:     facts{journalProblem: "line 3: not JSON"},
		setup: withUnit,
		row:   "journal unreadable", act: actQuarantine,
		calls: func(*harness) []string { return []string{`AttemptQuarantine 1 "line 3: not JSON"`} },
	}}
}

// TestHarnessCarryOut decides each case's facts with the table, then carries the decision out
// against the fakes: the calls made, their order and their number are the decision's and no more.
func TestHarnessCarryOut(t *testing.T) {
	for _, c := range carryOutCases() {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			l := h.live
			if c.setup != nil {
				c.setup(h, &l)
			}
			d := decide(c.f, h.r.rules())
			if d.row != c.row || d.act != c.act {
				t.Fatalf("decided row %q action %s, want row %q action %s", d.row, d.act, c.row, c.act)
			}
			err := h.r.carryOut(context.Background(), l, c.f, h.job, d)
			if (err != nil) != c.err {
				t.Fatalf("carryOut: %v, want error %t", err, c.err)
			}
			if got, want := h.rec.list(), c.calls(h); !slices.Equal(got, want) {
				t.Errorf("calls:\n got  %q\n want %q", got, want)
			}
			if c.check != nil {
				c.check(t, h)
			}
		})
	}
}

// TestHarnessCarryOutSpawnTwice carries the same spawn decision out twice, as two passes (or two
// daemons) may: the claim is what makes a spawn exactly-once, so the second is claimed and,
// refused, starts nothing and writes nothing.
func TestHarnessCarryOutSpawnTwice(t *testing.T) {
	h := newHarness(t)
	l := h.live
	l.Run.Status = model.StatusQueued
	f := unspawned(facts{})
	d := decide(f, h.r.rules())
	for range 2 {
		if err := h.r.carryOut(context.Background(), l, f, h.job, d); err != nil {
			t.Fatal(err)
		}
	}
	u := systemd.UnitName(h.job.Name, harnessRun, 1)
	want := []string{"AttemptClaimSpawn 1 " + u, "Start " + u, "AttemptMarkStarted 1 dbclock=true", "AttemptClaimSpawn 1 " + u}
	if got := h.rec.list(); !slices.Equal(got, want) {
		t.Errorf("calls:\n got  %q\n want %q", got, want)
	}
}
