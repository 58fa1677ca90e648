package reconcile_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/reconcile"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

// A backup whose summary names as its snapshot 100 KiB of text (what the job's user could write
// into the journal) ends as its exit says, with no snapshot id: neither the run, its event, its
// reason nor the inventory carries the text, and the reason says why there is no id.
func TestHostileSummarySnapshotID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	resticBin := testenv.Restic(t)
	dir := testenv.SharedDir(t)
	mark := "hf-mark-" + strings.Repeat("q", 8)
	hostile := "4b925b96" + strings.Repeat("z", 100<<10) + mark
	idFile := filepath.Join(dir, "id")
	if err := os.WriteFile(idFile, []byte(hostile), 0o644); err != nil {
		t.Fatal(err)
	}
	// restic backup prints a summary of its own making and exits 0; restic's other commands run.
	fake := filepath.Join(dir, "restic")
	script := `#!/bin/sh
for a; do
	if [ "$a" = backup ]; then
		printf '{"message_type":"summary","files_new":1,"data_added":5,"total_files_processed":1,"total_bytes_processed":5,"snapshot_id":"%s"}\n' "$(cat ID)"
		exit 0
	fi
done
exec REAL "$@"
`
	if err := os.WriteFile(fake, []byte(strings.NewReplacer("ID", idFile, "REAL", resticBin).Replace(script)), 0o755); err != nil {
		t.Fatal(err)
	}
	pw, repo := filepath.Join(dir, "pw"), filepath.Join(dir, "repo")
	if err := os.WriteFile(pw, []byte("pw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := storetest.Setup(t)
	st := b.Store
	rn, err := systemd.New(ctx, systemd.Config{Address: testenv.PrivateSystemd(t).Address, CallTimeout: testenv.Patience})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rn.Close)
	rec, err := reconcile.New(reconcile.Config{Store: st, Runner: rn, Inventory: st, StateDir: filepath.Join(dir, "state"),
		Binary: testenv.HoldfastBinary(t), ResticBinary: fake, SpawnGrace: 10 * time.Second, RunBudget: testenv.Patience,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.JobCreate(ctx, model.Job{Name: "hostile", Engine: "restic", Repository: repo, PasswordFile: pw,
		Paths: []string{filepath.Join(dir, "data")}}); err != nil {
		t.Fatal(err)
	}
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: "hostile", Trigger: "manual", Kind: model.KindBackup})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(testenv.Patience); ; {
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
	if run.Status != model.StatusSucceeded || run.SnapshotID != "" {
		t.Fatalf("run %s (%.300s), snapshot %.40q; want succeeded (restic exited 0) with no snapshot id", run.Status, run.Reason, run.SnapshotID)
	}
	if !strings.Contains(run.Reason, `the journal's summary named as its snapshot "4b925b96zzzzzzzz…", which is not 8 to 64 hex digits`) || len(run.Reason) > 400 {
		t.Fatalf("reason %.500q (%d bytes); want it to say, briefly, why there is no snapshot id", run.Reason, len(run.Reason))
	}
	if snaps, err := st.SnapshotList(ctx, repo); err != nil || len(snaps) != 0 {
		t.Fatalf("inventory %+v, %v; want nothing from the summary", snaps, err)
	}
	conn := b.DB
	var summaryBytes, eventBytes, events int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(length(summary::text)), 0) FROM attempts WHERE run_id = $1`, run.ID).Scan(&summaryBytes); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(max(length(reason) + length(details::text)), 0) FROM events WHERE run_id = $1`,
		run.ID).Scan(&events, &eventBytes); err != nil {
		t.Fatal(err)
	}
	if summaryBytes == 0 || summaryBytes > 4<<10 || events == 0 || eventBytes > 1<<10 {
		t.Fatalf("the attempt keeps a summary of %d bytes, %d event(s) of up to %d bytes; want the summary (bounded) and small events",
			summaryBytes, events, eventBytes)
	}
	var leaks int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM runs WHERE reason LIKE '%' || $1 || '%' OR snapshot_id IS NOT NULL AND id = $2)
		+ (SELECT count(*) FROM events WHERE reason LIKE '%' || $1 || '%' OR details::text LIKE '%' || $1 || '%')
		+ (SELECT count(*) FROM attempts WHERE summary::text LIKE '%' || $1 || '%')`, mark, run.ID).Scan(&leaks); err != nil {
		t.Fatal(err)
	}
	if leaks != 0 {
		t.Fatalf("%d row(s) carry the end of the summary's text", leaks)
	}
}
