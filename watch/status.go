package watch

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/setting"
)

// State is a status report's verdict, ordered: the worst one found is the report's.
type State int

// The states, with the exit codes monitoring plugins give them.
const (
	OK       State = 0
	Warning  State = 1
	Critical State = 2
	Unknown  State = 3
)

func (s State) String() string { return [...]string{"ok", "warning", "critical", "unknown"}[s] }

// NearQuota is the share of an account's quota in use from which status warns.
const NearQuota = 0.9

// Report is everything `holdfast status` shows.
type Report struct {
	State    State
	At       time.Time // the database's clock
	Jobs     []JobStatus
	Live     []LiveStatus
	Accounts []AccountStatus
	Hosts    []HostStatus
	// FailedDeliveries are notifications kept as failed (a warning): `holdfast notify log`.
	FailedDeliveries int64
}

// JobStatus is one job's line.
type JobStatus struct {
	Name          string
	State         State
	LastOutcome   string
	LastSuccess   *time.Time
	LastVerified  *time.Time // its last successful verification
	LastVerify    string     // how its last verification ended ("" none)
	LastDrilled   *time.Time // its last successful drill
	LastDrill     string     // how its last drill ended ("" none)
	NextRun       *time.Time
	OverdueSince  *time.Time
	OverdueReason string
	Note          string // why the state is not ok
}

// LiveStatus is one live run's line.
type LiveStatus struct {
	Run      uuid.UUID
	Job      string
	Status   string
	Attempt  int
	Started  *time.Time
	Progress *model.Progress
	ETA      *time.Duration // from its progress so far; nil without one
	Stalled  *time.Time     // when it was found stalled
	State    State
}

// HostStatus is one host whose daemon shares the database. A down host is critical while it
// holds live runs or has jobs pinned to it (they cannot run), a warning otherwise (forget it).
type HostStatus struct {
	Name  string
	State State
	Note  string // "down since …", "draining"; "" when alive
}

// AccountStatus is one account with a quota.
type AccountStatus struct {
	Name                   string
	State                  State
	Granted, Settled, Held int64
	UsedShare              float64
}

// StatusReader is what a status report reads. The CLI and the dashboard give their store.Store.
type StatusReader interface {
	JobWatchFacts(ctx context.Context, scope model.WatchScope) ([]model.WatchFacts, error)
	RunListLive(ctx context.Context, host string) ([]model.LiveRun, error)
	AccountList(ctx context.Context, name string) ([]model.Account, error)
	HostList(ctx context.Context) ([]model.Host, error)
	DeliveryCount(ctx context.Context) (pending, failed int64, err error)
}

// Status reads the report. An error means the state is Unknown.
func Status(ctx context.Context, st StatusReader) (Report, error) {
	facts, err := st.JobWatchFacts(ctx, model.WatchScope{})
	if err != nil {
		return Report{State: Unknown}, err
	}
	live, err := st.RunListLive(ctx, "")
	if err != nil {
		return Report{State: Unknown}, err
	}
	accounts, err := st.AccountList(ctx, "")
	if err != nil {
		return Report{State: Unknown}, err
	}
	hosts, err := st.HostList(ctx)
	if err != nil {
		return Report{State: Unknown}, err
	}
	_, failed, err := st.DeliveryCount(ctx)
	if err != nil {
		return Report{State: Unknown}, err
	}
	r := Report{FailedDeliveries: failed}
	if failed > 0 {
		r.State = Warning
	}
	for _, f := range facts {
		r.At = f.ReadAt
		j := JobStatus{Name: f.Job.Name, LastOutcome: f.Job.LastOutcome, LastSuccess: f.LastSuccess,
			LastVerified: f.LastVerified, LastVerify: f.LastVerify, LastDrilled: f.LastDrilled, LastDrill: f.LastDrill,
			NextRun: f.Job.NextRunAt, OverdueSince: f.Job.OverdueSince, OverdueReason: f.Job.OverdueReason}
		// Judged here too, so that a status with no daemon running still sees a missed backup.
		v, err := Judge(f, f.ReadAt)
		switch {
		case f.Job.OverdueSince != nil:
			j.State, j.Note = Critical, "overdue: "+f.Job.OverdueReason
		case err != nil:
			j.State, j.Note = Warning, err.Error()
		case v.Overdue:
			j.State, j.Note = Critical, "overdue (no daemon recorded it yet): "+v.Reason
			j.OverdueSince, j.OverdueReason = &v.Since, v.Reason
		case f.Job.LastOutcome != "" && f.Job.LastOutcome != model.StatusSucceeded && f.Job.LastOutcome != model.StatusSkipped:
			j.State, j.Note = Warning, "last run "+f.Job.LastOutcome
		case f.LastVerify != "" && f.LastVerify != model.StatusSucceeded && f.LastVerify != model.StatusStopped:
			j.State, j.Note = Warning, setting.Sprintf("last verification %s (holdfast run list {RunList.Job} %s)", f.LastVerify, f.Job.Name)
		}
		r.State = max(r.State, j.State)
		r.Jobs = append(r.Jobs, j)
	}
	for _, l := range live {
		if r.At.IsZero() {
			r.At = l.ReadAt
		}
		s := LiveStatus{Run: l.Run.ID, Job: l.Run.JobName, Status: l.Run.Status, Attempt: l.Attempt.No,
			Started: l.Attempt.StartedAt, Progress: l.Attempt.Progress, Stalled: l.Attempt.StalledAt}
		if s.Stalled != nil {
			s.State = Critical
		}
		r.State = max(r.State, s.State)
		if p := l.Attempt.Progress; p != nil && p.PercentDone > 0 && p.PercentDone < 1 && l.Attempt.StartedAt != nil {
			elapsed := l.ReadAt.Sub(*l.Attempt.StartedAt)
			eta := time.Duration(float64(elapsed) * (1 - p.PercentDone) / p.PercentDone).Round(time.Second)
			s.ETA = &eta
		}
		r.Live = append(r.Live, s)
	}
	for _, h := range hosts {
		s := HostStatus{Name: h.Name}
		switch {
		case !h.Alive && (h.LiveRuns > 0 || h.PinnedJobs > 0):
			s.State, s.Note = Critical, fmt.Sprintf("%s, with %d live runs and %d pinned jobs", h.State(), h.LiveRuns, h.PinnedJobs)
		case !h.Alive:
			s.State, s.Note = Warning, fmt.Sprintf("%s (holdfast host forget %s, if it is gone for good)", h.State(), h.Name)
		case h.DrainingSince != nil:
			s.Note = h.State()
		}
		r.State = max(r.State, s.State)
		r.Hosts = append(r.Hosts, s)
	}
	for _, a := range accounts {
		if a.Unlimited || a.GrantedBytes <= 0 {
			continue
		}
		s := AccountStatus{Name: a.Name, Granted: a.GrantedBytes, Settled: a.SettledBytes, Held: a.HeldBytes,
			UsedShare: float64(a.SettledBytes+a.HeldBytes) / float64(a.GrantedBytes)}
		if s.UsedShare >= NearQuota {
			s.State = Warning
		}
		r.State = max(r.State, s.State)
		r.Accounts = append(r.Accounts, s)
	}
	return r, nil
}

// Age says how long before now t was, for humans ("never" for nil).
func Age(t *time.Time, now time.Time) string {
	if t == nil {
		return "never"
	}
	d := now.Sub(*t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%.1fh ago", d.Hours())
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// Checked says, for humans, when a job's last successful verification (or drill) was, and how the
// last one ended if it did not succeed: "2.0h ago", "3d ago (last failed)", "-" for none.
func Checked(lastSuccess *time.Time, lastStatus string, now time.Time) string {
	if lastStatus == "" {
		return "-"
	}
	s := Age(lastSuccess, now)
	if lastStatus != model.StatusSucceeded {
		s += " (last " + lastStatus + ")"
	}
	return s
}
