package main_test

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"
)

type span struct {
	run, kind  string
	start, end time.Time
}

// lastSpan is the run's last attempt, from its spawn claim (just before systemd was asked; a
// short unit may have ended before the daemon saw it start) to its end.
func (w *world) lastSpan(id string) span {
	w.t.Helper()
	var full struct {
		Kind     string `json:"kind"`
		Attempts []struct {
			SpawnedAt *string `json:"spawned_at"`
			EndedAt   *string `json:"ended_at"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("run", "show", id, "--json")), &full); err != nil {
		w.t.Fatal(err)
	}
	at := full.Attempts[len(full.Attempts)-1]
	return span{id, full.Kind, parseTime(w.t, at.SpawnedAt), parseTime(w.t, at.EndedAt)}
}

// A prune needs its repository to itself: it waits while backups of the repository run, and a
// backup waits while it runs. Their units never overlap.
func TestPruneIsExclusive(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	for _, name := range []string{"alpha", "beta", "gamma"} {
		data := w.sampleData("data-"+name, 4, slowData)
		w.mustRun("job", "add", name, "--repo", repo, "--password-file", pw, "--path", data)
	}
	w.mustRun("job", "add", "tidy", "--repo", repo, "--password-file", pw, "--path", w.sampleData("data-tidy", 1, 1<<10))
	w.slowBackups()
	w.startDaemon()
	a := w.startRun("alpha")
	b := w.startRun("beta")
	w.waitRun(a, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	var pruneOut runJSON
	if err := json.Unmarshal([]byte(w.mustRun("run", "start", "tidy", "--prune", "--json")), &pruneOut); err != nil {
		t.Fatal(err)
	}
	prune := pruneOut.ID
	sawWaiting := false
	w.waitRun(prune, "a wait or the end", func(r runJSON) bool {
		for _, l := range w.runs("tidy") {
			sawWaiting = sawWaiting || strings.Contains(l.WaitingReason, "repository busy")
		}
		return sawWaiting || ended(r)
	})
	g := w.startRun("gamma") // admitted while the prune waits or runs: it must not overlap it
	var spans []span
	for _, id := range []string{a, b, prune, g} {
		r := w.waitEnd(id)
		if r.Status != "succeeded" {
			t.Fatalf("run %s = %+v, want succeeded", id, r)
		}
		spans = append(spans, w.lastSpan(id))
	}
	if !sawWaiting {
		t.Fatal("the prune never waited for the running backups")
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for i, p := range spans {
		if p.kind != "prune" {
			continue
		}
		for j, o := range spans {
			if i != j && o.start.Before(p.end) && p.start.Before(o.end) {
				t.Fatalf("prune %v overlaps backup %v", p, o)
			}
		}
	}
	w.noLocks(repo)
	w.checkInvariants()
}

// A prune schedule admits prune runs on its own slots; a slot that comes while the job's backup
// is live is put off until the backup has ended, never run beside it or dropped.
func TestPruneSchedule(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 4, slowData)
	w.mustRun("job", "add", "web", "--repo", repo, "--password-file", pw, "--path", data)
	backup := w.startRun("web")
	w.mustRun("job", "edit", "web", "--prune-schedule", "@every 1s")
	w.slowBackups()
	w.startDaemon()
	b := w.waitEnd(backup)
	if b.Status != "succeeded" {
		t.Fatalf("backup: %+v", b)
	}
	var prunes []listedRun
	w.waitRuns("web", "two scheduled prunes ended", func(runs []listedRun) bool {
		prunes = prunes[:0]
		for _, r := range runs {
			if r.ID != backup && ended(runJSON{Status: r.Status}) {
				prunes = append(prunes, r)
			}
		}
		return len(prunes) >= 2
	})
	bEnd := parseTime(t, w.show(backup).FinishedAt)
	for _, p := range prunes {
		var full struct {
			Kind     string `json:"kind"`
			Trigger  string `json:"trigger"`
			Status   string `json:"status"`
			Attempts []struct {
				SpawnedAt *string `json:"spawned_at"` // the claim, just before systemd was asked
			} `json:"attempts"`
		}
		if err := json.Unmarshal([]byte(w.mustRun("run", "show", p.ID, "--json")), &full); err != nil {
			t.Fatal(err)
		}
		if full.Kind != "prune" || full.Trigger != "schedule" || full.Status != "succeeded" {
			t.Fatalf("scheduled prune %s: %+v", p.ID, full)
		}
		if start := parseTime(t, full.Attempts[0].SpawnedAt); start.Before(bEnd) {
			t.Fatalf("prune %s started at %s, before the backup ended at %s", p.ID, start, bEnd)
		}
	}
	if next := w.job("web").NextPruneAt; next == nil {
		t.Fatal("the job has no next prune slot")
	}
	// No more prunes; the one that may be running ends before the repository is looked at.
	w.mustRun("job", "edit", "web", "--prune-schedule", "")
	if w.job("web").NextPruneAt != nil {
		t.Fatal("an empty prune schedule left a next prune slot")
	}
	for _, r := range w.runs("web") {
		w.waitEnd(r.ID)
	}
	w.noLocks(repo)
	w.checkInvariants()
}
