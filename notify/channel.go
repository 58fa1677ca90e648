package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nicholas-fedor/shoutrrr/pkg/router"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/discord"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/googlechat"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/mattermost"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/rocketchat"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/slack"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/teams"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/telegram"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/zulip"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/incident/opsgenie"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/incident/pagerduty"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/bark"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/gotify"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/ifttt"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/join"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/ntfy"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/pushbullet"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/pushover"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/specialized/generic"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/specialized/notifiarr"
	"github.com/nicholas-fedor/shoutrrr/pkg/types"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/setting"
)

// ChannelSchemes are the services a channel target may name: those whose shoutrrr sender
// holdfast can make send on an HTTP client of its own, so that the send ends at its timeout and
// follows no redirect (senderFor). The others open a connection holdfast cannot bound (smtp),
// send on an HTTP client of their own that holdfast cannot reach (matrix, signal, lark, wecom),
// or send nowhere (logger): see refusal.
var ChannelSchemes = func() []string {
	var r router.ServiceRouter
	var schemes []string
	for _, scheme := range r.ListServices() {
		if svc, err := r.NewService(scheme); err == nil && senderFor(svc) != nil {
			schemes = append(schemes, scheme)
		}
	}
	slices.Sort(schemes)
	return schemes
}()

// errRedirect is a channel send's failure when the service answered with a redirect.
var errRedirect = errors.New("redirects are not followed (give the service's final URL)")

// channel sends the event as one message through the service the target's URL file names, one of
// ChannelSchemes. The URL is read as root reads a secret at every send and never shown: an error
// names only the service and its host (not even that where the host is the secret).
func (d *Deliverer) channel(ctx context.Context, t model.Target, e model.Event) error {
	raw, err := ChannelURL(t.SecretFile)
	if err != nil {
		return err
	}
	send, err := channelService(raw)
	if err != nil {
		return fmt.Errorf("channel %w", err)
	}
	msg := fmt.Sprintf("holdfast: %s %s", about(e), e.Event)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.Run != nil {
		msg += " (run " + e.Run.String() + ")"
	}
	var h *channelHTTP
	defer func() {
		if h != nil {
			h.transport.CloseIdleConnections()
		}
	}()
	err = callSender(func() error {
		return send(ctx, func(insecure bool) *channelHTTP {
			h = d.newChannelHTTP(ctx, insecure)
			return h
		}, msg)
	})
	var o outcome
	if h != nil {
		o = h.seen()
	}
	var panicked senderPanic
	switch {
	case err == nil && o.checkAnswers && o.failed != "":
		// The service made nothing of it (telegram says nothing of a request that got no answer
		// or an error status): the message was not delivered all the same.
		err = errors.New(o.failed)
	case errors.As(err, &panicked) && o.failed != "":
		// Zulip's sender panics when its request got no answer: that is the news.
		err = fmt.Errorf("%s (%v)", o.failed, err)
	}
	where := Redact(raw)
	// The service's own words come last: they may quote the URL they were given, or those
	// they asked.
	switch {
	case o.redirect != "":
		// Failed even if the service made nothing of the error: the message was not delivered.
		return fmt.Errorf("channel %s: the service answered %s: %w", where, o.redirect, errRedirect)
	case errors.Is(err, errSharedBusy):
		return fmt.Errorf("channel %s: %w", where, err)
	case err != nil && timedOut(ctx):
		return setting.Errorf("channel %s: no answer within {Notify.Timeout} (%s): %w", where, d.cfg.Timeout, context.DeadlineExceeded)
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("channel %s: %w", where, ctx.Err())
	case err != nil:
		return fmt.Errorf("channel %s: %s", where, o.redact(redactErr(err, raw)))
	}
	return nil
}

// timedOut is whether ctx, a send's, reached its deadline: by its own timer, or by the clock
// where http.DefaultClient's Timeout, as long, ended the request a moment before that timer fired.
func timedOut(ctx context.Context) bool {
	deadline, ok := ctx.Deadline()
	return errors.Is(ctx.Err(), context.DeadlineExceeded) || ok && !time.Now().Before(deadline)
}

// callSender calls send, a service's sender, and turns a panic of its into a failed try: zulip's
// dereferences the response it did not get when a request fails, and the daemon, which supervises
// every job, is not to end with it. The sender runs in this goroutine, so the panic is its.
func callSender(send func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = senderPanic{p}
		}
	}()
	return send()
}

// senderPanic is a service's sender's panic, as a send's error.
type senderPanic struct{ value any }

func (p senderPanic) Error() string { return fmt.Sprintf("the service's sender failed: %v", p.value) }

// channelService is how to send through the service raw names; an error (naming the URL
// redacted) if raw names none, or one not among ChannelSchemes. A service is known for one
// holdfast does not send through before it is initialized: matrix's initialization logs in to
// its server, on its own client.
func channelService(raw string) (channelSend, error) {
	r := &router.ServiceRouter{}
	scheme, _, err := r.ExtractServiceName(raw)
	var svc types.Service
	if err == nil {
		svc, err = r.NewService(scheme)
	}
	if err == nil && senderFor(svc) == nil {
		schemes := make([]string, len(ChannelSchemes))
		for i, s := range ChannelSchemes {
			schemes[i] = s + "://"
		}
		return nil, setting.Errorf("%s: holdfast does not send through shoutrrr's %s sender: %s. It sends through %s "+
			"(generic+https://HOST/PATH posts the message to any URL); or use {TargetWebhook.URL}", Redact(raw), svc.GetID(),
			refusal(svc.GetID()), strings.Join(schemes, ", "))
	}
	if err == nil {
		svc, err = r.Locate(raw)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: not a service URL holdfast can send to: %s", Redact(raw), redactErr(err, raw))
	}
	return senderFor(svc), nil
}

// refusal says why holdfast does not send through the sender of service id, one not among
// ChannelSchemes.
func refusal(id string) string {
	switch id {
	case "smtp":
		// Its deadline bounds the dial only (Config.Timeout); the conversation after it has none,
		// and the connection is made inside its sender, out of holdfast's reach.
		return setting.Render("it speaks SMTP on a connection of its own that has no deadline once it is made, so a server that " +
			"stops answering would hold the send past {Notify.Timeout}; send mail through a command target instead " +
			"({Target.Command}, a program that reads the event's JSON on its standard input and hands a message to sendmail)")
	case "logger":
		return "it writes the message to a logger holdfast does not give it, so nothing would be delivered"
	}
	return setting.Render("it sends on an HTTP client of its own, which holdfast cannot reach to bound by {Notify.Timeout} " +
		"and to refuse redirects")
}

// channelSend sends msg through one service, on the HTTP client newHTTP makes for the send
// (insecure: with TLS verification off, where the service's URL asks for it as the service's own
// client would).
type channelSend func(ctx context.Context, newHTTP func(insecure bool) *channelHTTP, msg string) error

// senderFor is how holdfast sends through svc; nil for a service it does not send through.
// shoutrrr's own router is not used: it sends from a goroutine that it leaves behind at its
// timeout. Each service is called in the send's goroutine, with holdfast's HTTP client:
//   - handed over through a hook the service offers (a setter, a client field, a getter of the
//     very client its sender uses);
//   - or, for those whose sender uses http.DefaultClient (directly, through http.Post, or through
//     shoutrrr's jsonclient), as the process's http.DefaultClient, which New makes route each
//     request to the send under way (onDefaultClient);
//   - or holdfast sends the request itself, from the service's parsed URL, where the service's
//     client is out of reach but its request is plain: generic, and slack's webhooks.
func senderFor(svc types.Service) channelSend {
	params := &types.Params{} // as shoutrrr's router gives: some services read them
	switch s := svc.(type) {
	case *ntfy.Service:
		return func(_ context.Context, newHTTP func(bool) *channelHTTP, msg string) error {
			s.SetHTTPClient(newHTTP(s.Config.DisableTLSVerification).client)
			return s.Send(msg, params)
		}
	case *gotify.Service:
		return func(_ context.Context, newHTTP func(bool) *channelHTTP, msg string) error {
			if err := replaceClient(s.GetHTTPClient(), newHTTP(s.Config.InsecureSkipVerify).client); err != nil {
				return err
			}
			return s.Send(msg, params)
		}
	case *mattermost.Service:
		return func(_ context.Context, newHTTP func(bool) *channelHTTP, msg string) error {
			if err := replaceClient(s.GetHTTPClient(), newHTTP(false).client); err != nil {
				return err
			}
			return s.Send(msg, params)
		}
	case *discord.Service:
		return func(ctx context.Context, newHTTP func(bool) *channelHTTP, msg string) error {
			// Discord tries again after a pause of its own: cut short at the send's end.
			s.HTTPClient, s.Sleeper = newHTTP(false).client, sendSleeper{ctx}
			return s.Send(msg, params)
		}
	case *pushover.Service:
		return func(_ context.Context, newHTTP func(bool) *channelHTTP, msg string) error {
			s.Client = newHTTP(false).client
			return s.Send(msg, params)
		}
	case *rocketchat.Service:
		return func(_ context.Context, newHTTP func(bool) *channelHTTP, msg string) error {
			s.Client = newHTTP(false).client
			return s.Send(msg, params)
		}
	case *pagerduty.Service:
		return func(ctx context.Context, newHTTP func(bool) *channelHTTP, msg string) error {
			s.SetHTTPClient(newHTTP(false).client)
			return s.SendWithContext(ctx, msg, params)
		}
	case *generic.Service:
		return func(ctx context.Context, newHTTP func(bool) *channelHTTP, msg string) error {
			return sendGeneric(ctx, newHTTP(false).client, s, msg)
		}
	case *slack.Service:
		return func(ctx context.Context, newHTTP func(bool) *channelHTTP, msg string) error {
			if s.Config.Token.IsAPIToken() {
				// chat.postMessage, through jsonclient on http.DefaultClient.
				return newHTTP(false).onDefaultClient(ctx, func() error { return s.Send(msg, params) })
			}
			// A webhook is sent on a client the service makes for itself (following redirects).
			return sendSlackWebhook(ctx, newHTTP(false).client, s.Config, msg)
		}
	case *teams.Service, *telegram.Service, *googlechat.Service, *zulip.Service, *opsgenie.Service,
		*bark.Service, *ifttt.Service, *join.Service, *pushbullet.Service, *notifiarr.Service:
		return func(ctx context.Context, newHTTP func(bool) *channelHTTP, msg string) error {
			return newHTTP(false).onDefaultClient(ctx, func() error { return svc.Send(msg, params) })
		}
	}
	return nil
}

// replaceClient puts c in the place of the client a service's getter returned, the one its
// sender uses.
func replaceClient(own, c *http.Client) error {
	if own == nil {
		return errors.New("the service has no HTTP client to replace")
	}
	*own = *c
	return nil
}

// sendGeneric sends as shoutrrr's generic service does (the method, URL, payload, content type
// and headers of its parsed URL) but on c: the service itself sends on http.DefaultClient, and
// holdfast's own request needs no more than its parsed URL.
func sendGeneric(ctx context.Context, c *http.Client, s *generic.Service, msg string) error {
	cfg := s.Config
	body, err := s.GetPayload(cfg, types.Params{cfg.MessageKey: msg})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, cfg.RequestMethod, cfg.WebhookURL().String(), body)
	if err != nil {
		return err
	}
	contentType := cfg.ContentType
	if cfg.Template == "" {
		contentType = "text/plain"
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", contentType)
	// The config keeps the URL's headers to itself; its URL gives them back, as @Name keys.
	for key, values := range cfg.GetURL().Query() {
		if name, ok := strings.CutPrefix(key, string(generic.HeaderPrefixChar)); ok && name != "" && len(values) > 0 {
			req.Header.Set(name, values[0])
		}
	}
	resp, err := doChannel(c, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBodyRead))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: %s", req.Method, resp.Status)
	}
	return nil
}

// maxSlackAnswer bounds the part of a Slack webhook's answer a failure quotes.
const maxSlackAnswer = 200

// sendSlackWebhook sends as shoutrrr's slack service sends to a webhook (its payload, from the
// parsed URL, posted to the webhook's URL; delivered when the answer is "ok", or empty with a
// 200), but on c: the service sends webhooks on a client it makes for itself, unexported.
func sendSlackWebhook(ctx context.Context, c *http.Client, cfg *slack.Config, msg string) error {
	payload, err := json.Marshal(slack.CreateJSONPayload(cfg, msg))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Token.WebhookURL(), bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := doChannel(c, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyRead))
	if err != nil {
		return fmt.Errorf("reading the webhook's answer: %w", err)
	}
	switch got := strings.TrimSpace(string(answer)); {
	case got == "ok", got == "" && resp.StatusCode == http.StatusOK:
		return nil
	case got == "":
		return fmt.Errorf("the webhook answered %s", resp.Status)
	default:
		if len(got) > maxSlackAnswer {
			got = got[:maxSlackAnswer] + "…"
		}
		return fmt.Errorf("the webhook answered %s: %q", resp.Status, got)
	}
}

// doChannel makes a request holdfast sends itself for a service, with the URL in its error
// redacted.
func doChannel(c *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := c.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = Redact(ue.URL)
	}
	return resp, err
}

// channelHTTP is one channel send's HTTP client: connections of its own, closed when the send
// ends; every request bound to the send's context, so to its timeout, whatever the service's own
// timeouts and retries; and no redirect followed, as for a webhook. It is the client's
// transport, and notes what the send's requests got.
type channelHTTP struct {
	ctx       context.Context
	client    *http.Client
	transport *http.Transport

	mu    sync.Mutex
	noted outcome
}

// outcome is what a send's requests got.
type outcome struct {
	redirect string // the status of the redirect refused, if one was
	// failed is the first request's that got no answer or an answer other than 2xx; it fails the
	// send where checkAnswers, whatever the service made of it.
	failed       string
	checkAnswers bool
	requested    []url.URL // the URLs asked, each hidden from the service's error
}

func (d *Deliverer) newChannelHTTP(ctx context.Context, insecure bool) *channelHTTP {
	tr := d.cfg.transport.Clone()
	if insecure {
		tc := &tls.Config{}
		if tr.TLSClientConfig != nil {
			tc = tr.TLSClientConfig.Clone()
		}
		tc.InsecureSkipVerify = true
		tr.TLSClientConfig = tc
	}
	h := &channelHTTP{ctx: ctx, transport: tr}
	h.client = &http.Client{Transport: h, CheckRedirect: h.checkRedirect}
	return h
}

// checkRedirect refuses every redirect, noting its status.
func (h *channelHTTP) checkRedirect(req *http.Request, _ []*http.Request) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.noted.redirect = "a redirect"
	if req.Response != nil {
		h.noted.redirect = req.Response.Status
	}
	return errRedirect
}

// RoundTrip makes every request also end when the send does: services make their requests on
// contexts of their own (context.Background, or a timeout of their choice).
func (h *channelHTTP) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.noted.requested = append(h.noted.requested, *req.URL)
	h.mu.Unlock()
	if err := h.ctx.Err(); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		h.fail("no answer: " + err.Error())
		return nil, err
	}
	ctx, cancel := context.WithCancel(req.Context())
	// Canceled when the send ends at the latest: Send cancels its context as it returns.
	context.AfterFunc(h.ctx, cancel)
	resp, err := h.transport.RoundTrip(req.WithContext(ctx))
	switch {
	case err != nil:
		h.fail("no answer: " + err.Error()) // a transport's error, which quotes no URL
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		h.fail("the service answered " + resp.Status)
	}
	return resp, err
}

// fail notes a request's failure, the first one only.
func (h *channelHTTP) fail(why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.noted.failed == "" {
		h.noted.failed = why
	}
}

// seen is what the send's requests got.
func (h *channelHTTP) seen() outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.noted
	o.requested = slices.Clone(o.requested)
	return o
}

// redact is msg without the URLs the send asked (services quote them in their errors, and
// theirs may hold the secret in the path or the query: ifttt's key, join's apikey, telegram's
// bot token) but for their scheme and host.
func (o outcome) redact(msg string) string {
	for _, u := range o.requested {
		for _, s := range []string{u.String(), u.Redacted()} {
			msg = strings.ReplaceAll(msg, s, Redact(s))
		}
		if u.User != nil {
			msg = strings.ReplaceAll(msg, u.User.String(), "…")
		}
		if u.RawQuery != "" {
			msg = strings.ReplaceAll(msg, u.RawQuery, "…")
		}
		for _, p := range []string{u.EscapedPath(), u.Path} {
			if p != "" && p != "/" {
				msg = strings.ReplaceAll(msg, p, "/…")
			}
		}
	}
	return msg
}

// sendSleeper is a pause a service takes between its tries, ended early by the send's end.
type sendSleeper struct{ ctx context.Context }

func (s sendSleeper) Sleep(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-s.ctx.Done():
	}
}

// The services whose sender uses http.DefaultClient (directly, through http.Post, or through
// shoutrrr's jsonclient: teams, telegram, googlechat, zulip, opsgenie, bark, ifttt, join,
// pushbullet, notifiarr, slack's API) send on it as holdfast sets it, once per process, when the
// first Deliverer is built (the daemon builds one): it refuses redirects (errRedirect), has that
// Deliverer's Timeout as its own, and its transport hands each request to the channel
// send under way (its channelHTTP: the send's own connections, closed at its end; its context, so
// that the whole send ends at its timeout however many requests the service makes; its notes of a
// redirect and of failed answers). A request does not say which send it is of, so the sends on
// http.DefaultClient take turns (sharedSlot), each waiting within its own timeout; the daemon
// sends one delivery after the other anyway.
//
// A process-wide setting is acceptable because the daemon is holdfast's own process and nothing
// else in it uses http.DefaultClient: holdfast's code makes its requests on clients of its own
// (webhooks and checks on Config.client; only tests use http.DefaultClient, http.Get or
// http.Post), and of the packages the holdfast binary links, only shoutrrr's senders use it or
// net/http's helpers (http.Get, http.Post, ...) that do. A request made on it outside a channel
// send would still follow no redirect, and end at the Timeout.
var (
	sharedOnce sync.Once
	sharedSlot = make(chan struct{}, 1) // held by the send on http.DefaultClient
	sharedMu   sync.Mutex
	sharedSend *channelHTTP // the send on http.DefaultClient under way, nil between sends
)

// errSharedBusy is a channel send's failure when another one kept http.DefaultClient until its
// timeout.
var errSharedBusy = setting.Errorf("another channel send kept the HTTP client that this service sends on until {Notify.Timeout}")

// useDefaultClient makes http.DefaultClient the one the services without a client hook send on.
// It is changed in place: shoutrrr's jsonclient.DefaultClient keeps the pointer it took when its
// package was initialized.
func useDefaultClient(timeout time.Duration) {
	sharedOnce.Do(func() {
		*http.DefaultClient = http.Client{
			Transport: defaultTransport{},
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if h := currentShared(); h != nil {
					return h.checkRedirect(req, via)
				}
				return errRedirect
			},
			Timeout: timeout,
		}
	})
}

func currentShared() *channelHTTP {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	return sharedSend
}

// defaultTransport is http.DefaultClient's transport: the send's under way.
type defaultTransport struct{}

func (defaultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if h := currentShared(); h != nil {
		return h.RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// onDefaultClient calls send, a service's sender that uses http.DefaultClient, with h as the
// send under way on it, once the sends before it on it are done (within the send's context).
// Its requests' answers are checked: a failed request fails the send, whatever the service made
// of it.
func (h *channelHTTP) onDefaultClient(ctx context.Context, send func() error) error {
	select {
	case sharedSlot <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errSharedBusy, ctx.Err())
	}
	defer func() { <-sharedSlot }()
	h.mu.Lock()
	h.noted.checkAnswers = true
	h.mu.Unlock()
	sharedMu.Lock()
	sharedSend = h
	sharedMu.Unlock()
	defer func() {
		sharedMu.Lock()
		sharedSend = nil
		sharedMu.Unlock()
	}()
	return send()
}

// about names what an event is about: its job, or its host for a host's event.
func about(e model.Event) string {
	if e.Job == "" {
		return "host " + e.Host
	}
	return e.Job
}

// redactErr is err's text without the URL it may quote (with its secret).
func redactErr(err error, raw string) string {
	msg := strings.ReplaceAll(err.Error(), raw, Redact(raw))
	if u, perr := url.Parse(raw); perr == nil {
		if u.User != nil {
			msg = strings.ReplaceAll(msg, u.User.String(), "…")
		}
		if u.Path != "" && u.Path != "/" {
			msg = strings.ReplaceAll(msg, u.Path, "/…")
		}
		if slices.Contains(secretHost, u.Scheme) && u.Host != "" {
			msg = strings.ReplaceAll(msg, u.Host, "…")
		}
	}
	return msg
}

// secretHost are the channel services whose URL's host is their secret: ifttt's webhook key,
// notifiarr's API key, pushbullet's access token, wecom's webhook key. Redact shows only their
// scheme.
var secretHost = []string{"ifttt", "notifiarr", "pushbullet", "wecom"}

// ChannelURL reads a channel target's URL from its file, as root reads a secret: not through a
// link, a regular file of root's closed to its group and others.
func ChannelURL(file string) (string, error) {
	b, err := credentials.ReadSecret(file)
	if err != nil {
		return "", fmt.Errorf("channel URL file: %w", err)
	}
	raw := strings.TrimSpace(string(b))
	if raw == "" || strings.ContainsAny(raw, "\n\r") {
		return "", fmt.Errorf("channel URL file %s: give one URL on one line, such as ntfy://ntfy.sh/backups", file)
	}
	return raw, nil
}
