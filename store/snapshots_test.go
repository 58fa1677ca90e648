package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// finishBackup admits a run of job (a restic job of repository "/r") and ends it
// succeeded with snap as the inventory row its summary gave (nil: none), as the reconciler
// ends a backup. It returns the run and the time of its ending.
func finishBackup(t *testing.T, st *store.Store, job string, snap func(run uuid.UUID) *model.Snapshot) (model.Run, time.Time) {
	t.Helper()
	ctx := context.Background()
	run := storetest.Run(t, st, &storetest.RunOpts{Job: job})
	at := time.Now().Truncate(time.Microsecond)
	e := model.Ending{RunID: run.ID, Attempt: 1, At: at, Status: model.StatusSucceeded, Reason: "ok",
		ServiceResult: "success", ExitCode: "exited", ExitStatus: "0"}
	if snap != nil {
		e.Snapshot = snap(run.ID)
		e.SnapshotID = e.Snapshot.ID
	}
	if ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, e); err != nil || !ok {
		t.Fatalf("finish: ok=%v err=%v", ok, err)
	}
	return run, at
}

// fromSummary is the row a summary that gave id makes for a run of job, started at started.
func fromSummary(job, id string, started time.Time) func(uuid.UUID) *model.Snapshot {
	return func(run uuid.UUID) *model.Snapshot {
		return &model.Snapshot{Repository: "/r", ID: id, Time: started, Host: "h",
			Tags: engine.BackupTags(engine.Job{Name: job}, run), Paths: []string{"/data"}, JobName: job, RunID: &run,
			Source: model.SourceSummary}
	}
}

// listed is a snapshot as a full listing gives it, made by run of job (uuid.Nil: untagged).
func listed(id, job string, run uuid.UUID, at time.Time) model.Snapshot {
	s := model.Snapshot{ID: id, Time: at, Host: "h", Paths: []string{"/data"}}
	if run != uuid.Nil {
		s.Tags, s.JobName, s.RunID = engine.BackupTags(engine.Job{Name: job}, run), job, &run
	}
	return s
}

func inventory(t *testing.T, st *store.Store) []model.Snapshot {
	t.Helper()
	snaps, err := st.SnapshotList(context.Background(), "/r")
	if err != nil {
		t.Fatal(err)
	}
	return snaps
}

// A backup's snapshot enters the inventory from its summary with the ending, by restic 0.14's
// short id: it can be held and locked like any other, and the next listing completes that
// very row in place (full id, restic's facts), keeping its protections and first_seen_at.
func TestSummarySnapshotCompletedByListing(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "s", Repository: "/r"})
	started := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	run, ended := finishBackup(t, st, "s", fromSummary("s", "c1ae9ba1", started))

	snaps := inventory(t, st)
	if len(snaps) != 1 {
		t.Fatalf("inventory %+v, want the run's snapshot", snaps)
	}
	s := snaps[0]
	if s.ID != "c1ae9ba1" || s.Source != model.SourceSummary || s.RunID == nil || *s.RunID != run.ID || s.JobName != "s" ||
		!s.Time.Equal(started) || s.Host != "h" || !slices.Equal(s.Paths, []string{"/data"}) ||
		!slices.Contains(s.Tags, engine.RunTag(run.ID)) || !s.FirstSeenAt.Equal(ended) || s.ForgottenAt != nil {
		t.Fatalf("snapshot from the summary = %+v", s)
	}
	if got, err := st.RunGet(ctx, run.ID); err != nil || got.SnapshotID != "c1ae9ba1" {
		t.Fatalf("run = %+v, %v; want its snapshot id", got, err)
	}
	held, err := st.SnapshotHold(ctx, store.SnapshotHoldParams{Prefix: "c1ae", By: "auditor", Why: "case 7"})
	if err != nil || held.ID != "c1ae9ba1" || held.LegalHoldAt == nil {
		t.Fatalf("hold of the short id: %+v, %v", held, err)
	}
	until := time.Now().Add(48 * time.Hour).Truncate(time.Microsecond)
	if _, err := st.SnapshotLock(ctx, store.SnapshotLockParams{Prefix: "c1ae9ba1", Until: until, By: "auditor"}); err != nil {
		t.Fatalf("lock of the short id: %v", err)
	}

	// The listing: restic's full id of the run's snapshot, its own time and host, and another
	// snapshot made by hand.
	full := "c1ae9ba1" + strings.Repeat("7", 56)
	resticTime := started.Add(3 * time.Second)
	other := strings.Repeat("ab", 32)
	l := listed(full, "s", run.ID, resticTime)
	l.Host, l.Paths = "machine", []string{"/data", "/more"}
	added, forgotten, err := st.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: time.Now(), Listed: []model.Snapshot{l, listed(other, "", uuid.Nil, started)}})
	if err != nil || added != 1 || forgotten != 0 {
		t.Fatalf("sync: added %d, forgotten %d, %v; want the other one added, none forgotten", added, forgotten, err)
	}
	snaps = inventory(t, st)
	if len(snaps) != 2 {
		t.Fatalf("inventory %+v, want the run's snapshot once and the other", snaps)
	}
	i := slices.IndexFunc(snaps, func(s model.Snapshot) bool { return s.ID == full })
	if i < 0 {
		t.Fatalf("inventory %+v has no row with the full id", snaps)
	}
	s = snaps[i]
	if s.Source != model.SourceListing || !s.Time.Equal(resticTime) || s.Host != "machine" ||
		!slices.Equal(s.Paths, []string{"/data", "/more"}) || s.RunID == nil || *s.RunID != run.ID ||
		s.LegalHoldAt == nil || s.LegalHoldBy != "auditor" || s.LegalHoldWhy != "case 7" ||
		s.ImmutableUntil == nil || !s.ImmutableUntil.Equal(until) || !s.FirstSeenAt.Equal(ended) {
		t.Fatalf("completed snapshot = %+v; want restic's facts with the hold, the lock and the first sighting kept", s)
	}
	if p, err := st.SnapshotProtectedAmong(ctx, store.SnapshotProtectedAmongParams{Repository: "/r", IDs: []string{full, other}, At: time.Now()}); err != nil || !slices.Equal(p, []string{full}) {
		t.Fatalf("protected = %v, %v; want the completed snapshot", p, err)
	}
	// A second listing changes nothing more.
	if added, forgotten, err := st.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: time.Now(), Listed: []model.Snapshot{l, listed(other, "", uuid.Nil, started)}}); err != nil || added != 0 || forgotten != 0 {
		t.Fatalf("second sync: added %d, forgotten %d, %v", added, forgotten, err)
	}
	if v, err := st.InvariantViolations(ctx); err != nil || len(v) > 0 {
		t.Fatalf("invariants: %v %v", v, err)
	}
}

// A summary's snapshot that a listing asked for after the ending does not hold was really
// forgotten: the row is marked so. A listing asked for before the ending leaves it.
func TestSummarySnapshotForgotten(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "f", Repository: "/r"})
	before := time.Now().Add(-time.Second)
	run, _ := finishBackup(t, st, "f", fromSummary("f", "0123abcd", time.Now()))
	if _, err := st.SnapshotHold(ctx, store.SnapshotHoldParams{Prefix: "0123abcd", By: "auditor"}); err != nil {
		t.Fatal(err)
	}
	other := listed(strings.Repeat("e", 64), "f", uuid.New(), time.Now())
	if _, forgotten, err := st.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: before, Listed: []model.Snapshot{other}}); err != nil || forgotten != 0 {
		t.Fatalf("a listing older than the ending: forgotten %d, %v; want none", forgotten, err)
	}
	if snaps := inventory(t, st); len(snaps) != 2 {
		t.Fatalf("inventory %+v, want the summary's row and the listed one", snaps)
	}
	if _, forgotten, err := st.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: time.Now(), Listed: []model.Snapshot{other}}); err != nil || forgotten != 1 {
		t.Fatalf("a listing without the run's snapshot: forgotten %d, %v; want 1", forgotten, err)
	}
	snaps := inventory(t, st)
	if len(snaps) != 1 || snaps[0].ID != other.ID {
		t.Fatalf("inventory %+v, want only the listed snapshot", snaps)
	}
	if got, err := st.RunGet(ctx, run.ID); err != nil || got.SnapshotID != "0123abcd" {
		t.Fatalf("run = %+v, %v; its record keeps the snapshot id", got, err)
	}
}

// An id from the journal that is not 8 to 64 lower-case hex digits records no inventory row;
// the run ends as it would have, with the id on its record as before.
func TestSummarySnapshotBadID(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "b", Repository: "/r"})
	for _, id := range []string{"c1ae9b", "C1AE9BA1", "c1ae9ba1'; DROP TABLE snapshots; --", "../../etc/passwd", "c1ae9ba1%",
		strings.Repeat("a", 65), "c1ae9ba1\n"} {
		run, _ := finishBackup(t, st, "b", fromSummary("b", id, time.Now()))
		if got, err := st.RunGet(ctx, run.ID); err != nil || got.Status != model.StatusSucceeded || got.SnapshotID != id {
			t.Fatalf("run with summary id %q = %+v, %v; want succeeded with the id on record", id, got, err)
		}
	}
	if snaps := inventory(t, st); len(snaps) != 0 {
		t.Fatalf("inventory %+v, want no row from a bad id", snaps)
	}
}

// A journal that claims the id of a snapshot the inventory already has, another run's (whole or
// its prefix), changes nothing: the row stays that run's, with its facts and protections.
func TestSummarySnapshotOfAnotherRun(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "mine", Repository: "/r"})
	storetest.Job(t, st, &storetest.JobOpts{Name: "evil", Repository: "/r"})
	owner, _ := finishBackup(t, st, "mine", nil)
	theirs := strings.Repeat("5a", 32)
	at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	if _, _, err := st.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: time.Now(), Listed: []model.Snapshot{listed(theirs, "mine", owner.ID, at)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SnapshotHold(ctx, store.SnapshotHoldParams{Prefix: theirs[:8], By: "auditor", Why: "keep"}); err != nil {
		t.Fatal(err)
	}
	before := inventory(t, st)
	for _, id := range []string{theirs, theirs[:8], theirs[:20]} {
		finishBackup(t, st, "evil", fromSummary("evil", id, time.Now()))
	}
	// A listed snapshot the summary's id is the start of: not another row either.
	after := inventory(t, st)
	if len(after) != 1 || after[0].ID != theirs || after[0].JobName != "mine" || after[0].RunID == nil ||
		*after[0].RunID != owner.ID || !after[0].Time.Equal(at) || after[0].Source != model.SourceListing ||
		after[0].LegalHoldAt == nil || !after[0].SeenAt.Equal(before[0].SeenAt) {
		t.Fatalf("inventory %+v after summaries claiming %s; want only the owner's row, unchanged: %+v", after, theirs, before)
	}
	// A short id from a summary that matches a listed snapshot of another run is not merged
	// into it: the row is absent from the listing and forgotten.
	evil, _ := finishBackup(t, st, "evil", fromSummary("evil", "9f9f9f9f", time.Now()))
	victim := "9f9f9f9f" + strings.Repeat("0", 56)
	if _, _, err := st.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: time.Now(), Listed: []model.Snapshot{listed(theirs, "mine", owner.ID, at),
		listed(victim, "mine", owner.ID, at)}}); err != nil {
		t.Fatal(err)
	}
	snaps := inventory(t, st)
	i := slices.IndexFunc(snaps, func(s model.Snapshot) bool { return s.ID == victim })
	if len(snaps) != 2 || i < 0 || snaps[i].RunID == nil || *snaps[i].RunID != owner.ID || !snaps[i].FirstSeenAt.Equal(snaps[i].SeenAt) {
		t.Fatalf("inventory %+v; want the listed snapshot %s as its own new row, not run %s's", snaps, victim, evil.ID)
	}
}

// A short id two listed snapshots start with is not merged into either: both get rows of their
// own, and the short one, absent from the listing, is forgotten. A listing that came before the
// ending, holding the run's snapshot, makes the summary add no second row.
func TestSummarySnapshotAmbiguousAndLate(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "a", Repository: "/r"})
	run, _ := finishBackup(t, st, "a", fromSummary("a", "deadbeef", time.Now()))
	one, two := "deadbeef"+strings.Repeat("1", 56), "deadbeef"+strings.Repeat("2", 56)
	added, forgotten, err := st.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: time.Now(), Listed: []model.Snapshot{listed(one, "a", run.ID, time.Now()),
		listed(two, "a", run.ID, time.Now())}})
	if err != nil || added != 2 || forgotten != 1 {
		t.Fatalf("sync: added %d, forgotten %d, %v; want both added and the short row forgotten", added, forgotten, err)
	}
	if snaps := inventory(t, st); len(snaps) != 2 || snaps[0].Source != model.SourceListing || snaps[1].Source != model.SourceListing {
		t.Fatalf("inventory %+v, want the two listed rows", snaps)
	}

	// The listing of the next run's snapshot commits before the run's ending.
	next, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "a", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	full := "feedface" + strings.Repeat("3", 56)
	if _, _, err := st.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: time.Now(), Listed: []model.Snapshot{listed(one, "a", run.ID, time.Now()),
		listed(two, "a", run.ID, time.Now()), listed(full, "a", next.ID, time.Now())}}); err != nil {
		t.Fatal(err)
	}
	e := model.Ending{RunID: next.ID, Attempt: 1, At: time.Now(), Status: model.StatusSucceeded, Reason: "ok",
		SnapshotID: "feedface", Snapshot: fromSummary("a", "feedface", time.Now())(next.ID)}
	if ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, e); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}
	// An ending that does not apply (the attempt ended already) records nothing.
	e.Snapshot.ID = "0badc0de"
	if ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, e); err != nil || ok {
		t.Fatalf("second finish: %v %v; want it refused", ok, err)
	}
	snaps := inventory(t, st)
	if len(snaps) != 3 || slices.ContainsFunc(snaps, func(s model.Snapshot) bool { return s.Source != model.SourceListing }) {
		t.Fatalf("inventory %+v, want the three listed rows only", snaps)
	}
}

// The snapshots a host catalogues: of each catalogued job that may run there (pinned to it or to
// none), the newest Keep still in the repository that this machine made.
func TestSnapshotCatalogList(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	storetest.Job(t, st, &storetest.JobOpts{Name: "cat", Repository: "/r", Catalog: true})
	storetest.Job(t, st, &storetest.JobOpts{Name: "pinned", Repository: "/r", Catalog: true, Host: "other"})
	storetest.Job(t, st, &storetest.JobOpts{Name: "plain", Repository: "/r"})
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	id := func(c byte) string { return strings.Repeat(string(c), 64) }
	snap := func(c byte, job string, minutes int, host string) model.Snapshot {
		s := listed(id(c), job, uuid.New(), base.Add(time.Duration(minutes)*time.Minute))
		s.Host = host
		return s
	}
	all := []model.Snapshot{snap('1', "cat", 1, "h"), snap('2', "cat", 2, "h"), snap('3', "cat", 3, "h"), snap('4', "cat", 4, "elsewhere"),
		snap('5', "pinned", 5, "h"), snap('6', "plain", 6, "h")}
	if _, _, err := st.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: time.Now(), Listed: all}); err != nil {
		t.Fatal(err)
	}
	// The second is forgotten: a later listing lacks it.
	if _, _, err := st.SnapshotSync(ctx, store.SnapshotSyncParams{Repository: "/r", ListedAt: time.Now(), Listed: slices.Delete(slices.Clone(all), 1, 2)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		keep int
		want []string
	}{{2, []string{"cat " + id('3'), "cat " + id('1')}}, {1, []string{"cat " + id('3')}}} {
		got, err := st.SnapshotCatalogList(ctx, store.SnapshotCatalogListParams{Host: "here", SnapshotHost: "h", Keep: tc.keep})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range got {
			names = append(names, s.JobName+" "+s.ID)
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("keep %d: %q, want %q", tc.keep, names, tc.want)
		}
	}
	got, err := st.SnapshotCatalogList(ctx, store.SnapshotCatalogListParams{Host: "other", SnapshotHost: "h", Keep: 10})
	if err != nil || len(got) != 3 || got[2].JobName != "pinned" {
		t.Fatalf("on the host job pinned is pinned to: %+v, %v", got, err)
	}
}
