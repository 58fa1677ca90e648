package main_test

import (
	"context"
	"fmt"
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

// browser is headless Chromium on the dashboard at base, logged in with the Authorization header
// login (a browser's basic auth, as its prompt sends it). It keeps what the browser reports
// (console errors and warnings, exceptions, failed or blocked requests) for check, and saves
// screenshots in $HOLDFAST_SCREENSHOT_DIR (default a directory under the system's temporary one)
// under prefix.
type browser struct {
	t      *testing.T
	ctx    context.Context
	base   string
	shots  string
	prefix string

	mu       sync.Mutex
	problems []string
}

func newBrowser(t *testing.T, base, login, prefix string) *browser {
	t.Helper()
	chromium := testenv.Chromium(t)
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
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	b := &browser{t: t, ctx: ctx, base: base, shots: shots, prefix: prefix}
	if err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				b.problems = append(b.problems, fmt.Sprintf("console %s: %d argument(s)", e.Type, len(e.Args)))
			}
		case *runtime.EventExceptionThrown:
			b.problems = append(b.problems, "exception: "+e.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
				b.problems = append(b.problems, fmt.Sprintf("log %s: %s %s", e.Entry.Level, e.Entry.Text, e.Entry.URL))
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(b.step(10*time.Second), network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	b.login(login)
	return b
}

// login sends the Authorization header login with every request from now on.
func (b *browser) login(login string) {
	b.t.Helper()
	if _, err := chromedp.Call(b.step(10*time.Second), network.SetExtraHTTPHeaders,
		network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": login}}); err != nil {
		b.t.Fatal(err)
	}
}

// step is a context for one step, ended with the test.
func (b *browser) step(timeout time.Duration) context.Context {
	c, cancel := context.WithTimeout(b.ctx, timeout)
	b.t.Cleanup(cancel)
	return c
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.step(30*time.Second), chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, b.prefix+name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// visit opens path, saves a screenshot as shot, and returns the page's main text, which must
// hold wantText.
func (b *browser) visit(path, shot, wantText string) string {
	b.t.Helper()
	c := b.step(30 * time.Second)
	if err := chromedp.Do(c, chromedp.Navigate(b.base+path), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
		b.t.Fatalf("%s: %v", path, err)
	}
	return b.shown(shot, wantText)
}

// shown is the page's main text as it is now, which must hold wantText, saved as shot.
func (b *browser) shown(shot, wantText string) string {
	b.t.Helper()
	body, err := chromedp.Run(b.step(30*time.Second), chromedp.Text(chromedp.CSS("main")))
	if err != nil {
		b.t.Fatalf("%s: %v", shot, err)
	}
	b.screenshot(shot)
	if !strings.Contains(body, wantText) {
		b.t.Fatalf("%s lacks %q:\n%s", shot, wantText, body)
	}
	return body
}

// href is the target of the page's first link that sel finds, as a path of the dashboard.
func (b *browser) href(sel string) string {
	b.t.Helper()
	link, err := chromedp.Run(b.step(10*time.Second), chromedp.AttributeValue(chromedp.CSS(sel), "href"))
	if err != nil {
		b.t.Fatalf("no link %s: %v", sel, err)
	}
	return strings.TrimPrefix(link.Value, b.base)
}

// check fails the test if the browser reported a problem so far.
func (b *browser) check() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		b.t.Fatalf("the browser reported:\n%s", strings.Join(b.problems, "\n"))
	}
	b.t.Logf("screenshots in %s", b.shots)
}

// descend opens a snapshot's tree at tree and goes levels directories down, each by the page's
// first directory link, checking that the way shown grows a step each time; it returns the
// deepest page's path.
func (b *browser) descend(tree string, levels int) string {
	b.t.Helper()
	at := tree
	for level := 1; level <= levels; level++ {
		next := b.href(`table td a[href*="path="]`)
		if !strings.HasPrefix(next, "/jobs/") {
			next = strings.SplitN(at, "?", 2)[0] + next
		}
		at = next
		crumbs := b.visit(at, fmt.Sprintf("tree-level-%d", level), "Modified")
		if got := strings.Count(crumbs, " / "); got != level {
			b.t.Fatalf("level %d shows %d steps on its way:\n%s", level, got, crumbs)
		}
	}
	return at
}
