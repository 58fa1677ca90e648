package recovery

import (
	"cmp"
	"context"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// closings is a Store that records the runs closed; nothing else of it is called here.
type closings struct {
	Store
	closed []store.RunCloseParams
}

func (c *closings) RunClose(_ context.Context, p store.RunCloseParams) (bool, error) {
	c.closed = append(c.closed, p)
	return true, nil
}

// units are the states of a run's units by attempt, as systemd would list them.
type units map[string]systemd.State

func (u units) StatesMatching(_ context.Context, pattern string) (map[string]systemd.State, error) {
	out := map[string]systemd.State{}
	for name, st := range u {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = st
		}
	}
	return out, nil
}

var (
	running = systemd.State{LoadState: "loaded", ActiveState: "active", SubState: "running"}
	gone    = systemd.State{LoadState: "loaded", ActiveState: "failed", SubState: "failed"}
)

// A run live in a restored database is ended by evidence, top to bottom: an attempt of another
// host is that host's to judge; a job whose repository could not be read waits for it; a run
// whose time is to come or a unit of its attempt still there are the daemon's to follow; a unit
// of another attempt still running waits for its end; its own exit marker is the daemon's to
// read; a backup whose snapshot is in its own job's repository succeeded, with the figures
// restic kept; a later attempt's marker, or a unit gone with nothing left, ends it failed
// (stopped or paused, as asked), never run again; a run that never started is the daemon's to
// start if only this host runs its job, else failed; and a state directory without markers
// is no answer.
func TestCloseLive(t *testing.T) {
	snapID := strings.Repeat("ef", 32)
	start := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	type row struct {
		name                string
		kind                model.Kind
		host                string // the attempt's host; "" not spawned
		attempt             int    // the live attempt; 0 is 1
		anyHost             bool   // its job may run on any host
		later               bool   // its not-before time is to come
		unread              bool   // its job's repository could not be read
		units               map[int]systemd.State
		markers             []int
		snapJob             string // the job whose repository has a snapshot with the run's tag
		stop                bool
		paused              string
		noMarkersDir        bool
		wantStatus, wantWhy string // wantStatus "" left live
		wantPending         bool
		wantErr             string
	}
	for _, c := range []row{
		{name: "another host's", host: "h2", units: map[int]systemd.State{1: running}, wantWhy: "on host h2"},
		{name: "repository unread", host: "h1", unread: true, snapJob: "web", wantWhy: "could not be read", wantPending: true},
		{name: "its time to come", host: "h1", later: true, wantWhy: "has not come"},
		{name: "its unit running", host: "h1", units: map[int]systemd.State{1: running}, markers: []int{1}, snapJob: "web", wantWhy: "is there (active)"},
		{name: "a later attempt running", host: "h1", units: map[int]systemd.State{1: gone, 2: running}, snapJob: "web", wantWhy: "attempt 2's unit", wantPending: true},
		{name: "an earlier attempt running", host: "h1", attempt: 2, units: map[int]systemd.State{1: running}, wantWhy: "attempt 1's unit", wantPending: true},
		{name: "its marker, and its snapshot", host: "h1", units: map[int]systemd.State{1: gone}, markers: []int{1}, snapJob: "web", wantWhy: "exit marker is there"},
		{name: "snapshot in the repository", host: "h1", units: map[int]systemd.State{1: gone}, snapJob: "web", wantStatus: model.StatusSucceeded, wantWhy: "its snapshot efefefefefef is in the repository"},
		{name: "a later marker, and its snapshot", host: "h1", markers: []int{1, 2}, snapJob: "web", wantStatus: model.StatusSucceeded, wantWhy: "its snapshot"},
		{name: "never spawned, snapshot", snapJob: "web", wantStatus: model.StatusSucceeded, wantWhy: "its snapshot"},
		{name: "marker left", host: "h1", markers: []int{1}, wantWhy: "exit marker is there"},
		{name: "a later attempt's marker", host: "h1", markers: []int{1, 2}, wantStatus: model.StatusFailed, wantWhy: "went on in attempt 2"},
		{name: "no evidence", host: "h1", wantStatus: model.StatusFailed, wantWhy: "it is not run again"},
		{name: "no evidence, stop asked", host: "h1", stop: true, wantStatus: model.StatusStopped, wantWhy: "stopped; closed by holdfast recover"},
		{name: "no evidence, paused", host: "h1", paused: "quota", wantStatus: model.StatusPaused, wantWhy: "paused: quota; closed by holdfast recover"},
		{name: "never started", wantWhy: "never started"},
		{name: "never started, any host's job", anyHost: true, wantStatus: model.StatusFailed, wantWhy: "another host may have run it"},
		{name: "a forget, tagged snapshot", kind: model.KindForget, host: "h1", snapJob: "web", wantStatus: model.StatusFailed, wantWhy: "it is not run again"},
		{name: "another job's snapshot with its tag", host: "h1", snapJob: "mallory", wantStatus: model.StatusFailed, wantWhy: "it is not run again"},
		{name: "no markers directory", host: "h1", noMarkersDir: true, wantErr: "the daemon's state directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := uuid.New()
			st := &closings{}
			u := units{}
			for n, state := range c.units {
				u[systemd.UnitName("web", run, n)] = state
			}
			cfg := Config{Store: st, Units: u, Host: "h1", StateDir: t.TempDir()}
			if !c.noMarkersDir {
				if err := os.MkdirAll(filepath.Dir(systemd.MarkerPath(cfg.StateDir, run, 1)), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range c.markers {
				if err := systemd.WriteMarker(cfg.StateDir, systemd.Marker{Run: run, Attempt: n, Unit: systemd.UnitName("web", run, n),
					ServiceResult: "success", ExitCode: "exited", ExitStatus: "0", At: start}); err != nil {
					t.Fatal(err)
				}
			}
			now := time.Now()
			notBefore := now.Add(-time.Hour)
			if c.later {
				notBefore = now.Add(time.Hour)
			}
			l := model.LiveRun{Run: model.Run{ID: run, JobName: "web", Kind: cmp.Or(c.kind, model.KindBackup), Status: model.StatusRunning,
				NotBefore: &notBefore, PausedReason: c.paused}, Attempt: model.Attempt{No: cmp.Or(c.attempt, 1), Host: c.host}, ReadAt: now}
			if c.host != "" {
				l.Attempt.Unit = systemd.UnitName("web", run, l.Attempt.No)
			}
			if c.stop {
				l.Run.StopRequestedAt = &now
			}
			ev := evidence{snaps: map[string][]listed{}, unread: map[string]string{}, pinnedHere: map[string]bool{"web": !c.anyHost}}
			if c.snapJob != "" {
				ev.snaps[c.snapJob] = []listed{{model.Snapshot{ID: snapID, Time: start, RunID: &run, JobName: c.snapJob},
					&engine.SnapshotSummary{BackupStart: start, BackupEnd: start.Add(time.Minute), DataAdded: 7}}}
			}
			if c.unread {
				ev.unread["web"] = "restic: repository locked"
			}
			if err := ev.readHost(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			rr, err := closeLive(context.Background(), cfg, l, ev)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || len(st.closed) != 0 {
					t.Fatalf("error %v, closed %+v; want an error with %q and nothing closed", err, st.closed, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rr.Status != c.wantStatus || !strings.Contains(rr.Reason, c.wantWhy) || rr.Pending != c.wantPending {
				t.Fatalf("%q: %q (pending %v); want %q, a reason with %q (pending %v)", rr.Status, rr.Reason, rr.Pending, c.wantStatus, c.wantWhy, c.wantPending)
			}
			if c.wantStatus == "" {
				if len(st.closed) != 0 {
					t.Fatalf("left live, but closed: %+v", st.closed)
				}
				return
			}
			if len(st.closed) != 1 || st.closed[0].ID != run || st.closed[0].Status != c.wantStatus {
				t.Fatalf("closed %+v", st.closed)
			}
			if p := st.closed[0]; c.wantStatus == model.StatusSucceeded &&
				(p.SnapshotID != snapID || p.FinishedAt == nil || !p.FinishedAt.Equal(start.Add(time.Minute)) || p.BytesAdded == nil || *p.BytesAdded != 7) {
				t.Fatalf("closed without its snapshot's figures: %+v", p)
			}
		})
	}
}

// A snapshot's summary gives a run's start and end only when the backup started at the
// snapshot's time: a snapshot given another time (restic backup --time) keeps its own.
func TestFigures(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		sum      *engine.SnapshotSummary
		wantEnd  time.Time
		wantSize bool
	}{
		{"restic before 0.17", nil, at, false},
		{"a backup of its time", &engine.SnapshotSummary{BackupStart: at.Add(300 * time.Millisecond), BackupEnd: at.Add(time.Hour), DataAdded: 1}, at.Add(time.Hour), true},
		{"a time given", &engine.SnapshotSummary{BackupStart: at.Add(48 * time.Hour), BackupEnd: at.Add(49 * time.Hour), DataAdded: 1}, at, true},
		{"an end before its start", &engine.SnapshotSummary{BackupStart: at, BackupEnd: at.Add(-time.Hour), DataAdded: 1}, at, true},
		{"an end to come", &engine.SnapshotSummary{BackupStart: at, BackupEnd: at.Add(48 * time.Hour), DataAdded: 1}, at, true},
		{"a figure below zero", &engine.SnapshotSummary{BackupStart: at, BackupEnd: at.Add(time.Hour), DataAdded: -1}, at.Add(time.Hour), false},
	} {
		start, end := at, at
		var added, processed, files *int64
		figures(c.sum, at.Add(24*time.Hour), &start, &end, &added, &processed, &files)
		if !end.Equal(c.wantEnd) || (added != nil) != c.wantSize {
			t.Errorf("%s: end %s, added %v; want %s, figures %v", c.name, end, added, c.wantEnd, c.wantSize)
		}
	}
}
