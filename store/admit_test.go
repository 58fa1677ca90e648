package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// A due job that cannot be admitted (its row cannot be read; its slot was admitted before) is
// rolled back alone and set aside with its reason, while the others are admitted; it is not
// claimed again, nor reported due, before its retry time, and once repaired it is admitted and
// its reason cleared.
func TestAdmitSetsBadJobsAside(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx, db := b.Store, b.Ctx, b.DB

	now := time.Now().UTC().Truncate(time.Second)
	slot := now.Add(-time.Second)
	for _, name := range []string{"good", "unreadable", "admitted-before"} {
		if _, err := st.JobCreate(ctx, model.Job{Name: name, Engine: "restic", Repository: "/r", PasswordFile: "/pw",
			Paths: []string{"/data"}, Schedule: "@every 1h", NextRunAt: &slot}); err != nil {
			t.Fatal(err)
		}
	}
	// The breakages an operator's hand or an old bug could leave behind.
	if _, err := db.Exec(ctx, `UPDATE jobs SET windows = '{NULL}' WHERE name = 'unreadable'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO runs (id, job_id, job_name, trigger, status, planned_at)
		SELECT gen_random_uuid(), id, name, 'schedule', 'succeeded', $1 FROM jobs WHERE name = 'admitted-before'`, slot); err != nil {
		t.Fatal(err)
	}
	next := slot.Add(time.Hour)
	decide := func(j model.Job) model.SlotDecision {
		return model.SlotDecision{Run: true, Trigger: "schedule", Planned: *j.NextRunAt, Next: &next}
	}
	const aside = time.Minute

	got, err := st.JobAdmitDue(ctx, store.JobAdmitDueParams{Now: now, Horizon: now, Limit: 10, SetAside: aside, Decide: decide})
	if err != nil {
		t.Fatalf("one bad job failed the whole admission: %v", err)
	}
	byJob := map[string]model.Admitted{}
	for _, a := range got {
		byJob[a.Job] = a
	}
	if a := byJob["good"]; a.Run == nil || a.Failed != "" {
		t.Fatalf("good job: %+v, want admitted", a)
	}
	for name, want := range map[string]string{"unreadable": "read the job", "admitted-before": "runs_one_per_slot"} {
		a := byJob[name]
		if a.Run != nil || !strings.Contains(a.Failed, want) || a.RetryAt == nil || !a.RetryAt.Equal(now.Add(aside)) {
			t.Fatalf("%s: %+v, want set aside until %s because of %q", name, a, now.Add(aside), want)
		}
	}
	j, err := st.JobGet(ctx, "admitted-before")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(j.AdmissionError, "runs_one_per_slot") || j.NextRunAt == nil || !j.NextRunAt.Equal(slot) {
		t.Fatalf("job set aside: error %q, next run %v; want the error recorded and its slot kept", j.AdmissionError, j.NextRunAt)
	}

	// Not claimed again, and not due, before the retry time: a loop sleeping until the next due
	// time does not spin on it.
	if again, err := st.JobAdmitDue(ctx, store.JobAdmitDueParams{Now: now.Add(time.Second), Horizon: now.Add(time.Second), Limit: 10, SetAside: aside, Decide: decide}); err != nil || len(again) != 0 {
		t.Fatalf("second pass: %+v, %v; want nothing claimed", again, err)
	}
	due, err := st.JobNextDue(ctx, "h1", 0)
	if err != nil || due == nil || !due.Equal(now.Add(aside)) {
		t.Fatalf("next due = %v, %v; want the retry time %s", due, err, now.Add(aside))
	}

	// Repaired, the job is admitted at its retry and its error cleared.
	if _, err := db.Exec(ctx, `DELETE FROM runs WHERE job_name = 'admitted-before'`); err != nil {
		t.Fatal(err)
	}
	later := now.Add(aside + time.Second)
	got, err = st.JobAdmitDue(ctx, store.JobAdmitDueParams{Now: later, Horizon: later, Limit: 10, SetAside: aside, Decide: decide})
	if err != nil {
		t.Fatal(err)
	}
	admitted := false
	for _, a := range got {
		switch a.Job {
		case "admitted-before":
			admitted = a.Run != nil
		case "unreadable":
			if a.Failed == "" || !a.RetryAt.Equal(later.Add(aside)) {
				t.Fatalf("unreadable job at its retry: %+v, want set aside again", a)
			}
		}
	}
	if !admitted {
		t.Fatalf("the repaired job was not admitted at its retry: %+v", got)
	}
	if j, err = st.JobGet(ctx, "admitted-before"); err != nil || j.AdmissionError != "" || j.AdmissionRetryAt != nil {
		t.Fatalf("repaired job: error %q, retry %v, %v; want both cleared", j.AdmissionError, j.AdmissionRetryAt, err)
	}
}

// A slot within the horizon is admitted ahead, queued until the slot itself, only for a job
// without a live run; a job with one is left to be decided at its slot. JobNextDue reports a slot
// the lead ahead of it only where it can be admitted ahead, and a queued run's time the lead
// ahead while it has no unit.
func TestAdmitAhead(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx

	now := time.Now().UTC().Truncate(time.Second)
	slot, lead := now.Add(30*time.Minute), 40*time.Minute
	for _, name := range []string{"free", "busy"} {
		if _, err := st.JobCreate(ctx, model.Job{Name: name, Engine: "command", Command: []string{"/bin/true"},
			Schedule: "@every 1h", NextRunAt: &slot}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "busy", Trigger: "manual", Kind: model.KindBackup}); err != nil {
		t.Fatal(err)
	}
	if due, err := st.JobNextDue(ctx, "h1", lead); err != nil || due == nil || !due.Equal(slot.Add(-lead)) {
		t.Fatalf("next due = %v, %v; want the free job's slot a lead ahead, %s", due, err, slot.Add(-lead))
	}
	next := slot.Add(time.Hour)
	got, err := st.JobAdmitDue(ctx, store.JobAdmitDueParams{Now: now, Horizon: now.Add(lead), Limit: 10, SetAside: time.Minute, Decide: func(j model.Job) model.SlotDecision {
		return model.SlotDecision{Run: true, Trigger: model.TriggerSchedule, Planned: *j.NextRunAt, Next: &next}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Job != "free" || got[0].Run == nil {
		t.Fatalf("admitted %+v, want the free job's run only", got)
	}
	run, err := st.RunGet(ctx, *got[0].Run)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != model.StatusQueued || run.NotBefore == nil || !run.NotBefore.Equal(slot) || run.PlannedAt == nil || !run.PlannedAt.Equal(slot) {
		t.Fatalf("run admitted ahead: %s, not before %v, planned %v; want queued until its slot %s", run.Status, run.NotBefore, run.PlannedAt, slot)
	}
	busy, err := st.JobGet(ctx, "busy")
	if err != nil || busy.NextRunAt == nil || !busy.NextRunAt.Equal(slot) || busy.OverlapSkips != 0 {
		t.Fatalf("busy job: %+v, %v; want its slot kept, not skipped ahead of time", busy, err)
	}
	// The busy job is due at its slot. The queued run, without a unit, is due a lead before its
	// time, or at its time once that lead has passed (it is being prepared).
	if due, err := st.JobNextDue(ctx, "h1", 10*time.Minute); err != nil || due == nil || !due.Equal(slot.Add(-10*time.Minute)) {
		t.Fatalf("next due = %v, %v; want %s", due, err, slot.Add(-10*time.Minute))
	}
	for _, l := range []time.Duration{lead, 0} {
		if due, err := st.JobNextDue(ctx, "h1", l); err != nil || due == nil || !due.Equal(slot) {
			t.Fatalf("next due with a lead of %s = %v, %v; want the slot %s", l, due, err, slot)
		}
	}
}

// A daemon's admission tells only the daemon of another host: of a run pinned to that host.
// The admitting daemon wakes its own sweep for its host's runs and any host's, and every
// notification costs the server a wake of each listening session.
func TestAdmissionNotifiesOtherHostsOnly(t *testing.T) {
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	db := dial(t, b.DSN) // a connection of its own: it listens
	if _, err := db.Exec(ctx, "LISTEN "+store.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	slot, next := now.Add(-time.Second), now.Add(time.Hour)
	for _, j := range []struct{ name, host string }{{"mine", "h1"}, {"anyhost", ""}, {"theirs", "h2"}} {
		if _, err := st.JobCreate(ctx, model.Job{Name: j.name, Engine: "restic", Repository: "/r/" + j.name, PasswordFile: "/pw",
			Paths: []string{"/data"}, Schedule: "@every 1h", NextRunAt: &slot, Host: j.host}); err != nil {
			t.Fatal(err)
		}
	}
	// What creating the jobs announced (each its host) is read first.
	drain := func() []string {
		var got []string
		for {
			waitCtx, cancel := context.WithTimeout(ctx, time.Second)
			n, err := db.WaitForNotification(waitCtx)
			cancel()
			if err != nil {
				return got
			}
			got = append(got, n.Payload)
		}
	}
	if got := drain(); !slices.Equal(got, []string{"host:h1", "host:", "host:h2"}) {
		t.Fatalf("creating the jobs announced %q, want each job's host", got)
	}
	admitted, err := st.JobAdmitDue(ctx, store.JobAdmitDueParams{By: "h1", Now: now, Horizon: now, Limit: 10, SetAside: time.Minute, Decide: func(j model.Job) model.SlotDecision {
		return model.SlotDecision{Run: true, Trigger: "schedule", Planned: *j.NextRunAt, Next: &next}
	}})
	if err != nil || len(admitted) != 3 {
		t.Fatalf("admitted %+v, %v; want the three jobs' runs", admitted, err)
	}
	var pinned uuid.UUID
	for _, a := range admitted {
		if a.Job == "theirs" && a.Run != nil {
			pinned = *a.Run
		}
	}
	if got, want := drain(), []string{"run:" + pinned.String() + " host:h2"}; !slices.Equal(got, want) {
		t.Fatalf("h1's admission announced %q, want only %q (the run pinned to h2, named)", got, want)
	}
}

// Every repository schedule has its slot column, and no column is left without one.
func TestRepositorySchedulesHaveSlots(t *testing.T) {
	if len(store.MaintenanceSlots) != len(model.RepositorySchedules) {
		t.Errorf("%d slot columns for %d schedules", len(store.MaintenanceSlots), len(model.RepositorySchedules))
	}
	for _, s := range model.RepositorySchedules {
		if store.MaintenanceSlots[s.Name] == "" {
			t.Errorf("schedule %s has no slot column", s.Name)
		}
	}
}

// A restore asked for from the dashboard is admitted with a restore_requested event naming who
// asked, in the admission's transaction; one from the CLI writes none, and a refused admission
// (a live run of the job) writes neither run nor event.
func TestRunAdmitRequestedBy(t *testing.T) {
	b := storetest.Setup(t)
	asked := storetest.Job(t, b.Store, &storetest.JobOpts{Name: "asked", Repository: "/r"})
	fromCLI := storetest.Job(t, b.Store, &storetest.JobOpts{Name: "from-cli", Repository: "/r2"})
	restore := func(job, by string) (model.Run, error) {
		return b.Store.RunAdmit(b.Ctx, store.RunAdmitParams{Job: job, Trigger: model.TriggerManual, Kind: model.KindRestore, Host: b.Host,
			Restore: model.Restore{Target: "/restored", Snapshot: strings.Repeat("9", 64)}, RequestedBy: by})
	}
	requested := func() []model.Event {
		t.Helper()
		events, err := b.Store.EventList(b.Ctx, store.EventListParams{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var out []model.Event
		for _, e := range events {
			if e.Event == "restore_requested" {
				out = append(out, e)
			}
		}
		return out
	}
	run, err := restore(asked.Name, "ops-team")
	if err != nil {
		t.Fatal(err)
	}
	events := requested()
	if len(events) != 1 || events[0].Job != asked.Name || events[0].Run == nil || *events[0].Run != run.ID ||
		!strings.Contains(string(events[0].Details), `"requested_by": "ops-team"`) || events[0].Reason != "restore asked for from the dashboard by ops-team" {
		t.Fatalf("events after a dashboard restore: %+v", events)
	}
	if _, err := restore(asked.Name, "ops-team"); err == nil {
		t.Fatal("a second restore beside a live one was admitted")
	}
	if n := len(requested()); n != 1 {
		t.Fatalf("a refused admission left %d restore_requested events, want the first alone", n)
	}
	if _, err := restore(fromCLI.Name, ""); err != nil {
		t.Fatal(err)
	}
	if n := len(requested()); n != 1 {
		t.Fatalf("a restore from the CLI wrote a restore_requested event (%d in all)", n)
	}
}
