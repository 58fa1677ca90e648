package spawn_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/spawn"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

// restic unlock goes before an attempt only where the repository's history says a lock may be
// stale: after a clean end there is none; after an attempt killed by a signal, one that left no
// marker (a power loss) or one that met a lock (exit 11) there is, until a later unit has run;
// and the restart of an interrupted attempt unlocks whatever its end.
func TestUnlockOnlyAfterAnUncleanEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := storetest.Open(t)
	dir := t.TempDir()
	jobs := jobunit.Config{StateDir: filepath.Join(dir, "state"), Binary: "/usr/bin/holdfast", ResticBinary: "restic"}
	repo := filepath.Join(dir, "repo")
	for _, name := range []string{"a", "b"} { // two jobs sharing one repository
		if _, err := st.JobCreate(ctx, model.Job{Name: name, Engine: "restic", Repository: repo, PasswordFile: "/pw", Paths: []string{"/srv"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.JobCreate(ctx, model.Job{Name: "elsewhere", Engine: "restic", Repository: repo + "2", PasswordFile: "/pw", Paths: []string{"/srv"}}); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	tick := func() time.Time { clock = clock.Add(time.Second); return clock }
	// spec is the unit the next attempt of run on job gets, and why it unlocks.
	spec := func(jobName string, run model.Run, attempt int) (bool, string) {
		t.Helper()
		job, err := st.JobGet(ctx, jobName)
		if err != nil {
			t.Fatal(err)
		}
		s, why, err := spawn.AttemptSpec(ctx, st, jobs, job, run, attempt)
		if err != nil {
			t.Fatal(err)
		}
		unlocks := slices.Contains(s.ExecStart, "--before") && slices.Contains(s.ExecStart, "unlock")
		if unlocks != (why != "") {
			t.Fatalf("unit %v unlocks %v, but says why %q", s.ExecStart, unlocks, why)
		}
		return unlocks, why
	}
	// start claims and starts an attempt, as a spawn does.
	start := func(jobName string, run model.Run, attempt int) {
		t.Helper()
		if ok, blocked, err := st.AttemptClaimSpawn(ctx, model.Lease{Host: "h"}, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: attempt}, Unit: systemd.UnitName(jobName, run.ID, attempt)}); !ok || err != nil {
			t.Fatalf("claim: %v %q %v", ok, blocked, err)
		}
		if err := st.AttemptMarkStarted(ctx, model.Lease{Host: "h"}, store.AttemptMarkStartedParams{Ref: model.AttemptRef{Run: run.ID, No: attempt}, At: tick()}); err != nil {
			t.Fatal(err)
		}
	}
	finish := func(run model.Run, attempt int, m systemd.Marker, status string) {
		t.Helper()
		if ok, err := st.AttemptFinish(ctx, model.Lease{Host: "h"}, model.Ending{RunID: run.ID, Attempt: attempt, At: tick(), Status: status, Reason: "test",
			ServiceResult: m.ServiceResult, ExitCode: m.ExitCode, ExitStatus: m.ExitStatus}); !ok || err != nil {
			t.Fatalf("finish: %v %v", ok, err)
		}
	}
	released := ledger.Settlement{Release: true, Source: "test"}
	restart := func(run model.Run, attempt int, m systemd.Marker) {
		t.Helper()
		if ok, paused, err := st.AttemptRestart(ctx, model.Lease{Host: "h"}, model.Restarting{RunID: run.ID, Attempt: attempt, At: tick(),
			ServiceResult: m.ServiceResult, ExitCode: m.ExitCode, ExitStatus: m.ExitStatus, Settlement: &released}); !ok || paused != "" || err != nil {
			t.Fatalf("restart: %v %q %v", ok, paused, err)
		}
	}
	admit := func(jobName string) model.Run {
		t.Helper()
		run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: jobName, Trigger: "manual", Kind: model.KindBackup})
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	mustUnlock := func(want bool, jobName string, run model.Run, attempt int, about string) {
		t.Helper()
		if got, why := spec(jobName, run, attempt); got != want {
			t.Fatalf("%s: unlock = %v (%q), want %v", about, got, why, want)
		}
	}

	r1 := admit("a")
	mustUnlock(false, "a", r1, 1, "a repository with no history")
	start("a", r1, 1)
	finish(r1, 1, systemd.Marker{ServiceResult: "success", ExitCode: "exited", ExitStatus: "0"}, model.StatusSucceeded)

	r2 := admit("a")
	mustUnlock(false, "a", r2, 1, "after a clean end")
	start("a", r2, 1)
	restart(r2, 1, systemd.Marker{ServiceResult: "signal", ExitCode: "killed", ExitStatus: "KILL"})
	mustUnlock(true, "a", r2, 2, "after an attempt killed by SIGKILL")
	r3 := admit("b")
	mustUnlock(true, "b", r3, 1, "another job's run on the same repository")
	r4 := admit("elsewhere")
	mustUnlock(false, "elsewhere", r4, 1, "a run on another repository")

	// Attempt 2 started after the kill (so it unlocked) and ended interrupted by SIGINT, which
	// restic cleans up after: another run need not unlock, but the restart of the interrupted
	// run does all the same (a reboot's stop has left the lock behind).
	start("a", r2, 2)
	restart(r2, 2, systemd.Marker{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "130"})
	mustUnlock(false, "b", r3, 1, "after SIGINT, on the other job")
	if _, why := spec("a", r2, 3); !strings.Contains(why, "attempt 2 of run "+r2.ID.String()+" was interrupted") {
		t.Fatalf("the restart after SIGINT: unlock because %q, want because attempt 2 was interrupted", why)
	}

	// A power loss: no marker.
	start("a", r2, 3)
	restart(r2, 3, systemd.Marker{})
	mustUnlock(true, "a", r2, 4, "after an attempt that left no marker")
	start("a", r2, 4)
	finish(r2, 4, systemd.Marker{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "3"}, model.StatusPartial)

	// A run that could not lock met a lock that may be stale.
	start("b", r3, 1)
	finish(r3, 1, systemd.Marker{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "11"}, model.StatusFailed)
	r5 := admit("a")
	mustUnlock(true, "a", r5, 1, "after exit 11")
}
