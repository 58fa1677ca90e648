package supervisor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/notify"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/wake"
	"github.com/holdfast-backup/holdfast/watch"
)

// loop is a service that runs one function in its own goroutine until Stop (or the context
// given to Start) ends it.
type loop struct {
	name string
	run  func(ctx context.Context)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *loop) Name() string { return l.name }

// running reports whether the loop was started and not stopped.
func (l *loop) running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done != nil
}

// Start runs the loop; it does nothing if the loop runs already.
func (l *loop) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, l.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	l.done = done
	go func() {
		defer close(done)
		l.run(ctx)
	}()
	return nil
}

// Stop ends the loop and waits until its goroutine returned.
func (l *loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// sweep runs the reconciler's pass at once (the boot pass is an ordinary one), then every
// SweepInterval or as soon as something wakes it; after an idle pass (reconcile.SweepStats.Idle),
// while notifications reach the daemon, it waits until another host may be down, up to
// PollBackstop (SweepWait).
func (s *Supervisor) sweep(ctx context.Context) {
	for {
		s.progress.passBegins(time.Now())
		stats, err := s.rec.Sweep(ctx)
		wait, idle := SweepWait(s.cfg.SweepInterval, stats, err, s.listening.Load())
		s.progress.passEnds(time.Now(), stats.Runs, wait, err)
		// A run that ends or waits moves its job's next due time, and no notification says so:
		// admission reads that time again once a pass sees the live runs change.
		if stats.LiveChanged {
			s.dueWake.Wake()
		}
		if s.metrics != nil && err == nil {
			s.metrics.SweepTook(stats.Duration)
		}
		switch {
		case errors.Is(err, reconcile.ErrNoLease): // the lease service logs when it stands by
		case err != nil && ctx.Err() == nil:
			s.cfg.Logger.Error("sweep failed", "err", err)
		case stats.Errors > 0 || stats.Duration > time.Second:
			s.cfg.Logger.Warn("sweep", "runs", stats.Runs, "errors", stats.Errors, "duration", stats.Duration,
				"systemd", stats.SystemdDuration, "journal_lag_bytes", stats.JournalLag)
		}
		if s.idle.Swap(idle) && !idle {
			s.busyWake.Wake()
		}
		if !wake.Sleep(ctx, wait, s.sweepWake) {
			return
		}
	}
}

// SweepWait is how long the sweep waits for a wake after a pass that returned stats and err,
// and whether the daemon is idle. While something is live, or notifications may be lost
// unseen (listening false), it is interval. An idle daemon's next pass has work only if
// something wakes it (a notification, an exit marker, admission, the lease taken again) or
// another host goes down, whose takeover is due when its lease runs out plus the grace
// (SweepStats.NextDown): it waits until then, and PollBackstop at most, the look for what a
// notification lost on a silently dead connection announced.
func SweepWait(interval time.Duration, stats reconcile.SweepStats, err error, listening bool) (wait time.Duration, idle bool) {
	if err != nil || !stats.Idle || !listening {
		return interval, false
	}
	wait = PollBackstop
	if stats.NextDown > 0 {
		wait = min(wait, stats.NextDown)
	}
	return max(wait, interval), true
}

// admit turns due slots into runs, then sleeps until the earliest due time, the next look
// (pollEvery) or a notification, whichever comes first; after a sweep pass that saw the live
// runs change it reads the due time again without claiming. A pass that admitted runs wakes
// the sweep, which spawns them; so does a pass at a due time that admitted none, since that
// time may be a queued run's not-before (a retry's delay): the run then starts at it, not at
// the next look.
//
// A pass claims only when something may be due (schedule.Gate): an idle daemon's pass is the
// one read of the next due time.
func (s *Supervisor) admit(ctx context.Context, a *schedule.Admitter) {
	var dueAt, wokeFor time.Time
	var gate schedule.Gate
	woken := false
	for {
		if !s.acting() { // stands by without the host's lease
			if !wake.Sleep(ctx, s.cfg.SweepInterval, s.admitWake) {
				return
			}
			woken = true
			continue
		}
		var n int
		var err error
		if now := time.Now(); gate.Open(now, woken) {
			n, err = a.AdmitDue(ctx, now)
		}
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("admission of due jobs failed", "err", err)
		}
		// Once per due time: a job that stays due (another daemon holds it) must not make the
		// sweep run at every short sleep.
		if n > 0 || !dueAt.IsZero() && !dueAt.Equal(wokeFor) && !time.Now().Before(dueAt) {
			s.sweepWake.Wake()
			wokeFor = dueAt
		}
		wait := s.pollEvery(s.cfg.SweepInterval)
		dueAt = time.Time{}
		nextCtx, cancel := context.WithTimeout(ctx, s.cfg.Database.StatementTimeout)
		next, nextErr := s.cfg.Store.JobNextDue(nextCtx, s.rec.Host(), s.cfg.Reconcile.StartLead)
		gate.Learn(time.Now(), next, errors.Join(err, nextErr))
		if nextErr == nil && next != nil && time.Until(*next) < wait {
			dueAt = *next
			wait = max(minWait, time.Until(*next))
		}
		cancel()
		if ctx.Err() == nil {
			s.progress.admitted(errors.Join(err, nextErr))
		}
		var alive bool
		if alive, woken = wake.WaitOr(ctx, wait, s.admitWake, s.dueWake); !alive {
			return
		}
	}
}

// pollEvery is how long admission or delivery waits for a notification before it looks for
// work all the same: PollBackstop while the daemon listens, else interval.
func (s *Supervisor) pollEvery(interval time.Duration) time.Duration {
	if s.listening.Load() {
		return PollBackstop
	}
	return interval
}

// listen wakes admission and the sweep on each notification about this host's work or any
// host's, and delivery on each notification to send, on one connection, listening again after
// a failure; the intervals are the backstop while it does not listen. A notification that names
// a run hands it to the named spawns at once, and wakes nothing else where they spawn runs:
// spawnNamed wakes admission and the sweep for a run it leaves (passesAfterNamed). A pass over
// every live run of the host (tens of milliseconds at a thousand) has nothing to do for a run
// already spawned.
func (s *Supervisor) listen(ctx context.Context) {
	failures := 0 // in a row
	for ctx.Err() == nil {
		named := false // Store.Listen calls Run, then Runs, for a notification naming a run
		err := s.cfg.Store.Listen(ctx, store.Wakes{Host: s.rec.Host(),
			Run: func(run uuid.UUID) {
				named = true
				s.spawnSoon(run)
			},
			Runs: func() {
				s.listening.Store(true)
				if failures > 0 {
					// Listen wakes once when it listens again.
					s.cfg.Logger.Info("listening for notifications again")
					failures = 0
				}
				if named && s.rec.SpawnsNamed() {
					named = false // the named spawn wakes the passes for a run it leaves
					return
				}
				named = false
				s.admitWake.Wake()
				s.sweepWake.Wake()
			},
			Deliveries: func() {
				s.listening.Store(true)
				s.deliverWake.Wake()
			}})
		s.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		// Admission's, delivery's and an idle sweep's next waits are the polling ones.
		s.dueWake.Wake()
		s.deliverWake.Wake()
		s.sweepWake.Wake()
		failures++
		wait := wake.Backoff(relistenAfter, relistenAtMost, failures)
		s.cfg.Logger.Warn("listen for notifications failed; polling meanwhile", "err", err, "again_in", wait.Round(time.Millisecond))
		if !wake.Sleep(ctx, wait, nil) {
			return
		}
	}
}

// namedSettle is how long after the named spawns leave a run the sweep and admission's due
// time are woken for it: a stop asked for, which names its run, reaches systemd from the command
// that asked for it in the meantime, without sharing two cores with a pass over every live run;
// and the runs a burst of notifications leaves wake the passes once.
const namedSettle = 50 * time.Millisecond

// passesAfterNamed wakes the sweep and admission's due time namedSettle from now, unless such
// a wake is pending already.
func (s *Supervisor) passesAfterNamed() {
	if s.namedPending.CompareAndSwap(false, true) {
		time.AfterFunc(namedSettle, func() {
			s.namedPending.Store(false)
			s.dueWake.Wake()
			s.sweepWake.Wake()
		})
	}
}

// spawnSoon hands a run just admitted to the named spawns, or, when their queue is full, to the
// sweep's next pass.
func (s *Supervisor) spawnSoon(run uuid.UUID) {
	select {
	case s.named <- run:
	default:
		s.sweepWake.Wake()
	}
}

// namedQueue bounds the runs named by notifications that wait for spawnNamed; namedBatch is
// how many it takes at once.
const (
	namedQueue = 1024
	namedBatch = 256
)

// spawnNamed spawns the runs that notifications name (an admission names its run) at once,
// without waiting for the sweep's pass over every live run (reconcile.SpawnNamed), those named
// meanwhile together. A run it leaves is the pass's, which it wakes; so is one dropped from a
// full queue (spawnSoon).
func (s *Supervisor) spawnNamed(ctx context.Context) {
	for {
		var ids []uuid.UUID
		select {
		case <-ctx.Done():
			return
		case id := <-s.named:
			ids = append(ids, id)
		}
	batch:
		for len(ids) < namedBatch {
			select {
			case id := <-s.named:
				ids = append(ids, id)
			default:
				break batch
			}
		}
		// Without the lease SpawnNamed spawns nothing (ErrNoLease): the pass takes them then.
		left, err := s.rec.SpawnNamed(ctx, ids)
		if err != nil && !errors.Is(err, reconcile.ErrNoLease) && ctx.Err() == nil {
			s.cfg.Logger.Warn("runs named by notifications not spawned at once; the next pass spawns them", "runs", len(ids), "err", err)
		}
		// A run spawned wants no pass, nor a new look at the next due time (a live run only puts
		// its job's off); one left (a stop asked for, a retry not due yet, a claim the repository
		// blocks) is the pass's, and admission's if its time is ahead. An idle sweep waits up to
		// PollBackstop: it is woken to see the run live, and then follows it every interval.
		// While places are limited the notification woke the passes at once (listen).
		if s.rec.SpawnsNamed() && (left > 0 || err != nil || s.idle.Load()) {
			s.passesAfterNamed()
		}
	}
}

// watch judges every job overdue or not, at once and then every WatchInterval (each pass
// bounded by the pass timeout); while the daemon is idle (its last sweep pass was), until the
// earliest deadline of a job not overdue, up to IdleWatchIntervals of them (WatchEvery). A sweep that finds
// work again ends such a wait at once: the next pass comes WatchInterval after the last.
func (s *Supervisor) watch(ctx context.Context, w *watch.Watcher) {
	for {
		if !s.acting() { // stands by without the host's lease
			if !wake.Sleep(ctx, s.cfg.SweepInterval, nil) {
				return
			}
			continue
		}
		passCtx, cancel := context.WithTimeout(ctx, s.cfg.Reconcile.PassTimeout)
		err := w.Pass(passCtx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("watch pass failed; the next one tries again", "err", err)
		} else if err == nil {
			// Each judgement of every job, at the debug level.
			s.cfg.Logger.Debug("watch pass", "next_within", WatchEvery(s.cfg.WatchInterval, w, err, s.idle.Load()))
		}
		if !AwaitWatch(ctx, s.cfg.WatchInterval, w, err, &s.idle, s.busyWake) {
			return
		}
	}
}

// AwaitWatch waits, from the end of a watch pass that returned err, until the next pass is due
// (WatchEvery, with idle the sweep's word on whether the daemon is idle), and works that out
// again each time busy says the sweep found work. It returns false once ctx ended.
func AwaitWatch(ctx context.Context, interval time.Duration, w *watch.Watcher, err error, idle *atomic.Bool, busy wake.Signal) bool {
	passed := time.Now()
	for {
		wait := time.Until(passed.Add(WatchEvery(interval, w, err, idle.Load())))
		if wait <= 0 {
			return true
		}
		alive, woken := wake.Wait(ctx, wait, busy)
		if !alive || !woken {
			return alive
		}
	}
}

// IdleWatchIntervals is the longest an idle daemon's watch waits between passes, in watch
// intervals (a minute by default). A pass reads every job the daemon watches (about 5 ms of its
// CPU and 8 of the database's at 1,000 jobs); what it would see sooner is a job whose facts
// others changed.
const IdleWatchIntervals = 4

// WatchEvery is the time from one watch pass to the next, after one that returned err:
// interval, or for an idle daemon after a pass that judged every job, the time until its
// earliest deadline (w.NextDeadline: time alone makes no job overdue before it), between
// interval and IdleWatchIntervals of it. What an idle daemon does not see at once is a job's facts
// changed by others: a run of an any-host job ended elsewhere (judged by that host's daemon,
// busy then) or a job edited.
func WatchEvery(interval time.Duration, w *watch.Watcher, err error, idle bool) time.Duration {
	if err != nil || !idle {
		return interval
	}
	every := IdleWatchIntervals * interval
	if in, ok := w.NextDeadline(); ok {
		every = min(every, in)
	}
	return max(every, interval)
}

// deliverInterval is how often due deliveries are looked for while the daemon does not listen
// for notifications.
const deliverInterval = 2 * time.Second

// deliver sends the due notifications at once, then whenever a delivery is made, a try that
// failed here falls due again (no notification announces it) or the next look comes.
func (s *Supervisor) deliver(ctx context.Context, d *notify.Deliverer) {
	for {
		if !s.acting() { // stands by without the host's lease
			if !wake.Sleep(ctx, deliverInterval, s.deliverWake) {
				return
			}
			continue
		}
		if _, err := d.Pass(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("notification delivery failed; the next pass tries again", "err", err)
		}
		wait := s.pollEvery(deliverInterval)
		if at, ok := d.NextRetry(time.Now()); ok {
			wait = min(wait, max(minWait, time.Until(at)))
		}
		if !wake.Sleep(ctx, wait, s.deliverWake) {
			return
		}
	}
}

// removeRunFiles removes the journals and exit markers of runs that ended more than
// KeepRunFiles ago, at once and then every RunFilesEvery.
func (s *Supervisor) removeRunFiles(ctx context.Context) {
	for {
		n, err := s.rec.RemoveRunFiles(ctx, time.Since(s.cfg.keepRunFiles.Before(time.Now())))
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("run files not all removed; the next round tries again", "err", err)
		}
		if n > 0 {
			s.cfg.Logger.Info("journals and exit markers of ended runs removed", "runs", n, "ended_before", s.cfg.KeepRunFiles)
		}
		if !wake.Sleep(ctx, s.cfg.RunFilesEvery, nil) {
			return
		}
	}
}

// compactHistoryDuty is the duty (store.DutyClaim) of removing old history.
const compactHistoryDuty = "compact-history"

// compactHistory removes the history older than KeepHistory, when this daemon claims the duty:
// one daemon of the fleet does it per compactEvery.
func (s *Supervisor) compactHistory(ctx context.Context) {
	for {
		if s.acting() {
			if err := s.compactOnce(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("history not compacted; the next round tries again", "err", err)
			}
		}
		if !wake.Sleep(ctx, compactEvery, nil) {
			return
		}
	}
}

func (s *Supervisor) compactOnce(ctx context.Context) error {
	claimed, err := s.cfg.Store.DutyClaim(ctx, store.DutyClaimParams{Name: compactHistoryDuty, Host: s.rec.Host(), Every: compactEvery})
	if err != nil || !claimed {
		return err
	}
	now, err := s.cfg.Store.Now(ctx)
	if err != nil {
		return err
	}
	before := s.cfg.keepHistory.Before(now)
	c, err := s.cfg.Store.HistoryCompact(ctx, before, compactBatch)
	if c.Total() > 0 {
		s.cfg.Logger.Info("history compacted", "ended_before", before, "runs", c.Runs, "ledger_entries", c.LedgerEntries,
			"events", c.Events, "deliveries", c.Deliveries, "plans", c.Plans)
	}
	return err
}

// compactBatch bounds each of a compaction's transactions.
const compactBatch = 500

// httpService serves the daemon's HTTP endpoints (/metrics, the dashboard), over TLS when tls
// is set. Start binds the address, so a bad or taken one stops the daemon from starting; Stop
// shuts the server down.
type httpService struct {
	addr    string
	handler http.Handler
	tls     *tls.Config
	logger  *slog.Logger

	mu     sync.Mutex
	server *http.Server
	done   chan struct{}
}

func (h *httpService) Name() string { return "http " + h.addr }

func (h *httpService) Start(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.server != nil {
		return nil
	}
	ln, err := net.Listen("tcp", h.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", h.addr, err)
	}
	h.server = newHTTPServer(h.handler, h.tls, h.logger)
	h.done = make(chan struct{})
	scheme := "http"
	if h.tls != nil {
		scheme = "https"
	}
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		var err error
		if srv.TLSConfig != nil {
			err = srv.ServeTLS(ln, "", "") // the certificate comes from TLSConfig
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.logger.Error("http server ended", "addr", h.addr, "err", err)
		}
	}(h.server, h.done)
	h.logger.Info("serving metrics and the dashboard", "addr", ln.Addr().String(), "scheme", scheme)
	return nil
}

// The web server's bounds: requests have no body, a page reads within 15s (web), and a
// client that keeps a connection idle or sends huge headers costs little.
const (
	httpReadHeaderTimeout = 10 * time.Second
	httpReadTimeout       = 30 * time.Second
	httpWriteTimeout      = 60 * time.Second
	httpIdleTimeout       = 2 * time.Minute
	httpMaxHeaderBytes    = 16 << 10
)

// newHTTPServer is the server of handler; its own errors (a failed TLS handshake, a bad request
// line) are logger's at debug level: any scanner causes them.
func newHTTPServer(handler http.Handler, tlsConfig *tls.Config, logger *slog.Logger) *http.Server {
	return &http.Server{Handler: handler, TLSConfig: tlsConfig, ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout: httpReadTimeout, WriteTimeout: httpWriteTimeout, IdleTimeout: httpIdleTimeout,
		MaxHeaderBytes: httpMaxHeaderBytes, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)}
}

func (h *httpService) Stop() {
	h.mu.Lock()
	srv, done := h.server, h.done
	h.server, h.done = nil, nil
	h.mu.Unlock()
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	<-done
}
