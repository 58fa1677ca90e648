package main_test

import (
	"encoding/base64"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/holdfast-backup/holdfast/testenv"
)

// The dashboard in headless Chromium: every page renders with no console error, no exception
// and no blocked request; a running backup's progress moves on its page without a reload; a
// job's retention plan shows a reason per snapshot; on a phone's screen too. The browser logs in
// as an operator would at its prompt: basic auth, with the token of the auth file as the
// password; without it a page is 401. The screenshots are
// kept in $HOLDFAST_SCREENSHOT_DIR (default a directory under the system's temporary one).
func TestDashboard(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	addr := testenv.FreeAddr(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 8, slowData)
	w.mustRun("job", "add", "docs", "--repo", repo, "--password-file", pw, "--path", data, "--keep-last", "1", "--max-added", "1GiB")
	w.mustRun("account", "add", "team", "--quota", "1GiB")
	auth := webAuthFile(t)
	d := w.startDaemon("--listen", addr, "--web-auth-file", auth)
	for i := 0; i < 2; i++ {
		if r := w.waitEnd(w.startRun("docs")); r.Status != "succeeded" {
			t.Fatalf("backup %d: %s (%s)", i+1, r.Status, r.Reason)
		}
	}
	w.mustRun("retention", "plan", "docs") // reads the repository into the inventory
	// The next backup is slow enough to be watched: more data than restic reads ahead of its
	// uploads, which are limited.
	w.sampleData(filepath.Join("data", "more"), 6, 48<<20)
	d.kill()
	w.slowBackups()
	w.backupRate(2048)
	// The run waits for a prerequisite the test lets succeed once the page is open.
	w.mustRun("job", "add", "gate", "--engine", "command", "--command", "/bin/true")
	w.mustRun("job", "edit", "docs", "--depends-on", "gate")
	w.startDaemon("--listen", addr, "--web-auth-file", auth)
	// Its summary is held back until the page has shown it running: it runs as long as that takes.
	release := w.holdBackups()
	live := w.startRun("docs")

	base := "http://" + addr
	// Before logging in: refused, and no page may frame the dashboard.
	if resp := webGet(t, base+"/", "", ""); resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("the dashboard without credentials: %s %v, want 401 with a login prompt", resp.Status, resp.Header)
	}
	b := newBrowser(t, base, "Basic "+base64.StdEncoding.EncodeToString([]byte("operator:"+webToken)), "")
	step, screenshot, visit, href := b.step, b.screenshot, b.visit, b.href

	// Live progress: the page is loaded once, while the run is queued, and its figures move.
	w.waitRun(live, "waiting", func(r runJSON) bool { return r.WaitingReason != "" || ended(r) })
	visit("/runs/"+live, "run-queued", "waiting: prerequisite job gate")
	w.startRun("gate")
	if _, err := chromedp.Run(step(10*time.Second), chromedp.Evaluate[bool](`window.__loadedOnce = true`)); err != nil {
		t.Fatal(err)
	}
	// What the page shows of the run, read from the page as it is now.
	shown := func() string {
		t.Helper()
		text, err := chromedp.Run(step(10*time.Second), chromedp.Evaluate[string](
			`document.getElementById("run-status").textContent + " " + document.getElementById("run-percent").textContent`))
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	first := shown()
	var later string
	var running string
	if !testenv.Eventually(90*time.Second, func() bool {
		running = shown()
		return strings.HasPrefix(running, "running ") && !strings.HasSuffix(running, " -")
	}) {
		t.Fatalf("the run page never showed the running backup's progress; it shows %q", running)
	}
	screenshot("run-live")
	release()
	if !testenv.Eventually(90*time.Second, func() bool { later = shown(); return strings.HasPrefix(later, "succeeded ") }) {
		t.Fatalf("the run page shows %q, never its end", later)
	}
	if once, err := chromedp.Run(step(10*time.Second), chromedp.Evaluate[bool](`window.__loadedOnce === true`)); err != nil || !once {
		t.Fatalf("the run page reloaded to show its progress (%v)", err)
	}
	t.Logf("the run page went from %q to %q to %q without a reload", first, running, later)
	screenshot("run-ended")
	w.waitEnd(live)

	host, _ := os.Hostname()
	if jobs := visit("/", "jobs", "docs"); !strings.Contains(jobs, "Hosts") || !strings.Contains(jobs, host) {
		t.Fatalf("the jobs page does not list host %s:\n%s", host, jobs)
	}
	visit("/runs", "runs", "succeeded")
	visit("/jobs/docs", "job", "Retention plan")
	plan := visit("/jobs/docs/plan", "plan", "keep")
	if !strings.Contains(plan, "delete") || !strings.Contains(plan, "last 1") {
		t.Fatalf("the plan page does not show a kept and a deleted snapshot with their reasons:\n%s", plan)
	}
	visit("/accounts", "accounts", "team")
	visit("/accounts/default", "ledger", "Ledger")

	// Inside the snapshots: a snapshot's tree three levels down, each by its page's own link,
	// then the data's directory, a file's versions across the snapshots, and a search.
	visit("/jobs/docs", "job", "Snapshots: look inside them")
	visit("/jobs/docs/snapshots", "snapshots", "Find a file")
	tree := href(`table a[href^="/jobs/docs/snapshots/"]`)
	visit(tree, "tree-top", "tmp/")
	at := b.descend(tree, 3)
	dataTree := visit(strings.SplitN(at, "?", 2)[0]+"?path="+url.QueryEscape(data), "tree-data", "file-a-")
	if !strings.Contains(dataTree, "more/") || !strings.Contains(dataTree, "versions") {
		t.Fatalf("the data's directory in the newest snapshot:\n%s", dataTree)
	}
	versions := visit(href(`table a[href*="/find?pattern="]`), "versions", "entries in 3 snapshots")
	if strings.Count(versions, "Snapshot ") != 3 {
		t.Fatalf("a file of every backup shows in %d snapshots:\n%s", strings.Count(versions, "Snapshot "), versions)
	}
	if err := chromedp.Do(step(30*time.Second), chromedp.SetValue(`input[name="pattern"]`, "file-h-*"),
		chromedp.Submit(`input[name="pattern"]`), chromedp.WaitVisible(`#found`)); err != nil {
		t.Fatalf("the search form: %v", err)
	}
	if found, err := chromedp.Run(step(10*time.Second), chromedp.Text(chromedp.CSS("#found"))); err != nil || !strings.Contains(found, "3 entries in 3 snapshots") {
		t.Fatalf("the search for file-h-*: %q (%v)", found, err)
	}
	screenshot("search")
	// A phone's screen.
	if err := chromedp.Do(step(10*time.Second), chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	visit("/", "jobs-phone", "docs")
	visit("/jobs/docs/plan", "plan-phone", "keep")
	b.check()
}
