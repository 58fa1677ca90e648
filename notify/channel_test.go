package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
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

	"github.com/holdfast-backup/holdfast/model"
)

// channelCase is a service holdfast sends to, pointed at a test's server.
type channelCase struct {
	scheme string
	name   string // the case's name, where a scheme has more than one (its scheme otherwise)
	tls    bool   // the service speaks https only
	fixed  string // the address the service always sends to, dialed at the test's server instead
	url    func(addr string) string
	secret string // in the URL, never in an error
	// answer is the body a server that takes the message answers with ("{}" if nil): some
	// services check it.
	answer func(request []byte) string
}

func (c channelCase) label() string {
	if c.name != "" {
		return c.name
	}
	return c.scheme
}

// always is the URL of a service that always sends to the same address: raw, whatever the
// test server's.
func always(raw string) func(string) string { return func(string) string { return raw } }

func answerWith(body string) func([]byte) string { return func([]byte) string { return body } }

// pushbulletAnswer is the push Pushbullet's API answers with: the note asked for, which its
// sender checks.
func pushbulletAnswer(request []byte) string {
	var push struct{ Title, Body string }
	_ = json.Unmarshal(request, &push)
	b, _ := json.Marshal(map[string]any{"type": "note", "active": true, "title": push.Title, "body": push.Body})
	return string(b)
}

// teamsURL is a Teams webhook's URL in shoutrrr's syntax; its last part is the secret.
const teamsURL = "teams://11111111-4444-4444-8444-cccccccccccc@22222222-4444-4444-8444-cccccccccccc/" +
	"33333333012222222222333333333344/44444444-4444-4444-8444-cccccccccccc/s3cretV2ESyij_gAljSoUQHvZoZYzlpAoAXE" +
	"?host=holdfast.webhook.office.com"

var channelCases = []channelCase{
	{scheme: "bark", url: func(a string) string { return "bark://:s3cret-device@" + a + "/?scheme=http" }, secret: "s3cret",
		answer: answerWith(`{"code":200,"message":"success"}`)},
	{scheme: "discord", tls: true, fixed: "discord.com:443", url: always("discord://s3cret-token@123456789"), secret: "s3cret"},
	{scheme: "generic", url: func(a string) string { return "generic+http://" + a + "/hook/s3cret?@X-Hook=header-s3cret" }, secret: "s3cret"},
	{scheme: "googlechat", tls: true, url: func(a string) string { return "googlechat://" + a + "/v1/spaces/FOO/messages?key=k&token=s3cret" }, secret: "s3cret"},
	{scheme: "gotify", url: func(a string) string { return "gotify://" + a + "/As3cret-token-x?disabletls=yes" }, secret: "s3cret"},
	{scheme: "hangouts", tls: true, url: func(a string) string { return "hangouts://" + a + "/v1/spaces/FOO/messages?key=k&token=s3cret" }, secret: "s3cret"},
	{scheme: "ifttt", tls: true, fixed: "maker.ifttt.com:443", url: always("ifttt://s3cret-key/?events=backup"), secret: "s3cret"},
	{scheme: "join", tls: true, fixed: "joinjoaomgcd.appspot.com:443", url: always("join://:s3cret-apikey@join/?devices=phone"), secret: "s3cret"},
	{scheme: "mattermost", url: func(a string) string { return "mattermost://" + a + "/s3cret-token?disabletls=yes" }, secret: "s3cret"},
	{scheme: "notifiarr", tls: true, fixed: "notifiarr.com:443", url: always("notifiarr://s3cretapikey"), secret: "s3cret"},
	{scheme: "ntfy", url: func(a string) string { return "ntfy://" + a + "/backups-s3cret?scheme=http" }, secret: "s3cret"},
	{scheme: "opsgenie", tls: true, url: func(a string) string { return "opsgenie://" + a + "/s3cret-apikey" }, secret: "s3cret"},
	{scheme: "pagerduty", tls: true, url: func(a string) string { return "pagerduty://" + a + "/5ec7e75ec7e75ec7e75ec7e75ec7e75e" }, secret: "5ec7e7"},
	{scheme: "pushbullet", tls: true, fixed: "api.pushbullet.com:443", url: always("pushbullet://s3cretokentokentokentokentokentoke"),
		secret: "s3cret", answer: pushbulletAnswer},
	{scheme: "pushover", tls: true, fixed: "api.pushover.net:443", url: always("pushover://shoutrrr:s3cret-token@userkey/"), secret: "s3cret"},
	{scheme: "rocketchat", tls: true, url: func(a string) string { return "rocketchat://" + a + "/token-a/s3cret" }, secret: "s3cret"},
	{scheme: "slack", name: "slack webhook", tls: true, fixed: "hooks.slack.com:443",
		url:    always("slack://hook:AAAAAAAAA-BBBBBBBBB-s3cret789012345678901234@webhook"),
		secret: "s3cret", answer: answerWith("ok")},
	{scheme: "slack", name: "slack api", tls: true, fixed: "slack.com:443",
		url:    always("slack://xoxb:123456789012-1234567890123-s3cret789012345678901234@C0123456789"),
		secret: "s3cret", answer: answerWith(`{"ok":true}`)},
	{scheme: "teams", tls: true, fixed: "holdfast.webhook.office.com:443", url: always(teamsURL), secret: "s3cret"},
	{scheme: "telegram", tls: true, fixed: "api.telegram.org:443",
		url:    always("telegram://110201543:AAHs3cretvCH1vGWJxfSeofSAs0K5PALDs@telegram?chats=@backups"),
		secret: "s3cret", answer: answerWith(`{"ok":true,"result":{}}`)},
	{scheme: "zulip", tls: true, fixed: "zulip.example.com:443",
		url: always("zulip://bot%40example.com:s3cret-key@zulip.example.com?stream=backups&topic=holdfast"), secret: "s3cret"},
}

// The cases are the services holdfast sends to, all of them.
func TestChannelSchemes(t *testing.T) {
	var schemes []string
	for _, c := range channelCases {
		schemes = append(schemes, c.scheme)
	}
	if schemes = slices.Compact(schemes); !slices.Equal(schemes, ChannelSchemes) {
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

// recorder records the requests a server received: method, path, X-Hook header, body and
// query (join sends the message there).
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *recorder) add(_ http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.record(req, body)
}

func (r *recorder) record(req *http.Request, body []byte) {
	query, _ := url.QueryUnescape(req.URL.RawQuery)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, req.Method+" "+req.URL.Path+" "+req.Header.Get("X-Hook")+" "+string(body)+" "+query)
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// send sends the test event to a channel target whose URL file holds raw.
func send(d *Deliverer, t *testing.T, raw string) error {
	return d.Send(context.Background(), model.Target{Name: "x", Kind: model.TargetChannel, SecretFile: urlFile(t, raw)}, testEvent())
}

// Each service holdfast sends to gets the message on holdfast's client: a service's fixed
// address is reached only through the test's transport, so the message arriving shows that the
// service used it. Its target is accepted by notify add, and listed without its secret.
func TestChannelSends(t *testing.T) {
	for _, c := range channelCases {
		t.Run(c.label(), func(t *testing.T) {
			var rec recorder
			srv := c.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				rec.record(r, body)
				answer := "{}"
				if c.answer != nil {
					answer = c.answer(body)
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, answer)
			}))
			d := c.deliverer(t, srv, DefaultTimeout)
			raw := c.url(srv.Listener.Addr().String())
			target := model.Target{Name: "x", Kind: model.TargetChannel, SecretFile: urlFile(t, raw)}
			if err := ValidateTarget(&target); err != nil || target.URL != Redact(raw) || strings.Contains(target.URL, c.secret) {
				t.Fatalf("ValidateTarget: %v, URL %q", err, target.URL)
			}
			if err := d.Send(context.Background(), target, testEvent()); err != nil {
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
			t.Run(fmt.Sprintf("%s %d", c.label(), code), func(t *testing.T) {
				var asked recorder
				srv := c.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					asked.add(w, r)
					http.Redirect(w, r, other.URL+"/stolen", code)
				}))
				d := c.deliverer(t, srv, DefaultTimeout)
				raw := c.url(srv.Listener.Addr().String())
				err := send(d, t, raw)
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

// holdingServer starts a server for c that takes each request and never answers; its
// connections are held open until the test ends. It returns how many requests reached it.
func (c channelCase) holdingServer(t *testing.T) (*httptest.Server, func() int) {
	t.Helper()
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range held {
			conn.Close()
		}
	})
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
	return srv, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(held)
	}
}

// A channel's server that takes the request and never answers: the send fails at its timeout,
// having reached the server, and leaves no goroutine behind once the server is closed (its
// connections are held open by the test until then, so none ends them for the client).
func TestChannelTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	for _, c := range channelCases {
		t.Run(c.label(), func(t *testing.T) {
			before := runtime.NumGoroutine()
			srv, reached := c.holdingServer(t)
			d := c.deliverer(t, srv, timeout)
			raw := c.url(srv.Listener.Addr().String())
			start := time.Now()
			err := send(d, t, raw)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "channel "+Redact(raw)+": no answer within") {
				t.Fatalf("Send = %v, want the channel's timeout", err)
			}
			if took > timeout+timeout/2 {
				t.Fatalf("Send took %s, with a timeout of %s", took, timeout)
			}
			if strings.Contains(err.Error(), c.secret) {
				t.Fatalf("the error shows the URL's secret: %v", err)
			}
			if reached() == 0 {
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

// The timeout bounds the whole send, not each of its requests: telegram sends to each of its
// chats in turn, and makes nothing of a request that got no answer.
func TestChannelTimeoutBoundsTheWholeSend(t *testing.T) {
	const timeout = 2 * time.Second
	c := channelCases[slices.IndexFunc(channelCases, func(c channelCase) bool { return c.scheme == "telegram" })]
	srv, reached := c.holdingServer(t)
	d := c.deliverer(t, srv, timeout)
	raw := strings.Replace(c.url(""), "chats=@backups", "chats=@backups,@ops,@oncall", 1)
	start := time.Now()
	err := send(d, t, raw)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > timeout+timeout/2 {
		t.Fatalf("Send = %v after %s, want the timeout at %s", err, took, timeout)
	}
	if n := reached(); n != 1 {
		t.Fatalf("%d requests reached the server, want the first chat's only", n)
	}
}

// A service's server that answers with an error, or a server gone, fails the send, whatever the
// service made of it (telegram says nothing of an answer that is not its JSON, zulip's sender
// panics without a response), and the error shows no secret: neither the channel's URL's nor
// those of the requests the service made (ifttt's key, join's apikey, telegram's token).
func TestChannelFailures(t *testing.T) {
	for _, c := range channelCases {
		t.Run(c.label()+" 500", func(t *testing.T) {
			srv := c.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "<html>down for maintenance</html>", http.StatusInternalServerError)
			}))
			// Short: discord and pagerduty try again after a pause.
			d := c.deliverer(t, srv, 3*time.Second)
			raw := c.url(srv.Listener.Addr().String())
			err := send(d, t, raw)
			if err == nil || !strings.HasPrefix(err.Error(), "channel "+Redact(raw)+": ") || strings.Contains(err.Error(), c.secret) {
				t.Fatalf("Send = %v, want the channel's failure without its secret", err)
			}
		})
		t.Run(c.label()+" gone", func(t *testing.T) {
			srv := c.start(t, http.NotFoundHandler())
			d := c.deliverer(t, srv, 3*time.Second)
			raw := c.url(srv.Listener.Addr().String())
			srv.Close()
			err := send(d, t, raw)
			if err == nil || !strings.HasPrefix(err.Error(), "channel "+Redact(raw)+": ") || strings.Contains(err.Error(), c.secret) ||
				!strings.Contains(err.Error(), "connection refused") {
				t.Fatalf("Send = %v, want the channel's failure to connect, without its secret", err)
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

// A service holdfast does not send through is refused when the target is added, saying why and
// which it sends to; one stored before is refused at the send, and its server receives nothing.
func TestChannelRefusedServices(t *testing.T) {
	for _, c := range []struct{ raw, why string }{
		{"smtp://user:s3cret@127.0.0.1:2225/?fromAddress=holdfast@example.com&toAddresses=ops@example.com", "sendmail"},
		{"logger://", "nothing would be delivered"},
		{"matrix://user:s3cret@matrix.example.com/?rooms=backups", "an HTTP client of its own"},
		{"signal://:s3cret@signal.example.com:8080/+11111111111/+22222222222", "an HTTP client of its own"},
		{"lark://open.larksuite.com/s3cret-token", "an HTTP client of its own"},
		{"wecom://s3cretkey", "an HTTP client of its own"},
	} {
		target := model.Target{Name: "x", Kind: model.TargetChannel, SecretFile: urlFile(t, c.raw)}
		err := ValidateTarget(&target)
		scheme, _, _ := strings.Cut(c.raw, ":")
		if err == nil || !strings.Contains(err.Error(), "holdfast does not send through shoutrrr's "+scheme+" sender: ") ||
			!strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "ntfy://") || !strings.Contains(err.Error(), "slack://") {
			t.Fatalf("ValidateTarget(%s) = %v, want the refusal saying why, naming the services it sends to", scheme, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("the refusal shows the URL's secret: %v", err)
		}
	}

	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(rec.add))
	defer srv.Close()
	raw := "matrix://user:s3cret@" + srv.Listener.Addr().String() + "/?disableTLS=yes&rooms=backups"
	err := send(newTestDeliverer(t, Config{}), t, raw)
	if err == nil || !strings.HasPrefix(err.Error(), "channel "+Redact(raw)+": holdfast does not send through shoutrrr's matrix sender") {
		t.Fatalf("Send to a matrix channel = %v, want the refusal", err)
	}
	if got := rec.requests(); len(got) > 0 {
		t.Fatalf("the refused service's server received %q", got)
	}

	good := model.Target{Name: "x", Kind: model.TargetChannel, SecretFile: urlFile(t, "ntfy://ntfy.example.com/backups-s3cret")}
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
	err := send(d, t, c.url(""))
	if !errors.Is(err, context.DeadlineExceeded) || len(rec.requests()) != 1 {
		t.Fatalf("Send = %v after %d requests, want the timeout after the one asking for a pause", err, len(rec.requests()))
	}
}

// The sends on http.DefaultClient take turns: one that cannot have it within its timeout fails
// saying so, having sent nothing.
func TestChannelSharedClientTakesTurns(t *testing.T) {
	c := channelCases[slices.IndexFunc(channelCases, func(c channelCase) bool { return c.scheme == "telegram" })]
	var rec recorder
	srv := c.start(t, http.HandlerFunc(rec.add))
	d := c.deliverer(t, srv, time.Second)
	sharedSlot <- struct{}{} // another send's
	err := send(d, t, c.url(""))
	<-sharedSlot
	if !errors.Is(err, errSharedBusy) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send = %v, want it to have waited for the client until its timeout", err)
	}
	if got := rec.requests(); len(got) > 0 {
		t.Fatalf("the server received %q", got)
	}
}

// http.DefaultClient, asked outside a channel send (nothing in holdfast does), follows no
// redirect either.
func TestDefaultClientOutsideASend(t *testing.T) {
	newTestDeliverer(t, Config{})
	var elsewhere recorder
	other := httptest.NewServer(http.HandlerFunc(elsewhere.add))
	defer other.Close()
	srv := httptest.NewServer(http.RedirectHandler(other.URL+"/stolen", http.StatusTemporaryRedirect))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("body"))
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, errRedirect) || len(elsewhere.requests()) > 0 {
		t.Fatalf("POST = %v, and the redirect's target received %q: want the redirect refused", err, elsewhere.requests())
	}
	if http.DefaultClient.Timeout <= 0 {
		t.Fatal("http.DefaultClient has no timeout")
	}
}
