package forget_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/forget"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

func open(t *testing.T) *store.Store {
	t.Helper()
	st, _ := storetest.Open(t)
	return st
}

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// snapshots are n daily snapshots of the job on host "h", the newest a day before now.
func snapshots(job string, n int) []model.Snapshot {
	out := make([]model.Snapshot, n)
	for i := range out {
		out[i] = model.Snapshot{ID: fmt.Sprintf("%064x", i+1), Time: now.Add(-time.Duration(i+1) * 24 * time.Hour), Host: "h",
			Tags: []string{engine.JobTag(job)}, Paths: []string{"/data"}}
	}
	return out
}

func TestPlanAndApply(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	add := func(j model.Job) {
		t.Helper()
		if _, err := st.JobCreate(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	last := func(n int) []byte {
		raw, err := json.Marshal(retention.Policy{KeepLast: n})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	add(model.Job{Name: "dump", Engine: engine.NameCommand, Command: []string{"/bin/true"}})
	add(model.Job{Name: "bare", Engine: engine.NameRestic, Repository: "/r/bare", PasswordFile: "/pw", Paths: []string{"/data"}})
	add(model.Job{Name: "web", Engine: engine.NameRestic, Repository: "/r/web", PasswordFile: "/pw", Paths: []string{"/data"},
		Retention: model.RetentionSettings{Policy: last(10), MinKeep: 1}})
	add(model.Job{Name: "db", Engine: engine.NameRestic, Repository: "/r/db", PasswordFile: "/pw", Paths: []string{"/data"},
		Retention: model.RetentionSettings{Policy: last(2), MinKeep: 1}})
	add(model.Job{Name: "logs", Engine: engine.NameRestic, Repository: "/r/logs", PasswordFile: "/pw", Paths: []string{"/data"},
		Retention: model.RetentionSettings{Policy: last(2), MinKeep: 1}})

	read := func(n int) func(context.Context, model.Job) ([]model.Snapshot, error) {
		return func(_ context.Context, j model.Job) ([]model.Snapshot, error) { return snapshots(j.Name, n), nil }
	}
	keepLast := func(n int) func(retention.Policy) (retention.Policy, error) {
		return func(p retention.Policy) (retention.Policy, error) { p.KeepLast = n; return p, p.Validate() }
	}
	for _, c := range []struct {
		name     string
		req      forget.Request
		force    bool
		conflict string // Plan refuses with a *store.ConflictError saying this
		deletes  int
		refused  bool   // the guardrails refuse the plan
		outcome  string // what Apply records
		run      bool   // Apply admitted a forget run
	}{
		{name: "a command job has no restic repository", req: forget.Request{Job: "dump"},
			conflict: "job dump uses the command engine: retention applies to restic repositories"},
		{name: "a job without a policy needs one given", req: forget.Request{Job: "bare"},
			conflict: "job bare has no retention policy: set one (holdfast job edit bare Change.Preset 30d) or give policy flags"},
		{name: "a policy given for a job without one", req: forget.Request{Job: "bare", Policy: keepLast(9), PolicyGiven: true},
			deletes: 1, outcome: model.PlanApplied, run: true},
		{name: "the stored policy deletes nothing", req: forget.Request{Job: "web"}, outcome: model.PlanNothing},
		{name: "the guardrail refuses deleting most", req: forget.Request{Job: "db"},
			deletes: 8, refused: true, outcome: model.PlanRefused},
		{name: "forced past the guardrail", req: forget.Request{Job: "logs"}, force: true,
			deletes: 8, refused: true, outcome: model.PlanApplied, run: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.req.At, c.req.Host, c.req.Read = now, "h", read(10)
			pl, err := forget.Plan(ctx, st, c.req)
			if c.conflict != "" {
				var conflict *store.ConflictError
				if !errors.As(err, &conflict) || err.Error() != c.conflict {
					t.Fatalf("Plan = %v, want the conflict %q", err, c.conflict)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pl.Plan.Deletable != c.deletes || (pl.Refusal != nil) != c.refused {
				t.Fatalf("plan deletes %d, refusal %v; want %d, refused %v", pl.Plan.Deletable, pl.Refusal, c.deletes, c.refused)
			}
			saved, err := forget.Apply(ctx, st, pl, "tester", c.force)
			if err != nil {
				t.Fatal(err)
			}
			if saved.Outcome != c.outcome || (saved.RunID != nil) != c.run || saved.Forced != (c.force && c.refused) ||
				saved.Actor != "tester" || !saved.PlanAt.Equal(now) || len(saved.DeleteIDs) != c.deletes {
				t.Fatalf("recorded %+v; want outcome %q, run %v", saved, c.outcome, c.run)
			}
			if c.outcome == model.PlanRefused && !strings.Contains(saved.Refusal, "more than the allowed 50%") {
				t.Errorf("refusal %q does not say why", saved.Refusal)
			}
		})
	}
}

func TestSnapshots(t *testing.T) {
	held, until, added := now, now.Add(time.Hour), int64(42)
	got := forget.Snapshots([]model.Snapshot{
		{ID: "a", Time: now, Host: "h", Tags: []string{"t"}, Paths: []string{"/p"}},
		{ID: "b", LegalHoldAt: &held, ImmutableUntil: &until, BytesAdded: &added},
	})
	if len(got) != 2 || got[0].ID != "a" || got[0].Host != "h" || got[0].LegalHold || got[0].Bytes != 0 ||
		!got[1].LegalHold || got[1].ImmutableUntil != &until || got[1].Bytes != 42 {
		t.Errorf("Snapshots = %+v", got)
	}
}
