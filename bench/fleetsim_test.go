package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/notify"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/supervisor"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/wake"
	"github.com/holdfast-backup/holdfast/watch"
)

// The simulated fleet's shape.
const (
	// simRole is the role of the simulated fleet's hosts, twinRole that of the simulated twin of
	// the real idle daemon: pg_stat_statements tells them apart from each other and from it.
	simRole  = "hfsim"
	twinRole = "hftwin"
	// hostsPerPool simulated hosts share one store (a pool of store.DefaultMaxConns): a daemon's
	// own pool keeps a session open while idle beside its listener, so a pool per host would be
	// 2,000 sessions at 1,000 hosts on a 2-core machine. A larger shared pool was tried: under
	// load it opened and closed sessions without end, each new one cold, and did worse. Each
	// host listens on a connection of its own (store.Listen), as a daemon does: a NOTIFY's cost
	// grows with the listeners.
	hostsPerPool = 10
	// simMaxConnections: at 1,000 hosts a listener each, the pools, the real daemon, the twin
	// and the seeder.
	simMaxConnections = 1600
	// simHolder and simBootID are storetest.SeedFleet's lease holder and live attempts' boot: a
	// simulated host takes its seeded lease as that holder, and its units are of this boot.
	simHolder = "sim"
	simBootID = "boot"
	// The supervisor's delivery interval without a listener and history compaction
	// (deliverInterval, compactEvery and its duty), which it does not export; the calibration
	// shows the rates they give.
	simDeliverEvery = 2 * time.Second
	simCompactEvery = time.Hour
	simCompactDuty  = "compact-history"
	// simMinWait is the supervisor's minWait: admission's shortest sleep.
	simMinWait = 100 * time.Millisecond
	// simJoinRate is how many simulated hosts start a second, at most, unless
	// HOLDFAST_FLEET_JOIN_RATE says otherwise. A joining host costs more than a running one
	// (a new listening session, cold first passes): 1,000 joining 10 a second saturated this
	// 2-core machine from about 900 on, and leases lapsed; joining 4 a second, none did.
	simJoinRate = 4
)

// memUnits is systemd faked in memory for a simulated host: a unit asked about runs unless it
// was stopped (the seeded live runs' units run), a timer exists once armed, and starts and arms
// succeed at once. Nothing is carried out.
type memUnits struct {
	mu      sync.Mutex
	stopped map[string]bool
	armed   map[string]bool
}

var _ reconcile.Units = (*memUnits)(nil)

func (u *memUnits) state(name string) systemd.State {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stopped[name] || strings.HasSuffix(name, ".timer") && !u.armed[name] {
		return systemd.State{LoadState: "not-found", ActiveState: "inactive", SubState: "dead"}
	}
	return systemd.State{LoadState: "loaded", ActiveState: "active", SubState: "running"}
}

func (u *memUnits) Start(context.Context, systemd.Spec) (bool, error) { return false, nil }

func (u *memUnits) Arm(_ context.Context, s systemd.Spec, _ time.Time) (bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.armed == nil {
		u.armed = map[string]bool{}
	}
	u.armed[systemd.TimerName(s.Name)] = true
	return false, nil
}

func (u *memUnits) States(_ context.Context, names []string) (map[string]systemd.State, error) {
	out := make(map[string]systemd.State, len(names))
	for _, n := range names {
		out[n] = u.state(n)
	}
	return out, nil
}

func (u *memUnits) Alive(_ context.Context, name string) (bool, systemd.State, error) {
	st := u.state(name)
	return st.Alive(), st, nil
}

func (u *memUnits) Stop(_ context.Context, name string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stopped == nil {
		u.stopped = map[string]bool{}
	}
	u.stopped[name] = true
	return nil
}

func (u *memUnits) ResetFailed(context.Context, string) error { return nil }

// SystemManager is false: the units are built as for a user manager.
func (u *memUnits) SystemManager() bool { return false }

// Output runs no query: no simulated host asks restic.
func (u *memUnits) Stream(_ context.Context, s systemd.Spec, _ func(io.Reader) error) (systemd.Result, error) {
	return systemd.Result{}, errors.New("memUnits: no query unit " + s.Name)
}

// simStats is what the simulated hosts measured: latencies and passes while measuring, lapses
// and what was logged at warning level or above for the whole phase.
type simStats struct {
	measuring atomic.Bool
	stopping  atomic.Bool // what the hosts log once they are being stopped is not counted

	mu                  sync.Mutex
	renewals, sweeps    []time.Duration   // guarded by mu
	admissions, watches []time.Duration   // guarded by mu
	deliveries, standBy int               // guarded by mu
	minSlack            time.Duration     // guarded by mu: the least left of a lease when it was renewed
	lapsed              map[string]bool   // guarded by mu: hosts whose lease was found lost
	logged              map[string]int    // guarded by mu: by level and message
	firstErr            map[string]string // guarded by mu: the first error logged with each
}

func newSimStats() *simStats {
	return &simStats{minSlack: time.Hour, lapsed: map[string]bool{}, logged: map[string]int{}, firstErr: map[string]string{}}
}

// took records a pass of a loop (into *list), if measuring.
func (s *simStats) took(list *[]time.Duration, d time.Duration) {
	if !s.measuring.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	*list = append(*list, d)
}

func (s *simStats) count(n *int) {
	if !s.measuring.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	(*n)++
}

// Enabled, Handle, WithAttrs and WithGroup make simStats the simulated hosts' slog handler,
// which counts warnings and errors by message.
func (s *simStats) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (s *simStats) Handle(_ context.Context, r slog.Record) error {
	if s.stopping.Load() {
		return nil
	}
	msg, err := r.Level.String()+" "+r.Message, ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			err = a.Value.String()
			return false
		}
		return true
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logged[msg]++
	if _, ok := s.firstErr[msg]; !ok {
		s.firstErr[msg] = err[:min(len(err), 160)]
	}
	return nil
}

func (s *simStats) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *simStats) WithGroup(string) slog.Handler      { return s }

// simHost is one simulated daemon: the daemon's loops (supervisor/services.go, lease.go) at its
// default intervals, calling the real reconciler, admitter, watcher, deliverer and store, with
// systemd faked in memory (memUnits). The loops are the supervisor's, restated around the calls
// they time; the calibration holds their rates against a real daemon's.
type simHost struct {
	name                              string
	st                                *store.Store
	cfg                               supervisor.Config // the daemon's defaults
	rec                               *reconcile.Reconciler
	admitter                          *schedule.Admitter
	watcher                           *watch.Watcher
	deliverer                         *notify.Deliverer
	stats                             *simStats
	sweepWake, admitWake, deliverWake wake.Signal
	dueWake, busyWake                 wake.Signal
	listening, idle                   atomic.Bool

	mu        sync.Mutex
	lease     model.Lease // guarded by mu
	heldUntil time.Time   // guarded by mu
}

func newSimHost(name string, st *store.Store, stats *simStats, stateDir string) (*simHost, error) {
	logger := slog.New(stats)
	h := &simHost{name: name, st: st, cfg: supervisor.Defaults(), stats: stats, sweepWake: wake.New(), admitWake: wake.New(),
		deliverWake: wake.New(), dueWake: wake.New(), busyWake: wake.New()}
	rc := h.cfg.Reconcile
	rc.Store, rc.Runner, rc.Host, rc.StateDir, rc.Binary, rc.BootID, rc.Logger = st, &memUnits{}, name, stateDir,
		"/usr/bin/holdfast", simBootID, logger
	rc.HeldLease = h.current
	var err error
	if h.rec, err = reconcile.New(rc); err != nil {
		return nil, err
	}
	h.admitter = &schedule.Admitter{Store: st, Host: name, Grace: h.cfg.LateGrace, Logger: logger, Timeout: h.cfg.Reconcile.PassTimeout, Lead: h.cfg.Reconcile.StartLead}
	if err := h.admitter.Validate(); err != nil {
		return nil, err
	}
	if h.deliverer, err = notify.New(notify.Config{Store: st, Logger: logger}); err != nil {
		return nil, err
	}
	h.watcher = &watch.Watcher{Store: st, Host: name, Logger: logger, Interval: h.cfg.WatchInterval}
	return h, nil
}

// current is the lease and whether it is held, as the daemon's lease service tells.
func (h *simHost) current() (model.Lease, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease, h.lease.Holder != "" && time.Now().Before(h.heldUntil)
}

func (h *simHost) set(l model.Lease, asked time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lease, h.heldUntil = l, asked.Add(h.cfg.Lease)
}

func (h *simHost) acting() bool {
	_, held := h.current()
	return held
}

func (h *simHost) request() store.LeaseAcquireParams {
	return store.LeaseAcquireParams{Host: h.name, Holder: simHolder, Version: "fleetsim", Duration: h.cfg.Lease, Grace: h.cfg.Reconcile.TakeoverGrace}
}

// run takes the host's lease, then runs the daemon's services until ctx ends.
func (h *simHost) run(ctx context.Context) {
	for {
		asked := time.Now()
		l, err := h.st.LeaseAcquire(ctx, h.request())
		if err == nil {
			h.set(l, asked)
			break
		}
		slog.New(h.stats).Error("host lease not taken; trying again", "err", err)
		if !wake.Sleep(ctx, h.cfg.Lease/3, nil) {
			return
		}
	}
	services := []interface {
		Start(context.Context) error
		Stop()
	}{h.rec.RunawayWatch(), h.rec.Spawner(), h.rec.RepairChannel()}
	for _, s := range services {
		if err := s.Start(ctx); err != nil {
			return
		}
	}
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){h.renew, h.listen, h.sweep, h.admit, h.watch, h.deliver, h.compactHistory, h.removeRunFiles} {
		wg.Go(func() { loop(ctx) })
	}
	wg.Wait()
	for _, s := range slices.Backward(services) {
		s.Stop()
	}
}

// renew is hostLease.renew: every third of the lease, renewed, or taken again if it lapsed.
func (h *simHost) renew(ctx context.Context) {
	tick := time.NewTicker(h.cfg.Lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lease, _ := h.current()
		callCtx, cancel := context.WithTimeout(ctx, h.cfg.Lease/3)
		asked := time.Now()
		next, err := h.st.LeaseRenew(callCtx, lease, h.cfg.Lease)
		if err == nil {
			h.stats.took(&h.stats.renewals, time.Since(asked))
			// On the database's clock: what was left of the lease when the renewal ran.
			slack := lease.Until.Sub(next.Until.Add(-h.cfg.Lease))
			h.stats.mu.Lock()
			h.stats.minSlack = min(h.stats.minSlack, slack)
			h.stats.mu.Unlock()
		}
		if errors.Is(err, store.ErrLeaseLost) {
			h.stats.mu.Lock()
			h.stats.lapsed[h.name] = true
			h.stats.mu.Unlock()
			asked = time.Now()
			next, err = h.st.LeaseAcquire(callCtx, h.request())
		}
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				slog.New(h.stats).Error("host lease not renewed; trying again", "err", err)
			}
			continue
		}
		h.set(next, asked)
	}
}

// listen is Supervisor.listen, without the named spawns (the simulated hosts spawn in their
// passes): a notification wakes admission and the sweep at once.
func (h *simHost) listen(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := h.st.Listen(ctx, store.Wakes{Host: h.name,
			Runs: func() {
				h.listening.Store(true)
				failures = 0
				h.admitWake.Wake()
				h.sweepWake.Wake()
			},
			Deliveries: func() {
				h.listening.Store(true)
				h.deliverWake.Wake()
			}})
		h.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		h.dueWake.Wake()
		h.deliverWake.Wake()
		h.sweepWake.Wake()
		failures++
		slog.New(h.stats).Warn("listen for notifications failed; polling meanwhile", "err", err)
		if !wake.Sleep(ctx, wake.Backoff(2*time.Second, 30*time.Second, failures), nil) {
			return
		}
	}
}

// sweep is Supervisor.sweep.
func (h *simHost) sweep(ctx context.Context) {
	for {
		start := time.Now()
		stats, err := h.rec.Sweep(ctx)
		wait, idle := supervisor.SweepWait(h.cfg.SweepInterval, stats, err, h.listening.Load())
		if stats.LiveChanged {
			h.dueWake.Wake()
		}
		switch {
		case errors.Is(err, reconcile.ErrNoLease):
			h.stats.count(&h.stats.standBy)
		case err != nil && ctx.Err() == nil:
			slog.New(h.stats).Error("sweep failed", "err", err)
		case err == nil:
			h.stats.took(&h.stats.sweeps, time.Since(start))
		}
		if h.idle.Swap(idle) && !idle {
			h.busyWake.Wake()
		}
		if !wake.Sleep(ctx, wait, h.sweepWake) {
			return
		}
	}
}

// admit is Supervisor.admit; a pass is the admission and the read of the next due time.
func (h *simHost) admit(ctx context.Context) {
	var dueAt, wokeFor time.Time
	var gate schedule.Gate
	woken := false
	for {
		if !h.acting() {
			if !wake.Sleep(ctx, h.cfg.SweepInterval, h.admitWake) {
				return
			}
			woken = true
			continue
		}
		start := time.Now()
		var n int
		var err error
		if now := time.Now(); gate.Open(now, woken) {
			n, err = h.admitter.AdmitDue(ctx, now)
		}
		if err != nil && ctx.Err() == nil {
			slog.New(h.stats).Error("admission of due jobs failed", "err", err)
		}
		if n > 0 || !dueAt.IsZero() && !dueAt.Equal(wokeFor) && !time.Now().Before(dueAt) {
			h.sweepWake.Wake()
			wokeFor = dueAt
		}
		wait := h.pollEvery(h.cfg.SweepInterval)
		dueAt = time.Time{}
		nextCtx, cancel := context.WithTimeout(ctx, store.DefaultStatementTimeout)
		next, nextErr := h.st.JobNextDue(nextCtx, h.name, h.cfg.Reconcile.StartLead)
		gate.Learn(time.Now(), next, errors.Join(err, nextErr))
		if nextErr == nil && next != nil && time.Until(*next) < wait {
			dueAt = *next
			wait = max(simMinWait, time.Until(*next))
		}
		cancel()
		if err == nil && nextErr == nil {
			h.stats.took(&h.stats.admissions, time.Since(start))
		}
		var alive bool
		if alive, woken = wake.WaitOr(ctx, wait, h.admitWake, h.dueWake); !alive {
			return
		}
	}
}

// pollEvery is Supervisor.pollEvery.
func (h *simHost) pollEvery(interval time.Duration) time.Duration {
	if h.listening.Load() {
		return supervisor.PollBackstop
	}
	return interval
}

// watch is Supervisor.watch.
func (h *simHost) watch(ctx context.Context) {
	for {
		if !h.acting() {
			if !wake.Sleep(ctx, h.cfg.SweepInterval, nil) {
				return
			}
			continue
		}
		start := time.Now()
		passCtx, cancel := context.WithTimeout(ctx, h.cfg.Reconcile.PassTimeout)
		err := h.watcher.Pass(passCtx)
		cancel()
		if err != nil && ctx.Err() == nil {
			slog.New(h.stats).Warn("watch pass failed; the next one tries again", "err", err)
		} else if err == nil {
			h.stats.took(&h.stats.watches, time.Since(start))
		}
		if !supervisor.AwaitWatch(ctx, h.cfg.WatchInterval, h.watcher, err, &h.idle, h.busyWake) {
			return
		}
	}
}

// deliver is Supervisor.deliver.
func (h *simHost) deliver(ctx context.Context) {
	for {
		if h.acting() {
			if _, err := h.deliverer.Pass(ctx); err != nil && ctx.Err() == nil {
				slog.New(h.stats).Warn("notification delivery failed; the next pass tries again", "err", err)
			} else if err == nil {
				h.stats.count(&h.stats.deliveries)
			}
		}
		wait := h.pollEvery(simDeliverEvery)
		if at, ok := h.deliverer.NextRetry(time.Now()); ok {
			wait = min(wait, max(simMinWait, time.Until(at)))
		}
		if !wake.Sleep(ctx, wait, h.deliverWake) {
			return
		}
	}
}

// compactHistory is Supervisor.compactHistory: the duty claimed hourly. The seeded history is
// younger than --keep-history, so a claim removes nothing.
func (h *simHost) compactHistory(ctx context.Context) {
	for {
		if h.acting() {
			claimed, err := h.st.DutyClaim(ctx, store.DutyClaimParams{Name: simCompactDuty, Host: h.name, Every: simCompactEvery})
			if err == nil && claimed {
				var now time.Time
				if now, err = h.st.Now(ctx); err == nil {
					_, err = h.st.HistoryCompact(ctx, now.Add(-180*24*time.Hour), 500)
				}
			}
			if err != nil && ctx.Err() == nil {
				slog.New(h.stats).Warn("history not compacted; the next round tries again", "err", err)
			}
		}
		if !wake.Sleep(ctx, simCompactEvery, nil) {
			return
		}
	}
}

// removeRunFiles is Supervisor.removeRunFiles: a simulated host has no run files, so it asks
// the database nothing.
func (h *simHost) removeRunFiles(ctx context.Context) {
	for {
		if _, err := h.rec.RemoveRunFiles(ctx, 30*24*time.Hour); err != nil && ctx.Err() == nil {
			slog.New(h.stats).Warn("run files not all removed; the next round tries again", "err", err)
		}
		if !wake.Sleep(ctx, h.cfg.RunFilesEvery, nil) {
			return
		}
	}
}

// simFleet runs simulated hosts against the fleet until stop is called.
type simFleet struct {
	hosts  []*simHost
	stores []*store.Store
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// simulate starts a simulated host for each name, hostsPerPool of them per store opened with
// dsn(pool), each host after its share of spread, so that their loops are out of step as a
// fleet's daemons are.
func simulate(b *testing.B, names []string, dsn func(pool int) string, stats *simStats, spread time.Duration) *simFleet {
	ctx, cancel := context.WithCancel(context.Background())
	s := &simFleet{cancel: cancel}
	b.Cleanup(s.stop)
	stateDir := b.TempDir()
	for pool := range (len(names) + hostsPerPool - 1) / hostsPerPool {
		var st *store.Store
		var err error
		// A loaded machine may take longer than store.DefaultConnectTimeout to accept one.
		for range 3 {
			if st, err = store.New(ctx, store.Config{Address: store.Address{DSN: dsn(pool)}}); err == nil {
				break
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		s.stores = append(s.stores, st)
	}
	for i, name := range names {
		h, err := newSimHost(name, s.stores[i/hostsPerPool], stats, stateDir)
		if err != nil {
			b.Fatal(err)
		}
		s.hosts = append(s.hosts, h)
		delay := spread * time.Duration(i) / time.Duration(len(names))
		s.wg.Go(func() {
			if wake.Sleep(ctx, delay, nil) {
				h.run(ctx)
			}
		})
	}
	return s
}

// joinProgress prints every 10 s, until stopped, how many of n hosts joining over spread have
// started, how many leases lapsed and how busy the machine was: where a fleet saturates the
// machine while it joins, this says at what size.
func joinProgress(stats *simStats, n int, spread time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		start := time.Now()
		cpu0, err := machineCPU()
		for err == nil {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Second):
			}
			var cpu1 cpuTimes
			if cpu1, err = machineCPU(); err != nil {
				return
			}
			stats.mu.Lock()
			lapsed := len(stats.lapsed)
			stats.mu.Unlock()
			started := min(n, int(float64(n)*time.Since(start).Seconds()/max(spread.Seconds(), 1)))
			fmt.Printf("  joining: %3.0fs, %d of %d hosts started, %d leases lapsed, machine CPU busy %.0f%%\n",
				time.Since(start).Seconds(), started, n, lapsed, 100*float64(cpu1.busy-cpu0.busy)/float64(cpu1.total-cpu0.total))
			cpu0 = cpu1
		}
	}()
	return func() { close(done); <-stopped }
}

func (s *simFleet) stop() {
	s.cancel()
	s.wg.Wait()
	for _, st := range s.stores {
		st.Close()
	}
	s.stores = nil
}

// lapsedInTable counts the simulated hosts whose row says their lease lapsed: expired now, or
// taken anew since the host took it.
func (f *fleet) lapsedInTable(b *testing.B, hosts []*simHost) map[string]bool {
	held := map[string]int64{}
	for _, h := range hosts {
		l, _ := h.current()
		held[h.name] = l.Generation
	}
	rows, err := f.conn.Query(context.Background(), `SELECT name, generation, lease_until > now() FROM hosts WHERE name = ANY($1)`,
		slices.Collect(maps.Keys(held)))
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	lapsed := map[string]bool{}
	for rows.Next() {
		var name string
		var gen int64
		var alive bool
		if err := rows.Scan(&name, &gen, &alive); err != nil {
			b.Fatal(err)
		}
		if !alive || gen != held[name] {
			lapsed[name] = true
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return lapsed
}

// holdAllLeases gives every host's lease a day again, as SeedFleet does: between phases no host
// is down, so no daemon takes over or notices one.
func (f *fleet) holdAllLeases(b *testing.B) {
	if _, err := f.conn.Exec(context.Background(), `UPDATE hosts SET lease_until = now() + interval '1 day', holder = $1`, simHolder); err != nil {
		b.Fatal(err)
	}
}

// cpuTimes are the machine's busy and total CPU time (/proc/stat) and this process's.
type cpuTimes struct{ busy, total, self time.Duration }

func readCPU(b *testing.B) cpuTimes {
	c, err := machineCPU()
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// machineCPU is readCPU for a goroutine, which may not end the benchmark.
func machineCPU() (cpuTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	var c cpuTimes
	tick := time.Second / 100 // USER_HZ
	for i, field := range strings.Fields(line)[1:] {
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil || i >= 8 { // guest time is counted in user time already
			break
		}
		c.total += time.Duration(n) * tick
		if i != 3 && i != 4 { // idle, iowait
			c.busy += time.Duration(n) * tick
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}, err
	}
	c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return c, nil
}

// serverCPU is the CPU time of the fleet's PostgreSQL by process: the postmaster, with its
// children that ended, and its children alive now.
func (f *fleet) serverCPU(b *testing.B) map[int]time.Duration {
	pid, err := os.ReadFile(filepath.Join(f.srv.Dir, "data", "postmaster.pid"))
	if err != nil {
		b.Fatal(err)
	}
	first, _, _ := strings.Cut(string(pid), "\n")
	postmaster, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		b.Fatal(err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	out := map[int]time.Duration{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		i := strings.LastIndexByte(string(stat), ')')
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 15 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); p != postmaster && ppid != postmaster {
			continue
		}
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		if p == postmaster {
			// What the backends that ended spent (a connection closed, or never set up): the
			// postmaster reaps them.
			cutime, _ := strconv.ParseInt(fields[13], 10, 64)
			cstime, _ := strconv.ParseInt(fields[14], 10, 64)
			utime, stime = utime+cutime, stime+cstime
		}
		out[p] = time.Duration(utime+stime) * (time.Second / 100) // USER_HZ
	}
	return out
}

// since is the CPU time the processes of now spent since then. A process of then that ended
// meanwhile is counted in its parent's, whole: what it had spent by then is taken off.
func since(then, now map[int]time.Duration) time.Duration {
	var d time.Duration
	for p, t := range now {
		d += t - then[p]
	}
	for p, t := range then {
		if _, ok := now[p]; !ok {
			d -= t
		}
	}
	return d
}

// p99 is the 99th percentile of d, 0 if d is empty.
func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*99/100)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// callRates are per-second calls of each statement (by queryid) of one daemon.
type callRates map[int64]float64

func rates(all []statementCost, elapsed time.Duration, daemons int) callRates {
	r := callRates{}
	for _, s := range all {
		r[s.ID] += float64(s.Calls) / elapsed.Seconds() / float64(daemons)
	}
	return r
}

// statementTexts are the statements' texts by queryid, spaces folded.
var statementTexts = map[int64]string{}

func noteTexts(all []statementCost) {
	for _, s := range all {
		if _, ok := statementTexts[s.ID]; !ok {
			statementTexts[s.ID] = strings.Join(strings.Fields(s.Query), " ")
		}
	}
}

// BenchmarkFleetSimulated runs N simulated daemons (simHost: the daemon's loops at its default
// intervals over the real reconciler, admitter, watcher, deliverer and store, with systemd faked
// in memory) as the hosts h00000 on of a seeded fleet of N hosts (storetest.SeedFleet: each
// simulated host holds its own seeded lease and its live runs), at N = 100, 300 and 1,000, each
// over HOLDFAST_FLEET_WINDOW (30s by default) once all have started (HOLDFAST_FLEET_SIZES
// changes the sizes). It reports a daemon's database time and buffers (pg_stat_statements of
// the simulated hosts' role over N: on a saturated server the time includes waiting for a core,
// the buffers do not), the p99 of the lease renewals and of the sweeps as the hosts timed them,
// the hosts whose lease lapsed while simulated (0 is the requirement), the machine's CPU use
// (the fleet's PostgreSQL, the simulation, the rest), and the growth from 100 to 1,000.
// At 100 hosts a real idle daemon and a simulated twin of it (same jobs, own roles) run beside
// the fleet: the calibration table sets each statement's calls per daemon and second of the real
// daemon beside the twin's and the simulated fleet's.
func BenchmarkFleetSimulated(b *testing.B) {
	e := newBenchEnv(b)
	f := newFleet(b, simMaxConnections)
	for _, role := range []string{simRole, twinRole} {
		if _, err := f.conn.Exec(context.Background(), `CREATE ROLE `+role+` LOGIN SUPERUSER`); err != nil {
			b.Fatal(err)
		}
	}
	window := fleetWindow(b)
	defaults := supervisor.Defaults()
	sizes := fleetSizes(b, []int{100, 300, 1000})
	type result struct {
		dbMS, blocks, leaseP99, sweepP99 float64
		calls                            callRates
		perStatement                     map[int64]statementCost // by queryid, over all daemons
	}
	results := map[int]result{}
	var real, twin callRates
	for _, n := range sizes {
		f.grow(b, n)
		calibrate := n == sizes[0]
		var kill func()
		var twinFleet *simFleet
		twinStats := newSimStats()
		if calibrate {
			kill = f.idleDaemon(b, e, "realidle")
			f.idleJobs(b, "simtwin")
			twinFleet = simulate(b, []string{"simtwin"}, func(int) string { return f.roleDSN(b, twinRole, "simtwin") }, twinStats, 0)
		}
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("h%05d", i)
		}
		stats := newSimStats()
		// The hosts join over the longest of the per-second loops' intervals, so that every
		// loop's phase is spread over it, and at most joinRate a second: each new session
		// plans every statement it runs once, and 600 hosts joining within 15 s kept this
		// 2-core machine busy until leases lapsed, which then fed on themselves.
		spread := max(defaults.WatchInterval, time.Duration(n)*time.Second/time.Duration(joinRate(b)))
		sim := simulate(b, names, func(pool int) string { return f.roleDSN(b, simRole, fmt.Sprintf("simpool%d", pool)) }, stats, spread)
		stopProgress := joinProgress(stats, n, spread)
		// Every host started, its lease taken and its first passes made; the real daemon's start
		// connections closed again (store.DefaultMaxConnIdleTime).
		time.Sleep(spread + 10*time.Second)
		stopProgress()
		f.resetStatements(b)
		stats.measuring.Store(true)
		cpu0, server0, start := readCPU(b), f.serverCPU(b), time.Now()
		time.Sleep(window)
		cpu1, server1, elapsed := readCPU(b), f.serverCPU(b), time.Since(start)
		stats.measuring.Store(false)
		simCost, realCost, twinCost := f.statements(b, simRole), f.statements(b, daemonRole), f.statements(b, twinRole)
		noteTexts(realCost)
		noteTexts(simCost)
		noteTexts(twinCost)
		lapsed := f.lapsedInTable(b, sim.hosts)
		stats.stopping.Store(true)
		sim.stop()
		if calibrate {
			twinFleet.stop()
			kill()
			real, twin = rates(realCost, elapsed, 1), rates(twinCost, elapsed, 1)
		}
		f.holdAllLeases(b)

		stats.mu.Lock()
		for h := range stats.lapsed {
			lapsed[h] = true
		}
		var total, planning, duties float64
		var calls, blocks int64
		perStatement := map[int64]statementCost{}
		for _, s := range simCost {
			total, planning = total+s.MS, planning+s.PlanMS
			if strings.Contains(s.Query, "/* fleet duty */") {
				duties += s.MS
			}
			calls, blocks = calls+s.Calls, blocks+s.Blocks
			p := perStatement[s.ID]
			p.ID, p.Calls, p.MS, p.Blocks = s.ID, p.Calls+s.Calls, p.MS+s.MS, p.Blocks+s.Blocks
			perStatement[s.ID] = p
		}
		sec := elapsed.Seconds()
		res := result{dbMS: total / sec / float64(n), blocks: float64(blocks) / sec / float64(n), leaseP99: ms(p99(stats.renewals)), sweepP99: ms(p99(stats.sweeps)),
			calls: rates(simCost, elapsed, n), perStatement: perStatement}
		results[n] = res
		busy := float64(cpu1.busy-cpu0.busy) / float64(cpu1.total-cpu0.total)
		self := (cpu1.self - cpu0.self).Seconds() / sec // cores
		server := since(server0, server1).Seconds() / sec
		b.ReportMetric(res.dbMS, fmt.Sprintf("db-ms/s/daemon-%d", n))
		b.ReportMetric(res.blocks, fmt.Sprintf("db-blocks/s/daemon-%d", n))
		b.ReportMetric(total/sec, fmt.Sprintf("db-ms/s-fleet-%d", n))
		b.ReportMetric(res.leaseP99, fmt.Sprintf("lease-p99-ms-%d", n))
		b.ReportMetric(res.sweepP99, fmt.Sprintf("sweep-p99-ms-%d", n))
		b.ReportMetric(float64(len(lapsed)), fmt.Sprintf("lapsed-%d", n))
		b.ReportMetric(100*busy, fmt.Sprintf("cpu-busy-%%-%d", n))
		b.ReportMetric(server, fmt.Sprintf("server-cores-%d", n))
		perHost := func(k int, every time.Duration) string {
			return fmt.Sprintf("%.3f/s (want %.3f)", float64(k)/sec/float64(n), 1/every.Seconds())
		}
		fmt.Printf("simulated fleet of %d: per daemon %.2f db-ms/s, %.0f%% of it planning (%.1f statements/s, %.0f buffers/s; fleet duties %.2f ms/s in all), fleet %.0f db-ms/s\n",
			n, res.dbMS, 100*planning/total, float64(calls)/sec/float64(n), res.blocks, duties/sec, total/sec)
		fmt.Printf("  p99: lease renewal %.1f ms, sweep %.1f ms, admission %.1f ms, watch %.1f ms; least lease left at renewal %s\n",
			res.leaseP99, res.sweepP99, ms(p99(stats.admissions)), ms(p99(stats.watches)), stats.minSlack.Round(time.Millisecond))
		// An idle daemon's sweeps and watches have no rate of their own (supervisor.SweepWait,
		// WatchEvery): they come at the next takeover or deadline, within their backstops.
		perHostAtMost := func(k int, every time.Duration) string {
			return fmt.Sprintf("%.3f/s (idle, at least %.3f)", float64(k)/sec/float64(n), 1/every.Seconds())
		}
		fmt.Printf("  per host: renewals %s, sweeps %s, admissions %s, watches %s, deliveries %s; stood by %d times\n",
			perHost(len(stats.renewals), defaults.Lease/3), perHostAtMost(len(stats.sweeps), supervisor.PollBackstop),
			perHost(len(stats.admissions), supervisor.PollBackstop), perHostAtMost(len(stats.watches), supervisor.IdleWatchIntervals*defaults.WatchInterval),
			perHost(stats.deliveries, supervisor.PollBackstop), stats.standBy)
		fmt.Printf("  lapsed leases: %d of %d hosts; machine CPU busy %.0f%% of %d cores: the fleet's PostgreSQL %.2f cores, the simulation %.2f, the rest (the real daemon, other work on the machine) %.2f\n",
			len(lapsed), n, 100*busy, runtime.NumCPU(), server, self, busy*float64(runtime.NumCPU())-server-self)
		if behind := float64(len(stats.renewals)) / sec / float64(n) * (defaults.Lease / 3).Seconds(); behind < 0.9 {
			fmt.Printf("  FELL BEHIND: the lease renewals ran at %.0f%% of their rate: the figures per daemon are of a slower daemon\n", 100*behind)
		}
		if busy > 0.9 {
			fmt.Printf("  SATURATED: the machine was busy %.0f%% of the window: the p99s include waiting for a core, on the Go side as on PostgreSQL's\n", 100*busy)
		}
		logged := slices.Collect(maps.Keys(stats.logged))
		sort.Slice(logged, func(i, j int) bool { return stats.logged[logged[i]] > stats.logged[logged[j]] })
		for _, msg := range logged[:min(len(logged), 3)] {
			fmt.Printf("  logged %d times in the phase: %s (first: %s)\n", stats.logged[msg], msg, stats.firstErr[msg])
		}
		stats.mu.Unlock()
		if len(lapsed) > 0 {
			b.Errorf("%d of %d simulated hosts' leases lapsed (machine CPU busy %.0f%%)", len(lapsed), n, 100*busy)
		}
	}
	first, last := results[sizes[0]], results[sizes[len(sizes)-1]]
	growth := func(a, z float64) float64 {
		if a == 0 {
			return 0
		}
		return z / a
	}
	span := fmt.Sprintf("%d-to-%d", sizes[0], sizes[len(sizes)-1])
	b.ReportMetric(growth(first.dbMS, last.dbMS), "db-growth-"+span)
	b.ReportMetric(growth(first.blocks, last.blocks), "db-blocks-growth-"+span)
	b.ReportMetric(growth(first.leaseP99, last.leaseP99), "lease-p99-growth-"+span)
	b.ReportMetric(growth(first.sweepP99, last.sweepP99), "sweep-p99-growth-"+span)
	b.ReportMetric(0, "ns/op")
	printCalibration(real, twin, sizes, func(n int) callRates { return results[n].calls })
	printGrowth(sizes, func(n int) map[int64]statementCost { return results[n].perStatement })
}

// joinRate is how many simulated hosts start a second: HOLDFAST_FLEET_JOIN_RATE or simJoinRate.
func joinRate(b *testing.B) int {
	s := os.Getenv("HOLDFAST_FLEET_JOIN_RATE")
	if s == "" {
		return simJoinRate
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("HOLDFAST_FLEET_JOIN_RATE %q: want a number of hosts a second, such as 10", s)
	}
	return n
}

// fleetSizes are the fleets' sizes, HOLDFAST_FLEET_SIZES (e.g. 100,300,1000) or def.
func fleetSizes(b *testing.B, def []int) []int {
	s := os.Getenv("HOLDFAST_FLEET_SIZES")
	if s == "" {
		return def
	}
	var sizes []int
	for _, field := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || n <= 0 {
			b.Fatalf("HOLDFAST_FLEET_SIZES %q: want sizes such as 100,300,1000", s)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// printCalibration sets each statement's calls per daemon and second of the real idle daemon
// beside its simulated twin's and the simulated fleets'.
func printCalibration(real, twin callRates, sizes []int, sim func(int) callRates) {
	seen := map[int64]bool{}
	for _, r := range append([]callRates{real, twin}, sim(sizes[0])) {
		for q := range r {
			seen[q] = true
		}
	}
	queries := slices.Collect(maps.Keys(seen))
	sort.Slice(queries, func(i, j int) bool {
		a, z := queries[i], queries[j]
		if real[a] != real[z] {
			return real[a] > real[z]
		}
		if sim(sizes[0])[a] != sim(sizes[0])[z] {
			return sim(sizes[0])[a] > sim(sizes[0])[z]
		}
		return statementTexts[a] < statementTexts[z]
	})
	header := fmt.Sprintf("calibration, calls per daemon per second: %8s %8s", "real", "twin")
	for _, n := range sizes {
		header += fmt.Sprintf(" %8s", fmt.Sprintf("sim%d", n))
	}
	fmt.Println(header)
	for _, q := range queries[:min(len(queries), 40)] {
		line := fmt.Sprintf("  %-70.70s %8.3f %8.3f", statementTexts[q], real[q], twin[q])
		for _, n := range sizes {
			line += fmt.Sprintf(" %8.3f", sim(n)[q])
		}
		fmt.Println(line)
	}
}

// printGrowth shows the mean time and buffers of a call of the statements that cost the largest
// fleet most, at each size: a call whose buffers grow with the fleet reads more as it grows; one
// whose time alone grows waits (for a core, a lock).
func printGrowth(sizes []int, per func(int) map[int64]statementCost) {
	last := per(sizes[len(sizes)-1])
	top := slices.Collect(maps.Values(last))
	sort.Slice(top, func(i, j int) bool { return top[i].MS > top[j].MS })
	header := fmt.Sprintf("%-72s", "mean ms (buffers) per call by fleet size:")
	for _, n := range sizes {
		header += fmt.Sprintf(" %16d", n)
	}
	fmt.Println(header)
	for _, s := range top[:min(len(top), 12)] {
		line := fmt.Sprintf("  %-70.70s", statementTexts[s.ID])
		for _, n := range sizes {
			c := per(n)[s.ID]
			mean, buffers := 0.0, 0.0
			if c.Calls > 0 {
				mean, buffers = c.MS/float64(c.Calls), float64(c.Blocks)/float64(c.Calls)
			}
			line += fmt.Sprintf(" %8.3f (%5.0f)", mean, buffers)
		}
		fmt.Println(line)
	}
}
