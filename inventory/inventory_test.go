package inventory_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/inventory"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

// A restic backup that ends puts its snapshot in the inventory from its own summary, and no
// `restic snapshots` runs after it (every restic the reconciler starts, in the backup's unit or
// a query unit, goes through a script that notes its arguments in the job's cache, the one
// place all of them may write). The row is held like any other; `snapshot list --refresh`
// (inventory.Refresh) then completes that same row with restic's listing: restic's full id, host,
// tags and paths are those the row from the summary said, and the hold stays.
func TestBackupSnapshotFromSummary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	resticBin := testenv.Restic(t)
	dir := testenv.SharedDir(t)
	pw, repo := filepath.Join(dir, "pw"), filepath.Join(dir, "repo")
	if err := os.WriteFile(pw, []byte(testenv.ResticPassword+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, name := range []string{"b", "a"} { // not in restic's order, one with a trailing slash
		p := filepath.Join(dir, "data", name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "f"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p+"/")
	}
	testenv.ResticRepo(t, repo)
	wrapper := filepath.Join(dir, "restic")
	script := `#!/bin/sh
prev=
for a; do [ "$prev" = --cache-dir ] && log="$a/restic-calls"; prev=$a; done
echo "$*" >> "${log:?no --cache-dir}"
exec REAL "$@"
`
	if err := os.WriteFile(wrapper, []byte(strings.Replace(script, "REAL", resticBin, 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, storetest.Migrated(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	rn, err := systemd.New(ctx, systemd.Config{Address: testenv.PrivateSystemd(t).Address, CallTimeout: testenv.Patience})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rn.Close)
	cfg := reconcile.Config{Store: st, Runner: rn, Inventory: st, StateDir: filepath.Join(dir, "state"), Binary: testenv.HoldfastBinary(t),
		ResticBinary: wrapper, SpawnGrace: 10 * time.Second, RunBudget: testenv.Patience, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rec, err := reconcile.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.JobCreate(ctx, model.Job{Name: "inv", Engine: "restic", Repository: repo, PasswordFile: pw, Paths: paths}); err != nil {
		t.Fatal(err)
	}
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "inv", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	// Alone (its services not started), the reconciler spawns and repairs within Sweep: what it
	// asks restic after the run ended has been asked when the pass that ended it returns.
	deadline := time.Now().Add(testenv.Patience)
	for {
		if stats, err := rec.Sweep(ctx); err != nil || stats.Errors > 0 {
			t.Fatalf("sweep: %+v %v", stats, err)
		}
		got, err := st.RunGet(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !model.Live(got.Status) {
			run = got
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %+v never ended", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if run.Status != model.StatusSucceeded || run.SnapshotID == "" {
		t.Fatalf("run = %+v, want succeeded with a snapshot", run)
	}
	calls, err := os.ReadFile(filepath.Join(jobunit.CacheDir(cfg.StateDir, 0, "inv"), "restic-calls"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(calls), " backup ") || strings.Contains(string(calls), " snapshots") {
		t.Fatalf("restic was run as:\n%s\nwant a backup and no snapshots listing", calls)
	}

	attempts, err := st.AttemptList(ctx, run.ID)
	if err != nil || len(attempts) != 1 || attempts[0].StartedAt == nil {
		t.Fatalf("attempts %+v, %v; want one that started", attempts, err)
	}
	host, _ := os.Hostname()
	snaps, err := st.SnapshotList(ctx, repo)
	if err != nil || len(snaps) != 1 {
		t.Fatalf("inventory %+v, %v; want the run's snapshot", snaps, err)
	}
	fromSummary := snaps[0]
	if fromSummary.ID != run.SnapshotID || fromSummary.Source != model.SourceSummary || fromSummary.RunID == nil ||
		*fromSummary.RunID != run.ID || fromSummary.JobName != "inv" || fromSummary.Host != host ||
		!fromSummary.Time.Equal(*attempts[0].StartedAt) {
		t.Fatalf("snapshot from the summary %+v; want id %s, run %s, host %s, the attempt's start %s", fromSummary,
			run.SnapshotID, run.ID, host, attempts[0].StartedAt)
	}
	if _, err := st.SnapshotHold(ctx, store.SnapshotHoldParams{Prefix: run.SnapshotID, By: "auditor", Why: "case 9"}); err != nil {
		t.Fatal(err)
	}

	// What `holdfast snapshot list --refresh inv` does.
	job, err := st.JobGet(ctx, "inv")
	if err != nil {
		t.Fatal(err)
	}
	listed, err := inventory.Refresh(ctx, inventory.Config{Store: st, Runner: rn, StateDir: cfg.StateDir, Binary: cfg.Binary,
		ResticBinary: resticBin}, job)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 {
		t.Fatalf("inventory after the listing %+v, want the run's snapshot once", listed)
	}
	s := listed[0]
	if len(s.ID) != 64 || !strings.HasPrefix(s.ID, run.SnapshotID) || s.Source != model.SourceListing || s.LegalHoldAt == nil ||
		s.LegalHoldWhy != "case 9" || !s.FirstSeenAt.Equal(fromSummary.FirstSeenAt) || s.RunID == nil || *s.RunID != run.ID {
		t.Fatalf("completed snapshot %+v; want the full id of %s, the hold and first sighting kept", s, run.SnapshotID)
	}
	// The summary's row named it as restic did, but for restic's own time, near the attempt's
	// start (stamped by the database once the unit is up, so restic's may come first).
	if s.Host != fromSummary.Host || !slices.Equal(s.Tags, fromSummary.Tags) || !slices.Equal(s.Paths, fromSummary.Paths) {
		t.Fatalf("restic lists host %q tags %v paths %v; the summary's row said %q %v %v", s.Host, s.Tags, s.Paths,
			fromSummary.Host, fromSummary.Tags, fromSummary.Paths)
	}
	if s.Time.Before(fromSummary.Time.Add(-time.Minute)) || s.Time.After(fromSummary.Time.Add(time.Minute)) {
		t.Fatalf("restic's time %s, the attempt started at %s", s.Time, fromSummary.Time)
	}
	violations, err := st.InvariantViolations(ctx)
	if err != nil || len(violations) > 0 {
		t.Fatalf("invariants: %v %v", violations, err)
	}
}
