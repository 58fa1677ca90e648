package web

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

const testToken = "s3cret-token-0123456789"

func testCredentials(t *testing.T) *Credentials {
	t.Helper()
	path := filepath.Join(t.TempDir(), "web.auth")
	if err := os.WriteFile(path, []byte("bearer "+testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadAuth(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The names a listener accepts in Host: its own, localhost's for a loopback one, any IP
// literal (but no other name) for one on every address, and the --web-host names.
func TestHosts(t *testing.T) {
	hostname, _ := os.Hostname()
	for _, tc := range []struct {
		listen  string
		extra   []string
		allowed []string
		refused []string
	}{
		{"127.0.0.1:9750", nil,
			[]string{"127.0.0.1:9750", "127.0.0.1", "localhost:9750", "LocalHost.", "[::1]:9750", "localhost:80"},
			[]string{"attacker.example", "attacker.example:9750", "localhost.attacker.example", "127.0.0.2:9750", "", "[::2]:9750"}},
		{"localhost:9750", nil, []string{"localhost:9750", "127.0.0.1:9750", "[::1]:9750"}, []string{"attacker.example:9750"}},
		{"[::1]:9750", nil, []string{"[::1]:9750", "localhost:9750"}, []string{"attacker.example:9750", "10.0.0.1:9750"}},
		{"127.0.0.1:9750", []string{"backups.example.com", "[2001:db8::5]"},
			[]string{"backups.example.com:443", "BACKUPS.example.com", "[2001:db8::5]:9750", "localhost"},
			[]string{"example.com", "www.backups.example.com"}},
		{"192.0.2.10:9750", nil, []string{"192.0.2.10:9750"}, []string{"localhost:9750", "127.0.0.1:9750", "attacker.example"}},
		{"0.0.0.0:9750", nil, []string{"192.0.2.10:9750", "[2001:db8::1]:9750", "127.0.0.1", hostname + ":9750"},
			[]string{"attacker.example:9750", "192.0.2.10.attacker.example"}},
		{":9750", []string{"metrics.example.net"}, []string{"10.1.2.3", "metrics.example.net:9750"}, []string{"attacker.example"}},
	} {
		t.Run(tc.listen+" "+strings.Join(tc.extra, ","), func(t *testing.T) {
			h, err := HostsFor(tc.listen, tc.extra)
			if err != nil {
				t.Fatal(err)
			}
			for _, host := range tc.allowed {
				if !h.Allows(host) {
					t.Errorf("Host %q refused", host)
				}
			}
			for _, host := range tc.refused {
				if h.Allows(host) {
					t.Errorf("Host %q accepted", host)
				}
			}
		})
	}
	for _, bad := range []string{"a:b", "backups.example.com:443", "x/y", "", "user@host"} {
		if _, err := HostsFor("127.0.0.1:9750", []string{bad}); err == nil {
			t.Errorf("--web-host %q accepted", bad)
		}
	}
	if _, err := HostsFor("127.0.0.1", nil); err == nil {
		t.Error("a listener without a port accepted")
	}
}

// The guard serves no more requests at once than its bound: one more waits for a slot, and is
// answered 503 when none frees within its wait; once one frees, the next request is served.
func TestGuardBoundsConcurrency(t *testing.T) {
	inside := make(chan struct{})
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			inside <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	srv := httptest.NewServer(Guard{Auth: testCredentials(t), Hosts: AnyHost, MaxRequests: 2, QueueWait: 50 * time.Millisecond}.Handler(slow))
	defer srv.Close()
	get := func(path string) int {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); codes <- get("/slow") }()
	}
	<-inside
	<-inside // both slots taken
	if code := get("/fast"); code != http.StatusServiceUnavailable {
		t.Fatalf("a third request while two are served: %d, want 503", code)
	}
	release <- struct{}{}
	if code := <-codes; code != http.StatusOK {
		t.Fatalf("the released request: %d", code)
	}
	if code := get("/fast"); code != http.StatusOK {
		t.Fatalf("a request once a slot is free: %d, want 200", code)
	}
	close(release)
	wg.Wait()
}

// The dashboard behind its guard over a real listener, on a real database: without credentials
// every page, asset and API answers 401; with them but another Host (DNS rebinding) 421; with
// both 200. Every answer, the refusals included, forbids framing and sniffing.
func TestDashboardGuarded(t *testing.T) {
	st, _ := storetest.Open(t)
	run := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: "w", Engine: "command"}})
	dashboard, err := Handler(Config{Store: st, JournalDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := HostsFor(ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(Guard{Auth: testCredentials(t), Hosts: hosts}.Handler(dashboard))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	do := func(path, host string, auth bool) *http.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		if host != "" {
			req.Host = host
		}
		if auth {
			req.Header.Set("Authorization", "Bearer "+testToken)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	id := run.ID.String()
	for _, path := range []string{"/", "/runs", "/runs/" + id, "/runs/" + id[:8], "/api/runs/" + id, "/jobs/w", "/jobs/w/plan",
		"/accounts", "/static/app.js", "/static/style.css", "/no-such-page"} {
		t.Run(path, func(t *testing.T) {
			for _, c := range []struct {
				what string
				host string
				auth bool
				want int
			}{
				{"no credentials", "", false, http.StatusUnauthorized},
				{"no credentials, as localhost", "localhost", false, http.StatusUnauthorized},
				{"another site's name", "attacker.example", true, http.StatusMisdirectedRequest},
				{"another site's name with this port", "attacker.example:" + strings.Split(ln.Addr().String(), ":")[1], true, http.StatusMisdirectedRequest},
				{"credentials", "", true, http.StatusOK},
				{"credentials, as localhost", "localhost:1", true, http.StatusOK},
			} {
				want := c.want
				if want == http.StatusOK && path == "/no-such-page" {
					want = http.StatusNotFound
				}
				resp := do(path, c.host, c.auth)
				if resp.StatusCode != want {
					t.Errorf("%s: %s, want %d", c.what, resp.Status, want)
				}
				if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
					resp.Header.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("%s: headers %v lack frame-ancestors 'none' or nosniff", c.what, resp.Header)
				}
			}
		})
	}
}

// A run's page and API find it by its id or a unique prefix as `run list` prints it, through a
// range of the primary key (store.RunIDRange); a prefix no id's text starts with finds nothing.
func TestRunByPrefix(t *testing.T) {
	st, _ := storetest.Open(t)
	run := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: "p", Engine: "command"}})
	dashboard, err := Handler(Config{Store: st, JournalDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	id := run.ID.String()
	noDash := strings.ReplaceAll(id, "-", "")
	for _, tc := range []struct {
		name, ref string
		want      int
	}{
		{"the id", id, http.StatusOK},
		{"upper case", strings.ToUpper(id), http.StatusOK},
		{"8 characters", id[:8], http.StatusOK},
		{"4 characters", id[:4], http.StatusOK},
		{"up to a dash", id[:9], http.StatusOK},
		{"past a dash", id[:14], http.StatusOK},
		{"the id without its dashes", noDash, http.StatusOK}, // uuid.Parse takes it whole
		{"a prefix without its dash", noDash[:10], http.StatusNotFound},
		{"3 characters", id[:3], http.StatusNotFound},
		{"not hex", "zzzzzzzz", http.StatusNotFound},
		{"a pattern", id[:4] + "%25", http.StatusNotFound},
		{"another prefix", otherPrefix(id[:8]), http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			dashboard.ServeHTTP(w, httptest.NewRequest("GET", "/api/runs/"+tc.ref, nil))
			if w.Code != tc.want {
				t.Fatalf("GET /api/runs/%s: %d %s, want %d", tc.ref, w.Code, w.Body, tc.want)
			}
			if tc.want == http.StatusOK && !strings.Contains(w.Body.String(), id) {
				t.Fatalf("GET /api/runs/%s: %s, want run %s", tc.ref, w.Body, id)
			}
		})
	}
}

// otherPrefix is an 8-character prefix that differs from p in its last character.
func otherPrefix(p string) string {
	last := byte('0')
	if p[7] == '0' {
		last = '1'
	}
	return p[:7] + string(last)
}
