package recovery

import (
	"context"
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

type aliveUnits map[string]bool

func (u aliveUnits) Alive(_ context.Context, name string) (bool, systemd.State, error) {
	return u[name], systemd.State{}, nil
}

// A run live in a restored database is ended by evidence, in this order: an attempt of
// another host is that host's to judge; a unit still running, or an exit marker still there,
// is the daemon's to follow; a backup whose snapshot is in the repository succeeded, with the
// figures restic kept; anything else failed, not run again.
func TestCloseLive(t *testing.T) {
	snapID := strings.Repeat("ef", 32)
	start := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name       string
		kind       model.Kind
		host       string // the attempt's host; "" not spawned
		later      bool   // its not-before time is to come
		alive      bool
		marker     bool
		snapshot   bool
		wantStatus string // "" left live
		wantReason string
	}{
		{"another host's", model.KindBackup, "h2", true, true, true, true, "", "on host h2"},
		{"its time to come", model.KindBackup, "h1", true, false, false, false, "", "has not come"},
		{"unit running", model.KindBackup, "h1", false, true, true, true, "", "is running"},
		{"marker there", model.KindBackup, "h1", false, false, true, true, "", "exit marker is there"},
		{"snapshot in the repository", model.KindBackup, "h1", false, false, false, true, model.StatusSucceeded, "its snapshot efefefefefef is in the repository"},
		{"never spawned, snapshot", model.KindBackup, "", false, false, false, true, model.StatusSucceeded, "its snapshot"},
		{"no evidence", model.KindBackup, "h1", false, false, false, false, model.StatusFailed, "it is not run again"},
		{"its time passed, no evidence", model.KindBackup, "", false, false, false, false, model.StatusFailed, "it is not run again"},
		{"a forget, tagged snapshot", model.KindForget, "h1", false, false, false, true, model.StatusFailed, "it is not run again"},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := uuid.New()
			st := &closings{}
			cfg := Config{Store: st, Host: "h1", StateDir: t.TempDir()}
			unit := systemd.UnitName("web", run, 1)
			cfg.Units = aliveUnits{unit: c.alive}
			if c.marker {
				if err := systemd.WriteMarker(cfg.StateDir, systemd.Marker{Run: run, Attempt: 1, Unit: unit, ServiceResult: "success",
					ExitCode: "exited", ExitStatus: "0", At: start}); err != nil {
					t.Fatal(err)
				}
			}
			now := time.Now()
			notBefore := now.Add(-time.Hour)
			if c.later {
				notBefore = now.Add(time.Hour)
			}
			l := model.LiveRun{Run: model.Run{ID: run, JobName: "web", Kind: c.kind, Status: model.StatusRunning, NotBefore: &notBefore},
				Attempt: model.Attempt{No: 1, Host: c.host}, ReadAt: now}
			if c.host != "" {
				l.Attempt.Unit = unit
			}
			byRun := map[uuid.UUID]model.Snapshot{}
			if c.snapshot {
				byRun[run] = model.Snapshot{ID: snapID, Time: start, RunID: &run}
			}
			sum := &engine.SnapshotSummary{BackupStart: start, BackupEnd: start.Add(time.Minute), DataAdded: 7}
			rr, err := closeLive(context.Background(), cfg, l, byRun, map[string]*engine.SnapshotSummary{snapID: sum})
			if err != nil {
				t.Fatal(err)
			}
			if rr.Status != c.wantStatus || !strings.Contains(rr.Reason, c.wantReason) {
				t.Fatalf("%s: %q; want %q, a reason with %q", rr.Status, rr.Reason, c.wantStatus, c.wantReason)
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
	} {
		start, end := at, at
		var added, processed, files *int64
		figures(c.sum, &start, &end, &added, &processed, &files)
		if !end.Equal(c.wantEnd) || (added != nil) != c.wantSize {
			t.Errorf("%s: end %s, added %v; want %s, figures %v", c.name, end, added, c.wantEnd, c.wantSize)
		}
	}
}
