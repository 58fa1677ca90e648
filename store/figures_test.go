package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// fromHistory is what FiguresGet read before a job's figures were kept (migration 00029): five
// probes of each job's runs and a count of its inventory, at every read.
const fromHistory = `
	SELECT j.name,
		(SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.status = 'succeeded' AND r.kind = 'backup'),
		last.finished_at, last.bytes_added, j.overdue_since IS NOT NULL,
		(SELECT count(*) FROM snapshots s WHERE s.job_name = j.name AND s.forgotten_at IS NULL),
		(SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.status = 'succeeded' AND r.kind = 'verify'),
		(SELECT r.status = 'succeeded' FROM runs r WHERE r.job_id = j.id AND r.kind = 'verify'
			AND r.status IN ('succeeded', 'failed', 'partial') ORDER BY r.finished_at DESC LIMIT 1),
		(SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.status = 'succeeded' AND r.kind = 'restore')
	FROM jobs j LEFT JOIN LATERAL (
		SELECT r.finished_at, r.bytes_added FROM runs r
		WHERE r.job_id = j.id AND r.finished_at IS NOT NULL AND r.kind = 'backup'
		ORDER BY r.finished_at DESC LIMIT 1) last ON true
	ORDER BY j.name`

// TestFiguresKeptAsRunsEnd: after each ending of each kind and status, a late one, a retry, a
// pause and its resume, inventory changes and a compaction, the figures FiguresGet reads are
// what the history said (fromHistory), and holdfast check finds nothing; a compaction that
// removes the run a figure came from leaves the figure.
func TestFiguresKeptAsRunsEnd(t *testing.T) {
	b := storetest.Setup(t)
	job := storetest.Job(t, b.Store, &storetest.JobOpts{Name: "fig", Repository: "/r"})
	storetest.Job(t, b.Store, &storetest.JobOpts{Name: "idle"}) // no run ever: no figure
	if _, err := b.DB.Exec(b.Ctx, `UPDATE jobs SET alert_failures = 1`); err != nil {
		t.Fatal(err)
	}
	released := &ledger.Settlement{Release: true, Source: "test"}
	// end takes a new run of kind to its end as the daemon would; at zero stamps the database's clock.
	end := func(t *testing.T, kind model.Kind, status string, at time.Time, e model.Ending) model.Run {
		t.Helper()
		var r model.Run
		if kind == model.KindRestore {
			var err error
			if r, err = b.Store.RunAdmit(b.Ctx, store.RunAdmitParams{Job: job.Name, Trigger: model.TriggerManual, Kind: kind, Host: b.Host,
				Restore: model.Restore{Target: "/restored", Snapshot: strings.Repeat("9", 64)}}); err != nil {
				t.Fatal(err)
			}
			claimAs(t, b, b.Lease, r, 1)
		} else {
			r = storetest.Run(t, b.Store, &storetest.RunOpts{Job: job.Name, Kind: kind, Claim: &b.Lease, Started: true})
		}
		e.RunID, e.Attempt, e.At, e.Status, e.Reason, e.Settlement = r.ID, 1, at, status, status, released
		if status == model.StatusPaused {
			e.PausedReason = ledger.PausedRunCeiling
		}
		finishAs(t, b, b.Lease, e)
		return r
	}
	bytes := func(n int64) *int64 { return &n }
	summary := func(id string) *model.Snapshot {
		return &model.Snapshot{Repository: "/r", ID: id, Time: time.Now(), Host: "h", JobName: job.Name, Source: model.SourceSummary}
	}
	var paused, retried model.Run
	steps := []struct {
		name string
		do   func(t *testing.T)
		// kept: the compaction removed runs a figure came from; the figures keep them, what
		// the history says now does not.
		kept bool
	}{
		{"no run yet", func(t *testing.T) {}, false},
		{"a backup succeeded with a snapshot", func(t *testing.T) {
			end(t, model.KindBackup, model.StatusSucceeded, time.Time{}, model.Ending{BytesAdded: bytes(100),
				SnapshotID: "0123456789abcdef", Snapshot: summary("0123456789abcdef")})
		}, false},
		{"a backup failed and is retried", func(t *testing.T) {
			retry := &model.Retry{ID: uuid.New(), Number: 1, Why: "transient"}
			end(t, model.KindBackup, model.StatusFailed, time.Time{}, model.Ending{FailureClass: "transient", Retry: retry})
			if retried = readRun(t, b, retry.ID); retried.Status != model.StatusQueued {
				t.Fatalf("retry %+v", retried)
			}
		}, false},
		{"the retry ended partial", func(t *testing.T) {
			claimAs(t, b, b.Lease, retried, 1)
			finishAs(t, b, b.Lease, model.Ending{RunID: retried.ID, Attempt: 1, Status: model.StatusPartial, Reason: "partial",
				BytesAdded: bytes(50), Settlement: released, SnapshotID: "fedcba9876543210", Snapshot: summary("fedcba9876543210")})
		}, false},
		{"a backup succeeded, reported with an earlier end", func(t *testing.T) {
			end(t, model.KindBackup, model.StatusSucceeded, b.Now(t).Add(-time.Hour), model.Ending{BytesAdded: bytes(7)})
		}, false},
		{"a backup was skipped by its hook", func(t *testing.T) {
			end(t, model.KindBackup, model.StatusSkipped, time.Time{}, model.Ending{})
		}, false},
		{"a verification failed", func(t *testing.T) {
			end(t, model.KindVerify, model.StatusFailed, time.Time{}, model.Ending{})
		}, false},
		{"a verification succeeded", func(t *testing.T) {
			end(t, model.KindVerify, model.StatusSucceeded, time.Time{}, model.Ending{})
		}, false},
		{"a verification failed again", func(t *testing.T) {
			end(t, model.KindVerify, model.StatusFailed, time.Time{}, model.Ending{})
		}, false},
		{"a verification was stopped", func(t *testing.T) {
			end(t, model.KindVerify, model.StatusStopped, time.Time{}, model.Ending{})
		}, false},
		{"a restore failed", func(t *testing.T) {
			end(t, model.KindRestore, model.StatusFailed, time.Time{}, model.Ending{})
		}, false},
		{"a restore succeeded", func(t *testing.T) {
			end(t, model.KindRestore, model.StatusSucceeded, time.Time{}, model.Ending{})
		}, false},
		{"a backup paused", func(t *testing.T) {
			paused = end(t, model.KindBackup, model.StatusPaused, time.Time{}, model.Ending{})
		}, false},
		{"the paused backup resumed", func(t *testing.T) {
			if _, err := b.Store.RunResume(b.Ctx, paused.ID); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"the resumed backup stopped", func(t *testing.T) {
			claimAs(t, b, b.Lease, paused, 2)
			finishAs(t, b, b.Lease, model.Ending{RunID: paused.ID, Attempt: 2, Status: model.StatusStopped, Reason: "stopped", Settlement: released})
		}, false},
		{"a listing adds two snapshots and forgets those of the summaries", func(t *testing.T) {
			if _, _, err := b.Store.SnapshotSync(b.Ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: b.Now(t), Listed: []model.Snapshot{
				listed(strings.Repeat("9", 64), job.Name, uuid.New(), time.Now()),
				listed(strings.Repeat("8", 64), job.Name, uuid.New(), time.Now()),
				listed(strings.Repeat("7", 64), "", uuid.Nil, time.Now()), // of no job
			}}); err != nil {
				t.Fatal(err)
			}
		}, false},
		// With alert_failures 1, the compaction keeps the newest ended verification, the one
		// stopped, and removes the one that failed before it: the history alone would now say
		// the last verification that ended succeeded.
		{"a compaction", func(t *testing.T) {
			c, err := b.Store.HistoryCompact(b.Ctx, b.Now(t).Add(time.Minute), 2)
			if err != nil || c.Runs == 0 {
				t.Fatalf("compacted %+v: %v", c, err)
			}
		}, true},
		{"a backup succeeded after the compaction", func(t *testing.T) {
			end(t, model.KindBackup, model.StatusSucceeded, time.Time{}, model.Ending{BytesAdded: nil})
		}, true},
	}
	var kept []model.JobFigures
	for _, step := range steps {
		step.do(t)
		f, err := b.Store.FiguresGet(b.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := b.DB.Query(b.Ctx, fromHistory)
		if err != nil {
			t.Fatal(err)
		}
		history, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (model.JobFigures, error) {
			var j model.JobFigures
			err := row.Scan(&j.Name, &j.LastSuccess, &j.LastRunEnd, &j.LastBytesAdded, &j.Overdue, &j.Snapshots,
				&j.LastVerifySuccess, &j.LastVerifyOK, &j.LastRestoreSuccess)
			return j, err
		})
		if err != nil {
			t.Fatal(err)
		}
		want := history
		if step.kept && figuresEqual(f.Jobs, history) {
			t.Errorf("%s: the history still says what the figures do; want a compaction that removed the run of one", step.name)
		}
		if step.kept {
			// What the history said before the compaction, and what it says since of the
			// figures the compaction did not touch.
			want = []model.JobFigures{kept[0], history[1]}
			want[0].LastSuccess, want[0].LastRunEnd, want[0].LastBytesAdded = history[0].LastSuccess, history[0].LastRunEnd, history[0].LastBytesAdded
		}
		if !figuresEqual(f.Jobs, want) {
			t.Errorf("%s: figures\n%s\nwant\n%s", step.name, showFigures(f.Jobs), showFigures(want))
		}
		kept = f.Jobs
		requireNoViolations(t, b)
	}
	last := kept[0]
	if last.LastVerifyOK == nil || *last.LastVerifyOK || last.LastRestoreSuccess == nil || last.LastVerifySuccess == nil || last.Snapshots != 2 {
		t.Errorf("figures at the end: %s", showFigures(kept))
	}
}

func figuresEqual(a, b []model.JobFigures) bool {
	if len(a) != len(b) {
		return false
	}
	sameTime := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	same := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	for i := range a {
		x, y := a[i], b[i]
		okSame := (x.LastVerifyOK == nil) == (y.LastVerifyOK == nil) && (x.LastVerifyOK == nil || *x.LastVerifyOK == *y.LastVerifyOK)
		if x.Name != y.Name || !sameTime(x.LastSuccess, y.LastSuccess) || !sameTime(x.LastRunEnd, y.LastRunEnd) ||
			!same(x.LastBytesAdded, y.LastBytesAdded) || x.Overdue != y.Overdue || x.Snapshots != y.Snapshots ||
			!sameTime(x.LastVerifySuccess, y.LastVerifySuccess) || !okSame || !sameTime(x.LastRestoreSuccess, y.LastRestoreSuccess) {
			return false
		}
	}
	return true
}

func showFigures(fs []model.JobFigures) string {
	var out strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&out, "  %s: success %s end %s added %s verified %s ok %s restored %s snapshots %d\n", f.Name,
			show(f.LastSuccess), show(f.LastRunEnd), show(f.LastBytesAdded), show(f.LastVerifySuccess), show(f.LastVerifyOK),
			show(f.LastRestoreSuccess), f.Snapshots)
	}
	return out.String()
}

func show[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
