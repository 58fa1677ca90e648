// Package metrics is the daemon's Prometheus endpoint. The figures about jobs, live runs and
// accounts are read from PostgreSQL at each scrape, so every daemon of one database answers the
// same; the histograms (run duration, schedule lateness, sweep duration) are what this daemon
// observed, which Prometheus sums across daemons.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/holdfast-backup/holdfast/model"
)

// Store is what a scrape reads: the figures of the gauges and the hosts. The daemon gives its
// store.Store.
type Store interface {
	FiguresGet(ctx context.Context) (model.Figures, error)
	HostList(ctx context.Context) ([]model.Host, error)
}

// Config configures Metrics.
type Config struct {
	Store   Store
	Version string
	// Restic is the release of the restic the daemon runs (holdfast_restic_info); "" leaves the
	// series out.
	Restic string
	// ScrapeTimeout bounds reading the database at a scrape. Default DefaultScrapeTimeout.
	ScrapeTimeout time.Duration
	Logger        *slog.Logger
}

// DefaultScrapeTimeout bounds reading the database at one scrape.
const DefaultScrapeTimeout = 10 * time.Second

// Metrics holds the daemon's registry and the histograms it observes.
type Metrics struct {
	registry    *prometheus.Registry
	runDuration *prometheus.HistogramVec
	lateness    prometheus.Histogram
	sweep       prometheus.Histogram
}

// New registers the collectors.
func New(cfg Config) *Metrics {
	if cfg.ScrapeTimeout <= 0 {
		cfg.ScrapeTimeout = DefaultScrapeTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "holdfast_run_duration_seconds",
			Help:    "How long runs this daemon closed took, from their start to their end, by kind and outcome.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10), // 1s .. ~3 days
		}, []string{"kind", "status"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "holdfast_schedule_lateness_seconds",
			Help:    "How long after its slot a scheduled run started, for the runs this daemon closed.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}),
		sweep: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "holdfast_sweep_duration_seconds",
			Help:    "How long this daemon's reconciler passes took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1ms .. ~4 min
		}),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "holdfast_build_info",
		Help:        "The holdfast build this daemon runs; always 1.",
		ConstLabels: prometheus.Labels{"version": cfg.Version, "goversion": runtime.Version()},
	})
	build.Set(1)
	m.registry.MustRegister(m.runDuration, m.lateness, m.sweep, build, &database{cfg: cfg},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.Restic != "" {
		restic := prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "holdfast_restic_info",
			Help:        "The restic release this daemon runs; always 1.",
			ConstLabels: prometheus.Labels{"version": cfg.Restic},
		})
		restic.Set(1)
		m.registry.MustRegister(restic)
	}
	return m
}

// Handler serves the registry in Prometheus's exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// RunEnded observes a run this daemon closed at at (reconcile.Observer).
func (m *Metrics) RunEnded(run model.Run, status string, at time.Time) {
	started := run.CreatedAt
	if run.StartedAt != nil {
		started = *run.StartedAt
	}
	m.runDuration.WithLabelValues(string(run.Kind), status).Observe(at.Sub(started).Seconds())
	if run.Trigger == "schedule" && run.PlannedAt != nil && run.StartedAt != nil {
		m.lateness.Observe(max(run.StartedAt.Sub(*run.PlannedAt), 0).Seconds())
	}
}

// SweepTook observes one reconciler pass.
func (m *Metrics) SweepTook(d time.Duration) { m.sweep.Observe(d.Seconds()) }

// database collects the figures PostgreSQL holds, at each scrape.
type database struct{ cfg Config }

var (
	// Not "job": a scrape's own job label would rename it exported_job, and an alert on
	// holdfast_job_overdue{job_name="nightly"} must match what it says.
	labelsJob     = []string{"job_name"}
	labelsAccount = []string{"account"}

	descUp          = prometheus.NewDesc("holdfast_database_up", "Whether this scrape could read holdfast's database (1) or not (0).", nil, nil)
	descLastSuccess = prometheus.NewDesc("holdfast_job_last_success_timestamp_seconds", "When the job's last succeeded backup ended (Unix time); absent if none did.", labelsJob, nil)
	descVerified    = prometheus.NewDesc("holdfast_job_last_verify_success_timestamp_seconds", "When the job's last succeeded verification of its repository ended (Unix time); absent if none did.", labelsJob, nil)
	descVerifyOK    = prometheus.NewDesc("holdfast_job_last_verify_ok", "Whether the job's last ended verification succeeded (1) or found its repository unsound or could not check it (0); absent if none ended.", labelsJob, nil)
	descRestored    = prometheus.NewDesc("holdfast_job_last_restore_success_timestamp_seconds", "When the job's last succeeded restore ended (Unix time); absent if none did.", labelsJob, nil)
	descLastRun     = prometheus.NewDesc("holdfast_job_last_run_timestamp_seconds", "When the job's last backup run ended, however (Unix time); absent if none did.", labelsJob, nil)
	descOverdue     = prometheus.NewDesc("holdfast_job_overdue", "Whether the job is overdue (1) or not (0), as the daemons recorded it.", labelsJob, nil)
	descBytesAdded  = prometheus.NewDesc("holdfast_job_last_run_bytes_added", "What the job's last ended backup added to its repository, in bytes; absent if unknown.", labelsJob, nil)
	descSnapshots   = prometheus.NewDesc("holdfast_job_snapshots", "The job's snapshots in holdfast's inventory of its repository.", labelsJob, nil)
	descLive        = prometheus.NewDesc("holdfast_runs_live", "Runs queued or running, by status.", []string{"status"}, nil)
	descQuota       = prometheus.NewDesc("holdfast_account_quota_bytes", "The account's quota: all its grants, in bytes (absent for an unlimited account).", labelsAccount, nil)
	descBalance     = prometheus.NewDesc("holdfast_account_balance_bytes", "What the account can still hold: grants minus settled minus held, in bytes.", labelsAccount, nil)
	descPending     = prometheus.NewDesc("holdfast_notifications_pending", "Deliveries of events to notification targets waiting to be sent (the queue).", nil, nil)
	descFailed      = prometheus.NewDesc("holdfast_notifications_failed", "Deliveries of events kept as failed after their last try.", nil, nil)
	descHeld        = prometheus.NewDesc("holdfast_account_held_bytes", "The account's open holds of live runs, in bytes.", labelsAccount, nil)
	descHostUp      = prometheus.NewDesc("holdfast_host_up", "Whether the host's daemon holds its lease (1) or the host is down (0).", []string{"host"}, nil)
	descHeartbeat   = prometheus.NewDesc("holdfast_host_heartbeat_timestamp_seconds", "When the host's daemon last renewed its lease (Unix time).", []string{"host"}, nil)
)

func (d *database) Describe(ch chan<- *prometheus.Desc) {
	for _, desc := range []*prometheus.Desc{descUp, descLastSuccess, descVerified, descVerifyOK, descRestored, descLastRun, descOverdue, descBytesAdded, descSnapshots,
		descLive, descQuota, descBalance, descHeld, descPending, descFailed, descHostUp, descHeartbeat} {
		ch <- desc
	}
}

func (d *database) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ScrapeTimeout)
	defer cancel()
	f, err := d.cfg.Store.FiguresGet(ctx)
	var hosts []model.Host
	if err == nil {
		hosts, err = d.cfg.Store.HostList(ctx)
	}
	if err != nil {
		d.cfg.Logger.Warn("metrics: the database could not be read", "err", err)
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	for _, j := range f.Jobs {
		if j.LastSuccess != nil {
			gauge(descLastSuccess, unix(*j.LastSuccess), j.Name)
		}
		if j.LastRunEnd != nil {
			gauge(descLastRun, unix(*j.LastRunEnd), j.Name)
		}
		if j.LastVerifySuccess != nil {
			gauge(descVerified, unix(*j.LastVerifySuccess), j.Name)
		}
		if j.LastVerifyOK != nil {
			ok := 0.0
			if *j.LastVerifyOK {
				ok = 1
			}
			gauge(descVerifyOK, ok, j.Name)
		}
		if j.LastRestoreSuccess != nil {
			gauge(descRestored, unix(*j.LastRestoreSuccess), j.Name)
		}
		if j.LastBytesAdded != nil {
			gauge(descBytesAdded, float64(*j.LastBytesAdded), j.Name)
		}
		overdue := 0.0
		if j.Overdue {
			overdue = 1
		}
		gauge(descOverdue, overdue, j.Name)
		gauge(descSnapshots, float64(j.Snapshots), j.Name)
	}
	gauge(descPending, float64(f.DeliveriesPending))
	gauge(descFailed, float64(f.DeliveriesFailed))
	for status, n := range f.Live {
		gauge(descLive, float64(n), status)
	}
	for _, a := range f.Accounts {
		if !a.Unlimited {
			gauge(descQuota, float64(a.GrantedBytes), a.Name)
			gauge(descBalance, float64(a.Balance()), a.Name)
		}
		gauge(descHeld, float64(a.HeldBytes), a.Name)
	}
	for _, h := range hosts {
		up := 0.0
		if h.Alive {
			up = 1
		}
		gauge(descHostUp, up, h.Name)
		gauge(descHeartbeat, unix(h.HeartbeatAt), h.Name)
	}
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
