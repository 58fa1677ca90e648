package main_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A verification of a sound repository succeeds; after 4 KiB inside a pack are overwritten, one
// that reads all the data fails with restic's reason, a verify_failed event and a metric that
// says so.
func TestVerify(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rw := newRestoreWorld(t, w, 2, 1<<20)
	hook := newReceiver(t)
	w.mustRun("notify", "add", "hook", "--webhook", hook.URL, "--events", "verified,verify_failed")
	addr := freeAddr(t)
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
			if matches(m, []string{"job", "home"}) {
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

	// 4 KiB inside the largest pack overwritten, as a failing disk would.
	var pack string
	var size int64
	err := filepath.WalkDir(filepath.Join(rw.repo, "data"), func(p string, d fs.DirEntry, err error) error {
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
	if _, err := f.WriteAt([]byte(strings.Repeat("\xa5", 4<<10)), 4<<10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	bad, code := verify("--read-data-subset", "100%")
	if code != 4 || bad.Status != "failed" || !strings.Contains(bad.Reason, "repository contains errors") ||
		!strings.Contains(bad.Reason, "Pack ID does not match") {
		t.Fatalf("verify of a corrupted pack: exit %d, %+v; want failed with restic's reason", code, bad)
	}
	if v, found := metric("holdfast_job_last_verify_ok"); !found || v != 0 {
		t.Fatalf("holdfast_job_last_verify_ok after a failed check = %v (found %v), want 0", v, found)
	}
	if v, _ := metric("holdfast_job_last_verify_success_timestamp_seconds"); v != float64(finished.UnixNano())/1e9 {
		t.Fatalf("a failed check moved the last verify success to %v", v)
	}
	// The events, in order: verified for the sound check, verify_failed for this one.
	var events []string
	if !eventually(time.Minute, func() bool {
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
