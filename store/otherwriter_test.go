package store_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// AttemptOtherWriter names a run whose attempt was claimed on the same repository while the
// attempt ran, whether it is still live or ended since; never one that ended before the attempt
// was claimed, nor one of another repository.
func TestAttemptOtherWriter(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	const repo = "/srv/shared-repo"
	onRepo := func(name, repository string) *storetest.RunOpts {
		return &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: name, Repository: repository}, Claim: &b.Lease, Started: true}
	}
	finish := func(r model.Run) {
		t.Helper()
		if done, err := st.AttemptFinish(ctx, b.Lease, model.Ending{RunID: r.ID, Attempt: 1, Status: model.StatusSucceeded, Reason: "backed up"}); err != nil || !done {
			t.Fatalf("finish run of %s: %v %v", r.JobName, done, err)
		}
	}
	want := func(step string, of model.Run, other *uuid.UUID) {
		t.Helper()
		got, err := st.AttemptOtherWriter(ctx, model.AttemptRef{Run: of.ID, No: 1})
		if err != nil {
			t.Fatal(err)
		}
		if (got == nil) != (other == nil) || got != nil && *got != *other {
			t.Fatalf("%s: other writer %v, want %v", step, got, other)
		}
	}

	earlier := storetest.Run(t, st, onRepo("earlier", repo))
	finish(earlier)
	me := storetest.Run(t, st, onRepo("me", repo))
	want("a run that ended before the claim", me, nil)
	storetest.Run(t, st, onRepo("elsewhere", "/srv/another-repo"))
	want("a live run of another repository", me, nil)
	during := storetest.Run(t, st, onRepo("during", repo))
	want("a live run of the same repository", me, &during.ID)
	finish(during)
	want("that run ended since", me, &during.ID)
	finish(me)
	want("after the attempt ended", me, &during.ID)
	later := storetest.Run(t, st, onRepo("later", repo))
	want("a run claimed after every other ended", later, nil)
}
