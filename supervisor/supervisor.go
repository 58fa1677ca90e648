// Package supervisor is holdfast's daemon as a set of services, each with Start and Stop:
// admission (due jobs become runs), the sweep (the reconciler's pass over every live run, which
// decides), and the services that carry its decisions out or wake it: spawning (claim and
// start a run's unit), the repair channel (ask the repository for a snapshot the journal did
// not record, then close the run), the runaway watch (follow the repositories of running
// backups), the notification listener (PostgreSQL wakes admission and the sweep, and names the
// run an admission admitted, which the named spawns start without waiting for a pass), the
// control socket (`run start` on this host has the daemon admit its run, which the named spawns
// start at once), the unit-end watch (a unit's exit marker closes its run at once, and wakes
// the sweep), the removal of old run files and, under a service manager that asks for them, its
// notifications (ready, status, watchdog, stopping).
//
// Events only bring work forward: the sweep on its interval stays the safety net, so a lost
// notification or a missed file event costs latency, never correctness. An idle daemon (nothing
// live, notifications heard) stretches that net to the moment another host may go down and
// PollBackstop at most, and its watch to the next deadline of a job (four watch intervals at
// most), so that nothing wakes it more often than its nearest due work needs; the first pass
// that finds work shrinks both. Work handed to a service and not done when it stops is found
// again by the next sweep, from the records and the marker. Stop ends the services, after
// waiting for the spawns and repairs begun; running backups go on in their units.
package supervisor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/catalog"
	"github.com/holdfast-backup/holdfast/control"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/fssnap"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/metrics"
	"github.com/holdfast-backup/holdfast/notify"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/schedule"
	"github.com/holdfast-backup/holdfast/setting"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/unitcmd"
	"github.com/holdfast-backup/holdfast/wake"
	"github.com/holdfast-backup/holdfast/watch"
	"github.com/holdfast-backup/holdfast/web"
)

// The defaults of the daemon's own settings, each stated here once; those of the reconciler's
// settings are reconcile's (reconcile.Defaults), of notification delivery notify's, of the
// database's store's. Defaults returns a Config with all of them.
const (
	DefaultSweepInterval = 2 * time.Second
	DefaultLateGrace     = time.Minute
	DefaultKeepRunFiles  = "30d"
	// DefaultKeepHistory is how long ended runs, their events and ledger entries stay in the
	// database; a month's allowance and the watch read back 35 days at most.
	DefaultKeepHistory = "180d"
	minKeepHistory     = 35 * 24 * time.Hour
	// compactEvery is how often one daemon of the fleet removes the history older than that.
	compactEvery         = time.Hour
	DefaultRunFilesEvery = time.Hour
	// Each watch pass reads the host's jobs; deadlines and stalls are minutes apart, not seconds.
	DefaultWatchInterval = watch.DefaultInterval
	// DefaultLease is how long a host's lease lasts unless renewed: a host is seen down this
	// long after its daemon stopped answering.
	DefaultLease = 10 * time.Second
)

// PollBackstop is how often admission and delivery look for work that no notification
// announced while the daemon listens: the changes that concern the host notify it (a job
// created or changed, a run admitted elsewhere, queued again or asked to stop, a delivery
// made), the sweep tells admission when the live runs change, and a failed delivery's retry
// wakes its daemon; the look finds what a notification lost on a silently dead connection
// announced. Without a
// listener they look every sweep interval. At a thousand idle hosts a look every 2 s was a
// quarter of the database's statements.
const PollBackstop = 30 * time.Second

// minWait is the shortest sleep of admission between two passes, should a due job stay due
// (another daemon holds it, say).
const minWait = 100 * time.Millisecond

// relistenAfter is how long the notification listener first waits before it listens again
// after a failure, doubled at each failure in a row up to relistenAtMost, and spread (see
// wake.Backoff): a database restarted under a fleet is not met by every daemon at once. The
// sweep interval is the backstop meanwhile.
const (
	relistenAfter  = 2 * time.Second
	relistenAtMost = 30 * time.Second
)

// Config configures a Supervisor: the daemon's settings, each stated once, by the part of the
// daemon it configures. Reconcile, Notify, Database and Systemd are the settings of the
// reconciler, notification delivery, the database and systemd, whose defaults and validation are
// their packages'; the fields besides are the daemon's own. New builds each service's
// configuration from them. Start from Defaults: Validate refuses a zero where zero means nothing
// sensible (an interval, a count). Validate's errors name a setting by its path here
// ("SweepInterval", "Reconcile.SpawnGrace"), as package setting names it.
type Config struct {
	// Reconcile is the reconciler's settings (see reconcile.Config): validated as the daemon's
	// (reconcile.Config.ValidateFlags). Its Host is this daemon's host, which also holds the
	// host's lease and runs the jobs pinned to it; its PassTimeout bounds admission passes too,
	// and its StartLead is also how long before its slot a run is admitted. Here Binary defaults
	// to holdfast-unit installed beside this executable, else this one (unitcmd.Binary), and
	// ResticBinary to the restic in PATH, both checked by Validate. Its Logger is Validate's
	// to fill in, its Store, Runner, HeldLease and Observer New's, from those below, the host's
	// lease and the metrics.
	Reconcile reconcile.Config
	// Store and Runner are the daemon's connections, which New requires and Validate, run
	// before anything is connected, does not look at. The reconciler and the other services get
	// them, each as the interface of the calls it makes.
	Store  *store.Store
	Runner *systemd.Client
	// Logger is the daemon's log; nil is slog.Default().
	Logger *slog.Logger
	// ResticVersion is the release of Reconcile.ResticBinary, set by Validate, which refuses a
	// binary that is not restic or is older than engine.OldestRestic.
	ResticVersion engine.ResticVersion
	// Database and Systemd are the settings the daemon connects with; Validate checks them.
	Database store.Config
	Systemd  systemd.Config
	// Lease is how long the host's lease lasts unless renewed.
	Lease time.Duration

	SweepInterval time.Duration // time between passes when nothing wakes the sweep
	LateGrace     time.Duration // how late a slot may still start; older ones are missed
	// KeepRunFiles is how long the journals and markers of ended runs stay, a retention
	// duration such as 30d.
	KeepRunFiles  string
	RunFilesEvery time.Duration // how often old run files are looked for
	// KeepHistory is how long the database keeps ended runs with their attempts, events,
	// delivered deliveries and ledger entries, a retention duration of 35d or more; one daemon
	// of the fleet removes what is older every hour (store.HistoryCompact).
	KeepHistory   string
	WatchInterval time.Duration // how often jobs are judged overdue or not
	// Listen is the address the daemon serves /metrics and the dashboard on, e.g.
	// 127.0.0.1:9750; "" serves nothing. It needs WebAuthFile (see web.LoadAuth): every
	// request needs its credentials. A request's Host must be the listener's (web.HostsFor) or
	// one of WebHosts. A non-loopback address needs TLSCert and TLSKey. Version is the build
	// the metrics name; JournalDir the journal the dashboard reads log tails from ("" the
	// system's).
	Listen          string
	WebAuthFile     string
	WebHosts        []string
	TLSCert, TLSKey string
	Version         string
	JournalDir      string
	// Notify configures the delivery of notifications (its Store and Logger are the daemon's).
	Notify notify.Config

	// Filled in by Validate.
	webAuth      *web.Credentials
	webHosts     *web.Hosts
	tlsConfig    *tls.Config
	keepRunFiles retention.Duration
	keepHistory  retention.Duration
	leaseHolder  string            // export_test.go; "" is reconcile.LeaseHolder()
	holderGone   func(string) bool // export_test.go; nil is reconcile.HolderGone
}

// Defaults returns a Config with every default.
func Defaults() Config {
	return Config{Reconcile: reconcile.Defaults(), SweepInterval: DefaultSweepInterval, LateGrace: DefaultLateGrace,
		KeepRunFiles: DefaultKeepRunFiles, KeepHistory: DefaultKeepHistory, RunFilesEvery: DefaultRunFilesEvery,
		WatchInterval: DefaultWatchInterval, Lease: DefaultLease}
}

// Validate checks every setting and resolves the binaries, windows and users, touching nothing:
// a daemon refuses a bad configuration before it asks PostgreSQL or systemd anything.
func (c *Config) Validate() error {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := c.Systemd.Validate(); err != nil {
		return err
	}
	if err := c.Database.Validate(); err != nil {
		return err
	}
	for _, v := range []struct {
		path    string
		d       time.Duration
		example string
	}{{"SweepInterval", c.SweepInterval, "2s"}, {"WatchInterval", c.WatchInterval, "15s"}, {"Lease", c.Lease, "10s"}} {
		if v.d <= 0 {
			return fmt.Errorf("%s %s must be positive, e.g. %s", setting.Name(v.path), v.d, v.example)
		}
	}
	if c.Lease < 300*time.Millisecond {
		return fmt.Errorf("%s %s is too short to renew: give at least 300ms, e.g. 10s", setting.Name("Lease"), c.Lease)
	}
	// The reconciler's settings, the host's name, the global windows and the allowed users
	// among them, named by their paths here.
	rc := &c.Reconcile
	rc.Logger = c.Logger
	if err := rc.ValidateFlags(); err != nil {
		return err
	}
	var err error
	if c.keepRunFiles, err = retention.ParseDuration(c.KeepRunFiles); err != nil || c.keepRunFiles.IsZero() {
		return fmt.Errorf("%s %q: give a positive duration such as 30d, 2m or 36h", setting.Name("KeepRunFiles"), c.KeepRunFiles)
	}
	if c.keepHistory, err = retention.ParseDuration(c.KeepHistory); err != nil ||
		time.Since(c.keepHistory.Before(time.Now())) < minKeepHistory {
		return fmt.Errorf("%s %q: give a duration of 35 days or more, such as 180d or 1y", setting.Name("KeepHistory"), c.KeepHistory)
	}
	// A run's files are found through its row: a row removed first would leave them for good.
	if now := time.Now(); c.keepHistory.Before(now).After(c.keepRunFiles.Before(now)) {
		return fmt.Errorf("%s %s is shorter than %s %s: keep the history at least as long as the runs' files",
			setting.Name("KeepHistory"), c.KeepHistory, setting.Name("KeepRunFiles"), c.KeepRunFiles)
	}
	if c.RunFilesEvery <= 0 {
		return fmt.Errorf("%s must be positive", setting.Name("RunFilesEvery"))
	}
	if c.LateGrace < 0 {
		return fmt.Errorf("%s %s is negative: give 0 or more, e.g. 1m", setting.Name("LateGrace"), c.LateGrace)
	}
	if rc.Binary == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find holdfast's own executable: %w", err)
		}
		rc.Binary = unitcmd.Binary(self)
	} else if err := runctl.CheckExecutable(setting.Name("Reconcile.Binary"), rc.Binary); err != nil {
		return err
	}
	if rc.ResticBinary != "" {
		err = runctl.CheckExecutable(setting.Name("Reconcile.ResticBinary"), rc.ResticBinary)
	} else {
		rc.ResticBinary, err = runctl.ResticBinary("")
	}
	if err != nil {
		return err
	}
	if c.ResticVersion, err = engine.ResticVersionOf(context.Background(), rc.ResticBinary); err != nil {
		return fmt.Errorf("%s: %w", setting.Name("Reconcile.ResticBinary"), err)
	}
	if n := c.Notify; n.Lease > 0 && n.Timeout > 0 && n.Lease <= n.Timeout {
		return fmt.Errorf("%s %s must be longer than %s %s", setting.Name("Notify.Lease"), n.Lease, setting.Name("Notify.Timeout"), n.Timeout)
	}
	if c.Notify.AllowCommands {
		if _, err := notify.CommandCredential(c.Notify.CommandUser); err != nil {
			return err
		}
	}
	if c.Listen != "" {
		if err := c.validateListen(); err != nil {
			return err
		}
	}
	return nil
}

// validateListen checks what guards the listener and loads it: the credentials, the host
// names, the certificate.
func (c *Config) validateListen() error {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("%s %q: want HOST:PORT, e.g. 127.0.0.1:9750", setting.Name("Listen"), c.Listen)
	}
	if c.WebAuthFile == "" {
		return fmt.Errorf("%s %s serves only with credentials, and no %s is given nor %s there: run holdfast setup, "+
			`or (umask 077; echo "bearer $(head -c 24 /dev/urandom | base64)" >%s)`,
			setting.Name("Listen"), c.Listen, setting.Name("WebAuthFile"), web.DefaultAuthFile, web.DefaultAuthFile)
	}
	if c.webAuth, err = web.LoadAuth(c.WebAuthFile); err != nil {
		return fmt.Errorf("%s: %w", setting.Name("WebAuthFile"), err)
	}
	if c.webHosts, err = web.HostsFor(c.Listen, c.WebHosts); err != nil {
		return fmt.Errorf("%s: %w", setting.Name("WebHosts"), err)
	}
	cert, key := setting.Name("TLSCert"), setting.Name("TLSKey")
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return fmt.Errorf("%s and %s go together: give both, or neither", cert, key)
	case c.TLSCert != "":
		if c.tlsConfig, err = web.TLSConfig(c.TLSCert, c.TLSKey, c.Logger); err != nil {
			return err
		}
	case !web.IsLoopback(host):
		return fmt.Errorf("%s %s is reachable from elsewhere: give %s and %s (the credentials would cross the network in clear), "+
			"or listen on 127.0.0.1 behind a reverse proxy that terminates TLS", setting.Name("Listen"), c.Listen, cert, key)
	}
	return nil
}

// Service is one part of the daemon. Start returns once the service works (or failed to start);
// Stop returns once it has stopped. Both may be called more than once.
type Service interface {
	Name() string
	Start(ctx context.Context) error
	Stop()
}

// Supervisor is the daemon: its services, started in order and stopped in reverse.
type Supervisor struct {
	cfg         Config
	rec         *reconcile.Reconciler
	lease       *hostLease
	failed      chan error       // the one error the daemon stops for (ErrLeaseTaken)
	metrics     *metrics.Metrics // nil without --listen
	services    []Service
	sweepWake   wake.Signal
	admitWake   wake.Signal // work announced: admission claims
	dueWake     wake.Signal // the next due time may have moved: admission reads it again
	deliverWake wake.Signal
	listening   atomic.Bool // notifications reach the daemon (listen)
	// idle says that the sweep's last pass was idle (see sweep): the watch then waits longer,
	// and busyWake tells it when that ends.
	idle     atomic.Bool
	busyWake wake.Signal
	progress *progress // what the sweep and admission last did, for the service manager
	// named are the runs notifications named, for spawnNamed; namedPending is set while the
	// passes' wake for runs it left is pending (passesAfterNamed).
	named        chan uuid.UUID
	namedPending atomic.Bool
}

// New validates cfg and builds the services; nothing runs before Start.
func New(cfg Config) (*Supervisor, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("supervisor: no store")
	case cfg.Runner == nil:
		return nil, errors.New("supervisor: no runner")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var m *metrics.Metrics
	var observer reconcile.Observer
	if cfg.Listen != "" {
		m = metrics.New(metrics.Config{Store: cfg.Store, Version: cfg.Version, Restic: cfg.ResticVersion.Release(), Logger: cfg.Logger})
		observer = m
	}
	sweepWake, failed := wake.New(), make(chan error, 1)
	holder, gone := cfg.leaseHolder, cfg.holderGone
	if holder == "" {
		holder = reconcile.LeaseHolder()
	}
	if gone == nil {
		gone = reconcile.HolderGone
	}
	rc := cfg.Reconcile // validated: its windows parsed, its users resolved
	lease := newHostLease(cfg.Store, store.LeaseAcquireParams{Host: rc.Host, Holder: holder, Version: cfg.Version, ResticVersion: cfg.ResticVersion.Release(),
		Duration: cfg.Lease, Grace: rc.TakeoverGrace, HolderGone: gone}, cfg.Logger, sweepWake.Wake,
		func(err error) {
			select {
			case failed <- err:
			default:
			}
		})
	rc.Store, rc.Runner, rc.Inventory = cfg.Store, cfg.Runner, cfg.Store
	rc.HeldLease, rc.Observer = lease.current, observer
	rec, err := reconcile.New(rc)
	if err != nil {
		return nil, err
	}
	admitter := &schedule.Admitter{Store: cfg.Store, Host: rec.Host(), Grace: cfg.LateGrace, Logger: cfg.Logger, Timeout: rc.PassTimeout,
		Lead: rc.StartLead}
	if err := admitter.Validate(); err != nil {
		return nil, err
	}
	ncfg := cfg.Notify
	ncfg.Store, ncfg.Logger = cfg.Store, cfg.Logger
	deliverer, err := notify.New(ncfg)
	if err != nil {
		return nil, err
	}
	watcher := &watch.Watcher{Store: cfg.Store, Host: rec.Host(), Logger: cfg.Logger, Interval: cfg.WatchInterval}
	units := jobunit.Config{Runner: cfg.Runner, StateDir: rc.StateDir, Binary: rc.Binary, ResticBinary: rc.ResticBinary}
	catalogs, err := catalog.NewBuilder(catalog.BuilderConfig{Dir: catalog.DirIn(rc.StateDir), Store: cfg.Store,
		Restic: jobunit.Browser{Config: units}, Host: rec.Host(), Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	sweeper, err := fssnap.NewSweeper(fssnap.SweeperConfig{Dir: fssnap.RecordDir(rc.StateDir), Helper: fssnap.Helper{Runner: cfg.Runner, Binary: rc.Binary},
		Store: cfg.Store, Host: rec.Host(), Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: cfg, rec: rec, lease: lease, failed: failed, metrics: m, sweepWake: sweepWake, admitWake: wake.New(),
		dueWake: wake.New(), deliverWake: wake.New(), busyWake: wake.New(), progress: newProgress(), named: make(chan uuid.UUID, namedQueue)}
	s.services = []Service{
		// The lease first: every write about the host's attempts is fenced by it, and the
		// services that act stand by while it is not held.
		lease,
		// Listening next: a run admitted while the other services start still wakes them.
		&loop{name: "notifications", run: s.listen},
		&markerWatch{stateDir: rc.StateDir, runner: cfg.Runner, end: rec.EndNamed, ending: rec.RunawayWatch().Ending, mayWait: rec.MayWait,
			wake: s.sweepWake, due: s.dueWake, logger: cfg.Logger},
		// Those the sweep hands work to run before it and stop after it.
		rec.RunawayWatch(),
		rec.Spawner(),
		rec.RepairChannel(),
		&loop{name: "sweep", run: s.sweep},
		&loop{name: "named spawns", run: s.spawnNamed},
		&loop{name: "admission", run: func(ctx context.Context) { s.admit(ctx, admitter) }},
		&loop{name: "run files", run: s.removeRunFiles},
		&loop{name: "history", run: s.compactHistory},
		&loop{name: "watch", run: func(ctx context.Context) { s.watch(ctx, watcher) }},
		&loop{name: "delivery", run: func(ctx context.Context) { s.deliver(ctx, deliverer) }},
		&loop{name: "snapshot catalogs", run: catalogs.Run},
		&loop{name: "Btrfs snapshots", run: sweeper.Run},
	}
	// `run start` on this host asks the daemon to admit its run over the control socket, and the
	// named spawns start it at once; a socket that cannot be served leaves commands to admit
	// through the database.
	ctl, err := control.NewServer(control.Config{Path: control.SocketPath(rc.StateDir), DSN: cfg.Database.DSN, Store: cfg.Store,
		Admitted: s.spawnSoon, Spawner: func() string {
			// Without the lease the named spawns start nothing: the daemons are woken.
			if s.acting() && rec.SpawnsNamed() {
				return rec.Host()
			}
			return ""
		}, Logger: cfg.Logger})
	if err != nil {
		cfg.Logger.Warn("the control socket is not served; commands admit runs through the database", "err", err)
	} else {
		s.services = append(s.services, ctl)
	}
	if m != nil {
		// The daemon is the holdfast binary, whose probe-target checks a restore's target as the
		// job's user, as `holdfast restore` has it do.
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find holdfast's own executable: %w", err)
		}
		restore := func(ctx context.Context, p runctl.RestoreParams) (runctl.Restored, error) {
			return runctl.Restore(ctx, runctl.RestoreConfig{Store: cfg.Store, Units: units, Probe: []string{self, "probe-target"}}, p)
		}
		dashboard, err := web.Handler(web.Config{Store: cfg.Store, JournalDir: cfg.JournalDir, Host: rec.Host(), Restic: cfg.ResticVersion,
			Browser: catalog.Browser{Dir: catalog.DirIn(rc.StateDir), Restic: jobunit.Browser{Config: units}}, Restore: restore, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		mux.Handle("/", dashboard)
		// Every request, /metrics and the assets included: the Host check, the credentials, and
		// a bound on those served at once (they share the daemon's pool, see web.Guard).
		handler := web.Guard{Auth: cfg.webAuth, Hosts: cfg.webHosts}.Handler(mux)
		s.services = append(s.services, &httpService{addr: cfg.Listen, handler: handler, tls: cfg.tlsConfig, logger: cfg.Logger})
	}
	if os.Getenv("NOTIFY_SOCKET") != "" {
		// Last: stopped first, so the service manager hears at once that the daemon stops.
		n, err := newNotifier(s.progress, cfg, rec.Host())
		if err != nil {
			return nil, err
		}
		s.services = append(s.services, n)
	}
	return s, nil
}

// Services are the supervisor's services, in start order.
func (s *Supervisor) Services() []Service { return s.services }

// Start makes the state directory and starts every service; if one fails to start, those
// already started are stopped again.
func (s *Supervisor) Start(ctx context.Context) error {
	if err := os.MkdirAll(s.cfg.Reconcile.StateDir, 0o755); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	for i, svc := range s.services {
		if err := svc.Start(ctx); err != nil {
			for j := i - 1; j >= 0; j-- {
				s.services[j].Stop()
			}
			return fmt.Errorf("start %s: %w", svc.Name(), err)
		}
	}
	return nil
}

// Stop stops every service, in reverse order. Units keep running: the next daemon's first pass
// picks them up.
func (s *Supervisor) Stop() {
	for i := len(s.services) - 1; i >= 0; i-- {
		s.services[i].Stop()
	}
}

// WakeSweep asks for a sweep now (coalesced with any already asked for).
func (s *Supervisor) WakeSweep() { s.sweepWake.Wake() }

// Failed delivers the error the daemon must stop for, once: another live daemon took the
// host's lease (ErrLeaseTaken). By then every acting service stands by; the caller stops the
// supervisor and exits with the error.
func (s *Supervisor) Failed() <-chan error { return s.failed }

// acting reports whether the services that act (spawn, sweep, admission, takeover, watch,
// delivery) may: the daemon holds its host's lease. While it does not, they stand by.
func (s *Supervisor) acting() bool {
	_, held := s.lease.current()
	return held
}
