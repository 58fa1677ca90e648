package main_test

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/testenv"
)

// The append-only setup: a backup host (web1) writes a repository through rclone's append-only
// REST server, and a pruning host (vault) reaches the same repository through a server that
// may delete. Backups and verifications succeed through the append-only server; a forget or a
// prune of a job with no pruning host is refused before it exists; a job's plan, made on its
// host, is what its pruning host deletes, and its forgets and prunes run there alone.
func TestAppendOnly(t *testing.T) {
	parallel(t)
	c := newCluster(t, "web1", "vault")
	w := c.w
	dir, pw := w.resticRepo("repo")
	appendOnly := testenv.RcloneRestic(t, dir, true)
	full := testenv.RcloneRestic(t, dir, false)
	data := w.sampleData("data", 3, 64<<10)

	w.mustRun("job", "add", "app", "--host", "web1", "--repo", appendOnly, "--password-file", pw, "--path", data,
		"--append-only", "--prune-host", "vault", "--prune-repository", full, "--keep-last", "1")
	w.mustRun("job", "add", "books", "--host", "web1", "--repo", appendOnly, "--password-file", pw, "--path", data,
		"--append-only", "--keep-last", "1")
	if out := w.mustRun("job", "show", "app"); !strings.Contains(out, "deletes from:  host vault, through "+full) {
		t.Fatalf("job show app does not say where it deletes:\n%s", out)
	}
	// What would delete through the append-only server, or says nothing of where, is refused
	// at once, in one line, changing nothing.
	for _, r := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "edit", "books", "--prune-schedule", "@daily"}, "--prune-host HOST"},
		{[]string{"job", "edit", "books", "--prune-repository", full}, "give --prune-host HOST too"},
		{[]string{"job", "edit", "app", "--prune-host", "web1", "--prune-repository", ""}, "the job's own host"},
		{[]string{"job", "edit", "app", "--prune-host", "", "--prune-repository", full}, "drop --prune-repository"},
		{[]string{"job", "edit", "app", "--prune-host", "bad host"}, "invalid host name"},
	} {
		if res := w.run(r.args...); res.code != 2 || !strings.Contains(res.stderr, r.want) || strings.Count(res.stderr, "\n") != 1 {
			t.Errorf("holdfast %s: exit %d, %q; want exit 2 and one line saying %q", strings.Join(r.args, " "), res.code, res.stderr, r.want)
		}
	}
	var shown struct {
		AppendOnly      bool   `json:"append_only"`
		PruneHost       string `json:"prune_host"`
		PruneRepository string `json:"prune_repository"`
		PruneSchedule   string `json:"prune_schedule"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("job", "show", "app", "--json")), &shown); err != nil ||
		!shown.AppendOnly || shown.PruneHost != "vault" || shown.PruneRepository != full {
		t.Fatalf("job show app --json after the refused edits: %+v %v", shown, err)
	}

	c.start("web1")
	c.start("vault")
	for i := range 3 {
		// Each backup adds data of its own, which the prune then has to delete.
		fresh := make([]byte, 256<<10)
		_, _ = rand.Read(fresh)
		if err := os.WriteFile(filepath.Join(data, fmt.Sprintf("new-%d", i)), fresh, 0o644); err != nil {
			t.Fatal(err)
		}
		id := w.startRun("app")
		if r := w.waitEnd(id); r.Status != "succeeded" {
			t.Fatalf("backup %s through the append-only server: %s: %s", id, r.Status, r.Reason)
		}
		if on := c.ranOn(id, 1); !slices.Equal(on, []string{"web1"}) {
			t.Fatalf("backup %s ran on %v, want web1", id, on)
		}
	}
	for range 2 {
		if r := w.waitEnd(w.startRun("books")); r.Status != "succeeded" {
			t.Fatalf("backup of books: %s: %s", r.Status, r.Reason)
		}
	}
	var verify runJSON
	if err := json.Unmarshal([]byte(w.mustRun("run", "start", "app", "--verify", "--json")), &verify); err != nil {
		t.Fatal(err)
	}
	if r := w.waitEnd(verify.ID); r.Status != "succeeded" || !slices.Equal(c.ranOn(verify.ID, 1), []string{"web1"}) {
		t.Fatalf("verification through the append-only server: %s (%s) on %v; want succeeded on web1", r.Status, r.Reason, c.ranOn(verify.ID, 1))
	}

	// The server is append-only indeed: it refuses to delete a snapshot.
	snaps := w.resticSnapshots(dir, pw)
	if len(snaps) != 5 {
		t.Fatalf("%d snapshots after five backups", len(snaps))
	}
	for id := range snaps {
		req, err := http.NewRequest(http.MethodDelete, strings.TrimPrefix(appendOnly, "rest:")+"snapshots/"+id, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("DELETE of snapshot %s on the append-only server: %s, want 403 Forbidden", id[:8], resp.Status)
		}
		break
	}

	// books has no pruning host: its forget and prune are refused before any run exists, with
	// what to do; its plan is still shown.
	if p := w.plan("retention", "plan", "books", "--json"); p.Deletable != 1 || p.Kept != 1 {
		t.Fatalf("plan of books: %s; want one of its two snapshots deleted", p.Summary)
	}
	for _, args := range [][]string{
		{"retention", "apply", "books", "--force"},
		{"run", "start", "books", "--prune"},
		{"run", "start", "books", "--prune", "--wait"},
	} {
		res := w.run(args...)
		if res.code != 2 || !strings.Contains(res.stderr, "append-only") || !strings.Contains(res.stderr, "--prune-host HOST") ||
			strings.Count(res.stderr, "\n") != 1 {
			t.Errorf("holdfast %s: exit %d, %q; want exit 2 and one line saying to run it from a pruning host", strings.Join(args, " "), res.code, res.stderr)
		}
	}
	if runs, err := w.storeRuns("books"); err != nil || len(runs) != 2 {
		t.Fatalf("runs of books after the refusals: %d %v; want its two backups", len(runs), err)
	}
	var history []json.RawMessage
	if err := json.Unmarshal([]byte(w.mustRun("retention", "history", "books", "--json")), &history); err != nil || len(history) != 0 {
		t.Fatalf("plans recorded for books after the refusals: %d %v", len(history), err)
	}

	// app's plan, made here on web1 through the append-only server, is what vault deletes.
	plan := w.plan("retention", "plan", "app", "--json")
	if plan.Deletable != 2 || plan.OutsideScope != 2 {
		t.Fatalf("plan of app: %s (deletable %d, outside scope %d); want 2 of its 3 deleted, books' 2 outside", plan.Summary, plan.Deletable, plan.OutsideScope)
	}
	applied := w.plan("retention", "apply", "app", "--force", "--json")
	if applied.RunID == "" || !slices.Equal(applied.deletable(), plan.deletable()) {
		t.Fatalf("apply of app: run %q deleting %v; want a run deleting %v", applied.RunID, applied.deletable(), plan.deletable())
	}
	if r := w.waitEnd(applied.RunID); r.Status != "succeeded" {
		t.Fatalf("forget run %s: %s: %s", applied.RunID, r.Status, r.Reason)
	}
	if on, a := c.ranOn(applied.RunID, 1), c.attemptHosts(applied.RunID); !slices.Equal(on, []string{"vault"}) || len(a) != 1 || a[0].Host != "vault" {
		t.Fatalf("forget run %s: its unit on %v, attempts %+v; want one attempt, on vault", applied.RunID, on, a)
	}
	after := w.resticSnapshots(dir, pw)
	for id := range snaps {
		if _, kept := after[id]; kept == slices.Contains(plan.deletable(), id) {
			t.Errorf("snapshot %s kept=%v; the plan deletes %v", id[:8], kept, plan.deletable())
		}
	}
	// The listing vault made after its forget is the job's inventory: the snapshots it deleted
	// are gone from it, never recorded under the location vault reached.
	testenv.WaitFor(t, "the inventory of app without the forgotten snapshots", func() bool {
		var listed []snapshotOut
		if err := json.Unmarshal([]byte(w.mustRun("snapshot", "list", "app", "--json")), &listed); err != nil {
			t.Fatal(err)
		}
		for _, s := range listed {
			if slices.Contains(plan.deletable(), s.ID) {
				return false
			}
		}
		return len(listed) == len(after)
	})
	if under, err := w.store().SnapshotList(t.Context(), full); err != nil || len(under) != 0 {
		t.Fatalf("the inventory under the pruning host's location: %d snapshots, %v; want none", len(under), err)
	}

	var prune runJSON
	if err := json.Unmarshal([]byte(w.mustRun("run", "start", "app", "--prune", "--json")), &prune); err != nil {
		t.Fatal(err)
	}
	if r := w.waitEnd(prune.ID); r.Status != "succeeded" || !slices.Equal(c.ranOn(prune.ID, 1), []string{"vault"}) {
		t.Fatalf("prune %s: %s (%s) on %v; want succeeded on vault", prune.ID, r.Status, r.Reason, c.ranOn(prune.ID, 1))
	}
	// The repository is whole after the prune: the kept snapshots' data is all there.
	w.restic(dir, pw, "check", "--read-data")
	if id := w.startRun("app"); w.waitEnd(id).Status != "succeeded" {
		t.Fatalf("a backup after the prune: %+v", w.show(id))
	}
	w.noLocks(dir)
	w.checkInvariants()
}
