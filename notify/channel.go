package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nicholas-fedor/shoutrrr/pkg/router"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/discord"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/mattermost"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/rocketchat"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/incident/pagerduty"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/gotify"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/ntfy"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/pushover"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/specialized/generic"
	"github.com/nicholas-fedor/shoutrrr/pkg/types"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/store"
)

// ChannelSchemes are the services a channel target may name: those whose shoutrrr sender
// holdfast can give its own HTTP client, so that the send ends at its timeout and follows no
// redirect. The others (slack, telegram, smtp, ...) use http.DefaultClient, a client of their
// own or a connection holdfast cannot reach.
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
// names only the service and its host.
func (d *Deliverer) channel(ctx context.Context, t store.Target, e store.Event) error {
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
	err = send(ctx, func(insecure bool) *http.Client {
		h = d.newChannelHTTP(ctx, insecure)
		return h.client
	}, msg)
	// The service's own words come last: they may quote the URL they were given.
	switch {
	case h != nil && h.redirect != "":
		// Failed even if the service made nothing of the error: the message was not delivered.
		return fmt.Errorf("channel %s: the service answered %s: %w", Redact(raw), h.redirect, errRedirect)
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("channel %s: no answer within --notify-timeout (%s): %w", Redact(raw), d.cfg.Timeout, ctx.Err())
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("channel %s: %w", Redact(raw), ctx.Err())
	case err != nil:
		return fmt.Errorf("channel %s: %s", Redact(raw), redactErr(err, raw))
	}
	return nil
}

// channelService is how to send through the service raw names; an error (naming the URL
// redacted) if raw names none, or one not among ChannelSchemes.
func channelService(raw string) (channelSend, error) {
	svc, err := (&router.ServiceRouter{}).Locate(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: not a service URL holdfast can send to: %s", Redact(raw), redactErr(err, raw))
	}
	send := senderFor(svc)
	if send == nil {
		schemes := make([]string, len(ChannelSchemes))
		for i, s := range ChannelSchemes {
			schemes[i] = s + "://"
		}
		return nil, fmt.Errorf("%s: holdfast does not send through shoutrrr's %s sender: it sends only through those "+
			"it can give its own HTTP client (for its timeout, and to refuse redirects): %s "+
			"(generic+https://HOST/PATH posts the message to any URL); or use --webhook", Redact(raw), svc.GetID(), strings.Join(schemes, ", "))
	}
	return send, nil
}

// channelSend sends msg through one service, on the client newClient makes (insecure: with TLS
// verification off, where the service's URL asks for it as the service's own client would).
type channelSend func(ctx context.Context, newClient func(insecure bool) *http.Client, msg string) error

// senderFor is how holdfast sends through svc, each with a hook the service offers for its HTTP
// client (a setter, a client field, a getter of the very client its sender uses); nil for a
// service without one. shoutrrr's own router is not used: it sends from a goroutine that it
// leaves behind at its timeout.
func senderFor(svc types.Service) channelSend {
	params := &types.Params{} // as shoutrrr's router gives: some services read them
	switch s := svc.(type) {
	case *ntfy.Service:
		return func(_ context.Context, newClient func(bool) *http.Client, msg string) error {
			s.SetHTTPClient(newClient(s.Config.DisableTLSVerification))
			return s.Send(msg, params)
		}
	case *gotify.Service:
		return func(_ context.Context, newClient func(bool) *http.Client, msg string) error {
			if err := replaceClient(s.GetHTTPClient(), newClient(s.Config.InsecureSkipVerify)); err != nil {
				return err
			}
			return s.Send(msg, params)
		}
	case *mattermost.Service:
		return func(_ context.Context, newClient func(bool) *http.Client, msg string) error {
			if err := replaceClient(s.GetHTTPClient(), newClient(false)); err != nil {
				return err
			}
			return s.Send(msg, params)
		}
	case *discord.Service:
		return func(ctx context.Context, newClient func(bool) *http.Client, msg string) error {
			// Discord tries again after a pause of its own: cut short at the send's end.
			s.HTTPClient, s.Sleeper = newClient(false), sendSleeper{ctx}
			return s.Send(msg, params)
		}
	case *pushover.Service:
		return func(_ context.Context, newClient func(bool) *http.Client, msg string) error {
			s.Client = newClient(false)
			return s.Send(msg, params)
		}
	case *rocketchat.Service:
		return func(_ context.Context, newClient func(bool) *http.Client, msg string) error {
			s.Client = newClient(false)
			return s.Send(msg, params)
		}
	case *pagerduty.Service:
		return func(ctx context.Context, newClient func(bool) *http.Client, msg string) error {
			s.SetHTTPClient(newClient(false))
			return s.SendWithContext(ctx, msg, params)
		}
	case *generic.Service:
		return func(ctx context.Context, newClient func(bool) *http.Client, msg string) error {
			return sendGeneric(ctx, newClient(false), s, msg)
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
// and headers of its parsed URL) but on c: the service itself sends on http.DefaultClient, which
// follows redirects and has no timeout, and takes no other.
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
	resp, err := c.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = Redact(ue.URL)
	}
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

// channelHTTP is one channel send's HTTP client: connections of its own, closed when the send
// ends; every request bound to the send's context, so to its timeout, whatever the service's own
// timeouts and retries; and no redirect followed, as for a webhook.
type channelHTTP struct {
	client    *http.Client
	transport *http.Transport
	redirect  string // the status of the redirect refused, if one was
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
	h := &channelHTTP{transport: tr}
	h.client = &http.Client{Transport: boundTransport{ctx: ctx, base: tr},
		// Called in the service's sending goroutine, which is the send's own.
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			h.redirect = "a redirect"
			if req.Response != nil {
				h.redirect = req.Response.Status
			}
			return errRedirect
		}}
	return h
}

// boundTransport makes every request also end when ctx, the send's, does: services make their
// requests on contexts of their own (context.Background, or a timeout of their choice).
type boundTransport struct {
	ctx  context.Context
	base http.RoundTripper
}

func (t boundTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.ctx.Err(); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	ctx, cancel := context.WithCancel(req.Context())
	// Canceled when the send ends at the latest: Send cancels its context as it returns.
	context.AfterFunc(t.ctx, cancel)
	return t.base.RoundTrip(req.WithContext(ctx))
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

// about names what an event is about: its job, or its host for a host's event.
func about(e store.Event) string {
	if e.Job == "" {
		return "host " + e.Host
	}
	return e.Job
}

// redactErr is err's text without the URL it may quote (with its secret).
func redactErr(err error, raw string) string {
	msg := err.Error()
	if u, perr := url.Parse(raw); perr == nil {
		if u.User != nil {
			msg = strings.ReplaceAll(msg, u.User.String(), "…")
		}
		if u.Path != "" && u.Path != "/" {
			msg = strings.ReplaceAll(msg, u.Path, "/…")
		}
	}
	return strings.ReplaceAll(msg, raw, Redact(raw))
}

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
