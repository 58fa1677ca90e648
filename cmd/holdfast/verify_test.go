package main_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

// A verification of a sound repository succeeds; after 4 KiB inside a pack are overwritten, one
// that reads all the data fails with restic's reason, a verify_failed event and a metric that
// says so.
func TestVerify(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	rw := newRestoreWorld(t, w, 2, 1<<20)
	hook := newReceiver(t)
	w.mustRun("notify", "add", "hook", "--webhook", hook.URL, "--events", "verified,verify_failed")
	addr := testenv.FreeAddr(t)
	rw.startDaemon("--listen", addr, "--web-auth-file", webAuthFile(t))
	rw.backup()

	verify := func(args ...string) (restoreOut, int) {
		t.Helper()
		res := rw.run(append([]string{"run", "start", "home", "--verify", "--wait", "--json"}, args...)...)
		var r restoreOut
		if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
			t.Fatalf("run start --verify %v: exit %d, %v\n%s\n%s", args, res.code, err, res.stdout, res.stderr)
		}
		return r, res.code
	}
	ok, code := verify("--read-data-subset", "100%")
	if code != 0 || ok.Kind != "verify" || ok.Status != "succeeded" || !strings.Contains(ok.Reason, "no errors") {
		t.Fatalf("verify of a sound repository: exit %d, %+v", code, ok)
	}
	metric := func(name string) (float64, bool) {
		for _, m := range scrape(t, "http://"+addr+"/metrics")[name].GetMetric() {
			if matches(m, []string{"job_name", "home"}) {
				return m.GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	if v, found := metric("holdfast_job_last_verify_ok"); !found || v != 1 {
		t.Fatalf("holdfast_job_last_verify_ok after a sound check = %v (found %v), want 1", v, found)
	}
	finished, _ := time.Parse(time.RFC3339Nano, *ok.FinishedAt)
	if v, _ := metric("holdfast_job_last_verify_success_timestamp_seconds"); v != float64(finished.UnixNano())/1e9 {
		t.Fatalf("last verify success metric %v, the run ended %s", v, finished)
	}

	corruptLargestPack(t, rw.repo)
	bad, code := verify("--read-data-subset", "100%")
	// One damaged pack is one finding: "Pack ID does not match" up to restic 0.16, "pack … contains
	// N errors" (and advice that is not a finding) from 0.17.
	finding := regexp.MustCompile(`\(1 finding, first: (Pack ID does not match|pack [0-9a-f]{64} contains \d+ errors?)`)
	if code != 4 || bad.Status != "failed" || !strings.Contains(bad.Reason, "repository contains errors") ||
		!finding.MatchString(bad.Reason) {
		t.Fatalf("verify of a corrupted pack: exit %d, %+v; want failed with restic's reason, one finding", code, bad)
	}
	if v, found := metric("holdfast_job_last_verify_ok"); !found || v != 0 {
		t.Fatalf("holdfast_job_last_verify_ok after a failed check = %v (found %v), want 0", v, found)
	}
	if v, _ := metric("holdfast_job_last_verify_success_timestamp_seconds"); v != float64(finished.UnixNano())/1e9 {
		t.Fatalf("a failed check moved the last verify success to %v", v)
	}
	// The events, in order: verified for the sound check, verify_failed for this one.
	var events []string
	if !testenv.Eventually(time.Minute, func() bool {
		events = events[:0]
		for _, r := range hook.requests() {
			var e struct {
				Event string `json:"event"`
				Run   string `json:"run"`
			}
			if json.Unmarshal([]byte(r.body), &e) == nil {
				events = append(events, e.Event+" "+e.Run)
			}
		}
		return len(events) >= 2
	}) || events[0] != "verified "+ok.ID || events[1] != "verify_failed "+bad.ID || len(events) != 2 {
		t.Fatalf("the webhook got %v; want verified %s then verify_failed %s", events, ok.ID, bad.ID)
	}
	// A verification takes restic's exclusive lock and leaves none; it charged nothing.
	w.noLocks(rw.repo)
	if bad.HoldBytes != 0 || bad.SettledBytes != 0 {
		t.Fatalf("a verify run held or settled bytes: %+v", bad)
	}
	w.checkInvariants()
}

// A verify schedule admits verification runs on its slots, reading the part of the data it
// names; a job whose scheduled verifications keep failing is overdue for verification, by its
// own reason, once the last success is older than --verify-alert-after.
func TestVerifySchedule(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	rw := newRestoreWorld(t, w, 1, 64<<10)
	hook := newReceiver(t)
	w.mustRun("notify", "add", "hook", "--webhook", hook.URL, "--events", "overdue")
	rw.startDaemon("--watch-interval", "500ms")
	rw.backup()
	// An hour's grace first: on a slow machine two periods of 1s may pass before the first check.
	w.mustRun("job", "edit", "home", "--verify-schedule", "@every 1s", "--verify-read-data", "5%", "--alert-failures", "0",
		"--verify-alert-after", "1h")
	var first listedRun
	w.waitRuns("home", "a scheduled verification ended", func(runs []listedRun) bool {
		for _, r := range runs {
			if r.ID != runs[len(runs)-1].ID && ended(runJSON{Status: r.Status}) {
				first = r
				return true
			}
		}
		return false
	})
	var v struct {
		restoreOut
		Trigger        string `json:"trigger"`
		ReadDataSubset string `json:"read_data_subset"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("run", "show", first.ID, "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Kind != "verify" || v.Trigger != "schedule" || v.ReadDataSubset != "5%" || v.Status != "succeeded" {
		t.Fatalf("scheduled verification = %+v, want a succeeded verify run of 5%% on the schedule", v)
	}
	if j := w.job("home"); j.OverdueSince != nil {
		t.Fatalf("overdue while verified: %+v", j)
	}

	// Every verification fails from now on (restic cannot open the repository); the last success
	// ages past --verify-alert-after.
	if err := os.Rename(filepath.Join(rw.repo, "config"), filepath.Join(rw.repo, "config.away")); err != nil {
		t.Fatal(err)
	}
	w.mustRun("job", "edit", "home", "--verify-alert-after", "3s")
	j := await(t, "job home overdue for verification", func() string { return "" }, func() jobJSON { return w.job("home") },
		func(j jobJSON) bool { return j.OverdueSince != nil })
	if !strings.Contains(j.OverdueReason, "verification overdue") {
		t.Fatalf("overdue reason %q, want it to say the verification is overdue", j.OverdueReason)
	}
	// Overdue by the age of the last success, which may come before the failing verification ends.
	var status string
	if !testenv.Eventually(time.Minute, func() bool {
		status = w.run("status", "--json").stdout
		return strings.Contains(status, `"last_verify": "failed"`)
	}) {
		t.Fatalf("status does not show the failed verification:\n%s", status)
	}
	if !testenv.Eventually(time.Minute, func() bool { return len(hook.requests()) > 0 }) ||
		!strings.Contains(hook.requests()[0].body, "verification overdue") {
		t.Fatalf("the webhook heard %v, want the overdue event for the verification", hook.requests())
	}
	w.mustRun("job", "edit", "home", "--verify-schedule", "", "--verify-read-data", "", "--verify-alert-after", "0")
	if err := os.Rename(filepath.Join(rw.repo, "config.away"), filepath.Join(rw.repo, "config")); err != nil {
		t.Fatal(err)
	}
}

// A drill restores a random sample of the latest snapshot into the unit's scratch directory,
// verifies it, records the sample and removes the files; on a corrupted repository it fails.
func TestDrill(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	rw := newRestoreWorld(t, w, 1, 1<<20)
	addr := testenv.FreeAddr(t)
	rw.startDaemon("--listen", addr, "--web-auth-file", webAuthFile(t))
	rw.backup()
	drill := func(n string) (restoreOut, drillJSON, int) {
		t.Helper()
		res := rw.run("run", "start", "home", "--verify", "--drill", n, "--wait", "--json")
		var r struct {
			restoreOut
			DrillFiles int       `json:"drill_files"`
			Drill      drillJSON `json:"drill"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
			t.Fatalf("run start --verify --drill %s: exit %d, %v\n%s\n%s", n, res.code, err, res.stdout, res.stderr)
		}
		if r.DrillFiles == 0 {
			t.Fatalf("the run records no drill: %s", res.stdout)
		}
		return r.restoreOut, r.Drill, res.code
	}
	r, d, code := drill("2")
	if code != 0 || r.Kind != "verify" || r.Status != "succeeded" || !strings.Contains(r.Reason, "drill complete: 2 file(s)") {
		t.Fatalf("drill of a sound repository: exit %d, %+v", code, r)
	}
	if len(d.Files) != 2 || d.Files[0] == d.Files[1] || !strings.HasPrefix(d.SnapshotID, rw.snapshot) || d.Candidates != 3 {
		t.Fatalf("drill sample = %+v, want 2 distinct files of the 3 in snapshot %s", d, rw.snapshot)
	}
	for _, f := range d.Files {
		if _, err := os.Stat(f); err != nil || !strings.HasPrefix(f, rw.data+"/") {
			t.Fatalf("drilled file %q is not one of the backed-up files (%v)", f, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(w.state, "runs", r.ID, "a1", "drill")); !os.IsNotExist(err) {
		t.Fatalf("the drill's scratch directory is still there: %v", err)
	}
	// status and the dashboard show the job's last drill.
	var st struct {
		Jobs []struct {
			Name        string  `json:"name"`
			LastDrilled *string `json:"last_drilled_at"`
			LastDrill   string  `json:"last_drill"`
			LastVerify  string  `json:"last_verify"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(rw.run("status", "--json").stdout), &st); err != nil || len(st.Jobs) != 1 ||
		st.Jobs[0].LastDrill != "succeeded" || st.Jobs[0].LastDrilled == nil || *st.Jobs[0].LastDrilled != *r.FinishedAt {
		t.Fatalf("status after the drill: %+v (%v), want its last drill, succeeded at %s", st, err, *r.FinishedAt)
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Header.Set("Authorization", "Bearer "+webToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`<th>Drilled</th>`).Match(page) || !regexp.MustCompile(`<td>[^<]+ ago</td><td>[^<]+ ago</td><td>manual</td>`).Match(page) {
		t.Fatalf("the dashboard's jobs do not show the verification and the drill:\n%s", page)
	}
	if code := rw.run("run", "start", "home", "--verify", "--drill", "0").code; code != 2 {
		t.Fatalf("--drill 0: exit %d, want 2", code)
	}

	// A drill schedule admits drills on its slots, of --drill-files files each.
	w.mustRun("job", "edit", "home", "--drill-schedule", "@every 1s", "--drill-files", "1")
	var scheduled listedRun
	w.waitRuns("home", "a scheduled drill ended", func(runs []listedRun) bool {
		for _, l := range runs {
			if l.ID != r.ID && l.Kind == "verify" && ended(runJSON{Status: l.Status}) {
				scheduled = l
				return true
			}
		}
		return false
	})
	w.mustRun("job", "edit", "home", "--drill-schedule", "")
	var sd struct {
		restoreOut
		Trigger    string    `json:"trigger"`
		DrillFiles int       `json:"drill_files"`
		Drill      drillJSON `json:"drill"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("run", "show", scheduled.ID, "--json")), &sd); err != nil {
		t.Fatal(err)
	}
	if sd.Trigger != "schedule" || sd.DrillFiles != 1 || sd.Status != "succeeded" || len(sd.Drill.Files) != 1 {
		t.Fatalf("scheduled drill = %+v, want a succeeded drill of 1 file on the schedule", sd)
	}
	for _, l := range w.runs("home") {
		if !ended(runJSON{Status: l.Status}) {
			w.waitEnd(l.ID)
		}
	}

	// The backed-up file's data overwritten in its pack: a drill of every file fails on it.
	corruptLargestPack(t, rw.repo)
	bad, _, code := drill("10")
	if code != 4 || bad.Status != "failed" || !strings.Contains(bad.Reason, "drill failed") {
		t.Fatalf("drill of a corrupted repository: exit %d, %+v; want failed", code, bad)
	}
	w.noLocks(rw.repo)
	w.checkInvariants()
}

type drillJSON struct {
	SnapshotID string   `json:"snapshot_id"`
	Files      []string `json:"drill_files"`
	Candidates int64    `json:"drill_candidates"`
}

// corruptLargestPack overwrites 4 KiB inside the repository's largest pack, as a failing disk would.
func corruptLargestPack(t *testing.T, repo string) {
	t.Helper()
	var pack string
	var size int64
	err := filepath.WalkDir(filepath.Join(repo, "data"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil && info.Size() > size {
				pack, size = p, info.Size()
			}
		}
		return err
	})
	if err != nil || size < 8<<10 {
		t.Fatalf("no pack of 8 KiB in the repository (%v)", err)
	}
	f, err := os.OpenFile(pack, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(strings.Repeat("\xa5", 4<<10)), 4<<10); err != nil {
		t.Fatal(err)
	}
}
