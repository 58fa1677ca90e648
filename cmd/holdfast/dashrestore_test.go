package main_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/testenv"
)

// A file found and given back from the dashboard, in headless Chromium: an operator's
// credential browses a snapshot three levels down, searches for a file two of three snapshots
// hold (both listed, with their sizes), restores the older version into a new directory and
// follows the run to its end, sized from the snapshot so that its progress reaches 100%; the file
// comes back as that snapshot holds it, byte for byte; from the same form it goes back where it
// was (it was deleted there), and each restore is an event naming the credential. A read-only credential is offered no restore,
// and its forged request, one without the form's token and one from another origin are refused
// with 403 and queue nothing.
func TestDashboardRestore(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	addr := testenv.FreeAddr(t)
	repo, pw := w.resticRepo("repo")
	data := filepath.Join(w.dir, "data")
	notes := filepath.Join(data, "notes.txt")
	older, newer := []byte("the older version of the notes\n"), []byte("the newer version of the notes, which is longer\n")
	for _, f := range []struct {
		path    string
		content []byte
	}{{filepath.Join(data, "a", "b", "c", "deep.txt"), []byte("deep\n")}, {notes, older}} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.path, f.content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const reader, operator = "reader-token-4f6b0c1e9a77", "operator-token-9a77c1e4f6b0"
	auth := filepath.Join(t.TempDir(), "web.auth")
	if err := os.WriteFile(auth, []byte("bearer "+reader+"\nbearer "+operator+" operator ops-team\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.mustRun("job", "add", "docs", "--repo", repo, "--password-file", pw, "--path", data)
	w.startDaemon("--listen", addr, "--web-auth-file", auth)
	backup := func() runJSON {
		t.Helper()
		r := w.waitEnd(w.startRun("docs"))
		if r.Status != "succeeded" {
			t.Fatalf("backup: %s (%s)", r.Status, r.Reason)
		}
		return r
	}
	first := backup()
	if err := os.WriteFile(notes, newer, 0o644); err != nil {
		t.Fatal(err)
	}
	backup()
	if err := os.Remove(notes); err != nil {
		t.Fatal(err)
	}
	backup()

	base := "http://" + addr
	b := newBrowser(t, base, "Basic "+base64.StdEncoding.EncodeToString([]byte("ops:"+operator)), "restore-")
	b.visit("/jobs/docs/snapshots", "snapshots", "Find a file")
	tree := b.href(`table a[href^="/jobs/docs/snapshots/"]`)
	b.visit(tree, "tree-top", "tmp/")
	b.descend(tree, 3)

	// The search: two snapshots hold the notes, each version with its size.
	found := b.visit("/jobs/docs/find?pattern=notes.txt", "search", "2 entries in 2 snapshots")
	if !strings.Contains(found, "31 B") || !strings.Contains(found, "48 B") {
		t.Fatalf("the search does not show both versions' sizes (31 B and 48 B):\n%s", found)
	}
	// The older version's restore, into a new directory.
	form := b.href(`a.restore[href*="snapshot=` + first.SnapshotID[:8] + `"]`)
	b.visit(form, "form", "Into")
	target := filepath.Join(w.dir, "restored")
	if err := chromedp.Do(b.step(30*time.Second), chromedp.SetValue(`input[name="target"]`, target),
		chromedp.Submit(`input[name="target"]`), chromedp.WaitVisible(`#run-status`)); err != nil {
		text, _ := chromedp.Run(b.step(10*time.Second), chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("the restore form: %v; the page shows:\n%s", err, text)
	}
	var status string
	if !testenv.Eventually(2*time.Minute, func() bool {
		status, _ = chromedp.Run(b.step(10*time.Second), chromedp.Text(chromedp.CSS("#run-status")))
		return status == "succeeded" || status == "failed" || status == "partial"
	}) || status != "succeeded" {
		b.screenshot("run")
		t.Fatalf("the restore's page shows %q, not its success", status)
	}
	// A restore of one path is sized from the snapshot's listing: its progress is a share.
	if pct, err := chromedp.Run(b.step(10*time.Second), chromedp.Text(chromedp.CSS("#run-percent"))); err != nil || pct != "100.0%" {
		b.screenshot("run")
		t.Fatalf("the restore's page shows %q done (%v), want 100.0%%", pct, err)
	}
	b.shown("run", "restore")
	got, err := os.ReadFile(filepath.Join(target, notes))
	if err != nil || !bytes.Equal(got, older) {
		t.Fatalf("the restored notes: %q (%v), want the older version %q", got, err, older)
	}
	if _, err := os.Stat(filepath.Join(target, data, "a")); err == nil {
		t.Fatal("the restore of one file gave back more than that file")
	}
	// The older version back where it was, from the same form: the notes are deleted there.
	b.visit(form, "form-original", "back where it was")
	if err := chromedp.Do(b.step(30*time.Second), chromedp.Click(`input[name="where"][value="original"]`),
		chromedp.Submit(`input[name="target"]`), chromedp.WaitVisible(`#run-status`)); err != nil {
		text, _ := chromedp.Run(b.step(10*time.Second), chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("the restore form, back where it was: %v; the page shows:\n%s", err, text)
	}
	if !testenv.Eventually(2*time.Minute, func() bool {
		status, _ = chromedp.Run(b.step(10*time.Second), chromedp.Text(chromedp.CSS("#run-status")))
		return status == "succeeded" || status == "failed" || status == "partial"
	}) || status != "succeeded" {
		b.screenshot("run-original")
		t.Fatalf("the restore back where it was shows %q, not its success", status)
	}
	b.shown("run-original", "put back where it was")
	if got, err := os.ReadFile(notes); err != nil || !bytes.Equal(got, older) {
		t.Fatalf("the notes put back: %q (%v), want the older version %q", got, err, older)
	}

	events, err := w.store().EventList(context.Background(), store.EventListParams{Job: "docs", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var requested []string
	for _, e := range events {
		if e.Event == "restore_requested" {
			var d struct {
				RequestedBy string `json:"requested_by"`
			}
			_ = json.Unmarshal(e.Details, &d)
			requested = append(requested, d.RequestedBy)
		}
	}
	if len(requested) != 2 || requested[0] != "ops-team" || requested[1] != "ops-team" {
		t.Fatalf("restore_requested events naming %q, want two naming ops-team", requested)
	}

	// The read-only credential: no restore offered, and every way around the form refused.
	b.login("Basic " + base64.StdEncoding.EncodeToString([]byte("viewer:"+reader)))
	b.visit("/jobs/docs/find?pattern=notes.txt", "search-read-only", "2 entries in 2 snapshots")
	if n, err := chromedp.Run(b.step(10*time.Second), chromedp.Evaluate[int](`document.querySelectorAll("a.restore").length`)); err != nil || n != 0 {
		t.Fatalf("the read-only search offers %d restores (%v)", n, err)
	}
	runs, err := w.storeRuns("docs")
	if err != nil {
		t.Fatal(err)
	}
	// A token of the operator's form, as a page could have had it.
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(webPage(t, base+form, "Bearer "+operator))
	if m == nil {
		t.Fatal("the operator's form holds no token")
	}
	fields := url.Values{"csrf": {m[1]}, "snapshot": {first.SnapshotID}, "path": {notes}, "target": {filepath.Join(w.dir, "forged")}}
	for _, c := range []struct {
		name, token, origin string
		form                url.Values
	}{
		{"the read-only credential", reader, base, fields},
		{"no token", operator, base, url.Values{"snapshot": fields["snapshot"], "path": fields["path"], "target": fields["target"]}},
		{"another origin", operator, "http://attacker.example", fields},
	} {
		if status := webPost(t, base+"/jobs/docs/restore", "Bearer "+c.token, c.origin, c.form); status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", c.name, status)
		}
	}
	after, err := w.storeRuns("docs")
	if err != nil || len(after) != len(runs) {
		t.Fatalf("refused requests left %d runs where there were %d (%v)", len(after), len(runs), err)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "forged")); err == nil {
		t.Fatal("a refused request made its target")
	}
	b.check()
}

// webPage is the page at url, read with the Authorization header auth.
func webPage(t *testing.T, url, auth string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s (%v)", url, resp.Status, err)
	}
	return buf.String()
}

// webPost posts form to url with the Authorization header auth and the Origin origin, as a page
// would, and returns the response's status.
func webPost(t *testing.T, url, auth, origin string, form url.Values) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", auth)
	req.Header.Set("Origin", origin)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
