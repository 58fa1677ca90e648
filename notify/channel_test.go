package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/store"
)

// channelCase is a service holdfast sends to, pointed at a test's server.
type channelCase struct {
	scheme string
	tls    bool   // the service speaks https only
	fixed  string // the address the service always sends to, dialed at the test's server instead
	url    func(addr string) string
	secret string // in the URL, never in an error
}

var channelCases = []channelCase{
	{"discord", true, "discord.com:443", func(string) string { return "discord://s3cret-token@123456789" }, "s3cret"},
	{"generic", false, "", func(a string) string { return "generic+http://" + a + "/hook/s3cret?@X-Hook=header-s3cret" }, "s3cret"},
	{"gotify", false, "", func(a string) string { return "gotify://" + a + "/As3cret-token-x?disabletls=yes" }, "s3cret"},
	{"mattermost", false, "", func(a string) string { return "mattermost://" + a + "/s3cret-token?disabletls=yes" }, "s3cret"},
	{"ntfy", false, "", func(a string) string { return "ntfy://" + a + "/backups-s3cret?scheme=http" }, "s3cret"},
	{"pagerduty", true, "", func(a string) string { return "pagerduty://" + a + "/5ec7e75ec7e75ec7e75ec7e75ec7e75e" }, "5ec7e7"},
	{"pushover", true, "api.pushover.net:443", func(string) string { return "pushover://shoutrrr:s3cret-token@userkey/" }, "s3cret"},
	{"rocketchat", true, "", func(a string) string { return "rocketchat://" + a + "/token-a/s3cret" }, "s3cret"},
}

// The cases are the services holdfast sends to, all of them.
func TestChannelSchemes(t *testing.T) {
	var schemes []string
	for _, c := range channelCases {
		schemes = append(schemes, c.scheme)
	}
	if !slices.Equal(schemes, ChannelSchemes) {
		t.Fatalf("ChannelSchemes = %v, the tests cover %v", ChannelSchemes, schemes)
	}
}

// start starts srv as c's service speaks, on 127.0.0.1.
func (c channelCase) start(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	if c.tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	if host, _, _ := net.SplitHostPort(srv.Listener.Addr().String()); host != "127.0.0.1" {
		t.Fatalf("the test's server listens on %s, not 127.0.0.1", srv.Listener.Addr())
	}
	return srv
}

// deliverer is a Deliverer whose channel sends reach srv: a service's fixed address is dialed at
// srv, srv's certificate is trusted (it names example.com), and nothing but 127.0.0.1 is dialed.
func (c channelCase) deliverer(t *testing.T, srv *httptest.Server, timeout time.Duration) *Deliverer {
	t.Helper()
	roots := x509.NewCertPool()
	if c.tls {
		roots.AddCert(srv.Certificate())
	}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "example.com"},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == c.fixed {
				addr = srv.Listener.Addr().String()
			}
			if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
				return nil, fmt.Errorf("the test dials 127.0.0.1 only, not %s", addr)
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	return newTestDeliverer(t, Config{Timeout: timeout, transport: tr})
}

// urlFile is a channel URL file of root's holding raw.
func urlFile(t *testing.T, raw string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "channel.url")
	if err := os.WriteFile(p, []byte(raw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// recorder records the requests a server received.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *recorder) add(_ http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, req.Method+" "+req.URL.Path+" "+req.Header.Get("X-Hook")+" "+string(body))
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// Each service holdfast sends to gets the message on holdfast's client: a service's fixed
// address is reached only through the test's transport, so the message arriving shows that the
// service used it.
func TestChannelSends(t *testing.T) {
	for _, c := range channelCases {
		t.Run(c.scheme, func(t *testing.T) {
			var rec recorder
			srv := c.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rec.add(w, r)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, "{}")
			}))
			d := c.deliverer(t, srv, DefaultTimeout)
			e := testEvent()
			if err := d.Send(context.Background(), store.Target{Name: "x", Kind: store.TargetChannel, SecretFile: urlFile(t, c.url(srv.Listener.Addr().String()))}, e); err != nil {
				t.Fatalf("Send: %v", err)
			}
			got := rec.requests()
			if len(got) != 1 || !strings.Contains(got[0], "home") || !strings.Contains(got[0], "failed") {
				t.Fatalf("the service's server received %q, want one request with the message", got)
			}
			if c.scheme == "generic" && !strings.HasPrefix(got[0], "POST /hook/s3cret header-s3cret ") {
				t.Fatalf("the generic request was %q, want a POST to the hook's path with its header", got[0])
			}
		})
	}
}

// A channel's server that answers with a redirect is not followed there: whatever the code and
// the service, the place it points to receives nothing, and the send fails naming the channel
// (redacted) and the status.
func TestChannelRedirectsNotFollowed(t *testing.T) {
	var elsewhere recorder
	other := httptest.NewServer(http.HandlerFunc(elsewhere.add))
	defer other.Close()
	for _, c := range channelCases {
		for _, code := range []int{301, 302, 303, 307, 308} {
			t.Run(fmt.Sprintf("%s %d", c.scheme, code), func(t *testing.T) {
				var asked recorder
				srv := c.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					asked.add(w, r)
					http.Redirect(w, r, other.URL+"/stolen", code)
				}))
				d := c.deliverer(t, srv, DefaultTimeout)
				raw := c.url(srv.Listener.Addr().String())
				err := d.Send(context.Background(), store.Target{Name: "x", Kind: store.TargetChannel, SecretFile: urlFile(t, raw)}, testEvent())
				if !errors.Is(err, errRedirect) || !strings.Contains(err.Error(), strconv.Itoa(code)) {
					t.Fatalf("Send = %v, want a refused redirect naming %d", err, code)
				}
				if !strings.HasPrefix(err.Error(), "channel "+Redact(raw)+": ") {
					t.Fatalf("Send = %v, want it to name the channel %s", err, Redact(raw))
				}
				if strings.Contains(err.Error(), c.secret) || strings.Contains(err.Error(), "stolen") {
					t.Fatalf("the error shows a URL's secret or the redirect's target: %v", err)
				}
				if len(asked.requests()) == 0 {
					t.Fatal("the channel's server was never asked: the test shows nothing")
				}
			})
		}
	}
	if got := elsewhere.requests(); len(got) > 0 {
		t.Fatalf("the redirects' destination received %q", got)
	}
}

// A channel's server that takes the request and never answers: the send fails at its timeout,
// having reached the server, and leaves no goroutine behind once the server is closed (its
// connections are held open by the test until then, so none ends them for the client).
func TestChannelTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	for _, c := range channelCases {
		t.Run(c.scheme, func(t *testing.T) {
			before := runtime.NumGoroutine()
			var mu sync.Mutex
			var held []net.Conn
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				for _, conn := range held {
					conn.Close()
				}
			}()
			srv := c.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				mu.Lock()
				held = append(held, conn)
				mu.Unlock()
			}))
			d := c.deliverer(t, srv, timeout)
			raw := c.url(srv.Listener.Addr().String())
			err := d.Send(context.Background(), store.Target{Name: "x", Kind: store.TargetChannel, SecretFile: urlFile(t, raw)}, testEvent())
			if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "channel "+Redact(raw)+": no answer within") {
				t.Fatalf("Send = %v, want the channel's timeout", err)
			}
			if strings.Contains(err.Error(), c.secret) {
				t.Fatalf("the error shows the URL's secret: %v", err)
			}
			mu.Lock()
			reached := len(held)
			mu.Unlock()
			if reached == 0 {
				t.Fatal("the send ended before its request reached the server: the test shows nothing")
			}
			srv.Close()
			if left := waitGoroutines(before); left > before {
				var stacks bytes.Buffer
				_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
				t.Fatalf("%d goroutines before the send, %d after it and the server's close:\n%s", before, left, stacks.String())
			}
		})
	}
}

// waitGoroutines waits for the goroutines to be at most want, and returns their number: a
// goroutine whose connection was closed takes a moment to notice. Generous, for a loaded machine.
func waitGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(30 * time.Second); n > want && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// A service holdfast cannot give its client is refused when the target is added, saying which it
// sends to; one stored before is refused at the send, and its server receives nothing.
func TestChannelRefusedServices(t *testing.T) {
	for _, raw := range []string{
		"slack://hook:AAAAAAAAA-BBBBBBBBB-123456s3cret123456789123@webhook",
		"telegram://110201543:AAHs3cretvCH1vGWJxfSeofSAs0K5PALDs@telegram?chats=@backups",
		"smtp://user:s3cret@127.0.0.1:2225/?fromAddress=holdfast@example.com&toAddresses=ops@example.com",
		"logger://",
	} {
		target := store.Target{Name: "x", Kind: store.TargetChannel, SecretFile: urlFile(t, raw)}
		err := ValidateTarget(&target)
		scheme, _, _ := strings.Cut(raw, ":")
		if err == nil || !strings.Contains(err.Error(), "holdfast does not send through shoutrrr's "+scheme+" sender") ||
			!strings.Contains(err.Error(), "ntfy://") {
			t.Fatalf("ValidateTarget(%s) = %v, want the refusal naming the services it sends to", scheme, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("the refusal shows the URL's secret: %v", err)
		}
	}

	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(rec.add))
	defer srv.Close()
	raw := "bark://:s3cret@" + srv.Listener.Addr().String() + "/?scheme=http"
	err := newTestDeliverer(t, Config{}).Send(context.Background(), store.Target{Name: "x", Kind: store.TargetChannel, SecretFile: urlFile(t, raw)}, testEvent())
	if err == nil || !strings.HasPrefix(err.Error(), "channel "+Redact(raw)+": holdfast does not send through shoutrrr's bark sender") {
		t.Fatalf("Send to a bark channel = %v, want the refusal", err)
	}
	if got := rec.requests(); len(got) > 0 {
		t.Fatalf("the refused service's server received %q", got)
	}

	good := store.Target{Name: "x", Kind: store.TargetChannel, SecretFile: urlFile(t, "ntfy://ntfy.example.com/backups-s3cret")}
	if err := ValidateTarget(&good); err != nil || good.URL != "ntfy://ntfy.example.com/…" {
		t.Fatalf("ValidateTarget of an ntfy channel: %v, URL %q", err, good.URL)
	}
}

// Discord pauses between its tries as long as its server asks: the pause ends with the send.
func TestChannelPauseEndsWithTheSend(t *testing.T) {
	c := channelCases[slices.IndexFunc(channelCases, func(c channelCase) bool { return c.scheme == "discord" })]
	var rec recorder
	srv := c.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(w, r)
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	d := c.deliverer(t, srv, 2*time.Second)
	raw := c.url("")
	err := d.Send(context.Background(), store.Target{Name: "x", Kind: store.TargetChannel, SecretFile: urlFile(t, raw)}, testEvent())
	if !errors.Is(err, context.DeadlineExceeded) || len(rec.requests()) != 1 {
		t.Fatalf("Send = %v after %d requests, want the timeout after the one asking for a pause", err, len(rec.requests()))
	}
}
