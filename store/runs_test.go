package store_test

// The run transactions of runs.go, one by one, against the real PostgreSQL: each case starts
// from a bundle of its own (storetest.Setup: a fresh database and a host holding its current
// lease), brings a run to the state it needs through the store as a daemon would
// (storetest.Run), acts once, and checks what changed, or that nothing did, and the invariants.
// Times are checked by order on the database's clock, never against a wall-clock bound.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// claimedRun is a queued run whose first attempt the bundle's host claimed; startedRun one
// whose attempt it marked started too.
func claimedRun(t *testing.T, b *storetest.Bundle) model.Run {
	t.Helper()
	return storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &b.Lease})
}

func startedRun(t *testing.T, b *storetest.Bundle) model.Run {
	t.Helper()
	return storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &b.Lease, Started: true})
}

// otherHost takes the lease of a second host, h2.
func otherHost(t *testing.T, b *storetest.Bundle) model.Lease {
	t.Helper()
	return storetest.Lease(t, b.Store, &storetest.LeaseOpts{Host: "h2", Holder: "holder-h2"})
}

// readRun, readAttempts and readJob read a run, its attempts and a job as the store has them now.
func readRun(t *testing.T, b *storetest.Bundle, id uuid.UUID) model.Run {
	t.Helper()
	r, err := b.Store.RunGet(b.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readAttempts(t *testing.T, b *storetest.Bundle, id uuid.UUID) []model.Attempt {
	t.Helper()
	as, err := b.Store.AttemptList(b.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

func readJob(t *testing.T, b *storetest.Bundle, name string) model.Job {
	t.Helper()
	j, err := b.Store.JobGet(b.Ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// finishAs ends the run's attempt under w, and fails the test unless that applied.
func finishAs(t *testing.T, b *storetest.Bundle, w model.Lease, e model.Ending) {
	t.Helper()
	if ok, err := b.Store.AttemptFinish(b.Ctx, w, e); err != nil || !ok {
		t.Fatalf("finish run %s attempt %d %s: ok=%v err=%v", e.RunID, e.Attempt, e.Status, ok, err)
	}
}

// restartAs ends the run's attempt under w and opens the next, and fails the test unless it did.
func restartAs(t *testing.T, b *storetest.Bundle, w model.Lease, run model.Run, attempt int) {
	t.Helper()
	moved, paused, err := b.Store.AttemptRestart(b.Ctx, w, model.Restarting{RunID: run.ID, Attempt: attempt,
		Settlement: &ledger.Settlement{Release: true, Source: "it never ran"}})
	if err != nil || !moved || paused != "" {
		t.Fatalf("restart run %s after attempt %d: moved=%v paused=%q err=%v", run.ID, attempt, moved, paused, err)
	}
}

// claimAs claims the spawn of the run's attempt with its derived unit under w, and fails the test
// unless it did.
func claimAs(t *testing.T, b *storetest.Bundle, w model.Lease, run model.Run, attempt int) {
	t.Helper()
	if ok, blocked, err := b.Store.AttemptClaimSpawn(b.Ctx, w, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: attempt}, Unit: storetest.Unit(run, attempt), Boot: "boot-1"}); err != nil || !ok {
		t.Fatalf("claim run %s attempt %d on %s: ok=%v blocked=%q err=%v", run.ID, attempt, w.Host, ok, blocked, err)
	}
}

func requireNoViolations(t *testing.T, b *storetest.Bundle) {
	t.Helper()
	v, err := b.Store.InvariantViolations(b.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 0 {
		t.Fatalf("invariants violated:\n%s", strings.Join(v, "\n"))
	}
}

// requireUnchanged fails the test if the run or its attempts differ from before.
func requireUnchanged(t *testing.T, b *storetest.Bundle, what string, run model.Run, attempts []model.Attempt) {
	t.Helper()
	if got := readRun(t, b, run.ID); !reflect.DeepEqual(got, run) {
		t.Errorf("%s changed the run:\n got  %+v\n want %+v", what, got, run)
	}
	if got := readAttempts(t, b, run.ID); !reflect.DeepEqual(got, attempts) {
		t.Errorf("%s changed the attempts:\n got  %+v\n want %+v", what, got, attempts)
	}
}

// requireOrdered fails the test unless each time is at or after the one before it.
func requireOrdered(t *testing.T, what string, times ...*time.Time) {
	t.Helper()
	for i := 1; i < len(times); i++ {
		if times[i-1] == nil || times[i] == nil {
			t.Fatalf("%s: time %d or %d is not set: %v", what, i-1, i, times)
		}
		if times[i].Before(*times[i-1]) {
			t.Fatalf("%s: %s is before %s", what, times[i].Format(time.RFC3339Nano), times[i-1].Format(time.RFC3339Nano))
		}
	}
}

// staleWriters are writers that are not the current holder of the bundle's host's lease. Each
// returns its lease and makes it stale; then revive makes the bundle's lease the host's
// current one again, so a case can show that its write applies under that lease: the refusal
// was the fence's.
var staleWriters = []struct {
	name  string
	stale func(t *testing.T, b *storetest.Bundle) model.Lease
}{
	{"a lease another holder of the host took since", func(t *testing.T, b *storetest.Bundle) model.Lease {
		old := b.Lease
		b.Lease = storetest.Lease(t, b.Store, &storetest.LeaseOpts{Host: b.Host, Holder: "holder-2"})
		if b.Lease.Generation != old.Generation+1 {
			t.Fatalf("generations: %d then %d", old.Generation, b.Lease.Generation)
		}
		return old
	}},
	{"the same holder's lease of an earlier generation", func(t *testing.T, b *storetest.Bundle) model.Lease {
		old := b.Lease
		b.Lease = storetest.Lease(t, b.Store, &storetest.LeaseOpts{Host: b.Host, Holder: old.Holder})
		return old
	}},
	{"a lease that lapsed", func(t *testing.T, b *storetest.Bundle) model.Lease {
		if err := b.Store.LeaseRelease(b.Ctx, b.Lease); err != nil {
			t.Fatal(err)
		}
		return b.Lease
	}},
	{"a writer that names no lease, for a host that has one", func(t *testing.T, b *storetest.Bundle) model.Lease {
		return model.Lease{Host: b.Host}
	}},
}

// revive takes the bundle's host's lease anew; it adopts the host's live attempts.
func revive(t *testing.T, b *storetest.Bundle) {
	t.Helper()
	b.Lease = storetest.Lease(t, b.Store, &storetest.LeaseOpts{Host: b.Host, Holder: "holder-back"})
}

// A spawn claim records the unit, the host and the boot on a live attempt that has none, for the
// current holder of the host's lease, once; anything else changes nothing.
func TestClaimSpawn(t *testing.T) {
	type claim struct {
		w       model.Lease
		run     model.Run
		attempt int    // 0 is 1
		unit    string // "" is the one derived from the attempt
		limits  model.RunningLimits
	}
	tests := []struct {
		name        string
		arrange     func(t *testing.T, b *storetest.Bundle) claim
		wantClaimed bool
		wantBlocked string // a part of the reason given; "" wants none
	}{
		{
			name: "a queued run's first attempt",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, nil)}
			},
			wantClaimed: true,
		},
		{
			name: "a retry that waits for its time: the claim clears why it waits",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				failed := claimedRun(t, b)
				retry := uuid.New()
				finishAs(t, b, b.Lease, model.Ending{RunID: failed.ID, Attempt: 1, Status: model.StatusFailed, FailureClass: "transient",
					Reason: "network down", Retry: &model.Retry{ID: retry, Number: 1, Delay: time.Minute, Why: "transient failure"}})
				r := readRun(t, b, retry)
				if !strings.HasPrefix(r.WaitingReason, "transient failure, due at ") {
					t.Fatalf("retry waits with %q", r.WaitingReason)
				}
				return claim{w: b.Lease, run: r}
			},
			wantClaimed: true,
		},
		{
			name: "a job pinned to this host",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Host: b.Host}})}
			},
			wantClaimed: true,
		},
		{
			name: "an attempt claimed already by this host",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				return claim{w: b.Lease, run: claimedRun(t, b)}
			},
		},
		{
			name: "an attempt claimed already by another host",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				h2 := otherHost(t, b)
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &h2})}
			},
		},
		{
			name: "an attempt the run does not have",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, nil), attempt: 2}
			},
		},
		{
			name: "a run asked to stop",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				r := storetest.Run(t, b.Store, nil)
				if _, err := b.Store.RunRequestStop(b.Ctx, r.ID); err != nil {
					t.Fatal(err)
				}
				return claim{w: b.Lease, run: readRun(t, b, r.ID)}
			},
		},
		{
			name: "a run that ended before it spawned",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				r := storetest.Run(t, b.Store, nil)
				finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusFailed, FailureClass: "permanent", Reason: "bad"})
				return claim{w: b.Lease, run: readRun(t, b, r.ID)}
			},
		},
		{
			name: "a job pinned to another host",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Host: "h9"}})}
			},
		},
		{
			name: "a draining host",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				if _, err := b.Store.HostDrain(b.Ctx, b.Host, true); err != nil {
					t.Fatal(err)
				}
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, nil)}
			},
		},
		{
			name: "a backup while a prune holds its repository",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				storetest.Job(t, b.Store, &storetest.JobOpts{Name: "pruned", Repository: "/srv/shared"})
				storetest.Run(t, b.Store, &storetest.RunOpts{Job: "pruned", Kind: model.KindPrune, Claim: &b.Lease})
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Repository: "/srv/shared"}})}
			},
			wantBlocked: "waiting: repository busy: prune run ",
		},
		{
			name: "a prune while a backup holds its repository",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				storetest.Run(t, b.Store, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Repository: "/srv/shared"}, Claim: &b.Lease})
				storetest.Job(t, b.Store, &storetest.JobOpts{Name: "pruned", Repository: "/srv/shared"})
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, &storetest.RunOpts{Job: "pruned", Kind: model.KindPrune})}
			},
			wantBlocked: "waiting: repository busy: backup run ",
		},
		{
			name: "a prune on the job's pruning host while a backup of its repository runs",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				storetest.Run(t, b.Store, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Repository: "rest:http://ao/"}, Claim: &b.Lease})
				storetest.Job(t, b.Store, &storetest.JobOpts{Name: "pruned", Repository: "rest:http://ao/",
					Prune: model.PruneSettings{AppendOnly: true, Host: b.Lease.Host, Repository: "/srv/full"}})
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, &storetest.RunOpts{Job: "pruned", Kind: model.KindPrune})}
			},
			wantBlocked: "waiting: repository busy: backup run ",
		},
		{
			name: "a backup beside another backup of its repository",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				storetest.Run(t, b.Store, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Repository: "/srv/shared"}, Claim: &b.Lease})
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Repository: "/srv/shared"}})}
			},
			wantClaimed: true,
		},
		{
			name: "the global limit, filled by another host",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				h2 := otherHost(t, b)
				storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &h2})
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, nil), limits: model.RunningLimits{MaxRunning: 1}}
			},
			wantBlocked: "waiting: 1 runs hold a unit, the global limit is 1",
		},
		{
			name: "the host limit",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				claimedRun(t, b)
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, nil), limits: model.RunningLimits{MaxRunningHost: 1}}
			},
			wantBlocked: "waiting: 1 runs hold a unit on h1, the host limit is 1",
		},
		{
			name: "the host limit counts the host's units only",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				h2 := otherHost(t, b)
				storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &h2})
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, nil), limits: model.RunningLimits{MaxRunningHost: 1}}
			},
			wantClaimed: true,
		},
		{
			name: "a limit that an ended attempt no longer fills",
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				done := startedRun(t, b)
				finishAs(t, b, b.Lease, model.Ending{RunID: done.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "ok"})
				return claim{w: b.Lease, run: storetest.Run(t, b.Store, nil), limits: model.RunningLimits{MaxRunning: 1, MaxRunningHost: 1}}
			},
			wantClaimed: true,
		},
	}
	for _, sw := range staleWriters {
		tests = append(tests, struct {
			name        string
			arrange     func(t *testing.T, b *storetest.Bundle) claim
			wantClaimed bool
			wantBlocked string
		}{
			name: "under " + sw.name,
			arrange: func(t *testing.T, b *storetest.Bundle) claim {
				r := storetest.Run(t, b.Store, nil)
				return claim{w: sw.stale(t, b), run: r}
			},
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			c := tt.arrange(t, b)
			c.attempt = max(c.attempt, 1)
			if c.unit == "" {
				c.unit = storetest.Unit(c.run, c.attempt)
			}
			run, before := readRun(t, b, c.run.ID), readAttempts(t, b, c.run.ID)

			claimed, blocked, err := b.Store.AttemptClaimSpawn(b.Ctx, c.w, model.SpawnClaim{Attempt: model.AttemptRef{Run: c.run.ID, No: c.attempt}, Unit: c.unit, Boot: "boot-1", Limits: c.limits})
			if err != nil {
				t.Fatal(err)
			}
			if claimed != tt.wantClaimed {
				t.Fatalf("claimed = %v, want %v (blocked %q)", claimed, tt.wantClaimed, blocked)
			}
			if tt.wantBlocked == "" && blocked != "" || !strings.Contains(blocked, tt.wantBlocked) {
				t.Fatalf("blocked = %q, want %q", blocked, tt.wantBlocked)
			}
			if !claimed {
				requireUnchanged(t, b, "a refused claim", run, before)
				requireNoViolations(t, b)
				return
			}
			a := readAttempts(t, b, c.run.ID)[c.attempt-1]
			if a.Unit != c.unit || a.Host != c.w.Host || a.BootID != "boot-1" || a.ArmedFor != nil || a.StartedAt != nil || a.EndedAt != nil {
				t.Fatalf("claimed attempt: %+v; want unit %s on %s of boot-1, not armed, started or ended", a, c.unit, c.w.Host)
			}
			requireOrdered(t, "claim after creation", &a.CreatedAt, a.SpawnClaimedAt)
			if got := readRun(t, b, c.run.ID); got.Status != model.StatusQueued || got.StartedAt != nil || got.WaitingReason != "" {
				t.Fatalf("run after its claim: %s started %v waiting %q; want queued, not started, waiting for nothing",
					got.Status, got.StartedAt, got.WaitingReason)
			}
			// Claimed once: the same claim again is refused, and changes nothing.
			again, before := readRun(t, b, c.run.ID), readAttempts(t, b, c.run.ID)
			if ok, blocked, err := b.Store.AttemptClaimSpawn(b.Ctx, c.w, model.SpawnClaim{Attempt: model.AttemptRef{Run: c.run.ID, No: c.attempt}, Unit: c.unit, Boot: "boot-2"}); err != nil || ok || blocked != "" {
				t.Fatalf("second claim: ok=%v blocked=%q err=%v, want refused", ok, blocked, err)
			}
			requireUnchanged(t, b, "a second claim", again, before)
			requireNoViolations(t, b)
		})
	}

	// A claim a stale writer was refused is the current holder's to make.
	for _, sw := range staleWriters {
		t.Run("the current lease after "+sw.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			r := storetest.Run(t, b.Store, nil)
			stale := sw.stale(t, b)
			if ok, _, err := b.Store.AttemptClaimSpawn(b.Ctx, stale, model.SpawnClaim{Attempt: model.AttemptRef{Run: r.ID, No: 1}, Unit: storetest.Unit(r, 1)}); err != nil || ok {
				t.Fatalf("stale claim: %v %v", ok, err)
			}
			revive(t, b)
			claimAs(t, b, b.Lease, r, 1)
			if a := readAttempts(t, b, r.ID)[0]; a.Host != b.Host || a.Unit != storetest.Unit(r, 1) {
				t.Fatalf("attempt after the current holder's claim: %+v", a)
			}
			requireNoViolations(t, b)
		})
	}
}

// A claim refused because the attempt is claimed already is not held back by a limit, even when
// the attempt's own unit is what fills it. Two daemons that share the database list the same
// unspawned run of an any-host job and both claim it: the loser is told the global limit holds
// the run back, and records that as the run's waiting reason (spawn/spawn.go calls
// RunSetWaiting with any reason it is given), which run show prints on a run that holds its unit
// and, once started, runs. The host limit is computed the same way (its subtest shows it for a
// second claim by the same host, a narrower race).
func TestClaimSpawnOfAClaimedAttemptNamesNoLimit(t *testing.T) {
	for name, limits := range map[string]model.RunningLimits{"global limit": {MaxRunning: 1}, "host limit": {MaxRunningHost: 1}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			r := storetest.Run(t, b.Store, nil)
			unit := storetest.Unit(r, 1)
			if ok, blocked, err := b.Store.AttemptClaimSpawn(b.Ctx, b.Lease, model.SpawnClaim{Attempt: model.AttemptRef{Run: r.ID, No: 1}, Unit: unit, Limits: limits}); err != nil || !ok || blocked != "" {
				t.Fatalf("first claim: ok=%v blocked=%q err=%v", ok, blocked, err)
			}
			w := b.Lease
			if limits.MaxRunning > 0 {
				w = otherHost(t, b)
			}
			ok, blocked, err := b.Store.AttemptClaimSpawn(b.Ctx, w, model.SpawnClaim{Attempt: model.AttemptRef{Run: r.ID, No: 1}, Unit: unit, Limits: limits})
			if err != nil || ok {
				t.Fatalf("second claim: ok=%v err=%v, want refused", ok, err)
			}
			if blocked != "" {
				t.Errorf("second claim of a claimed attempt, limits %+v: blocked = %q, want none: no limit holds this run back, it holds the place itself", limits, blocked)
				// What the losing daemon does with it, and what the run then shows once started.
				if err := b.Store.RunSetWaiting(b.Ctx, store.RunSetWaitingParams{RunID: r.ID, Reason: blocked}); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Store.AttemptMarkStarted(b.Ctx, b.Lease, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, At: time.Time{}}); err != nil {
				t.Fatal(err)
			}
			if got := readRun(t, b, r.ID); got.Status != model.StatusRunning || got.WaitingReason != "" {
				t.Errorf("run after its start: %s, waiting %q; want running, waiting for nothing", got.Status, got.WaitingReason)
			}
		})
	}
}

// An armed claim records when the timer starts the unit; the run stays queued until then.
func TestClaimSpawnArmed(t *testing.T) {
	b := storetest.Setup(t)
	r := storetest.Run(t, b.Store, nil)
	at := b.Now(t).Add(10 * time.Second).Truncate(time.Microsecond)
	ok, blocked, err := b.Store.AttemptClaimSpawn(b.Ctx, b.Lease, model.SpawnClaim{Attempt: model.AttemptRef{Run: r.ID, No: 1}, Unit: storetest.Unit(r, 1), Boot: "boot-1", ArmedFor: &at})
	if err != nil || !ok || blocked != "" {
		t.Fatalf("armed claim: ok=%v blocked=%q err=%v", ok, blocked, err)
	}
	a := readAttempts(t, b, r.ID)[0]
	if a.ArmedFor == nil || !a.ArmedFor.Equal(at) || a.StartedAt != nil {
		t.Fatalf("armed attempt: armed for %v, started %v; want armed for %v, not started", a.ArmedFor, a.StartedAt, at)
	}
	if got := readRun(t, b, r.ID); got.Status != model.StatusQueued {
		t.Fatalf("armed run is %s, want queued", got.Status)
	}
	requireNoViolations(t, b)
}

// AttemptMarkStarted makes the run running and stamps the attempt's start once, on the database's clock
// unless a time is given, for the current holder of the attempt's host's lease.
func TestMarkStarted(t *testing.T) {
	given := time.Date(2001, 2, 3, 4, 5, 6, 789012000, time.UTC)
	tests := []struct {
		name    string
		arrange func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Run)
		at      time.Time
		want    bool // the attempt becomes started by this call
	}{
		{
			name:    "a claimed attempt, on the database's clock",
			arrange: func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Run) { return b.Lease, claimedRun(t, b) },
			want:    true,
		},
		{
			name:    "a claimed attempt, at the time given",
			arrange: func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Run) { return b.Lease, claimedRun(t, b) },
			at:      given,
			want:    true,
		},
		{
			name:    "an attempt started already: its first start stays",
			arrange: func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Run) { return b.Lease, startedRun(t, b) },
			at:      given,
		},
		{
			name: "an attempt that ended",
			arrange: func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Run) {
				r := claimedRun(t, b)
				finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusFailed, FailureClass: "permanent", Reason: "x"})
				return b.Lease, r
			},
		},
		{
			name: "another host's attempt",
			arrange: func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Run) {
				h2 := otherHost(t, b)
				return b.Lease, storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &h2})
			},
		},
	}
	for _, sw := range staleWriters {
		tests = append(tests, struct {
			name    string
			arrange func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Run)
			at      time.Time
			want    bool
		}{
			name: "under " + sw.name,
			arrange: func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Run) {
				r := claimedRun(t, b)
				return sw.stale(t, b), r
			},
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			w, r := tt.arrange(t, b)
			run, before := readRun(t, b, r.ID), readAttempts(t, b, r.ID)
			dbBefore := b.Now(t)
			if err := b.Store.AttemptMarkStarted(b.Ctx, w, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, At: tt.at}); err != nil {
				t.Fatal(err)
			}
			dbAfter := b.Now(t)
			if !tt.want {
				requireUnchanged(t, b, "MarkStarted", run, before)
				requireNoViolations(t, b)
				return
			}
			got, a := readRun(t, b, r.ID), readAttempts(t, b, r.ID)[0]
			if got.Status != model.StatusRunning {
				t.Fatalf("run is %s, want running", got.Status)
			}
			if a.StartedAt == nil || got.StartedAt == nil || !a.StartedAt.Equal(*got.StartedAt) {
				t.Fatalf("started: attempt %v, run %v; want the same time", a.StartedAt, got.StartedAt)
			}
			if tt.at.IsZero() {
				requireOrdered(t, "claim, start, on the database's clock", a.SpawnClaimedAt, &dbBefore, a.StartedAt, &dbAfter)
			} else if !a.StartedAt.Equal(tt.at) {
				t.Fatalf("started at %v, want %v as given", a.StartedAt, tt.at)
			}
			// Once: a second start, at another time, changes nothing.
			run, before = got, readAttempts(t, b, r.ID)
			if err := b.Store.AttemptMarkStarted(b.Ctx, w, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, At: given.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			requireUnchanged(t, b, "a second MarkStarted", run, before)
			requireNoViolations(t, b)
		})
	}
}

// A journal batch applies once, from the cursor it was read from: the projection's counters
// add up, its first messages stay the first, its newest figures win.
func TestApplyJournal(t *testing.T) {
	t.Run("a cursor moving back is refused", func(t *testing.T) {
		t.Parallel()
		b := storetest.Setup(t)
		r := startedRun(t, b)
		c1 := journal.Cursor{Offset: 100, LastSeq: 3, LastHash: "h3"}
		if ok, err := b.Store.AttemptApplyJournal(b.Ctx, b.Lease, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, From: journal.Cursor{}, To: c1, Delta: model.JournalDelta{}}); err != nil || !ok {
			t.Fatalf("first batch: %v %v", ok, err)
		}
		before := readAttempts(t, b, r.ID)
		for _, back := range []journal.Cursor{{Offset: 50, LastSeq: 3, LastHash: "x"}, {Offset: 100, LastSeq: 2, LastHash: "x"}} {
			ok, err := b.Store.AttemptApplyJournal(b.Ctx, b.Lease, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, From: c1, To: back, Delta: model.JournalDelta{ItemErrors: 1}})
			if ok || err == nil || !strings.Contains(err.Error(), "the cursor would move back") {
				t.Fatalf("%+v -> %+v: ok=%v err=%v, want refused", c1, back, ok, err)
			}
		}
		if got := readAttempts(t, b, r.ID); !reflect.DeepEqual(got, before) {
			t.Fatalf("a refused batch changed the attempt: %+v", got[0])
		}
	})
	t.Run("batches in order", func(t *testing.T) {
		t.Parallel()
		b := storetest.Setup(t)
		r := startedRun(t, b)
		c1 := journal.Cursor{Offset: 100, LastSeq: 3, LastHash: "h3"}
		c2 := journal.Cursor{Offset: 250, LastSeq: 7, LastHash: "h7"}
		c3 := journal.Cursor{Offset: 300, LastSeq: 8, LastHash: "h8"}
		seen := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		p1 := model.Progress{PercentDone: 0.25, FilesDone: 10, TotalFiles: 40, BytesDone: 1000, TotalBytes: 4000}
		p3 := model.Progress{PercentDone: 1, FilesDone: 40, TotalFiles: 40, BytesDone: 4000, TotalBytes: 4000}
		apply := func(from, to journal.Cursor, d model.JournalDelta, want bool) model.Attempt {
			t.Helper()
			ok, err := b.Store.AttemptApplyJournal(b.Ctx, b.Lease, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, From: from, To: to, Delta: d})
			if err != nil || ok != want {
				t.Fatalf("apply %+v -> %+v: ok=%v err=%v, want %v", from, to, ok, err, want)
			}
			return readAttempts(t, b, r.ID)[0]
		}
		a := apply(journal.Cursor{}, c1, model.JournalDelta{LastEventAt: &seen, Progress: &p1, ItemErrors: 2, FirstItemError: "/a: denied"}, true)
		if a.Cursor != c1 || a.ItemErrors != 2 || a.FirstItemError != "/a: denied" || a.Progress == nil || *a.Progress != p1 ||
			a.LastEventAt == nil || !a.LastEventAt.Equal(seen) || a.Fatal != "" || a.Summary != nil {
			t.Fatalf("after the first batch: %+v", a)
		}
		// The same batch again, and any batch read from the old cursor, are refused.
		first := readAttempts(t, b, r.ID)
		apply(journal.Cursor{}, c1, model.JournalDelta{ItemErrors: 2, FirstItemError: "/a: denied"}, false)
		apply(journal.Cursor{}, c2, model.JournalDelta{ItemErrors: 9, Fatal: "late"}, false)
		if got := readAttempts(t, b, r.ID); !reflect.DeepEqual(got, first) {
			t.Fatalf("a batch from an old cursor changed the attempt: %+v", got[0])
		}
		a = apply(c1, c2, model.JournalDelta{ItemErrors: 3, FirstItemError: "/b: denied", Fatal: "repository locked",
			Summary: json.RawMessage(`{"files_new":3,"snapshot_id":"abc"}`)}, true)
		if a.Cursor != c2 || a.ItemErrors != 5 || a.FirstItemError != "/a: denied" || a.Fatal != "repository locked" {
			t.Fatalf("after the second batch: cursor %+v, %d item errors, first %q, fatal %q; want %+v, 5, the first batch's, the second's",
				a.Cursor, a.ItemErrors, a.FirstItemError, a.Fatal, c2)
		}
		if a.Progress == nil || *a.Progress != p1 || a.LastEventAt == nil || !a.LastEventAt.Equal(seen) {
			t.Fatalf("a batch without progress or events lost the earlier ones: %+v %v", a.Progress, a.LastEventAt)
		}
		requireJSON(t, a.Summary, `{"files_new":3,"snapshot_id":"abc"}`)
		a = apply(c2, c3, model.JournalDelta{Progress: &p3, Fatal: "another", Summary: json.RawMessage(`{"snapshot_id":"def"}`)}, true)
		if a.Cursor != c3 || a.ItemErrors != 5 || a.Fatal != "repository locked" || a.Progress == nil || *a.Progress != p3 {
			t.Fatalf("after the third batch: %+v", a)
		}
		requireJSON(t, a.Summary, `{"snapshot_id":"def"}`)
		if got := readRun(t, b, r.ID); got.Status != model.StatusRunning {
			t.Fatalf("run is %s, want running", got.Status)
		}
		requireNoViolations(t, b)
	})

	type apply struct {
		w       model.Lease
		run     model.Run
		attempt int // 0 is 1
		from    journal.Cursor
	}
	tests := []struct {
		name    string
		arrange func(t *testing.T, b *storetest.Bundle) apply
	}{
		{"a batch read from an old cursor", func(t *testing.T, b *storetest.Bundle) apply {
			r := startedRun(t, b)
			if ok, err := b.Store.AttemptApplyJournal(b.Ctx, b.Lease, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, From: journal.Cursor{}, To: journal.Cursor{Offset: 10, LastSeq: 1, LastHash: "h1"},
				Delta: model.JournalDelta{ItemErrors: 1}}); err != nil || !ok {
				t.Fatalf("first batch: %v %v", ok, err)
			}
			return apply{w: b.Lease, run: r}
		}},
		{"a quarantined journal", func(t *testing.T, b *storetest.Bundle) apply {
			r := startedRun(t, b)
			if err := b.Store.AttemptQuarantine(b.Ctx, b.Lease, store.AttemptQuarantineParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, Reason: "unreadable"}); err != nil {
				t.Fatal(err)
			}
			return apply{w: b.Lease, run: r}
		}},
		{"an attempt that ended", func(t *testing.T, b *storetest.Bundle) apply {
			r := startedRun(t, b)
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "ok"})
			return apply{w: b.Lease, run: r}
		}},
		{"an attempt the run does not have", func(t *testing.T, b *storetest.Bundle) apply {
			return apply{w: b.Lease, run: startedRun(t, b), attempt: 2}
		}},
		{"another host's attempt", func(t *testing.T, b *storetest.Bundle) apply {
			h2 := otherHost(t, b)
			return apply{w: b.Lease, run: storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &h2, Started: true})}
		}},
	}
	for _, sw := range staleWriters {
		tests = append(tests, struct {
			name    string
			arrange func(t *testing.T, b *storetest.Bundle) apply
		}{"under " + sw.name, func(t *testing.T, b *storetest.Bundle) apply {
			r := startedRun(t, b)
			return apply{w: sw.stale(t, b), run: r}
		}})
	}
	for _, tt := range tests {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			c := tt.arrange(t, b)
			run, before := readRun(t, b, c.run.ID), readAttempts(t, b, c.run.ID)
			ok, err := b.Store.AttemptApplyJournal(b.Ctx, c.w, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: c.run.ID, No: max(c.attempt, 1)}, From: c.from,
				To: journal.Cursor{Offset: 500, LastSeq: 20, LastHash: "h20"}, Delta: model.JournalDelta{ItemErrors: 7, Fatal: "boom"}})
			if err != nil || ok {
				t.Fatalf("ok=%v err=%v, want refused", ok, err)
			}
			requireUnchanged(t, b, "a refused batch", run, before)
			requireNoViolations(t, b)
		})
	}
	for _, sw := range staleWriters {
		t.Run("the current lease after "+sw.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			r := startedRun(t, b)
			to := journal.Cursor{Offset: 10, LastSeq: 1, LastHash: "h1"}
			if ok, err := b.Store.AttemptApplyJournal(b.Ctx, sw.stale(t, b), store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, From: journal.Cursor{}, To: to, Delta: model.JournalDelta{ItemErrors: 1}}); err != nil || ok {
				t.Fatalf("stale batch: %v %v", ok, err)
			}
			revive(t, b)
			if ok, err := b.Store.AttemptApplyJournal(b.Ctx, b.Lease, store.AttemptApplyJournalParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, From: journal.Cursor{}, To: to, Delta: model.JournalDelta{ItemErrors: 1}}); err != nil || !ok {
				t.Fatalf("current holder's batch: %v %v", ok, err)
			}
			if a := readAttempts(t, b, r.ID)[0]; a.Cursor != to || a.ItemErrors != 1 {
				t.Fatalf("attempt after the current holder's batch: %+v", a)
			}
		})
	}
}

// requireJSON compares JSON by value: jsonb keeps neither spacing nor key order.
func requireJSON(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("summary %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("summary = %s, want %s", got, want)
	}
}

// A quarantine stops the journal's projection once, with its first reason; the run goes on.
func TestQuarantine(t *testing.T) {
	t.Run("the first reason stays", func(t *testing.T) {
		t.Parallel()
		b := storetest.Setup(t)
		r := startedRun(t, b)
		if err := b.Store.AttemptQuarantine(b.Ctx, b.Lease, store.AttemptQuarantineParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, Reason: "line 3: not JSON"}); err != nil {
			t.Fatal(err)
		}
		a := readAttempts(t, b, r.ID)[0]
		if a.QuarantinedAt == nil || a.QuarantineReason != "line 3: not JSON" || a.EndedAt != nil {
			t.Fatalf("quarantined attempt: %+v", a)
		}
		requireOrdered(t, "start, then quarantine", a.StartedAt, a.QuarantinedAt)
		if got := readRun(t, b, r.ID); got.Status != model.StatusRunning {
			t.Fatalf("a quarantine ended the run: %s", got.Status)
		}
		run, before := readRun(t, b, r.ID), readAttempts(t, b, r.ID)
		if err := b.Store.AttemptQuarantine(b.Ctx, b.Lease, store.AttemptQuarantineParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, Reason: "another reason"}); err != nil {
			t.Fatal(err)
		}
		requireUnchanged(t, b, "a second quarantine", run, before)
		requireNoViolations(t, b)
	})
	t.Run("another host's attempt", func(t *testing.T) {
		t.Parallel()
		b := storetest.Setup(t)
		h2 := otherHost(t, b)
		r := storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &h2, Started: true})
		run, before := readRun(t, b, r.ID), readAttempts(t, b, r.ID)
		if err := b.Store.AttemptQuarantine(b.Ctx, b.Lease, store.AttemptQuarantineParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, Reason: "not mine"}); err != nil {
			t.Fatal(err)
		}
		requireUnchanged(t, b, "another host's quarantine", run, before)
	})
	for _, sw := range staleWriters {
		t.Run("under "+sw.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			r := startedRun(t, b)
			stale := sw.stale(t, b)
			run, before := readRun(t, b, r.ID), readAttempts(t, b, r.ID)
			if err := b.Store.AttemptQuarantine(b.Ctx, stale, store.AttemptQuarantineParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, Reason: "stale"}); err != nil {
				t.Fatal(err)
			}
			requireUnchanged(t, b, "a stale quarantine", run, before)
			revive(t, b)
			if err := b.Store.AttemptQuarantine(b.Ctx, b.Lease, store.AttemptQuarantineParams{Ref: model.AttemptRef{Run: r.ID, No: 1}, Reason: "current"}); err != nil {
				t.Fatal(err)
			}
			if a := readAttempts(t, b, r.ID)[0]; a.QuarantinedAt == nil || a.QuarantineReason != "current" {
				t.Fatalf("attempt after the current holder's quarantine: %+v", a)
			}
			requireNoViolations(t, b)
		})
	}
}

// AttemptFinish ends the attempt and its run once, with the status, the reason and the figures given,
// stamped on the database's clock, and updates the job's last outcome; the hold is settled or
// deferred in the same transaction.
func TestFinish(t *testing.T) {
	int64p := func(n int64) *int64 { return &n }
	tests := []struct {
		name   string
		ending model.Ending // without run and attempt
	}{
		{"succeeded", model.Ending{Status: model.StatusSucceeded, Reason: "backed up", ServiceResult: "success", ExitCode: "exited",
			ExitStatus: "0", SnapshotID: "0123abcd", BytesAdded: int64p(1000), BytesProcessed: int64p(5000), FilesProcessed: int64p(12),
			Settlement: &ledger.Settlement{Bytes: 1000, Source: "restic's summary"}}},
		{"partial", model.Ending{Status: model.StatusPartial, Reason: "2 files could not be read", ServiceResult: "exit-code",
			ExitCode: "exited", ExitStatus: "3", FilesSkipped: 2, Settlement: &ledger.Settlement{Bytes: 10, Source: "restic's summary"}}},
		{"failed, permanent", model.Ending{Status: model.StatusFailed, FailureClass: "permanent", Reason: "wrong password",
			ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "1", Settlement: &ledger.Settlement{Release: true, Source: "added nothing"}}},
		{"failed, transient, its figure unknown", model.Ending{Status: model.StatusFailed, FailureClass: "transient", Reason: "network down"}},
		{"stopped", model.Ending{Status: model.StatusStopped, Reason: "stopped by the operator", ServiceResult: "exit-code",
			ExitCode: "killed", ExitStatus: "INT"}},
		{"paused", model.Ending{Status: model.StatusPaused, PausedReason: ledger.PausedRunCeiling, Reason: "paused (run_ceiling)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			r := startedRun(t, b)
			e := tt.ending
			e.RunID, e.Attempt = r.ID, 1
			dbBefore := b.Now(t)
			finishAs(t, b, b.Lease, e)
			dbAfter := b.Now(t)

			got, a := readRun(t, b, r.ID), readAttempts(t, b, r.ID)[0]
			if got.Status != e.Status || got.Reason != e.Reason || got.FailureClass != e.FailureClass || got.PausedReason != e.PausedReason {
				t.Fatalf("run: %s %q class %q paused %q; want %s %q class %q paused %q", got.Status, got.Reason, got.FailureClass,
					got.PausedReason, e.Status, e.Reason, e.FailureClass, e.PausedReason)
			}
			if got.SnapshotID != e.SnapshotID || !reflect.DeepEqual(got.BytesAdded, e.BytesAdded) || !reflect.DeepEqual(got.BytesProcessed, e.BytesProcessed) ||
				!reflect.DeepEqual(got.FilesProcessed, e.FilesProcessed) || got.FilesSkipped != e.FilesSkipped {
				t.Fatalf("run's figures: %+v, want those of %+v (unknown stays NULL)", got, e)
			}
			if a.EndedAt == nil || got.FinishedAt == nil || !a.EndedAt.Equal(*got.FinishedAt) {
				t.Fatalf("ended: attempt %v, run %v; want one time", a.EndedAt, got.FinishedAt)
			}
			requireOrdered(t, "start, then the end on the database's clock", a.StartedAt, &dbBefore, got.FinishedAt, &dbAfter)
			if a.ServiceResult != e.ServiceResult || a.ExitCode != e.ExitCode || a.ExitStatus != e.ExitStatus {
				t.Fatalf("attempt's marker fields: %q %q %q", a.ServiceResult, a.ExitCode, a.ExitStatus)
			}
			if j := readJob(t, b, r.JobName); j.LastOutcome != e.Status || j.LastRunID == nil || *j.LastRunID != r.ID {
				t.Fatalf("job's last outcome %q of run %v, want %s of %s", j.LastOutcome, j.LastRunID, e.Status, r.ID)
			}
			if a.HoldBytes == nil {
				t.Fatal("a restic backup's attempt had no hold")
			}
			switch st := e.Settlement; {
			case st == nil:
				if a.SettleDeferred == "" || got.HeldBytes != *a.HoldBytes || got.SettledBytes != 0 {
					t.Fatalf("an ending without a settlement: deferred %q, held %d of %d, settled %d; want the hold open with a reason",
						a.SettleDeferred, got.HeldBytes, *a.HoldBytes, got.SettledBytes)
				}
			case st.Release:
				if got.HeldBytes != 0 || got.SettledBytes != 0 || a.Settlement != st.Source {
					t.Fatalf("a released hold: held %d, settled %d, settlement %q", got.HeldBytes, got.SettledBytes, a.Settlement)
				}
			default:
				if got.HeldBytes != 0 || got.SettledBytes != st.Bytes || a.Settlement != st.Source || a.SettleDeferred != "" {
					t.Fatalf("a settled hold: held %d, settled %d, settlement %q, deferred %q", got.HeldBytes, got.SettledBytes, a.Settlement, a.SettleDeferred)
				}
			}
			requireNoViolations(t, b)

			// Once: a second ending, whatever it says, changes nothing.
			run, before := got, readAttempts(t, b, r.ID)
			ok, err := b.Store.AttemptFinish(b.Ctx, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusFailed,
				FailureClass: "permanent", Reason: "a later pass", Settlement: &ledger.Settlement{Release: true, Source: "late"}})
			if err != nil || ok {
				t.Fatalf("second finish: ok=%v err=%v, want false", ok, err)
			}
			requireUnchanged(t, b, "a second Finish", run, before)
			if j := readJob(t, b, r.JobName); j.LastOutcome != e.Status {
				t.Fatalf("a second Finish changed the job's last outcome to %q", j.LastOutcome)
			}
			requireNoViolations(t, b)
		})
	}

	t.Run("at the time given", func(t *testing.T) {
		t.Parallel()
		b := storetest.Setup(t)
		r := startedRun(t, b)
		at := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
		finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, At: at, Status: model.StatusSucceeded, Reason: "ok"})
		got, a := readRun(t, b, r.ID), readAttempts(t, b, r.ID)[0]
		if got.FinishedAt == nil || !got.FinishedAt.Equal(at) || a.EndedAt == nil || !a.EndedAt.Equal(at) {
			t.Fatalf("finished %v, ended %v; want %v", got.FinishedAt, a.EndedAt, at)
		}
	})

	t.Run("a prune leaves its job's last outcome", func(t *testing.T) {
		t.Parallel()
		b := storetest.Setup(t)
		backup := startedRun(t, b)
		finishAs(t, b, b.Lease, model.Ending{RunID: backup.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "ok",
			Settlement: &ledger.Settlement{Bytes: 1, Source: "summary"}})
		prune := storetest.Run(t, b.Store, &storetest.RunOpts{Job: backup.JobName, Kind: model.KindPrune, Claim: &b.Lease, Started: true})
		finishAs(t, b, b.Lease, model.Ending{RunID: prune.ID, Attempt: 1, Status: model.StatusFailed, FailureClass: "permanent", Reason: "locked"})
		if got := readRun(t, b, prune.ID); got.Status != model.StatusFailed {
			t.Fatalf("prune is %s", got.Status)
		}
		if j := readJob(t, b, backup.JobName); j.LastOutcome != model.StatusSucceeded || j.LastRunID == nil || *j.LastRunID != backup.ID {
			t.Fatalf("job's last outcome %q of %v, want the backup's, succeeded", j.LastOutcome, j.LastRunID)
		}
		requireNoViolations(t, b)
	})

	refusals := []struct {
		name    string
		arrange func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Ending)
		wantErr bool
	}{
		{"a status that is not final: queued", func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Ending) {
			return b.Lease, model.Ending{RunID: startedRun(t, b).ID, Attempt: 1, Status: model.StatusQueued}
		}, true},
		{"a status that is not final: running", func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Ending) {
			return b.Lease, model.Ending{RunID: startedRun(t, b).ID, Attempt: 1, Status: model.StatusRunning}
		}, true},
		{"an attempt a restart ended", func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Ending) {
			r := startedRun(t, b)
			restartAs(t, b, b.Lease, r, 1)
			return b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusSucceeded}
		}, false},
		{"an attempt the run does not have", func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Ending) {
			return b.Lease, model.Ending{RunID: startedRun(t, b).ID, Attempt: 2, Status: model.StatusSucceeded}
		}, false},
		{"another host's attempt", func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Ending) {
			h2 := otherHost(t, b)
			r := storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &h2, Started: true})
			return b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusSucceeded}
		}, false},
		{"with a retry that is not admitted", func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Ending) {
			r := startedRun(t, b)
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusFailed, FailureClass: "permanent", Reason: "first"})
			return b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusFailed, FailureClass: "transient", Reason: "second",
				Retry: &model.Retry{ID: uuid.New(), Number: 1, Delay: time.Minute, Why: "retry"}}
		}, false},
	}
	for _, sw := range staleWriters {
		refusals = append(refusals, struct {
			name    string
			arrange func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Ending)
			wantErr bool
		}{"under " + sw.name, func(t *testing.T, b *storetest.Bundle) (model.Lease, model.Ending) {
			r := startedRun(t, b)
			return sw.stale(t, b), model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "stale"}
		}, false})
	}
	for _, tt := range refusals {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			w, e := tt.arrange(t, b)
			run, before := readRun(t, b, e.RunID), readAttempts(t, b, e.RunID)
			job := readJob(t, b, run.JobName)
			ok, err := b.Store.AttemptFinish(b.Ctx, w, e)
			if ok || (err != nil) != tt.wantErr {
				t.Fatalf("ok=%v err=%v, want refused (with an error: %v)", ok, err, tt.wantErr)
			}
			requireUnchanged(t, b, "a refused Finish", run, before)
			if got := readJob(t, b, run.JobName); !reflect.DeepEqual(got, job) {
				t.Fatalf("a refused Finish changed the job: %+v", got)
			}
			if e.Retry != nil {
				if _, err := b.Store.RunGet(b.Ctx, e.Retry.ID); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("the retry of a refused Finish: %v, want not found", err)
				}
			}
			requireNoViolations(t, b)
		})
	}
	for _, sw := range staleWriters {
		t.Run("the current lease after "+sw.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			r := startedRun(t, b)
			e := model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "ok"}
			if ok, err := b.Store.AttemptFinish(b.Ctx, sw.stale(t, b), e); err != nil || ok {
				t.Fatalf("stale finish: %v %v", ok, err)
			}
			revive(t, b)
			finishAs(t, b, b.Lease, e)
			if got := readRun(t, b, r.ID); got.Status != model.StatusSucceeded {
				t.Fatalf("run after the current holder's finish: %s", got.Status)
			}
			requireNoViolations(t, b)
		})
	}
}

// A failure's retry is admitted with its ending: due at the ending plus its delay on the
// database's clock, named in the failed run's reason, and waiting with its own.
func TestFinishAdmitsTheRetry(t *testing.T) {
	b := storetest.Setup(t)
	r := startedRun(t, b)
	retry := model.Retry{ID: uuid.New(), Number: 1, Delay: 90 * time.Second, Why: "transient failure"}
	finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusFailed, FailureClass: "transient",
		Reason: "network down", Retry: &retry})
	failed := readRun(t, b, r.ID)
	if failed.FinishedAt == nil {
		t.Fatal("failed run has no end")
	}
	due := failed.FinishedAt.Add(retry.Delay)
	dueText := due.UTC().Format(time.RFC3339)
	if want := "network down; retry 1 as run " + retry.ID.String() + " at " + dueText; failed.Reason != want {
		t.Fatalf("failed run's reason %q, want %q", failed.Reason, want)
	}
	if failed.RetriedBy == nil || *failed.RetriedBy != retry.ID {
		t.Fatalf("failed run retried by %v, want %s", failed.RetriedBy, retry.ID)
	}
	next := readRun(t, b, retry.ID)
	if next.Status != model.StatusQueued || next.Trigger != model.TriggerRetry || next.RetryOf == nil || *next.RetryOf != r.ID ||
		next.RetryNumber != 1 || next.JobName != r.JobName {
		t.Fatalf("retry run: %+v", next)
	}
	if next.NotBefore == nil || !next.NotBefore.Equal(due) {
		t.Fatalf("retry not before %v, want the failure's end plus %s: %v", next.NotBefore, retry.Delay, due)
	}
	if next.WaitingReason != "transient failure, due at "+dueText {
		t.Fatalf("retry waits with %q", next.WaitingReason)
	}
	// The job has no history and no ceiling: the retry's hold is sized from its paths as it starts.
	if as := readAttempts(t, b, retry.ID); len(as) != 1 || as[0].EndedAt != nil || as[0].Unit != "" || as[0].HoldBytes != nil {
		t.Fatalf("retry's attempts: %+v, want one live, unclaimed, holding nothing yet", as)
	}
	if j := readJob(t, b, r.JobName); j.LastOutcome != model.StatusFailed || j.LastRunID == nil || *j.LastRunID != retry.ID {
		t.Fatalf("job: last outcome %q, last run %v; want failed, and the retry as its last run", j.LastOutcome, j.LastRunID)
	}
	requireNoViolations(t, b)
}

// A restart ends the live attempt with its marker fields, settles its hold and opens the next,
// numbered one more, unclaimed, with a hold of its own; the run is queued again and keeps its
// first start. It applies once, for the current lease, and never after a stop request.
func TestRestart(t *testing.T) {
	type restart struct {
		w   model.Lease
		run model.Run
		r   model.Restarting
	}
	released := &ledger.Settlement{Release: true, Source: "it never ran"}
	marked := func(run model.Run, attempt int) model.Restarting {
		return model.Restarting{RunID: run.ID, Attempt: attempt, ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "130",
			Settlement: &ledger.Settlement{Bytes: 100, Source: "measured growth"}}
	}
	applied := []struct {
		name    string
		arrange func(t *testing.T, b *storetest.Bundle) restart
	}{
		{"a started attempt", func(t *testing.T, b *storetest.Bundle) restart {
			r := startedRun(t, b)
			return restart{w: b.Lease, run: r, r: marked(r, 1)}
		}},
		{"a claimed attempt that never started", func(t *testing.T, b *storetest.Bundle) restart {
			r := claimedRun(t, b)
			return restart{w: b.Lease, run: r, r: model.Restarting{RunID: r.ID, Attempt: 1, Settlement: released}}
		}},
		{"at the time given", func(t *testing.T, b *storetest.Bundle) restart {
			r := startedRun(t, b)
			rs := marked(r, 1)
			rs.At = b.Now(t).Truncate(time.Microsecond)
			return restart{w: b.Lease, run: r, r: rs}
		}},
		{"the second attempt", func(t *testing.T, b *storetest.Bundle) restart {
			r := startedRun(t, b)
			restartAs(t, b, b.Lease, r, 1)
			claimAs(t, b, b.Lease, r, 2)
			if err := b.Store.AttemptMarkStarted(b.Ctx, b.Lease, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: r.ID, No: 2}, At: time.Time{}}); err != nil {
				t.Fatal(err)
			}
			if got := readRun(t, b, r.ID); got.Status != model.StatusRunning || !got.StartedAt.Equal(*r.StartedAt) {
				t.Fatalf("run after its second start: %s started %v, want running since its first start %v", got.Status, got.StartedAt, r.StartedAt)
			}
			return restart{w: b.Lease, run: r, r: marked(r, 2)}
		}},
	}
	for _, tt := range applied {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			c := tt.arrange(t, b)
			run := readRun(t, b, c.run.ID)
			dbBefore := b.Now(t)
			moved, paused, err := b.Store.AttemptRestart(b.Ctx, c.w, c.r)
			if err != nil || !moved || paused != "" {
				t.Fatalf("restart: moved=%v paused=%q err=%v", moved, paused, err)
			}
			dbAfter := b.Now(t)
			n := c.r.Attempt
			as := readAttempts(t, b, run.ID)
			if len(as) != n+1 {
				t.Fatalf("%d attempts after restarting attempt %d, want %d", len(as), n, n+1)
			}
			old, next := as[n-1], as[n]
			if old.EndedAt == nil || old.ServiceResult != c.r.ServiceResult || old.ExitCode != c.r.ExitCode || old.ExitStatus != c.r.ExitStatus {
				t.Fatalf("restarted attempt: %+v", old)
			}
			if c.r.At.IsZero() {
				requireOrdered(t, "the end on the database's clock", &dbBefore, old.EndedAt, &dbAfter)
			} else if !old.EndedAt.Equal(c.r.At) {
				t.Fatalf("attempt ended at %v, want %v", old.EndedAt, c.r.At)
			}
			if old.Settlement != c.r.Settlement.Source || old.SettleDeferred != "" {
				t.Fatalf("restarted attempt's hold: settled by %q, deferred %q", old.Settlement, old.SettleDeferred)
			}
			if next.No != n+1 || next.Unit != "" || next.Host != "" || next.SpawnClaimedAt != nil || next.StartedAt != nil ||
				next.EndedAt != nil || next.HoldBytes == nil {
				t.Fatalf("next attempt: %+v, want number %d, live, unclaimed, with a hold", next, n+1)
			}
			requireOrdered(t, "the next attempt opens as the last ends", old.EndedAt, &next.CreatedAt)
			got := readRun(t, b, run.ID)
			if got.Status != model.StatusQueued || got.FinishedAt != nil || !reflect.DeepEqual(got.StartedAt, run.StartedAt) {
				t.Fatalf("run after the restart: %s finished %v started %v; want queued, not finished, started %v",
					got.Status, got.FinishedAt, got.StartedAt, run.StartedAt)
			}
			requireNoViolations(t, b)

			// Once: the same restart again changes nothing.
			run, before := got, as
			if moved, _, err := b.Store.AttemptRestart(b.Ctx, c.w, c.r); err != nil || moved {
				t.Fatalf("second restart: moved=%v err=%v", moved, err)
			}
			requireUnchanged(t, b, "a second Restart", run, before)
			// The next attempt is the host's to claim.
			claimAs(t, b, b.Lease, run, n+1)
			requireNoViolations(t, b)
		})
	}

	refusals := []struct {
		name    string
		arrange func(t *testing.T, b *storetest.Bundle) restart
	}{
		{"a run asked to stop since", func(t *testing.T, b *storetest.Bundle) restart {
			r := startedRun(t, b)
			if _, err := b.Store.RunRequestStop(b.Ctx, r.ID); err != nil {
				t.Fatal(err)
			}
			return restart{w: b.Lease, run: r, r: marked(r, 1)}
		}},
		{"a run that ended", func(t *testing.T, b *storetest.Bundle) restart {
			r := startedRun(t, b)
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "ok"})
			return restart{w: b.Lease, run: r, r: marked(r, 1)}
		}},
		{"an attempt the run does not have", func(t *testing.T, b *storetest.Bundle) restart {
			r := startedRun(t, b)
			return restart{w: b.Lease, run: r, r: marked(r, 2)}
		}},
		{"another host's attempt", func(t *testing.T, b *storetest.Bundle) restart {
			h2 := otherHost(t, b)
			r := storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &h2, Started: true})
			return restart{w: b.Lease, run: r, r: marked(r, 1)}
		}},
	}
	for _, sw := range staleWriters {
		refusals = append(refusals, struct {
			name    string
			arrange func(t *testing.T, b *storetest.Bundle) restart
		}{"under " + sw.name, func(t *testing.T, b *storetest.Bundle) restart {
			r := startedRun(t, b)
			return restart{w: sw.stale(t, b), run: r, r: marked(r, 1)}
		}})
	}
	for _, tt := range refusals {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			c := tt.arrange(t, b)
			run, before := readRun(t, b, c.run.ID), readAttempts(t, b, c.run.ID)
			moved, paused, err := b.Store.AttemptRestart(b.Ctx, c.w, c.r)
			if err != nil || moved || paused != "" {
				t.Fatalf("moved=%v paused=%q err=%v, want nothing moved", moved, paused, err)
			}
			// Even the attempt's end, written before the stop was seen, is rolled back.
			requireUnchanged(t, b, "a refused Restart", run, before)
			requireNoViolations(t, b)
		})
	}
	for _, sw := range staleWriters {
		t.Run("the current lease after "+sw.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			r := startedRun(t, b)
			if moved, _, err := b.Store.AttemptRestart(b.Ctx, sw.stale(t, b), marked(r, 1)); err != nil || moved {
				t.Fatalf("stale restart: %v %v", moved, err)
			}
			revive(t, b)
			restartAs(t, b, b.Lease, r, 1)
			if as := readAttempts(t, b, r.ID); len(as) != 2 {
				t.Fatalf("%d attempts after the current holder's restart, want 2", len(as))
			}
			requireNoViolations(t, b)
		})
	}

	// A run whose budget the ended attempt's open hold still takes cannot hold for the next: it
	// ends paused instead, with no next attempt.
	t.Run("paused: the budget is held by a deferred settlement", func(t *testing.T) {
		t.Parallel()
		b := storetest.Setup(t)
		quota, most := int64(1<<30), int64(1<<20)
		if _, err := b.Store.AccountCreate(b.Ctx, store.AccountCreateParams{Name: "team", Quota: &quota, Actor: "tester"}); err != nil {
			t.Fatal(err)
		}
		r := storetest.Run(t, b.Store, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Account: "team", MaxAdded: &most}, Claim: &b.Lease, Started: true})
		moved, paused, err := b.Store.AttemptRestart(b.Ctx, b.Lease, model.Restarting{RunID: r.ID, Attempt: 1,
			Settlement: &ledger.Settlement{Deferred: "no figure yet"}})
		if err != nil || !moved || !strings.HasPrefix(paused, "paused ("+ledger.PausedSettlementDeferred+")") {
			t.Fatalf("restart: moved=%v paused=%q err=%v", moved, paused, err)
		}
		got := readRun(t, b, r.ID)
		if got.Status != model.StatusPaused || got.PausedReason != ledger.PausedSettlementDeferred || got.Reason != paused || got.FinishedAt == nil {
			t.Fatalf("run: %s paused %q reason %q finished %v", got.Status, got.PausedReason, got.Reason, got.FinishedAt)
		}
		as := readAttempts(t, b, r.ID)
		if len(as) != 1 || as[0].EndedAt == nil || as[0].SettleDeferred != "no figure yet" {
			t.Fatalf("attempts: %+v, want the one, ended, its settlement deferred", as)
		}
		if j := readJob(t, b, r.JobName); j.LastOutcome != model.StatusPaused {
			t.Fatalf("job's last outcome %q, want paused", j.LastOutcome)
		}
		requireNoViolations(t, b)
	})
}

// A spawn claim given back before systemd was asked goes to any host; one given back after a
// failed start stays its host's. Only the claim as recorded, not started, is given back, by the
// current holder of its host's lease.
func TestReleaseSpawnClaim(t *testing.T) {
	type release struct {
		w        model.Lease
		run      model.Run
		unit     string
		mayExist bool
	}
	claimed := func(t *testing.T, b *storetest.Bundle, armed bool) model.Run {
		r := storetest.Run(t, b.Store, nil)
		var ok bool
		var err error
		if armed {
			ok, _, err = b.Store.AttemptClaimSpawn(b.Ctx, b.Lease, model.SpawnClaim{Attempt: model.AttemptRef{Run: r.ID, No: 1}, Unit: storetest.Unit(r, 1), Boot: "boot-1", ArmedFor: new(b.Now(t).Add(time.Minute))})
		} else {
			ok, _, err = b.Store.AttemptClaimSpawn(b.Ctx, b.Lease, model.SpawnClaim{Attempt: model.AttemptRef{Run: r.ID, No: 1}, Unit: storetest.Unit(r, 1), Boot: "boot-1"})
		}
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		return r
	}
	applied := []struct {
		name    string
		arrange func(t *testing.T, b *storetest.Bundle) release
	}{
		{"before systemd was asked", func(t *testing.T, b *storetest.Bundle) release {
			r := claimed(t, b, false)
			return release{w: b.Lease, run: r, unit: storetest.Unit(r, 1)}
		}},
		{"after a failed start", func(t *testing.T, b *storetest.Bundle) release {
			r := claimed(t, b, false)
			return release{w: b.Lease, run: r, unit: storetest.Unit(r, 1), mayExist: true}
		}},
		{"an armed claim", func(t *testing.T, b *storetest.Bundle) release {
			r := claimed(t, b, true)
			return release{w: b.Lease, run: r, unit: storetest.Unit(r, 1)}
		}},
	}
	for _, tt := range applied {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			h2 := otherHost(t, b)
			c := tt.arrange(t, b)
			if err := b.Store.AttemptReleaseSpawnClaim(b.Ctx, c.w, store.AttemptReleaseSpawnClaimParams{Ref: model.AttemptRef{Run: c.run.ID, No: 1}, Unit: c.unit, MayExist: c.mayExist}); err != nil {
				t.Fatal(err)
			}
			a := readAttempts(t, b, c.run.ID)[0]
			wantHost := ""
			if c.mayExist {
				wantHost = b.Host
			}
			if a.Unit != "" || a.SpawnClaimedAt != nil || a.ArmedFor != nil || a.BootID != "" || a.EndedAt != nil || a.Host != wantHost {
				t.Fatalf("released attempt: %+v; want no unit, claim, timer or boot, live, host %q", a, wantHost)
			}
			if got := readRun(t, b, c.run.ID); got.Status != model.StatusQueued {
				t.Fatalf("run is %s, want queued", got.Status)
			}
			// Given back to any host, another host claims it; kept by its host, only that host does.
			ok, _, err := b.Store.AttemptClaimSpawn(b.Ctx, h2, model.SpawnClaim{Attempt: model.AttemptRef{Run: c.run.ID, No: 1}, Unit: c.unit})
			if err != nil || ok == c.mayExist {
				t.Fatalf("claim by another host: %v %v, want %v", ok, err, !c.mayExist)
			}
			if c.mayExist {
				claimAs(t, b, b.Lease, c.run, 1)
			}
			requireNoViolations(t, b)
		})
	}

	refusals := []struct {
		name    string
		arrange func(t *testing.T, b *storetest.Bundle) release
	}{
		{"a unit the attempt does not have", func(t *testing.T, b *storetest.Bundle) release {
			r := claimed(t, b, false)
			return release{w: b.Lease, run: r, unit: storetest.Unit(r, 2)}
		}},
		{"a started attempt", func(t *testing.T, b *storetest.Bundle) release {
			r := startedRun(t, b)
			return release{w: b.Lease, run: r, unit: storetest.Unit(r, 1)}
		}},
		{"an ended attempt", func(t *testing.T, b *storetest.Bundle) release {
			r := claimed(t, b, false)
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusFailed, FailureClass: "permanent", Reason: "x"})
			return release{w: b.Lease, run: r, unit: storetest.Unit(r, 1)}
		}},
		{"another host's claim", func(t *testing.T, b *storetest.Bundle) release {
			h2 := otherHost(t, b)
			r := storetest.Run(t, b.Store, &storetest.RunOpts{Claim: &h2})
			return release{w: b.Lease, run: r, unit: storetest.Unit(r, 1)}
		}},
	}
	for _, sw := range staleWriters {
		refusals = append(refusals, struct {
			name    string
			arrange func(t *testing.T, b *storetest.Bundle) release
		}{"under " + sw.name, func(t *testing.T, b *storetest.Bundle) release {
			r := claimed(t, b, false)
			return release{w: sw.stale(t, b), run: r, unit: storetest.Unit(r, 1)}
		}})
	}
	for _, tt := range refusals {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			c := tt.arrange(t, b)
			run, before := readRun(t, b, c.run.ID), readAttempts(t, b, c.run.ID)
			if err := b.Store.AttemptReleaseSpawnClaim(b.Ctx, c.w, store.AttemptReleaseSpawnClaimParams{Ref: model.AttemptRef{Run: c.run.ID, No: 1}, Unit: c.unit, MayExist: false}); err != nil {
				t.Fatal(err)
			}
			requireUnchanged(t, b, "a refused release", run, before)
			requireNoViolations(t, b)
		})
	}
}

// A stop is the operator's intent on a live run, recorded once and kept: no spawn claim and no
// restart after it, and the run ends stopped.
func TestRequestStop(t *testing.T) {
	for _, tt := range []struct {
		name    string
		arrange func(t *testing.T, b *storetest.Bundle) model.Run
	}{
		{"a queued run", func(t *testing.T, b *storetest.Bundle) model.Run { return storetest.Run(t, b.Store, nil) }},
		{"a running run", func(t *testing.T, b *storetest.Bundle) model.Run { return startedRun(t, b) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			r := tt.arrange(t, b)
			stopped, err := b.Store.RunRequestStop(b.Ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if stopped.Status != r.Status || stopped.StopRequestedAt == nil {
				t.Fatalf("after the stop request: %s, stop requested %v; want %s with the request", stopped.Status, stopped.StopRequestedAt, r.Status)
			}
			requireOrdered(t, "admission, then the stop request", &r.CreatedAt, stopped.StopRequestedAt)
			again, err := b.Store.RunRequestStop(b.Ctx, r.ID)
			if err != nil || again.StopRequestedAt == nil || !again.StopRequestedAt.Equal(*stopped.StopRequestedAt) {
				t.Fatalf("second stop request: %v %v, want the first request's time %v kept", again.StopRequestedAt, err, stopped.StopRequestedAt)
			}
			a := readAttempts(t, b, r.ID)[0]
			if a.Unit == "" {
				if ok, _, err := b.Store.AttemptClaimSpawn(b.Ctx, b.Lease, model.SpawnClaim{Attempt: model.AttemptRef{Run: r.ID, No: 1}, Unit: storetest.Unit(r, 1)}); err != nil || ok {
					t.Fatalf("claim after the stop request: %v %v", ok, err)
				}
			}
			if moved, _, err := b.Store.AttemptRestart(b.Ctx, b.Lease, model.Restarting{RunID: r.ID, Attempt: 1}); err != nil || moved {
				t.Fatalf("restart after the stop request: %v %v", moved, err)
			}
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusStopped, Reason: "stopped by the operator",
				Settlement: &ledger.Settlement{Release: true, Source: "stopped"}})
			got := readRun(t, b, r.ID)
			if got.Status != model.StatusStopped || got.StopRequestedAt == nil || !got.StopRequestedAt.Equal(*stopped.StopRequestedAt) {
				t.Fatalf("run: %s stop requested %v", got.Status, got.StopRequestedAt)
			}
			if as := readAttempts(t, b, r.ID); len(as) != 1 {
				t.Fatalf("%d attempts, want 1", len(as))
			}
			requireNoViolations(t, b)
		})
	}
	t.Run("a finished run", func(t *testing.T) {
		t.Parallel()
		b := storetest.Setup(t)
		r := startedRun(t, b)
		finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "ok"})
		run, before := readRun(t, b, r.ID), readAttempts(t, b, r.ID)
		var conflict *store.ConflictError
		if _, err := b.Store.RunRequestStop(b.Ctx, r.ID); !errors.As(err, &conflict) || !strings.Contains(err.Error(), "already succeeded") {
			t.Fatalf("stop of a succeeded run: %v, want a ConflictError naming its status", err)
		}
		requireUnchanged(t, b, "a refused stop request", run, before)
	})
	t.Run("an unknown run", func(t *testing.T) {
		t.Parallel()
		b := storetest.Setup(t)
		if _, err := b.Store.RunRequestStop(b.Ctx, uuid.New()); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("stop of an unknown run: %v, want ErrNotFound", err)
		}
	})
}

// A stop is stamped when it is recorded, not when its transaction began: a restart that took
// the run's row first and committed while the stop waited for it came before the stop, and the
// invariant that no attempt follows a stop request must not see it after. Whether the holder
// wrote the row (a restart queues the run again) or only locked it.
func TestRequestStopStampedWhenRecorded(t *testing.T) {
	for _, tt := range []struct{ name, hold string }{
		{"the holder wrote the row", `UPDATE runs SET status = status WHERE id = $1`},
		{"the holder locked the row", `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireStopStampedAfter(t, tt.hold)
		})
	}
}

// requireStopStampedAfter asks for a stop while a transaction holds the run's row with hold, and
// requires the stop's time to be after the row was released.
func requireStopStampedAfter(t *testing.T, hold string) {
	t.Helper()
	b := storetest.Setup(t)
	r := startedRun(t, b)
	// A transaction holds the run's row as a restart holds it between its lock and its commit.
	holder, err := b.DB.Begin(b.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(b.Ctx)
	if _, err := holder.Exec(b.Ctx, hold, r.ID); err != nil {
		t.Fatal(err)
	}
	var holderPID int
	if err := holder.QueryRow(b.Ctx, `SELECT pg_backend_pid()`).Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		run model.Run
		err error
	}
	done := make(chan result, 1)
	go func() {
		run, err := b.Store.RunRequestStop(b.Ctx, r.ID)
		done <- result{run, err}
	}()
	// Wait until the stop waits for the row: its transaction has begun by then.
	for {
		var waiting bool
		if err := b.DB.QueryRow(b.Ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, holderPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case res := <-done:
			t.Fatalf("the stop did not wait for the row held: %v %v", res.run.StopRequestedAt, res.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	var released time.Time
	if err := holder.QueryRow(b.Ctx, `SELECT clock_timestamp()`).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if err := holder.Commit(b.Ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	requireOrdered(t, "the row released, then the stop recorded", &released, res.run.StopRequestedAt)
	requireNoViolations(t, b)
}

// RunResume continues a stopped or paused run as a new attempt, numbered after its last, with its
// intents cleared; any other run, or one whose job has another live run or whose hold cannot be
// taken, is refused and left as it was.
func TestResume(t *testing.T) {
	released := &ledger.Settlement{Release: true, Source: "it never ran"}
	applied := []struct {
		name    string
		arrange func(t *testing.T, b *storetest.Bundle) model.Run
	}{
		{"a stopped run", func(t *testing.T, b *storetest.Bundle) model.Run {
			r := startedRun(t, b)
			if _, err := b.Store.RunRequestStop(b.Ctx, r.ID); err != nil {
				t.Fatal(err)
			}
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusStopped, Reason: "stopped", Settlement: released})
			return r
		}},
		{"a paused run", func(t *testing.T, b *storetest.Bundle) model.Run {
			r := startedRun(t, b)
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusPaused, PausedReason: ledger.PausedRunCeiling,
				Reason: "paused", Settlement: released})
			return r
		}},
		{"a run stopped in its second attempt", func(t *testing.T, b *storetest.Bundle) model.Run {
			r := startedRun(t, b)
			restartAs(t, b, b.Lease, r, 1)
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 2, Status: model.StatusStopped, Reason: "stopped", Settlement: released})
			return r
		}},
	}
	for _, tt := range applied {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			r := tt.arrange(t, b)
			before := readAttempts(t, b, r.ID)
			resumed, err := b.Store.RunResume(b.Ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if resumed.Status != model.StatusQueued || resumed.StopRequestedAt != nil || resumed.PausedReason != "" ||
				resumed.FinishedAt != nil || resumed.Reason != "" || resumed.FailureClass != "" {
				t.Fatalf("resumed run: %+v; want queued with its intents and its ending cleared", resumed)
			}
			as := readAttempts(t, b, r.ID)
			if len(as) != len(before)+1 || !reflect.DeepEqual(as[:len(before)], before) {
				t.Fatalf("attempts after resuming: %+v, want those before and one more", as)
			}
			next := as[len(before)]
			if next.No != len(before)+1 || next.EndedAt != nil || next.Unit != "" || next.HoldBytes == nil {
				t.Fatalf("resumed attempt: %+v, want number %d, live, unclaimed, with a hold", next, len(before)+1)
			}
			requireNoViolations(t, b)
			claimAs(t, b, b.Lease, resumed, next.No)
			requireNoViolations(t, b)
		})
	}

	refusals := []struct {
		name    string
		arrange func(t *testing.T, b *storetest.Bundle) model.Run
		want    string // a part of the ConflictError; "" wants ErrNotFound
	}{
		{"a queued run", func(t *testing.T, b *storetest.Bundle) model.Run { return storetest.Run(t, b.Store, nil) }, "is queued"},
		{"a running run", func(t *testing.T, b *storetest.Bundle) model.Run { return startedRun(t, b) }, "is running"},
		{"a succeeded run", func(t *testing.T, b *storetest.Bundle) model.Run {
			r := startedRun(t, b)
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "ok", Settlement: released})
			return r
		}, "is succeeded"},
		{"a stopped run whose job has another live run", func(t *testing.T, b *storetest.Bundle) model.Run {
			r := startedRun(t, b)
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusStopped, Reason: "stopped", Settlement: released})
			storetest.Run(t, b.Store, &storetest.RunOpts{Job: r.JobName})
			return r
		}, "while the job has a live run"},
		{"a paused run whose budget a deferred settlement holds", func(t *testing.T, b *storetest.Bundle) model.Run {
			r := startedRun(t, b)
			finishAs(t, b, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusPaused, PausedReason: ledger.PausedRunCeiling, Reason: "paused"})
			return r
		}, "cannot resume yet"},
		{"an unknown run", func(t *testing.T, b *storetest.Bundle) model.Run { return model.Run{ID: uuid.New()} }, ""},
	}
	for _, tt := range refusals {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Setup(t)
			r := tt.arrange(t, b)
			var run model.Run
			var before []model.Attempt
			if tt.want != "" {
				run, before = readRun(t, b, r.ID), readAttempts(t, b, r.ID)
			}
			_, err := b.Store.RunResume(b.Ctx, r.ID)
			if tt.want == "" {
				if !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("resume: %v, want ErrNotFound", err)
				}
				return
			}
			var conflict *store.ConflictError
			if !errors.As(err, &conflict) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("resume: %v, want a ConflictError saying %q", err, tt.want)
			}
			requireUnchanged(t, b, "a refused Resume", run, before)
			requireNoViolations(t, b)
		})
	}
}

// A first backup's attempt holds nothing until its spawn sizes it from its paths: then the run's
// budget is recorded and the attempt holds it, once, and only under the lease it was claimed
// with; an account that cannot hold it pauses the run before its unit starts, naming the quota.
func TestAttemptHoldSize(t *testing.T) {
	measured := ledger.Source{Bytes: 100 << 20, Entries: 10}
	budget := int64(200<<20 + 10<<10)
	for _, c := range []struct {
		name   string
		quota  int64 // 0: the default account, unlimited
		other  bool  // sized under another host's lease
		twice  bool
		taken  bool
		paused string
	}{
		{name: "sized: the budget recorded, the attempt holds it", taken: true},
		{name: "sized once: a second call changes nothing", taken: true, twice: true},
		{name: "refused: another host's lease", other: true},
		{name: "paused: the account's quota cannot hold it", quota: 50 << 20, taken: true,
			paused: "paused (quota_exhausted): account team has 50 MiB left of its quota of 50 MiB and the run needs 200 MiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := storetest.Setup(t)
			opts := &storetest.JobOpts{}
			if c.quota > 0 {
				if _, err := b.Store.AccountCreate(b.Ctx, store.AccountCreateParams{Name: "team", Quota: &c.quota, Actor: "tester"}); err != nil {
					t.Fatal(err)
				}
				opts.Account = "team"
			}
			r := storetest.Run(t, b.Store, &storetest.RunOpts{JobOpts: opts})
			if as := readAttempts(t, b, r.ID); r.BudgetBytes != nil || as[0].HoldBytes != nil {
				t.Fatalf("admitted first backup: budget %v, attempt %+v; want neither a budget nor a hold yet", r.BudgetBytes, as[0])
			}
			claimAs(t, b, b.Lease, r, 1)
			w := b.Lease
			if c.other {
				w = otherHost(t, b)
			}
			ref := model.AttemptRef{Run: r.ID, No: 1}
			h, err := b.Store.AttemptHoldSize(b.Ctx, w, store.AttemptHoldSizeParams{Attempt: ref, Source: measured})
			if c.twice && err == nil {
				h, err = b.Store.AttemptHoldSize(b.Ctx, w, store.AttemptHoldSizeParams{Attempt: ref, Source: ledger.Source{Bytes: 1}})
				c.taken = false
			}
			if err != nil || h.Taken != c.taken || h.Paused != "" != (c.paused != "") || !strings.HasPrefix(h.Paused, c.paused) {
				t.Fatalf("AttemptHoldSize = %+v, %v; want taken %v, paused %q", h, err, c.taken, c.paused)
			}
			got, as := readRun(t, b, r.ID), readAttempts(t, b, r.ID)
			switch {
			case c.other:
				if got.BudgetBytes != nil || as[0].HoldBytes != nil {
					t.Fatalf("sized under another lease: budget %v, hold %v", got.BudgetBytes, as[0].HoldBytes)
				}
			case c.paused != "":
				if got.Status != model.StatusPaused || got.PausedReason != ledger.PausedQuotaExhausted || as[0].EndedAt == nil || as[0].HoldBytes != nil {
					t.Fatalf("paused first backup: %+v, attempt %+v", got, as[0])
				}
			default:
				if got.BudgetBytes == nil || *got.BudgetBytes != budget || as[0].HoldBytes == nil || *as[0].HoldBytes != budget ||
					!strings.Contains(as[0].HoldNote, "twice what the job's paths hold, 100 MiB in 10 entries") {
					t.Fatalf("sized first backup: budget %v, attempt %+v; want %d held, saying where it came from", got.BudgetBytes, as[0], budget)
				}
			}
			requireNoViolations(t, b)
		})
	}
}

// A run that deletes from a job's repository is pinned to its pruning host whatever host it was
// asked for, and no other host claims it; with none, one through a repository written append-only is refused before it
// exists. Other runs are left where they were.
func TestRunAdmitWhereItDeletes(t *testing.T) {
	t.Parallel()
	b := storetest.Setup(t)
	ctx := context.Background()
	withPruner := model.PruneSettings{AppendOnly: true, Host: "vault", Repository: "/srv/full"}
	appendOnly := model.PruneSettings{AppendOnly: true}
	for _, c := range []struct {
		prune    model.PruneSettings
		kind     model.Kind
		askedOn  string
		wantHost string
		refused  string
	}{
		{withPruner, model.KindPrune, "", "vault", ""},
		{withPruner, model.KindPrune, "web1", "vault", ""},
		{withPruner, model.KindVerify, "", "", ""},
		{withPruner, model.KindBackup, "", "", ""},
		{appendOnly, model.KindPrune, "", "", "writes its repository append-only"},
		{appendOnly, model.KindVerify, "", "", ""},
	} {
		// Any-host jobs: the bundle's host may claim their runs, unless a run is pinned elsewhere.
		j := storetest.Job(t, b.Store, &storetest.JobOpts{Prune: c.prune}) // a repository of its own
		run, err := b.Store.RunAdmit(ctx, store.RunAdmitParams{Job: j.Name, Trigger: model.TriggerManual, Kind: c.kind, Host: c.askedOn})
		var conflict *store.ConflictError
		switch {
		case c.refused != "" && (!errors.As(err, &conflict) || !strings.Contains(err.Error(), c.refused)):
			t.Fatalf("%s of %+v: %v; want refused saying %q", c.kind, c.prune, err, c.refused)
		case c.refused != "":
			if runs, err := b.Store.RunList(ctx, j.Name, 10); err != nil || len(runs) != 0 {
				t.Fatalf("a refused %s of %s left runs: %v %v", c.kind, j.Name, runs, err)
			}
		case err != nil:
			t.Fatalf("%s of %+v: %v", c.kind, c.prune, err)
		case cmp.Or(run.Host, j.Host) != c.wantHost:
			t.Fatalf("%s of %+v pinned to %q (the job to %q), want it run on %q", c.kind, c.prune, run.Host, j.Host, c.wantHost)
		case run.Host == "vault":
			// No other host's daemon may claim it, though it may claim the job's other runs.
			claimed, _, err := b.Store.AttemptClaimSpawn(ctx, b.Lease, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: storetest.Unit(run, 1)})
			if err != nil || claimed {
				t.Fatalf("host %s claimed the prune pinned to vault: %v %v", b.Lease.Host, claimed, err)
			}
		case run.Host == "" && c.kind == model.KindVerify:
			// The control: the same host claims a run of such a job that is not pinned.
			claimed, blocked, err := b.Store.AttemptClaimSpawn(ctx, b.Lease, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: storetest.Unit(run, 1)})
			if err != nil || !claimed {
				t.Fatalf("host %s could not claim the verify of an any-host job: %v %q %v", b.Lease.Host, claimed, blocked, err)
			}
		}
	}
}
