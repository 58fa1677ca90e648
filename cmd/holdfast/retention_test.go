package main_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type planJSON struct {
	Summary          string `json:"summary"`
	Kept             int    `json:"kept"`
	Deletable        int    `json:"deletable"`
	Protected        int    `json:"protected"`
	OutsideScope     int    `json:"outside_scope"`
	ReclaimableBytes int64  `json:"reclaimable_bytes"`
	Guardrail        string `json:"guardrail"`
	PlanID           string `json:"plan_id"`
	RunID            string `json:"run_id"`
	Outcome          string `json:"outcome"`
	Decisions        []struct {
		SnapshotID   string    `json:"snapshot_id"`
		Time         time.Time `json:"time"`
		Keep         bool      `json:"keep"`
		Reason       string    `json:"reason"`
		Protected    bool      `json:"protected"`
		OutsideScope bool      `json:"outside_scope"`
	} `json:"decisions"`
}

func (p planJSON) deletable() []string {
	var ids []string
	for _, d := range p.Decisions {
		if !d.Keep {
			ids = append(ids, d.SnapshotID)
		}
	}
	slices.Sort(ids)
	return ids
}

type resticSnapshot struct {
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	Host string    `json:"hostname"`
	Tags []string  `json:"tags"`
}

func (w *world) resticSnapshots(repo, pw string) map[string]resticSnapshot {
	w.t.Helper()
	out := w.restic(repo, pw, "snapshots", "--json")
	var list []resticSnapshot
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		w.t.Fatalf("restic snapshots: %v\n%s", err, out)
	}
	m := make(map[string]resticSnapshot, len(list))
	for _, s := range list {
		m[s.ID] = s
	}
	return m
}

// A repository with ~40 snapshots of two jobs, one from another host and one made by something
// else: `retention apply` deletes exactly the plan's deletable snapshots of its job, never a
// protected one, refuses a plan that deletes too much until forced, records every plan, and a
// forget run that finds an id gone says so instead of succeeding.
func TestRetentionApply(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 2, 64<<10)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	w.mustRun("job", "add", "web", "--repo", repo, "--password-file", pw, "--path", data,
		"--keep-daily", "7", "--keep-weekly", "4", "--keep-monthly", "2")
	w.mustRun("job", "add", "db", "--repo", repo, "--password-file", pw, "--path", data, "--preset", "7d")

	// Snapshots as holdfast's backups tag them, at chosen times: job web every 1-3 days for ~3
	// months and a few within the last day; job db; web's tag on another host; and an untagged one.
	now := time.Now().UTC()
	var backups [][]string
	backup := func(at time.Time, host string, tags ...string) {
		args := []string{"backup", "--time", at.Format("2006-01-02 15:04:05"), "--host", host}
		for _, tag := range tags {
			args = append(args, "--tag", tag)
		}
		backups = append(backups, append(args, data))
	}
	var webTimes []time.Time
	for _, h := range []int{2, 7, 20} {
		webTimes = append(webTimes, now.Add(-time.Duration(h)*time.Hour))
	}
	for day := 1; len(webTimes) < 34; day += 1 + day%3 {
		webTimes = append(webTimes, now.Add(-time.Duration(day)*24*time.Hour-90*time.Minute))
	}
	for _, at := range webTimes {
		backup(at, host, "holdfast-job=web")
	}
	for _, d := range []int{1, 3, 12, 40} {
		backup(now.Add(-time.Duration(d)*24*time.Hour), host, "holdfast-job=db")
	}
	backup(now.Add(-60*24*time.Hour), "elsewhere", "holdfast-job=web")
	backup(now.Add(-61*24*time.Hour), host, "made-by-hand")
	w.resticTZAll(repo, pw, backups)
	before := w.resticSnapshots(repo, pw)
	if len(before) != 40 {
		t.Fatalf("the repository has %d snapshots, want 40", len(before))
	}

	// simulate, on the repository's own listing, keeps what restic forget keeps.
	listing := filepath.Join(w.dir, "snapshots.json")
	if err := os.WriteFile(listing, []byte(w.restic(repo, pw, "snapshots", "--json")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, policy := range [][]string{{"--keep-daily", "5", "--keep-weekly", "3"}, {"--keep-last", "4"}, {"--keep-within", "10d"},
		{"--keep-monthly", "2", "--keep-hourly", "3"}} {
		sim := w.plan(append([]string{"retention", "simulate", "--snapshots", listing, "--within-from", "latest",
			"--host", host, "--tag", "holdfast-job=web", "--json"}, policy...)...)
		var simKept []string
		for _, d := range sim.Decisions {
			if d.Keep && !d.OutsideScope {
				simKept = append(simKept, d.SnapshotID)
			}
		}
		var groups []struct {
			Keep []resticSnapshot `json:"keep"`
		}
		out := w.restic(repo, pw, append([]string{"forget", "--dry-run", "--json", "--host", host, "--tag", "holdfast-job=web"}, policy...)...)
		if err := json.Unmarshal([]byte(out), &groups); err != nil || len(groups) != 1 {
			t.Fatalf("restic forget --dry-run %v: %v, %d groups\n%s", policy, err, len(groups), out)
		}
		var resticKept []string
		for _, s := range groups[0].Keep {
			resticKept = append(resticKept, s.ID)
		}
		slices.Sort(simKept)
		slices.Sort(resticKept)
		if !slices.Equal(simKept, resticKept) {
			t.Errorf("%v: simulate keeps %d, restic forget keeps %d:\n%v\n%v", policy, len(simKept), len(resticKept), simKept, resticKept)
		}
	}

	plan := w.plan("retention", "plan", "web", "--json")
	if plan.Deletable == 0 || plan.Kept == 0 || plan.OutsideScope != 6 {
		t.Fatalf("plan of web: %s (kept %d, deletable %d, outside scope %d; want 6 outside: db's 4, another host's, the untagged)",
			plan.Summary, plan.Kept, plan.Deletable, plan.OutsideScope)
	}
	if plan.Guardrail == "" {
		t.Fatalf("plan deletes %d of 34 snapshots, yet the 50%% guardrail does not object", plan.Deletable)
	}
	for _, d := range plan.Decisions {
		s := before[d.SnapshotID]
		inScope := s.Host == host && slices.Contains(s.Tags, "holdfast-job=web")
		if d.OutsideScope == inScope || (d.OutsideScope && !d.Keep) || d.Reason == "" {
			t.Fatalf("decision %+v for snapshot %+v", d, s)
		}
	}

	// The guardrail refuses, with the numbers, and nothing changes.
	r := w.run("retention", "apply", "web")
	if r.code != 2 || !strings.Contains(r.stderr, fmt.Sprintf("%d of 34", plan.Deletable)) {
		t.Fatalf("apply of a plan deleting %d of 34: exit %d, stderr %q; want exit 2 and the numbers", plan.Deletable, r.code, r.stderr)
	}
	if after := w.resticSnapshots(repo, pw); len(after) != 40 {
		t.Fatalf("a refused plan changed the repository: %d snapshots left", len(after))
	}

	// A legal hold keeps a snapshot the policy would delete.
	held := plan.deletable()[0]
	w.mustRun("snapshot", "hold", held[:10], "--why", "audit 2026")
	plan = w.plan("retention", "plan", "web", "--json")
	if slices.Contains(plan.deletable(), held) || plan.Protected != 1 {
		t.Fatalf("after the hold on %s the plan still deletes it or shows %d protected", held[:8], plan.Protected)
	}

	// Applied by force while no daemon runs; one of its snapshots is then forgotten behind
	// holdfast's back, so the forget run meets an id that is gone.
	applied := w.plan("retention", "apply", "web", "--force", "--json")
	if applied.Outcome != "applied" || applied.RunID == "" || !slices.Equal(applied.deletable(), plan.deletable()) {
		t.Fatalf("forced apply: outcome %q run %q, deletes %v; want applied, a run, and %v", applied.Outcome, applied.RunID,
			applied.deletable(), plan.deletable())
	}
	gone := applied.deletable()[len(applied.deletable())-1]
	w.restic(repo, pw, "forget", gone)
	w.startDaemon()
	run := w.waitEnd(applied.RunID)
	if run.Status != "partial" || !strings.Contains(run.Reason, gone[:8]) {
		t.Fatalf("forget run with a vanished id = %s: %s; want partial naming %s", run.Status, run.Reason, gone[:8])
	}
	after := w.resticSnapshots(repo, pw)
	for id := range before {
		_, kept := after[id]
		if want := !slices.Contains(applied.deletable(), id); kept != want {
			t.Errorf("snapshot %s kept=%v, want %v", id[:8], kept, want)
		}
	}
	if _, ok := after[held]; !ok {
		t.Fatalf("the held snapshot %s was deleted", held[:8])
	}

	// Re-planning the result deletes nothing more, and every plan is on record.
	if again := w.plan("retention", "plan", "web", "--json"); again.Deletable != 0 {
		t.Fatalf("the plan of the result deletes %d more: %s", again.Deletable, again.Summary)
	}
	var history []struct {
		Outcome   string            `json:"outcome"`
		Actor     string            `json:"actor"`
		Forced    bool              `json:"forced"`
		DeleteIDs []string          `json:"delete_ids"`
		Decisions []json.RawMessage `json:"decisions"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("retention", "history", "web", "--json")), &history); err != nil {
		t.Fatal(err)
	}
	if len(history) != 2 || history[0].Outcome != "applied" || !history[0].Forced || history[1].Outcome != "refused" ||
		len(history[0].Decisions) != 40 || history[0].Actor == "" {
		t.Fatalf("plan history: %+v", history)
	}
	w.noLocks(repo)
	w.checkInvariants()
}

// resticTZ runs restic in UTC, so that `backup --time` is read as UTC.
func (w *world) resticTZ(repo, passwordFile string, args ...string) {
	w.t.Helper()
	cmd := exec.Command("restic", append([]string{"--repo", repo, "--password-file", passwordFile, "--no-cache"}, args...)...)
	cmd.Env = append(os.Environ(), "TZ=UTC")
	if out, err := cmd.CombinedOutput(); err != nil {
		w.t.Fatalf("restic %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// resticTZAll runs restic in UTC once for each command line, four at a time: backups of one
// repository share its lock, and each waits mostly on restic's key derivation.
func (w *world) resticTZAll(repo, passwordFile string, commands [][]string) {
	w.t.Helper()
	errs := make([]error, len(commands))
	next := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range next {
				cmd := exec.Command("restic", append([]string{"--repo", repo, "--password-file", passwordFile, "--no-cache"}, commands[i]...)...)
				cmd.Env = append(os.Environ(), "TZ=UTC")
				if out, err := cmd.CombinedOutput(); err != nil {
					errs[i] = fmt.Errorf("restic %s: %v\n%s", strings.Join(commands[i], " "), err, out)
				}
			}
		})
	}
	for i := range commands {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) plan(args ...string) planJSON {
	w.t.Helper()
	var p planJSON
	if err := json.Unmarshal([]byte(w.mustRun(args...)), &p); err != nil {
		w.t.Fatal(err)
	}
	return p
}

// Bad policies and protections are refused with exit 2 and a message, and change nothing.
func TestRetentionBadInput(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 1, 1<<10)
	w.mustRun("job", "add", "web", "--repo", repo, "--password-file", pw, "--path", data, "--keep-last", "3")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "edit", "web", "--keep-daily", "-1"}, "--keep-daily -1"},
		{[]string{"job", "edit", "web", "--keep-within", "3 days"}, "3 days"},
		{[]string{"job", "edit", "web", "--retention-tz", "Mars/Olympus"}, "Mars/Olympus"},
		{[]string{"job", "edit", "web", "--preset", "forever"}, "forever"},
		{[]string{"job", "edit", "web", "--keep-last", "0"}, "keeps nothing"},
		{[]string{"job", "edit", "web", "--retention-max-delete", "0"}, "1 to 100"},
		{[]string{"job", "add", "other", "--repo", repo, "--password-file", pw, "--path", data, "--keep-weekly", "-2"}, "--keep-weekly -2"},
		{[]string{"retention", "plan", "web", "--at", "yesterday"}, "yesterday"},
		{[]string{"retention", "apply", "web", "--at", "2026-01-01"}, "--at"},
		{[]string{"retention", "simulate", "--keep-last", "1"}, "--snapshots"},
		{[]string{"retention", "simulate", "--snapshots", data + "/missing.json", "--keep-last", "1"}, "missing.json"},
		{[]string{"retention", "simulate", "--snapshots", "/etc/hostname", "--keep-last", "1"}, "restic snapshots"},
		{[]string{"retention", "simulate", "--snapshots", "/etc/hostname", "--keep-last", "1", "--within-from", "then"}, "then"},
		{[]string{"snapshot", "hold", "xyz!"}, "hex"},
		{[]string{"snapshot", "hold", "abcdef12"}, "not found"},
		{[]string{"snapshot", "lock", "abcdef12", "--until", "2001-01-01"}, "future"},
	} {
		r := w.run(c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("holdfast %s: exit %d, stderr %q; want exit 2 and one line with %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
	var j struct {
		Retention struct {
			KeepLast int `json:"keep_last"`
		} `json:"retention"`
		RetentionMaxDelete float64 `json:"retention_max_delete"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("job", "show", "web", "--json")), &j); err != nil {
		t.Fatal(err)
	}
	if j.Retention.KeepLast != 3 || j.RetentionMaxDelete != 0.5 {
		t.Fatalf("bad input changed the job: %+v", j)
	}
	if r := w.run("job", "show", "other"); r.code != 2 {
		t.Fatalf("a refused job add left a job behind: %q", r.stdout)
	}
}
