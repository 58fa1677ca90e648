package reconcile

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/systemd"
)

// A host's clock hours off changes nothing that is judged on the database's clock (issue 25,
// item 7). The daemon stamps a run started and ended on the database's clock, so a host behind
// does not make a run look stalled the moment it starts (nor a host ahead hide a stall); a
// retry is due its backoff after the failure as the database recorded it, and the retry is
// spawned once that time has come on the database's clock, neither hours early nor late.
func TestHostClockSkew(t *testing.T) {
	t.Parallel()
	b := storetest.Setup(t)
	st, ctx, db := b.Store, b.Ctx, b.DB
	within := func(t *testing.T, what string, got, from, to time.Time) {
		t.Helper()
		if got.Before(from) || got.After(to) {
			t.Fatalf("%s %s, want it between %s and %s (the database's clock)", what, got, from, to)
		}
	}
	const backoff = 10 * time.Minute
	for i, tc := range []struct {
		name string
		skew time.Duration // of the host's clock against the database's
	}{
		{"host two hours behind", -2 * time.Hour},
		{"host on time", 0},
		{"host two hours ahead", 2 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := []string{"behind", "ontime", "ahead"}[i]
			if _, err := st.JobCreate(ctx, model.Job{Name: name, Engine: engine.NameCommand, Command: []string{"/bin/true"},
				StallAfter: time.Hour, StallAction: model.StallStop, RetryMax: 1, RetryBackoff: backoff}); err != nil {
				t.Fatal(err)
			}
			r := &Reconciler{cfg: Config{Store: st, StateDir: t.TempDir(), Host: "h", SpawnGrace: time.Minute, MaxAttempts: 5, RunBudget: time.Minute,
				AllowCommandJobs: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				now: func() time.Time { return time.Now().Add(tc.skew) }}, unlocked: map[model.AttemptRef]bool{}}
			if err := r.newServices(); err != nil {
				t.Fatal(err)
			}
			live := func(id string) model.LiveRun {
				t.Helper()
				ls, err := st.RunListLive(ctx, "h")
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range ls {
					if l.Run.ID.String() == id {
						return l
					}
				}
				t.Fatalf("run %s is not live", id)
				return model.LiveRun{}
			}
			run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: name, Trigger: "manual", Kind: model.KindBackup})
			if err != nil {
				t.Fatal(err)
			}
			if ok, _, err := st.AttemptClaimSpawn(ctx, r.fence(), model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: systemd.UnitName(name, run.ID, 1)}); !ok || err != nil {
				t.Fatalf("claim: %v %v", ok, err)
			}

			// A pass finds the unit alive and marks the run running.
			from := b.Now(t)
			if err := r.carryOut(ctx, live(run.ID.String()), facts{}, model.Job{}, decision{act: actMarkRunning}); err != nil {
				t.Fatal(err)
			}
			to := b.Now(t)
			a, err := st.AttemptGet(ctx, model.AttemptRef{Run: run.ID, No: 1})
			if err != nil || a.StartedAt == nil {
				t.Fatalf("attempt after the start: %+v %v", a, err)
			}
			within(t, "started", *a.StartedAt, from, to)
			stalls, err := st.AttemptListStalled(ctx, "h")
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stalls {
				if s.Run == run.ID {
					t.Fatalf("a run started just now looks stalled (progress since %s)", s.Since)
				}
			}

			// It fails for a transient reason: the retry is due a backoff after the recorded end.
			from = b.Now(t)
			if err := r.finishAttempt(ctx, live(run.ID.String()), a, systemd.Marker{},
				verdict{status: model.StatusFailed, class: string(engine.Transient), reason: "failed by the test"}); err != nil {
				t.Fatal(err)
			}
			to = b.Now(t)
			failed, err := st.RunGet(ctx, run.ID)
			if err != nil || failed.Status != model.StatusFailed || failed.FinishedAt == nil || failed.RetriedBy == nil {
				t.Fatalf("failed run: %+v %v", failed, err)
			}
			within(t, "finished", *failed.FinishedAt, from, to)
			retry, err := st.RunGet(ctx, *failed.RetriedBy)
			if err != nil || retry.NotBefore == nil {
				t.Fatalf("retry: %+v %v", retry, err)
			}
			// The backoff has a jitter of a fifth either way (schedule.Backoff).
			within(t, "retry due", *retry.NotBefore, from.Add(backoff*4/5), to.Add(backoff*6/5))
			if due := retry.NotBefore.UTC().Format(time.RFC3339); !strings.Contains(failed.Reason, "at "+due) || !strings.Contains(retry.WaitingReason, "due at "+due) {
				t.Fatalf("reasons %q and %q do not name the retry's time %s", failed.Reason, retry.WaitingReason, due)
			}

			decideRetry := func() string {
				t.Helper()
				l := live(retry.ID.String())
				f, _, err := r.gather(ctx, &l, &passReads{})
				if err != nil {
					t.Fatal(err)
				}
				return decide(f, r.rules()).row
			}
			// Not due yet on the database's clock: not spawned, however far ahead the host is.
			if row := decideRetry(); row != "unspawned, not before" {
				t.Fatalf("the retry, due in %s: row %q, want it to wait", backoff, row)
			}
			// Due on the database's clock: spawned, however far behind the host is.
			if _, err := db.Exec(ctx, `UPDATE runs SET not_before = now() - interval '1 second' WHERE id = $1`, retry.ID); err != nil {
				t.Fatal(err)
			}
			if row := decideRetry(); row != "unspawned" {
				t.Fatalf("the retry, due a second ago: row %q, want it spawned", row)
			}
		})
	}
}
