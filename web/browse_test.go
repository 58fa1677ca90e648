package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
)

// fakeBrowser serves listings and searches from memory, counting the entries it handed on.
type fakeBrowser struct {
	dirs   map[string][]engine.Node // a directory's listing, the directory itself first
	found  []engine.Found
	handed int
}

func (b *fakeBrowser) Ls(_ context.Context, _ model.Job, _, dir string, _ bool, each func(engine.Node) error) error {
	for _, n := range b.dirs[dir] {
		b.handed++
		if err := each(n); err != nil {
			return err
		}
	}
	return nil
}

func (b *fakeBrowser) Find(_ context.Context, _ model.Job, _ string, _ []string, each func(engine.Found) error) error {
	for _, f := range b.found {
		b.handed++
		if err := each(f); err != nil {
			return err
		}
	}
	return nil
}

func fileNode(path string, size uint64) engine.Node {
	return engine.Node{Path: path, Type: "file", Size: &size, Mode: 0o644, ModTime: time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)}
}

func dirNode(path string) engine.Node {
	return engine.Node{Path: path, Type: "dir", Mode: 0o755 | 1<<31, ModTime: time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)}
}

type browseBundle struct {
	h       http.Handler
	store   *store.Store
	browser *fakeBrowser
	first   string // the older snapshot's id
	second  string
}

func setupBrowse(t *testing.T) *browseBundle {
	t.Helper()
	st, _ := storetest.Open(t)
	j := storetest.Job(t, st, &storetest.JobOpts{Name: "docs"})
	b := &browseBundle{browser: &fakeBrowser{dirs: map[string][]engine.Node{}},
		first: strings.Repeat("a1", 32), second: strings.Repeat("b2", 32)}
	at := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	var listed []model.Snapshot
	for i, id := range []string{b.first, b.second} {
		listed = append(listed, model.Snapshot{ID: id, Time: at.Add(time.Duration(i) * time.Hour), Host: "h", Paths: []string{"/srv"},
			Tags: []string{engine.JobTag("docs")}, JobName: "docs"})
	}
	if _, _, err := st.SnapshotSync(context.Background(), store.SnapshotSyncParams{Repository: j.Repository, ListedAt: at.Add(2 * time.Hour), Listed: listed}); err != nil {
		t.Fatal(err)
	}
	h, err := Handler(Config{Store: st, JournalDir: t.TempDir(), Browser: b.browser})
	if err != nil {
		t.Fatal(err)
	}
	b.h, b.store = h, st
	return b
}

func (b *browseBundle) get(t *testing.T, target string) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
	return w.Code, w.Body.String()
}

func TestBrowseTree(t *testing.T) {
	b := setupBrowse(t)
	srv := []engine.Node{dirNode("/srv"), dirNode("/srv/a"), fileNode("/srv/<script>x\x1b[31m", 5), fileNode("/srv/a[1].txt", 7)}
	b.browser.dirs["/srv"] = srv
	big := []engine.Node{dirNode("/srv/big")}
	for i := range 2*treePage + 50 {
		big = append(big, fileNode(fmt.Sprintf("/srv/big/f%04d", i), 1))
	}
	b.browser.dirs["/srv/big"] = big

	code, body := b.get(t, "/jobs/docs/snapshots")
	if code != 200 || !strings.Contains(body, "/jobs/docs/snapshots/"+b.first) || !strings.Contains(body, "/jobs/docs/snapshots/"+b.second) {
		t.Fatalf("snapshots page: %d\n%s", code, body)
	}
	code, body = b.get(t, "/jobs/docs/snapshots/"+b.first[:8]+"?path=/srv")
	if code != 200 {
		t.Fatalf("tree: %d\n%s", code, body)
	}
	// The hostile name is escaped twice over: its control characters shown, its markup inert.
	if strings.Contains(body, "\x1b") || strings.Contains(body, "<script>") || !strings.Contains(body, `&lt;script&gt;x\x1b[31m`) {
		t.Fatalf("tree shows the hostile name unescaped:\n%s", body)
	}
	// A directory opens further down; a file's versions are a search for exactly its path.
	if !strings.Contains(body, `?path=%2Fsrv%2Fa"`) {
		t.Fatalf("tree has no link into /srv/a:\n%s", body)
	}
	want := url.Values{"pattern": {`/srv/a\[1\].txt`}}.Encode()
	if !strings.Contains(body, want) {
		t.Fatalf("tree has no versions link with pattern %s:\n%s", want, body)
	}

	// A page at a time: the listing is read only as far as the page needs.
	b.browser.handed = 0
	code, body = b.get(t, "/jobs/docs/snapshots/"+b.first+"?path=/srv/big")
	if rows := strings.Count(body, "<tr>") - 1; code != 200 || rows != treePage || !strings.Contains(body, "next page") || strings.Contains(body, "previous page") {
		t.Fatalf("page 1: %d, %d rows\n%s", code, rows, body)
	}
	if b.browser.handed > treePage+2 {
		t.Fatalf("page 1 read %d entries of the listing, want at most %d", b.browser.handed, treePage+2)
	}
	code, body = b.get(t, "/jobs/docs/snapshots/"+b.first+"?path=/srv/big&page=3")
	if rows := strings.Count(body, "<tr>") - 1; code != 200 || rows != 50 || strings.Contains(body, "next page") || !strings.Contains(body, "previous page") {
		t.Fatalf("page 3: %d, %d rows\n%s", code, rows, body)
	}
	if !strings.Contains(body, "f0449") || strings.Contains(body, "f0399<") {
		t.Fatalf("page 3 shows the wrong entries:\n%s", body)
	}

	// Nothing there, and requests that ask wrongly.
	if code, body := b.get(t, "/jobs/docs/snapshots/"+b.first+"?path=/nowhere"); code != 200 || !strings.Contains(body, "holds nothing at /nowhere") {
		t.Fatalf("a missing path: %d\n%s", code, body)
	}
	for _, c := range []struct {
		target string
		want   int
	}{
		{"/jobs/docs/snapshots/" + b.first + "?path=srv", 400},
		{"/jobs/docs/snapshots/" + b.first + "?page=0", 400},
		{"/jobs/docs/snapshots/" + b.first + "?page=x", 400},
		{"/jobs/docs/snapshots/ffffffff", 404},
		{"/jobs/docs/snapshots/a1a", 404},
		{"/jobs/nosuch/snapshots", 404},
		{"/jobs/docs/find?pattern=%5B", 400},
		{"/jobs/docs/find?pattern=x&newest=0", 400},
	} {
		if code, body := b.get(t, c.target); code != c.want {
			t.Errorf("GET %s: %d, want %d\n%s", c.target, code, c.want, body)
		}
	}
}

func TestBrowseFind(t *testing.T) {
	b := setupBrowse(t)
	b.browser.found = []engine.Found{
		{Snapshot: b.first, Node: fileNode("/srv/report.txt", 18)},
		{Snapshot: b.second, Node: fileNode("/srv/report.txt", 42)},
		{Snapshot: b.second, Node: dirNode("/srv/reports")},
	}
	code, body := b.get(t, "/jobs/docs/find?pattern=report*")
	if code != 200 || !strings.Contains(body, "3 entries in 2 snapshots") || strings.Count(body, "<h2>Snapshot ") != 2 ||
		!strings.Contains(body, "18 B") || !strings.Contains(body, "42 B") {
		t.Fatalf("find: %d\n%s", code, body)
	}
	// A directory found opens in its snapshot.
	if !strings.Contains(body, "/jobs/docs/snapshots/"+b.second[:16]+"?path=%2Fsrv%2Freports") {
		t.Fatalf("find has no link into the directory found:\n%s", body)
	}
	// The form alone, without a pattern: no search.
	b.browser.handed = 0
	if code, body := b.get(t, "/jobs/docs/find"); code != 200 || b.browser.handed != 0 || strings.Contains(body, `id="found"`) {
		t.Fatalf("the search form: %d, %d handed\n%s", code, b.browser.handed, body)
	}
	// Without a browser the trees are unavailable, and say so.
	st, _ := storetest.Open(t)
	h, err := Handler(Config{Store: st, JournalDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Job(t, st, &storetest.JobOpts{Name: "docs"})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/jobs/docs/find?pattern=x", nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("find without a browser: %d %s", w.Code, w.Body)
	}
}

// A restore from the dashboard: only an operator's credential is offered one and may ask, only
// from the dashboard's own page and with the form's token of that credential; what it asks is
// runctl.Restore's, naming the credential; a refusal is shown on the form.
func TestBrowseRestore(t *testing.T) {
	b := setupBrowse(t)
	b.browser.dirs["/srv"] = []engine.Node{dirNode("/srv"), fileNode("/srv/report.txt", 18)}
	var asked []runctl.RestoreParams
	refuse := false
	runID := uuid.New()
	creds, err := parseAuth("auth", []byte("bearer reader-token-0123456789\n"+
		"bearer operator-token-0123456789 operator ops-team\n"+
		"basic alice alice-password-0123456789 operator\n"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Handler(Config{Store: b.store, JournalDir: t.TempDir(), Browser: b.browser, Host: "here",
		Restore: func(_ context.Context, p runctl.RestoreParams) (runctl.Restored, error) {
			asked = append(asked, p)
			if refuse {
				return runctl.Restored{}, &runctl.RefusedError{Msg: "target /nope refused: not the job user's"}
			}
			return runctl.Restored{Started: runctl.Started{Run: model.Run{ID: runID}}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	guarded := Guard{Auth: creds, Hosts: AnyHost}.Handler(h)
	do := func(method, target, token string, form url.Values, headers map[string]string) *httptest.ResponseRecorder {
		t.Helper()
		var body *strings.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		} else {
			body = strings.NewReader("")
		}
		r := httptest.NewRequest(method, "http://dash.example"+target, body)
		r.Header.Set("Authorization", "Bearer "+token)
		if form != nil {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for k, v := range headers {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		guarded.ServeHTTP(w, r)
		return w
	}
	tree := "/jobs/docs/snapshots/" + b.first + "?path=/srv"
	formURL := "/jobs/docs/restore?" + url.Values{"snapshot": {b.first[:16]}, "path": {"/srv/report.txt"}}.Encode()
	reader, operator := "reader-token-0123456789", "operator-token-0123456789"
	csrfOf := func(token string) string {
		t.Helper()
		w := do("GET", formURL, token, nil, nil)
		m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(w.Body.String())
		if w.Code != 200 || m == nil {
			t.Fatalf("the restore form as %s: %d\n%s", token, w.Code, w.Body)
		}
		return m[1]
	}
	good := func(csrf string) url.Values {
		return url.Values{"csrf": {csrf}, "snapshot": {b.first}, "path": {"/srv/report.txt"}, "target": {"/srv/restore/old"}}
	}
	sameSite := map[string]string{"Origin": "http://dash.example", "Sec-Fetch-Site": "same-origin"}

	// The read-only credential: no restore offered, the form and a forged request refused.
	if w := do("GET", tree, reader, nil, nil); w.Code != 200 || strings.Contains(w.Body.String(), "/restore?") {
		t.Fatalf("the tree as a reader: %d, offers a restore:\n%s", w.Code, w.Body)
	}
	if w := do("GET", formURL, reader, nil, nil); w.Code != http.StatusForbidden {
		t.Fatalf("the restore form as a reader: %d, want 403", w.Code)
	}
	opCSRF := csrfOf(operator)
	if w := do("POST", "/jobs/docs/restore", reader, good(opCSRF), sameSite); w.Code != http.StatusForbidden {
		t.Fatalf("a reader's POST: %d, want 403", w.Code)
	}
	// The operator: offered, and refused without the token, with another credential's, or from
	// another site.
	if w := do("GET", tree, operator, nil, nil); !strings.Contains(w.Body.String(), "/jobs/docs/restore?") ||
		!strings.Contains(w.Body.String(), `id="restore-here" href="/jobs/docs/restore?path=%2Fsrv&amp;snapshot=`) {
		t.Fatalf("the tree as an operator offers no restore of an entry and of the directory:\n%s", w.Body)
	}
	aliceCSRF := func() string {
		r := httptest.NewRequest("GET", "http://dash.example"+formURL, nil)
		r.SetBasicAuth("alice", "alice-password-0123456789")
		w := httptest.NewRecorder()
		guarded.ServeHTTP(w, r)
		return regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(w.Body.String())[1]
	}()
	for _, c := range []struct {
		name    string
		form    url.Values
		headers map[string]string
	}{
		{"no token", url.Values{"snapshot": {b.first}, "path": {"/srv/report.txt"}, "target": {"/srv/restore/old"}}, sameSite},
		{"another credential's token", good(aliceCSRF), sameSite},
		{"another origin", good(opCSRF), map[string]string{"Origin": "http://evil.example"}},
		{"another site", good(opCSRF), map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		if w := do("POST", "/jobs/docs/restore", operator, c.form, c.headers); w.Code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403\n%s", c.name, w.Code, w.Body)
		}
	}
	if len(asked) != 0 {
		t.Fatalf("refused requests asked for restores: %+v", asked)
	}
	// A refusal of the restore's own is shown on the form.
	refuse = true
	if w := do("POST", "/jobs/docs/restore", operator, good(opCSRF), sameSite); w.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(w.Body.String(), "target /nope refused") {
		t.Fatalf("a refused restore: %d\n%s", w.Code, w.Body)
	}
	refuse = false
	asked = nil
	w := do("POST", "/jobs/docs/restore", operator, good(opCSRF), sameSite)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/runs/"+runID.String() {
		t.Fatalf("the restore: %d %v\n%s", w.Code, w.Header(), w.Body)
	}
	want := runctl.RestoreParams{Job: "docs", Snapshot: b.first, Target: "/srv/restore/old", Includes: []string{"/srv/report.txt"}, Host: "here", RequestedBy: "ops-team"}
	if len(asked) != 1 || fmt.Sprint(asked[0]) != fmt.Sprint(want) {
		t.Fatalf("asked %+v, want %+v", asked, want)
	}
	// A name with a glob's characters is restored alone: restic reads an include as a pattern.
	globbed := good(opCSRF)
	globbed.Set("path", "/srv/a[1]*.txt")
	if w := do("POST", "/jobs/docs/restore", operator, globbed, sameSite); w.Code != http.StatusSeeOther ||
		len(asked) != 2 || !slices.Equal(asked[1].Includes, []string{`/srv/a\[1\]\*.txt`}) {
		t.Fatalf("the restore of /srv/a[1]*.txt: %d, asked %+v", w.Code, asked)
	}
	// Back where it was: the path itself, no target, whatever the target field holds.
	back := good(opCSRF)
	back.Set("path", "/srv/a[1]*.txt")
	back.Set("where", "original")
	if w := do("POST", "/jobs/docs/restore", operator, back, sameSite); w.Code != http.StatusSeeOther || len(asked) != 3 ||
		!asked[2].ToOriginal || asked[2].Target != "" || !slices.Equal(asked[2].Includes, []string{"/srv/a[1]*.txt"}) {
		t.Fatalf("the restore of /srv/a[1]*.txt back where it was: %d, asked %+v", w.Code, asked)
	}
}

// A search that matches more of one snapshot than a search holds asks for a narrower pattern.
func TestBrowseFindTooMany(t *testing.T) {
	b := setupBrowse(t)
	tooMany := &tooManyBrowser{}
	h, err := Handler(Config{Store: b.store, JournalDir: t.TempDir(), Browser: tooMany})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/jobs/docs/find?pattern=*", nil))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "narrow it") {
		t.Fatalf("a search that matches too much: %d %s", w.Code, w.Body)
	}
}

type tooManyBrowser struct{ fakeBrowser }

func (*tooManyBrowser) Find(context.Context, model.Job, string, []string, func(engine.Found) error) error {
	return fmt.Errorf("restic find *: %w", engine.ErrTooManyFound)
}

func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		origin, site string
		want         bool
	}{
		{"http://dash.example", "same-origin", true},
		{"http://dash.example", "", true},
		{"null", "same-origin", true}, // a form's POST under Referrer-Policy: no-referrer
		{"null", "", false},
		{"null", "cross-site", false},
		{"http://evil.example", "same-origin", false},
		{"https://dash.example", "same-origin", false},
		{"http://dash.example", "cross-site", false},
		{"", "same-site", false},
		{"", "", true}, // not a browser: the form's token alone
	} {
		r := httptest.NewRequest("POST", "http://dash.example/jobs/x/restore", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.site != "" {
			r.Header.Set("Sec-Fetch-Site", c.site)
		}
		if got := sameOrigin(r); got != c.want {
			t.Errorf("Origin %q, Sec-Fetch-Site %q: %v, want %v", c.origin, c.site, got, c.want)
		}
	}
}
