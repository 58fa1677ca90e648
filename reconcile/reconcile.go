// Package reconcile is holdfast's sweep: for every live run it drains the run journal into
// PostgreSQL, reads the exit marker, asks systemd whether the unit is still there, and, with the
// recorded stop intent and paused reason, decides whether the run is spawned, left alone,
// restarted or closed (the table in decide.go). The boot pass is an ordinary pass.
//
// One run's error never stops the sweep, every run has its own time budget per pass, and every
// state change is a store write guarded by "this attempt is still live".
//
// The sweep decides; three services carry out what takes long or outlives a pass (services.go):
// the spawner (package spawn) claims and starts units, the repair channel asks the repository
// for a snapshot the journal did not record and then ends the run, and the runaway guard
// (package runaway) follows the repositories of running backups. The sweep hands work over and never waits for it. While they
// are not started (a Reconciler used alone, as in its tests) Sweep spawns and repairs inline.
package reconcile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/attemptqueue"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/inventory"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runaway"
	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/setting"
	"github.com/holdfast-backup/holdfast/spawn"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// DefaultDependsWait is how long a run waits for its prerequisite's next outcome by default:
// long enough for a nightly prerequisite that failed to be retried or run by hand.
const DefaultDependsWait = 6 * time.Hour

// Config configures a Reconciler, and states the defaults and the validation of its settings.
// A setting left zero gets its default; a negative or otherwise invalid one is refused with a
// one-line error that names it by its path in the daemon's configuration, Reconcile.<field>, as
// package setting renders it. The daemon's flags set them
// (supervisor.Config.Reconcile; cmd/holdfast binds the flags and names each).
type Config struct {
	// Store is the database the reconciler reads and writes (State), Runner the systemd it asks
	// (Units): the daemon gives its store.Store and *systemd.Client; a unit test of the
	// reconciler's logic may give fakes (harness_test.go).
	Store  State
	Runner Units
	// Inventory records the listing of a repository a forget run changed (inventory.Refresh):
	// the daemon gives its store.Store again. Nil (fakes) lists nothing: inventory refuses it.
	Inventory inventory.Store
	// StateDir holds markers and run journals; it must be the same path inside the units.
	StateDir string
	// Binary is the holdfast executable the units run (`holdfast exec`, `holdfast marker`).
	Binary string
	// ResticBinary is the restic executable the units run. Default jobunit.DefaultResticBinary.
	ResticBinary string
	// Host is this daemon's host: recorded on each attempt it claims, and the only host whose
	// attempts it reconciles. Default os.Hostname().
	Host string
	// TakeoverGrace is how long after another host's lease expired this daemon takes over that
	// host's runs of any-host jobs. Default DefaultTakeoverGrace.
	TakeoverGrace time.Duration
	// HeldLease, if set, is the host's lease as the daemon holds it now, and whether it holds it
	// (it took or renewed it less than a lease length ago and no other holder took it). Every
	// write about an attempt, every spawn claim and every takeover carries it (the fence, see
	// model.Lease); while it is not held the reconciler stands by: Sweep does nothing and returns
	// ErrNoLease, and no spawn, repair or runaway stop is carried out. Nil: the reconciler
	// holds no lease (used alone, as in its tests) and writes as Host without one.
	HeldLease func() (model.Lease, bool)
	// BootID is the host's current boot, recorded on each attempt: a unit of this host's
	// earlier boot is gone for good. Default CurrentBoot ("" if it cannot be read: then a run a
	// reboot interrupted waits out the spawn grace).
	BootID string
	// SpawnGrace is how long after a spawn claim a missing unit is still "not started yet".
	// Default DefaultSpawnGrace.
	SpawnGrace time.Duration
	// RunBudget bounds the time one run may take in one pass. Default DefaultRunBudget.
	RunBudget time.Duration
	// PassTimeout bounds a whole pass, so a database or systemd that stops answering cannot
	// hold the daemon's loop: the runs not reached go to the next pass. The daemon bounds its
	// admission passes with it too. Default DefaultPassTimeout.
	PassTimeout time.Duration
	// MaxAttempts bounds restarts: a run whose units keep vanishing fails after this many
	// attempts. Default DefaultMaxAttempts.
	MaxAttempts int
	// Limits bound how many runs hold a unit at once (0: no limit).
	Limits model.RunningLimits
	// Windows are global maintenance windows ("Sat 01:00-05:00", see schedule.ParseWindow) in
	// the IANA zone WindowZone ("" is UTC): no run starts inside one. Validate parses them.
	Windows    []string
	WindowZone string
	// DependsWait bounds how long a run waits for its prerequisite's next outcome when the
	// prerequisite's last run did not succeed, counted from when the run was queued. Default
	// DefaultDependsWait.
	DependsWait time.Duration
	// Workers is how many runs one pass reconciles at once. Default DefaultWorkers.
	Workers int
	// SpawnWorkers is how many spawns the spawning service carries out at once. Default
	// spawn.DefaultWorkers.
	SpawnWorkers int
	// SpawnHook, if set, is called by each spawn before its claim; for tests, which hold a
	// spawn with it.
	SpawnHook func(ctx context.Context, run uuid.UUID)
	// AllowUsers are the users jobs may run as: user names or numeric uids, or AnyUser.
	// Default DefaultAllowUsers. A run of a job whose user is not among them ends failed.
	AllowUsers []string
	// AllowCommandJobs lets runs of command jobs start; without it they end failed.
	// Default DefaultAllowCommandJobs.
	AllowCommandJobs bool
	// StartLead is how long before its not-before time (a scheduled run's slot, a retry's
	// delay) a ready run is claimed, prepared and armed, so that systemd starts its unit at that
	// time from a transient timer (systemd.Client.Arm); the daemon admits a slot as far ahead. 0
	// starts every run when its time has come. Defaults gives DefaultStartLead; a Config built by
	// code that leaves it zero arms nothing.
	StartLead time.Duration
	// Observer hears of each run this reconciler closes (metrics); nil hears nothing.
	Observer Observer
	Logger   *slog.Logger
	// now is replaceable in tests.
	now func() time.Time
	// allowedUIDs is AllowUsers resolved; nil allows every user.
	allowedUIDs map[uint32]bool
	// windows and zone are Windows and WindowZone parsed.
	windows []schedule.Window
	zone    *time.Location
}

// Observer hears of the runs a reconciler closes, once each.
type Observer interface {
	RunEnded(run model.Run, status string, at time.Time)
}

// Config's defaults, each stated once (and applied in durations and counts, or by Defaults);
// the daemon's flags default to them.
const (
	DefaultPassTimeout = 2 * time.Minute
	DefaultSpawnGrace  = 30 * time.Second
	DefaultRunBudget   = 30 * time.Second
	DefaultMaxAttempts = 5
	DefaultWorkers     = 8
	// DefaultStartLead is how long before its slot a scheduled run is admitted and armed: ample
	// for a burst of slots to be prepared, short enough that limits and windows decided then
	// still hold at the slot.
	DefaultStartLead = 10 * time.Second
)

// CurrentBoot identifies this boot of the host: the kernel's boot id, and when its PID 1 started
// (in clock ticks since the kernel's boot), since a container rebooting keeps the kernel's. A
// re-exec of PID 1 keeps both; a restart of the daemon too.
func CurrentBoot() (string, error) {
	kernel, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	start := processStart(1)
	if start == "" {
		return "", errors.New("/proc/1/stat: no start time")
	}
	return strings.TrimSpace(string(kernel)) + "+" + start, nil
}

// Validate fills in the defaults of the settings left zero and checks every field: the
// connections and programs a Reconciler needs, and each setting (a negative or otherwise
// invalid one is refused with an error naming it, see name).
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("reconcile: no store")
	case c.Runner == nil:
		return errors.New("reconcile: no runner")
	case c.StateDir == "":
		return errors.New("reconcile: no state directory")
	case c.Binary == "":
		return errors.New("reconcile: no holdfast binary")
	}
	if err := c.validateSettings(false); err != nil {
		return err
	}
	if c.ResticBinary == "" {
		c.ResticBinary = jobunit.DefaultResticBinary
	}
	if c.BootID == "" {
		var err error
		if c.BootID, err = CurrentBoot(); err != nil {
			c.Logger.Warn("boot id unknown: runs a reboot interrupts will wait out the spawn grace", "err", err)
		}
	}
	if c.now == nil {
		c.now = time.Now
	}
	return nil
}

// ValidateFlags checks the settings as the daemon's flags give them, before anything is
// connected, and fills in the defaults of those left zero where zero means the default, so the
// daemon refuses a bad one before it connects anywhere. The flags default to the Default
// constants (see Defaults), so a setting is zero here only if the operator asked for zero: where
// zero means nothing (a count, a grace, a budget) it is refused like a negative, instead of
// quietly becoming the default as in a Config built by code (Validate). PassTimeout and
// SpawnWorkers take 0 as their default either way.
func (c *Config) ValidateFlags() error { return c.validateSettings(true) }

// Defaults returns a Config with the default of every setting that has one: the defaults of the
// daemon's flags.
func Defaults() Config {
	c := Config{AllowUsers: []string{DefaultAllowUsers}, AllowCommandJobs: DefaultAllowCommandJobs, StartLead: DefaultStartLead}
	for _, s := range c.durations() {
		*s.v = s.def
	}
	for _, s := range c.counts() {
		*s.v = s.def
	}
	return c
}

// defaulted is one of Config's settings that has a default, with its field's name (errors name
// it through name); zeroIsDefault if a zero the operator gave means the default too.
type defaulted[T time.Duration | int] struct {
	field         string
	v             *T
	def           T
	zeroIsDefault bool
}

// durations and counts are Config's settings with a default: each default is stated here, once.
func (c *Config) durations() []defaulted[time.Duration] {
	return []defaulted[time.Duration]{
		{"SpawnGrace", &c.SpawnGrace, DefaultSpawnGrace, false},
		{"RunBudget", &c.RunBudget, DefaultRunBudget, false},
		{"PassTimeout", &c.PassTimeout, DefaultPassTimeout, true},
		{"DependsWait", &c.DependsWait, DefaultDependsWait, false},
		{"TakeoverGrace", &c.TakeoverGrace, DefaultTakeoverGrace, false},
	}
}

func (c *Config) counts() []defaulted[int] {
	return []defaulted[int]{
		{"MaxAttempts", &c.MaxAttempts, DefaultMaxAttempts, false},
		{"Workers", &c.Workers, DefaultWorkers, false},
		{"SpawnWorkers", &c.SpawnWorkers, spawn.DefaultWorkers, true}, // the daemon has no flag for it
	}
}

// validateSettings is the one check of every setting, and where the defaults of those left zero
// are filled in; given says the settings are the daemon's flags (ValidateFlags): then a zero was
// asked for, and is refused where zero means nothing.
func (c *Config) validateSettings(given bool) error {
	for _, s := range c.durations() {
		switch {
		case *s.v < 0 || *s.v == 0 && given && !s.zeroIsDefault:
			return fmt.Errorf("%s %s must be positive, e.g. %s", c.name(s.field), *s.v, shortDuration(s.def))
		case *s.v == 0:
			*s.v = s.def
		}
	}
	for _, s := range c.counts() {
		switch {
		case *s.v < 0 || *s.v == 0 && given && !s.zeroIsDefault:
			return fmt.Errorf("%s %d is out of range: give at least 1", c.name(s.field), *s.v)
		case *s.v == 0:
			*s.v = s.def
		}
	}
	for _, l := range []struct {
		field string
		n     int
	}{{"Limits.MaxRunning", c.Limits.MaxRunning}, {"Limits.MaxRunningHost", c.Limits.MaxRunningHost}} {
		if l.n < 0 { // 0 is no limit
			return fmt.Errorf("%s %d is out of range: give at least 0", c.name(l.field), l.n)
		}
	}
	if c.StartLead < 0 { // 0 starts runs when their time has come
		return fmt.Errorf("%s %s is negative: give 0 or more, e.g. %s", c.name("StartLead"), c.StartLead, shortDuration(DefaultStartLead))
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	if err := jobdef.ValidateHost(c.Host); err != nil {
		return fmt.Errorf("%s: %w", c.name("Host"), err)
	}
	var err error
	if c.zone, err = schedule.LoadZone(c.WindowZone); err != nil {
		return fmt.Errorf("%s: %w", c.name("WindowZone"), err)
	}
	if c.windows, err = schedule.ParseWindows(c.Windows); err != nil {
		return err // it quotes the window
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c.ValidatePolicy()
}

// name is what the operator calls the setting of Config's field: a daemon's settings are named
// by their path in its configuration, where this Config is Reconcile (package setting).
func (c *Config) name(field string) string {
	return setting.Name("Reconcile." + field)
}

// shortDuration is d as a flag is best given: 6h, 2m, 30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// ErrNoLease is what Sweep returns while the daemon does not hold its host's lease.
var ErrNoLease = errors.New("the host's lease is not held: standing by until this daemon takes it again")

// fence is the lease r writes under now (see Config.HeldLease).
func (r *Reconciler) fence() model.Lease {
	if r.cfg.HeldLease == nil {
		return model.Lease{Host: r.cfg.Host}
	}
	l, _ := r.cfg.HeldLease()
	if l.Host != r.cfg.Host { // not taken yet: no lease
		return model.Lease{Host: r.cfg.Host}
	}
	return l
}

// acting reports whether r may act now: it holds its host's lease, or it was given none to hold.
func (r *Reconciler) acting() bool {
	if r.cfg.HeldLease == nil {
		return true
	}
	l, held := r.cfg.HeldLease()
	return held && l.Host == r.cfg.Host
}

// Reconciler runs sweeps.
type Reconciler struct {
	cfg Config
	// The services Sweep hands its decisions to (services.go).
	spawner *spawn.Spawner
	repairs *attemptqueue.Queue
	runaway *runaway.Guard

	repairMu    sync.Mutex
	repairAsked map[model.AttemptRef]time.Time // guarded by repairMu
	unlocked    map[model.AttemptRef]bool      // superseded attempts whose repository was unlocked; guarded by repairMu
	// hostname is this machine's host name (os.Hostname), which restic records on the snapshots
	// its units make here; cfg.Host may be another name.
	hostname   string
	drainLimit int64 // maxDrain unless a test sets it
	// unitsLastPass is how many units the last pass asked systemd about.
	unitsLastPass atomic.Int64
	orphans       orphanReads
	windows       windowsMemo // the jobs' maintenance windows, parsed
	// shapeLastPass is liveShape of the live runs the last pass read (0 before one did).
	shapeLastPass atomic.Uint64
	// What MayWait answers from: whether the last pass read a run waiting for its unit (or was
	// not one that could tell), and how many times a run was left waiting since (leftCount)
	// against the count when that pass began (leftSeen).
	passWaits           atomic.Bool
	leftCount, leftSeen atomic.Uint64
}

// MayWait reports whether a live run of this host may be waiting for something an end of
// another run frees (its repository, a place, a prerequisite): the last pass read a run not
// spawned yet, or a run was left without its unit since that pass began. An end closed by
// EndNamed then still wants a pass; otherwise it wants none.
func (r *Reconciler) MayWait() bool {
	return r.passWaits.Load() || r.leftCount.Load() != r.leftSeen.Load()
}

// left notes a run left waiting for its unit (see MayWait). It wakes no pass: one for a claim
// the repository blocks would find it blocked again; the end that frees it, or the interval,
// brings the next.
func (r *Reconciler) left() { r.leftCount.Add(1) }

// New validates cfg and returns a Reconciler.
func New(cfg Config) (*Reconciler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Reconciler{cfg: cfg, unlocked: map[model.AttemptRef]bool{}}
	r.passWaits.Store(true) // until a pass has read the live runs
	r.hostname, _ = os.Hostname()
	if err := r.newServices(); err != nil {
		return nil, err
	}
	return r, nil
}

// SweepStats reports one pass.
type SweepStats struct {
	Runs     int
	Errors   int
	Duration time.Duration
	// SystemdDuration is the part of Duration spent waiting for systemd's answer about the
	// units once the live runs were read (most of it, where systemd was asked while they were).
	SystemdDuration time.Duration
	// JournalLag is the largest number of journal bytes not yet applied, over all live runs.
	JournalLag int64
	// LiveChanged says that the live runs read differ from the last pass's in what the next
	// due time rests on (liveShape), or that the pass took runs over: a pass's own changes
	// show in the next pass's read.
	LiveChanged bool
	// Idle says that the pass found nothing to follow: no live run of this host, none taken
	// over, no unit of a superseded attempt alive, no error. Nothing but a notification, an
	// exit marker, admission or a host going down gives the next pass work then.
	Idle bool
	// NextDown is, in an idle pass, how long until another host may be down at the earliest
	// (store.HostNextDown), the moment a takeover may be due; 0 for no other host that may.
	NextDown time.Duration
}

// Sweep reconciles every live run once, within PassTimeout. Without the host's lease it does
// nothing and returns ErrNoLease; a lease lost during the pass ends it with the runs not reached.
func (r *Reconciler) Sweep(ctx context.Context) (SweepStats, error) {
	if !r.acting() {
		return SweepStats{}, ErrNoLease
	}
	start := time.Now()
	leftBefore := r.leftCount.Load()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PassTimeout)
	defer cancel()
	// Runs of hosts that lost their lease are taken over first, so this pass may spawn them.
	taken, takeErr := r.takeOver(ctx)
	if takeErr != nil {
		r.cfg.Logger.Error("runs of hosts that lost their lease not taken over; the next pass tries again", "err", takeErr)
	}
	// One question to systemd for the whole pass. It is asked before any marker is read: a unit
	// reads as gone only after its ExecStopPost ended, so a marker it wrote is seen below. Where
	// the last pass had units, it is asked about all of holdfast's units while the live runs are
	// read, so that neither waits for the other.
	var early chan unitAnswer
	if lister, ok := r.cfg.Runner.(unitLister); ok && r.unitsLastPass.Load() > 0 {
		early = make(chan unitAnswer, 1)
		go func() {
			askCtx, cancel := context.WithTimeout(ctx, r.cfg.RunBudget)
			defer cancel()
			states, err := lister.StatesMatching(askCtx, systemd.UnitPattern)
			early <- unitAnswer{states, err}
		}()
	}
	live, err := r.cfg.Store.RunListLive(ctx, r.cfg.Host)
	if err != nil {
		return SweepStats{}, err
	}
	shape := liveShape(live)
	// A run taken over and ended at once (stopped, or given up) was never among the live runs.
	stats := SweepStats{Runs: len(live), LiveChanged: r.shapeLastPass.Swap(shape) != shape || taken > 0}
	asked := time.Now()
	states, statesErr := r.unitStates(ctx, live, early)
	stats.SystemdDuration = time.Since(asked)
	jobs, err := r.jobsToSpawn(ctx, live)
	if err != nil {
		return stats, err
	}
	var mu sync.Mutex
	pass := &passReads{jobs: jobs, states: states, statesErr: statesErr}
	if len(live) > 0 { // an idle daemon's pass opens nothing
		pass.openDirs(r.cfg.StateDir)
		defer pass.closeDirs()
	}
	one := func(l model.LiveRun) {
		runCtx, cancel := context.WithTimeout(ctx, r.cfg.RunBudget)
		lag, err := r.reconcile(runCtx, l, pass)
		cancel()
		mu.Lock()
		defer mu.Unlock()
		stats.JournalLag = max(stats.JournalLag, lag)
		if err != nil {
			stats.Errors++
			r.cfg.Logger.Error("run could not be reconciled; the next pass tries again",
				"run", l.Run.ID, "attempt", l.Attempt.No, "err", err)
		}
	}
	// Runs are independent; a few at once keep one slow call from delaying the rest. But when
	// places are limited, runs waiting for one are handed to the spawner one by one in the
	// snapshot's order, which is priority order, and claim in that order.
	limited := r.cfg.Limits.Set()
	// A few long-lived workers rather than a goroutine per run: each new goroutine grew its
	// stack again down the journal's and the store's calls.
	var inOrder []model.LiveRun
	var wg sync.WaitGroup
	queue := make(chan model.LiveRun)
	for range min(r.cfg.Workers, len(live)) {
		wg.Go(func() {
			for l := range queue {
				one(l)
			}
		})
	}
	for _, l := range live {
		if ctx.Err() != nil || !r.acting() {
			break
		}
		if limited && l.Attempt.Unit == "" {
			inOrder = append(inOrder, l)
			continue
		}
		queue <- l
	}
	close(queue)
	wg.Wait()
	for _, l := range inOrder {
		if ctx.Err() != nil || !r.acting() {
			break
		}
		one(l)
	}
	if err := ctx.Err(); err != nil {
		return stats, err
	}
	if !r.acting() {
		return stats, ErrNoLease
	}
	r.runaway.Prune(live)
	stopping, err := r.stopSuperseded(ctx)
	if err != nil {
		stats.Errors++
		r.cfg.Logger.Error("units of superseded attempts not stopped; the next pass tries again", "err", err)
	}
	// Deferred settlements do not keep a daemon awake: each is asked about every repairInterval.
	if err := r.settleDeferred(ctx); err != nil {
		stats.Errors++
		r.cfg.Logger.Error("deferred settlements not retried", "err", err)
	}
	stats.Idle = len(live) == 0 && taken == 0 && takeErr == nil && !stopping && stats.Errors == 0
	// Read before this pass's spawns: a run it spawned counts as waiting until the next pass.
	r.passWaits.Store(limited || stats.Errors > 0 || slices.ContainsFunc(live, func(l model.LiveRun) bool { return l.Attempt.Unit == "" }))
	r.leftSeen.Store(leftBefore)
	if stats.Idle {
		in, ok, err := r.cfg.Store.HostNextDown(ctx, r.cfg.Host, r.cfg.TakeoverGrace)
		switch {
		case err != nil:
			stats.Idle = false
			r.cfg.Logger.Warn("when another host may be down not read; the next pass comes at the sweep interval", "err", err)
		case ok:
			stats.NextDown = max(in, time.Nanosecond) // 0 says none
		}
	}
	stats.Duration = time.Since(start)
	return stats, nil
}

// liveShape sums up what of the live runs a host's next due time rests on (store.JobNextDue):
// which runs are live, in which attempt, spawned or not, and from when they may be spawned.
// The order they were read in does not count (runs of the same priority and age come in any).
// It is never 0.
func liveShape(live []model.LiveRun) uint64 {
	var sum uint64
	var h maphash.Hash
	h.SetSeed(shapeSeed)
	var b [8]byte
	for _, l := range live {
		h.Reset()
		h.Write(l.Run.ID[:])
		h.WriteString(l.Run.Status)
		binary.LittleEndian.PutUint64(b[:], uint64(l.Attempt.No))
		h.Write(b[:])
		if l.Attempt.Unit != "" {
			h.WriteByte(1)
		}
		if l.Run.NotBefore != nil {
			binary.LittleEndian.PutUint64(b[:], uint64(l.Run.NotBefore.UnixNano()))
			h.Write(b[:])
		}
		sum += h.Sum64()
	}
	return sum | 1
}

// shapeSeed is liveShape's: one per process, so that its sums compare within it.
var shapeSeed = maphash.MakeSeed()

// SpawnsNamed reports whether SpawnNamed spawns runs at all: while places are limited it leaves
// every run to the pass.
func (r *Reconciler) SpawnsNamed() bool {
	return !r.cfg.Limits.Set()
}

// SpawnNamed spawns at once those of the runs ids that this host may spawn and that have no
// unit yet, where the pass would spawn them (or arm them) now: the same facts and the same
// decision table, but not the rest of a pass, so that an admission's notification, which names
// its run, starts the run without waiting for a pass over every live run of the host. Any other
// decision is left to the pass; so are all runs while places are limited, since the pass hands
// them over in priority order. Runs the pass hands over at the same time are spawned once: the
// spawner drops an attempt already handed over, and only one claim of an attempt is granted.
// It returns how many of the runs named (each counted once) it did not hand over: those want a
// pass (a stop asked for, a run another host spawns, one waiting for its repository, ...).
func (r *Reconciler) SpawnNamed(ctx context.Context, ids []uuid.UUID) (left int, err error) {
	distinct := len(slices.Compact(slices.SortedFunc(slices.Values(ids), func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })))
	defer func() {
		if left > 0 {
			r.left()
		}
	}()
	if !r.acting() {
		return distinct, ErrNoLease
	}
	if !r.SpawnsNamed() {
		return distinct, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RunBudget)
	defer cancel()
	live, err := r.cfg.Store.RunListSpawnable(ctx, r.cfg.Host, ids)
	if err != nil || len(live) == 0 {
		return distinct, err
	}
	pass := &passReads{jobs: map[string]model.Job{}}
	for _, l := range live {
		if _, ok := pass.jobs[l.Run.JobName]; ok || l.Run.JobName == "" {
			continue
		}
		j, err := r.cfg.Store.JobGet(ctx, l.Run.JobName)
		if errors.Is(err, store.ErrNotFound) {
			continue // the pass judges the run of a removed job
		}
		if err != nil {
			return distinct, err
		}
		pass.jobs[j.Name] = j
	}
	handed, err := r.actNamed(ctx, live, pass, actSpawn, actArm)
	return distinct - handed, err
}

// EndNamed closes at once those of the runs ids whose units systemd said are gone (states, its
// answer asked after their exit markers appeared) where the pass would close them from their
// markers now: the same facts and decision table as the pass, and as SpawnNamed, carrying out
// that decision only. Any other (a restart, a stop, a quarantine) is left to the pass, which the
// caller wakes as well, as it is for a run whose unit states does not name. A run the pass
// closes at the same time is closed once: each close is a store write guarded by "this attempt
// is still live", and a journal's batch is applied by whichever read it first. It returns how
// many of the live runs of the units named it did not close: those want a pass.
func (r *Reconciler) EndNamed(ctx context.Context, ids []uuid.UUID, states map[string]systemd.State) (left int, err error) {
	if !r.acting() {
		return 0, ErrNoLease
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RunBudget)
	defer cancel()
	live, err := r.cfg.Store.RunListSpawned(ctx, r.cfg.Host, ids)
	if err != nil {
		return 0, err
	}
	live = slices.DeleteFunc(live, func(l model.LiveRun) bool { _, asked := states[l.Attempt.Unit]; return !asked })
	if len(live) == 0 {
		return 0, nil
	}
	pass := &passReads{states: states}
	pass.openDirs(r.cfg.StateDir)
	defer pass.closeDirs()
	closed, err := r.actNamed(ctx, live, pass, actFinish)
	return len(live) - closed, err
}

// actNamed judges each of the runs live as the pass does, with what pass read for them, and
// carries out the decisions whose action is among acts; it leaves the others to the pass. done
// is how many it carried out.
func (r *Reconciler) actNamed(ctx context.Context, live []model.LiveRun, pass *passReads, acts ...action) (done int, err error) {
	var errs []error
	for _, l := range live {
		if !r.acting() {
			return done, ErrNoLease
		}
		f, job, d, _, err := r.judge(ctx, &l, pass)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if slices.Contains(acts, d.act) {
			r.cfg.Logger.Debug("reconcile", "run", l.Run.ID, "attempt", l.Attempt.No, "action", d.act.String(), "row", d.row, "named", true)
			if err := r.carryOut(ctx, l, f, job, d); err != nil {
				errs = append(errs, err)
				continue
			}
			done++
		}
	}
	return done, errors.Join(errs...)
}

// jobsToSpawn reads the jobs this host may run once for the pass, if any run waits for its unit: one query
// instead of one per spawn, which counts when many runs are due at once.
func (r *Reconciler) jobsToSpawn(ctx context.Context, live []model.LiveRun) (map[string]model.Job, error) {
	if !slices.ContainsFunc(live, func(l model.LiveRun) bool { return l.Attempt.Unit == "" }) {
		return nil, nil
	}
	list, err := r.cfg.Store.JobListForHost(ctx, r.cfg.Host)
	if err != nil {
		return nil, err
	}
	jobs := make(map[string]model.Job, len(list))
	for _, j := range list {
		jobs[j.Name] = j
	}
	return jobs, nil
}

// unitStates is systemd's answer for the pass about the units of live: early's, if the pass
// asked while it read the runs, else asked now, by name.
func (r *Reconciler) unitStates(ctx context.Context, live []model.LiveRun, early <-chan unitAnswer) (map[string]systemd.State, error) {
	names := make([]string, 0, len(live))
	for _, l := range live {
		if l.Attempt.Unit != "" {
			names = append(names, l.Attempt.Unit)
		}
	}
	r.unitsLastPass.Store(int64(len(names)))
	if early != nil {
		// Asked before the runs were read: a unit claimed before the read that systemd had not
		// created yet when asked reads as gone, which the spawn grace covers, as it covers a
		// unit claimed and not yet created when asked after.
		answer := <-early
		if answer.err != nil {
			return nil, answer.err
		}
		states := answer.states
		if states == nil {
			states = make(map[string]systemd.State, len(names))
		}
		for _, name := range names {
			if _, ok := states[name]; !ok {
				states[name] = systemd.NotFound
			}
		}
		return states, nil
	}
	if len(names) == 0 {
		return nil, nil
	}
	askCtx, cancel := context.WithTimeout(ctx, r.cfg.RunBudget)
	defer cancel()
	return r.cfg.Runner.States(askCtx, names)
}

// unitAnswer is systemd's answer about holdfast's units, or why there is none.
type unitAnswer struct {
	states map[string]systemd.State
	err    error
}

func (r *Reconciler) engineFor(jobEngine string) classifier {
	if jobEngine == engine.NameCommand {
		return engine.Command{}
	}
	return engine.Restic{Binary: r.cfg.ResticBinary}
}

// reconcile drains the run's journal, gathers the facts, decides once and carries the decision
// out, with what pass read for every run; it returns the run's journal lag.
func (r *Reconciler) reconcile(ctx context.Context, l model.LiveRun, pass *passReads) (int64, error) {
	f, job, d, lag, err := r.judge(ctx, &l, pass)
	if err != nil {
		return lag, err
	}
	r.cfg.Logger.Debug("reconcile", "run", l.Run.ID, "attempt", l.Attempt.No, "action", d.act.String(), "row", d.row)
	return lag, r.carryOut(ctx, l, f, job, d)
}

// judge drains the run's journal, gathers the facts (updating l as gather does) and decides
// once, with what pass read for every run; it returns the run's journal lag too.
func (r *Reconciler) judge(ctx context.Context, l *model.LiveRun, pass *passReads) (facts, model.Job, decision, int64, error) {
	lag, problem, drainErr := r.drain(ctx, *l, pass)
	if drainErr != nil {
		// The journal decides how fresh the numbers are, never the lifecycle.
		r.cfg.Logger.Warn("run journal not drained this pass", "run", l.Run.ID, "attempt", l.Attempt.No, "err", drainErr)
	}
	f := facts{journalProblem: problem}
	var job model.Job
	if problem == "" { // the quarantine comes first; nothing else is read for it
		var err error
		if f, job, err = r.gather(ctx, l, pass); err != nil {
			return f, job, decision{}, lag, err
		}
	}
	return f, job, decide(f, r.rules()), lag, nil
}

func (r *Reconciler) rules() rules {
	p := rules{spawnGrace: r.cfg.SpawnGrace, dependsWait: r.cfg.DependsWait, maxAttempts: r.cfg.MaxAttempts, startLead: r.cfg.StartLead}
	if r.spawner != nil && r.spawner.ArmRefused() { // nil in the tests that build a Reconciler to gather facts
		p.startLead = 0 // this manager cannot arm: every run starts at its time
	}
	return p
}

// gather reads the facts about one live run: the marker, our intents, systemd's answer, and
// before a spawn what may hold it back. It changes nothing, except l's intents, which it reads
// again for a readable marker. It returns the run's job where a spawn needs it. pass holds
// what the pass read for every run.
func (r *Reconciler) gather(ctx context.Context, l *model.LiveRun, pass *passReads) (facts, model.Job, error) {
	jobs, states, statesErr := pass.jobs, pass.states, pass.statesErr
	f := facts{
		attempt:       l.Attempt.No,
		queued:        l.Run.Status == model.StatusQueued,
		unitRecorded:  l.Attempt.Unit != "",
		unitName:      l.Attempt.Unit,
		stopRequested: l.Run.StopRequestedAt != nil,
		stopReason:    l.Run.StopReason,
		pausedReason:  l.Run.PausedReason,
		// The database's clock: a retry's not-before and the time the run was queued are on it,
		// and the host's clock may be off.
		now:      l.Now(),
		queuedAt: l.Run.CreatedAt,
	}
	if l.Attempt.SpawnClaimedAt != nil {
		// On the database's clock: the daemon's may differ from it. An armed unit is not started
		// before its slot, so it cannot be missed before that either.
		from := *l.Attempt.SpawnClaimedAt
		if a := l.Attempt.ArmedFor; a != nil && a.After(from) {
			from = *a
		}
		f.sinceSpawn = l.ReadAt.Sub(from)
	}
	f.armed = l.Attempt.ArmedFor != nil
	f.earlierBoot = l.Attempt.BootID != "" && l.Attempt.Host == r.cfg.Host && l.Attempt.BootID != r.cfg.BootID
	if err := r.readMarker(*l, &f, r.engineFor(l.JobEngine), pass.markers); err != nil {
		return f, model.Job{}, err
	}
	switch {
	case f.marker == markerReadable:
		run, err := r.cfg.Store.RunGet(ctx, l.Run.ID)
		if err != nil {
			return f, model.Job{}, err // nothing is closed on intents we could not read
		}
		l.Run.StopRequestedAt, l.Run.StopReason, l.Run.PausedReason = run.StopRequestedAt, run.StopReason, run.PausedReason
		f.stopRequested, f.stopReason, f.pausedReason = run.StopRequestedAt != nil, run.StopReason, run.PausedReason
		if st, ok := states[l.Attempt.Unit]; ok && statesErr == nil && st.Alive() {
			f.stopping = true
		}
	case f.marker == markerUnreadable:
	case f.unitRecorded:
		if statesErr != nil {
			return f, model.Job{}, statesErr // "could not ask" is never "gone"
		}
		st, ok := states[l.Attempt.Unit]
		if !ok {
			return f, model.Job{}, fmt.Errorf("systemd was not asked about unit %s", l.Attempt.Unit)
		}
		f.unit = unitGone
		f.unitFailed = st.ActiveState == "failed"
		if st.Alive() {
			f.unit, f.unitFailed = unitAlive, false
			if !f.stopRequested && f.pausedReason == "" {
				f.runaway = r.runaway.Measure(ctx, *l)
			}
		}
	case f.stopRequested:
		f.unitName = systemd.UnitName(l.Run.JobName, l.Run.ID, l.Attempt.No)
		alive, _, err := r.cfg.Runner.Alive(ctx, f.unitName)
		if err != nil {
			return f, model.Job{}, err
		}
		f.unit = unitGone
		if alive {
			f.unit = unitAlive
		}
	default:
		job, err := r.spawnFacts(ctx, *l, jobs, &f)
		return f, job, err
	}
	return f, model.Job{}, nil
}

// carryOut does what d says about the run. Every state change in it is a store write guarded
// by "this attempt is still live".
func (r *Reconciler) carryOut(ctx context.Context, l model.LiveRun, f facts, job model.Job, d decision) error {
	switch d.act {
	case actNothing:
		return nil
	case actQuarantine:
		return r.quarantine(ctx, l, d.why)
	case actSpawn:
		return r.spawner.Spawn(ctx, l, job, nil)
	case actArm:
		return r.spawner.Spawn(ctx, l, job, f.notBefore)
	case actDisarm:
		return r.disarm(ctx, l, f, d.end)
	case actWait:
		return r.cfg.Store.RunSetWaiting(ctx, store.RunSetWaitingParams{RunID: l.Run.ID, Reason: d.why, NotBefore: d.until})
	case actFinish:
		if err := r.markArmedStarted(ctx, l, f); err != nil {
			return err
		}
		return r.finishFromMarker(ctx, l, f.ended, r.engineFor(l.JobEngine))
	case actEnd:
		return r.finish(ctx, l, f.ended, d.end)
	case actStop:
		if f.armed { // its timer may still be there
			if err := r.cfg.Runner.Stop(ctx, systemd.TimerName(f.unitName)); err != nil {
				return err
			}
		}
		return r.cfg.Runner.Stop(ctx, f.unitName)
	case actMarkRunning:
		return r.cfg.Store.AttemptMarkStarted(ctx, r.fence(), store.AttemptMarkStartedParams{Ref: l.Ref(), At: time.Time{}}) // on the database's clock
	case actPauseRunaway:
		return r.runaway.Pause(ctx, l, *f.runaway)
	case actWatch:
		r.runaway.Watch(l)
		return nil
	case actResetFailed:
		return r.cfg.Runner.ResetFailed(ctx, l.Attempt.Unit)
	case actRestart:
		if err := r.markArmedStarted(ctx, l, f); err != nil {
			return err
		}
		return r.restart(ctx, l, f.ended)
	}
	return fmt.Errorf("run %s: no handling for action %s", l.Run.ID, d.act)
}

// markArmedStarted records the start of an armed unit that ended before any pass saw it alive:
// its marker proves it ran, and its timer started it at its slot.
func (r *Reconciler) markArmedStarted(ctx context.Context, l model.LiveRun, f facts) error {
	if !f.armed || !f.queued || f.marker != markerReadable {
		return nil
	}
	return r.cfg.Store.AttemptMarkStarted(ctx, r.fence(), store.AttemptMarkStartedParams{Ref: l.Ref(), At: *l.Attempt.ArmedFor})
}

// readMarker reads the attempt's marker into f, through markers if it is not nil.
func (r *Reconciler) readMarker(l model.LiveRun, f *facts, eng classifier, markers *systemd.Markers) error {
	var m systemd.Marker
	var err error
	if markers != nil {
		m, err = markers.Read(l.Run.ID, l.Attempt.No)
	} else {
		m, err = systemd.ReadMarker(r.cfg.StateDir, l.Run.ID, l.Attempt.No)
	}
	switch {
	case err == nil:
		f.marker = markerReadable
		f.ended = m
		f.interrupted = interrupted(m, eng)
		return nil
	case errors.Is(err, systemd.ErrNoMarker):
		f.marker = markerNone
		return nil
	case errors.Is(err, systemd.ErrMarkerUnreadable):
		f.marker = markerUnreadable
		f.markerProblem = err.Error()
		return nil
	}
	return err // an I/O error may pass: decide nothing on it
}

// Host is the host name the reconciler records on attempts (Config.Host after its default).
func (r *Reconciler) Host() string { return r.cfg.Host }
