package main_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
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
	chromium := testenv.Chromium(t)
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

	shots := os.Getenv("HOLDFAST_SCREENSHOT_DIR")
	if shots == "" {
		shots = filepath.Join(os.TempDir(), "holdfast-dashboard")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				problems = append(problems, fmt.Sprintf("console %s: %d argument(s)", e.Type, len(e.Args)))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+e.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
				problems = append(problems, fmt.Sprintf("log %s: %s %s", e.Entry.Level, e.Entry.Text, e.Entry.URL))
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	step := func(timeout time.Duration) context.Context {
		c, cancel := context.WithTimeout(ctx, timeout)
		t.Cleanup(cancel)
		return c
	}
	base := "http://" + addr
	// Before logging in: refused, and no page may frame the dashboard.
	if resp := webGet(t, base+"/", "", ""); resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("the dashboard without credentials: %s %v, want 401 with a login prompt", resp.Status, resp.Header)
	}
	login := "Basic " + base64.StdEncoding.EncodeToString([]byte("operator:"+webToken))
	if _, err := chromedp.Call(step(10*time.Second), network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(step(10*time.Second), network.SetExtraHTTPHeaders,
		network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": login}}); err != nil {
		t.Fatal(err)
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(step(30*time.Second), chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	visit := func(path, shot, wantText string) string {
		t.Helper()
		c := step(30 * time.Second)
		if err := chromedp.Do(c, chromedp.Navigate(base+path), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("main")))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		screenshot(shot)
		if !strings.Contains(body, wantText) {
			t.Fatalf("%s lacks %q:\n%s", path, wantText, body)
		}
		return body
	}

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
	href := func(sel string) string {
		t.Helper()
		link, err := chromedp.Run(step(10*time.Second), chromedp.AttributeValue(chromedp.CSS(sel), "href"))
		if err != nil {
			t.Fatalf("no link %s: %v", sel, err)
		}
		return strings.TrimPrefix(link.Value, base)
	}
	visit("/jobs/docs", "job", "Snapshots: look inside them")
	visit("/jobs/docs/snapshots", "snapshots", "Find a file")
	tree := href(`table a[href^="/jobs/docs/snapshots/"]`)
	visit(tree, "tree-top", "tmp/")
	at := tree
	for level := 1; level <= 3; level++ {
		next := href(`table td a[href*="path="]`)
		if !strings.HasPrefix(next, "/jobs/docs/snapshots/") {
			next = strings.SplitN(at, "?", 2)[0] + next
		}
		at = next
		crumbs := visit(at, fmt.Sprintf("tree-level-%d", level), "Modified")
		if got := strings.Count(crumbs, " / "); got != level {
			t.Fatalf("level %d shows %d steps on its way:\n%s", level, got, crumbs)
		}
	}
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
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("the browser reported:\n%s", strings.Join(problems, "\n"))
	}
	t.Logf("screenshots in %s", shots)
}
