package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/wake"
)

// progress is what the sweep and admission last did, for the service manager: whether a pass
// is under way and since when, when the last one ended, and what they found.
type progress struct {
	mu        sync.Mutex
	passFrom  time.Time // the start of the pass under way; zero between passes
	passEnded time.Time // zero before the first pass ended
	liveRuns  int
	wait      time.Duration // how long the sweep waits after the last pass at most
	sweepErr  error         // of the last pass
	admitErr  error         // of the last admission pass
	nextDue   *time.Time    // the earliest slot or queued run's time
	dueRead   bool          // whether nextDue was read at all
	admitPass uint64        // admission passes ended: each read the next due time anew
	sweeps    uint64        // sweep passes ended
	firstPass chan struct{} // closed once the first pass ended
	changed   wake.Signal   // woken at the end of each pass of the sweep or admission
}

func newProgress() *progress { return &progress{firstPass: make(chan struct{}), changed: wake.New()} }

func (p *progress) passBegins(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.passFrom = now
}

// passEnds records a pass of the sweep that ended at now, after which the sweep waits wait at
// most (SweepWait).
func (p *progress) passEnds(now time.Time, liveRuns int, wait time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.passEnded.IsZero() {
		close(p.firstPass)
	}
	p.passFrom, p.passEnded, p.wait, p.sweepErr = time.Time{}, now, wait, err
	p.sweeps++
	if err == nil {
		p.liveRuns = liveRuns
	}
	p.changed.Wake()
}

func (p *progress) admitted(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.admitErr = err
	p.admitPass++
	p.changed.Wake()
}

// dueStale reports whether the status's next due time should be read again at now: never read,
// passed, or admission read its own since the pass numbered seen (it returns the number now).
// Admission reads it after every change it is told of, at least every PollBackstop.
func (p *progress) dueStale(now time.Time, seen uint64) (bool, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.dueRead || p.admitPass != seen || p.nextDue != nil && !now.Before(*p.nextDue), p.admitPass
}

func (p *progress) due(next *time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextDue, p.dueRead = next, true
}

// pulse reports whether the sweep keeps its rhythm at now: a pass under way for no longer than
// passTimeout allows, or the last one ended no longer ago than the sweep's wait after it (the
// interval between passes, or an idle daemon's longer wait) allows. Either with a slack of one
// interval and a few seconds for a loaded machine.
func (p *progress) pulse(now time.Time, interval, passTimeout time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	slack := interval + 5*time.Second
	switch {
	case !p.passFrom.IsZero():
		return now.Sub(p.passFrom) <= passTimeout+slack
	case !p.passEnded.IsZero():
		return now.Sub(p.passEnded) <= max(p.wait, interval)+slack
	}
	return false
}

// status is the one line `systemctl status holdfast` shows.
func (p *progress) status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d live run(s)", p.liveRuns)
	switch {
	case !p.dueRead:
		b.WriteString("; next due not read yet")
	case p.nextDue != nil:
		fmt.Fprintf(&b, "; next due %s", p.nextDue.UTC().Format("2006-01-02 15:04:05Z"))
	default:
		b.WriteString("; nothing scheduled")
	}
	if p.sweepErr != nil {
		fmt.Fprintf(&b, "; sweep failing: %v", p.sweepErr)
	}
	if p.admitErr != nil {
		fmt.Fprintf(&b, "; admission failing: %v", p.admitErr)
	}
	return strings.Join(strings.Fields(b.String()), " ") // one line, whatever an error says
}

// notifier tells the service manager that started the daemon how it is (sd_notify(3)), when
// that manager asked for it (NOTIFY_SOCKET): READY=1 once the first pass ended, STATUS= kept
// current (looked at after each pass of the sweep and admission), WATCHDOG=1 only while the
// sweep keeps its rhythm (so systemd restarts a wedged or frozen daemon), STOPPING=1 when it
// stops.
type notifier struct {
	progress    *progress
	store       *store.Store  // asked for the next due slot
	host        string        // whose slots
	interval    time.Duration // the sweep's
	passTimeout time.Duration
	watchdog    time.Duration // WatchdogSec; 0 without a watchdog
	logger      *slog.Logger
	loop
}

func newNotifier(p *progress, cfg Config, host string) (*notifier, error) {
	watchdog, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return nil, fmt.Errorf("read the service manager's watchdog setting: %w", err)
	}
	n := &notifier{progress: p, store: cfg.Store, host: host, interval: cfg.SweepInterval, passTimeout: cfg.Reconcile.PassTimeout, watchdog: watchdog,
		logger: cfg.Logger}
	n.loop = loop{name: "service manager notifications", run: n.run}
	return n, nil
}

func (n *notifier) run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-n.progress.firstPass:
	}
	_, seen := n.progress.dueStale(time.Now(), 0)
	n.readDue(ctx)
	status := n.progress.status()
	n.send("READY=1\nSTATUS=" + status)
	n.logger.Info("told the service manager the daemon is ready", "watchdog", n.watchdog)
	ticker := time.NewTicker(pingEvery(n.watchdog))
	defer ticker.Stop()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-ticker.C:
			// The ping first: the status's database question must not delay it.
			if n.watchdog > 0 && n.progress.pulse(now, n.interval, n.passTimeout) {
				n.send("WATCHDOG=1")
			}
		case <-n.progress.changed:
			now = time.Now()
		}
		var stale bool
		if stale, seen = n.progress.dueStale(now, seen); stale {
			n.readDue(ctx)
		}
		if s := n.progress.status(); s != status {
			status = s
			n.send("STATUS=" + s)
		}
	}
}

// pingEvery is how often the notifier looks at the sweep's rhythm and the status besides after
// each pass: under a watchdog (period watchdog, 0 without one) at a quarter of its period
// (systemd's advice is half the period at least; a quarter leaves room for a late tick), else
// every PollBackstop. An idle daemon is not woken more often than that.
func pingEvery(watchdog time.Duration) time.Duration {
	if watchdog > 0 {
		return watchdog / 4
	}
	return PollBackstop
}

// readDue reads the next due time for the status: the slot itself, not the earlier moment
// admission acts on it. A failed read keeps the last answer: it says nothing of the schedule.
func (n *notifier) readDue(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, dueReadTimeout)
	defer cancel()
	if next, err := n.store.JobNextDue(ctx, n.host, 0); err == nil {
		n.progress.due(next)
	}
}

// dueReadTimeout bounds the status's question for the next due slot.
const dueReadTimeout = 5 * time.Second

// Stop ends the loop and says the daemon is stopping.
func (n *notifier) Stop() {
	if !n.running() {
		return
	}
	n.loop.Stop()
	n.send("STOPPING=1\nSTATUS=stopping; running backups continue in their units")
}

func (n *notifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		n.logger.Warn("service manager notification not sent", "err", err)
	}
}
