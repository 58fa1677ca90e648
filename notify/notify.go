// Package notify delivers the outbox's events to the operator's targets: a webhook (a JSON POST
// signed with HMAC-SHA256), a healthchecks.io check (its ping protocol), a command (the event as
// JSON on its standard input; run only where the daemon allows it, as an unprivileged user), or
// a channel (a message through a service by URL, with shoutrrr's sender for it on an HTTP client
// of holdfast's). Redirects are not followed, and every send ends at its timeout. Each delivery
// is claimed by one daemon for a lease, sent at least once with the event's id as the
// idempotency key (receivers deduplicate), tried again with a growing delay, and kept as failed
// after MaxTries.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/journallog"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/setting"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
)

// Events are the events a target can ask for; DefaultEvents those it gets when it names none:
// all but a run's start and a restore asked for from the dashboard (an audit record, which a
// target asks for by name).
var (
	Events = []string{"started", "succeeded", "partial", "failed", "stopped", "paused", "overdue", "recovered", "stalled",
		"host_down", "host_back", "verified", "verify_failed", "skipped", "restore_requested"}
	DefaultEvents = Events[1 : len(Events)-1]
)

// Headers a webhook request carries.
const (
	HeaderSignature   = "X-Holdfast-Signature" // "sha256=" and the hex HMAC-SHA256 of the body
	HeaderEvent       = "X-Holdfast-Event"
	HeaderIdempotency = "Idempotency-Key" // the event's id
)

// Payload is the JSON an event is sent as: the fields every event has, then its details.
func Payload(e model.Event) ([]byte, error) {
	fields := map[string]any{}
	if len(e.Details) > 0 {
		if err := json.Unmarshal(e.Details, &fields); err != nil {
			return nil, fmt.Errorf("details of event %s: %w", e.ID, err)
		}
	}
	fields["id"], fields["event"], fields["job"], fields["status"] = e.ID.String(), e.Event, e.Job, e.Status
	fields["reason"], fields["at"], fields["host"] = e.Reason, e.At.UTC().Format(time.RFC3339Nano), e.Host
	fields["run"], fields["attempt"] = nil, nil
	if e.Run != nil {
		fields["run"] = e.Run.String()
	}
	if e.Attempt != nil {
		fields["attempt"] = *e.Attempt
	}
	return json.Marshal(fields)
}

// Sign is the signature header's value for body with key.
func Sign(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Store is what a Deliverer reads and writes: the deliveries it claims and how each ended, and
// the attempts of the run an event is about. The daemon and the CLI give their store.Store.
type Store interface {
	DeliveryClaim(ctx context.Context, limit int, lease time.Duration) ([]model.Delivery, error)
	DeliveryMarkDone(ctx context.Context, event uuid.UUID, target string) error
	DeliveryMarkFailed(ctx context.Context, p store.DeliveryMarkFailedParams) error
	AttemptList(ctx context.Context, runID uuid.UUID) ([]model.Attempt, error)
}

// Config configures a Deliverer.
type Config struct {
	Store Store
	// JournalDir is the journal directory a healthchecks body's log tail is read from ("" the
	// system journal).
	JournalDir string
	// Lease is how long a claimed delivery is this daemon's; Timeout bounds one send. MaxTries
	// is how many tries a delivery gets before it is kept as failed; Backoff the delay after the
	// first failed try, doubled after each next one up to MaxBackoff.
	Lease, Timeout, Backoff, MaxBackoff time.Duration
	MaxTries                            int
	// AllowCommands lets command targets run (--allow-notify-commands): whoever can write the
	// database names their program, so by default a delivery to one fails, saying so.
	// CommandUser is the user they run as (--notify-command-user, DefaultCommandUser).
	AllowCommands bool
	CommandUser   string
	Logger        *slog.Logger
	client        *http.Client
	credential    *syscall.Credential // CommandUser's, nil for this process's own
	waitDelay     time.Duration
	// transport is what each channel send's own transport is cloned from (tests dial their
	// servers through it).
	transport *http.Transport
}

// Defaults, each stated once.
const (
	DefaultLease      = 2 * time.Minute
	DefaultTimeout    = 30 * time.Second
	DefaultBackoff    = 5 * time.Second
	DefaultMaxBackoff = 10 * time.Minute
	DefaultMaxTries   = 8
	// DefaultCommandUser is the user command targets run as: never root unless the operator
	// says so.
	DefaultCommandUser = "nobody"
	logTailLines       = 50
	maxBodyRead        = 64 << 10
	maxStderr          = 4 << 10
	// maxWaitDelay bounds how long a command's end waits for a process it left holding its
	// standard error (or that ignores the kill at its timeout).
	maxWaitDelay = 2 * time.Second
)

// ErrCommandsRefused is the failure of a delivery to a command target on a host whose daemon
// does not run them.
var ErrCommandsRefused = setting.Errorf("refused: this host's daemon runs no command targets " +
	"(allow them with holdfast daemon {Notify.AllowCommands}, HOLDFAST_ALLOW_NOTIFY_COMMANDS=true; they run as {Notify.CommandUser}, default nobody)")

// CommandCredential resolves the user a command target runs as: a name or a uid, with its
// primary and supplementary groups. It is nil when that is this process's own user.
func CommandCredential(name string) (*syscall.Credential, error) {
	if name == "" {
		name = DefaultCommandUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, setting.Errorf("{Notify.CommandUser} %q: no such user", name)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, setting.Errorf("{Notify.CommandUser} %q: uid %s gid %s", name, u.Uid, u.Gid)
	}
	if int(uid) == os.Geteuid() && int(gid) == os.Getegid() {
		return nil, nil
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	groups, _ := u.GroupIds()
	for _, g := range groups {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil && n != gid {
			cred.Groups = append(cred.Groups, uint32(n))
		}
	}
	return cred, nil
}

// Deliverer sends due deliveries.
type Deliverer struct {
	cfg Config

	mu      sync.Mutex
	retries []time.Time // when the tries this deliverer saw fail are due again, those not yet passed
}

// maxRetriesKept bounds the retry times a Deliverer remembers; one that is not remembered is
// found by its daemon's next look for due deliveries all the same, later.
const maxRetriesKept = 64

// New validates cfg and fills in its defaults.
func New(cfg Config) (*Deliverer, error) {
	if cfg.Store == nil {
		return nil, errors.New("notify: no store")
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.Lease, DefaultLease}, {&cfg.Timeout, DefaultTimeout}, {&cfg.Backoff, DefaultBackoff}, {&cfg.MaxBackoff, DefaultMaxBackoff}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if cfg.MaxTries <= 0 {
		cfg.MaxTries = DefaultMaxTries
	}
	if cfg.Lease <= cfg.Timeout {
		return nil, fmt.Errorf("notify: lease %s must be longer than a send's timeout %s", cfg.Lease, cfg.Timeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AllowCommands {
		cred, err := CommandCredential(cfg.CommandUser)
		if err != nil {
			return nil, err
		}
		cfg.credential = cred
	}
	// The lease outlasts the send, its wait for a command's leftovers included.
	cfg.waitDelay = max(time.Millisecond, min(maxWaitDelay, (cfg.Lease-cfg.Timeout)/2))
	// A redirect is not followed: it would take the body and its signature to wherever the
	// receiver (or whoever answers in its name) points, https or not. A 3xx is a failed try.
	cfg.client = &http.Client{Timeout: cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if cfg.transport == nil {
		cfg.transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	// The channel services that send on http.DefaultClient send on it as holdfast sets it, once
	// per process (the daemon builds one Deliverer): see useDefaultClient.
	useDefaultClient(cfg.Timeout)
	return &Deliverer{cfg: cfg}, nil
}

// Pass sends what is due, batch by batch, and reports how many it delivered.
func (d *Deliverer) Pass(ctx context.Context) (int, error) {
	delivered := 0
	for {
		// No more than can be sent, one after the other, within the lease: a delivery whose lease
		// ran out under way could be claimed and sent by another daemon too.
		batch, err := d.cfg.Store.DeliveryClaim(ctx, max(1, int(d.cfg.Lease/(d.cfg.Timeout+d.cfg.waitDelay))-1), d.cfg.Lease)
		if err != nil || len(batch) == 0 {
			return delivered, err
		}
		for _, dl := range batch {
			sendErr := d.Send(ctx, dl.Target, dl.Event)
			if sendErr == nil {
				if err := d.cfg.Store.DeliveryMarkDone(ctx, dl.Event.ID, dl.Target.Name); err != nil {
					return delivered, err
				}
				delivered++
				continue
			}
			giveUp := dl.Tries >= d.cfg.MaxTries
			backoff := min(d.cfg.Backoff<<min(dl.Tries-1, 20), d.cfg.MaxBackoff)
			why := textsafe.String(sendErr.Error())
			failed := store.DeliveryMarkFailedParams{Event: dl.Event.ID, Target: dl.Target.Name, Why: why, Backoff: backoff, GiveUp: giveUp}
			if err := d.cfg.Store.DeliveryMarkFailed(ctx, failed); err != nil {
				return delivered, err
			}
			// Due backoff after the database recorded the try, which is before now here,
			// whatever either clock says.
			next := time.Now().Add(backoff)
			if giveUp {
				d.cfg.Logger.Error("notification failed for good", "target", dl.Target.Name, "event", dl.Event.Event,
					"event_id", dl.Event.ID, "tries", dl.Tries, "err", why)
			} else {
				d.retryAt(next)
				d.cfg.Logger.Warn("notification failed; trying again", "target", dl.Target.Name, "event", dl.Event.Event,
					"event_id", dl.Event.ID, "tries", dl.Tries, "next", next, "err", why)
			}
		}
	}
}

// retryAt remembers that a failed delivery is due again at t.
func (d *Deliverer) retryAt(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.retries) < maxRetriesKept {
		d.retries = append(d.retries, t)
	}
}

// NextRetry returns the earliest time after now at which a delivery this deliverer saw fail is
// due again, false if there is none: no notification announces a retry, so its daemon looks
// for due deliveries then. The times passed are forgotten.
func (d *Deliverer) NextRetry(now time.Time) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.retries = slices.DeleteFunc(d.retries, func(t time.Time) bool { return !t.After(now) })
	if len(d.retries) == 0 {
		return time.Time{}, false
	}
	return slices.MinFunc(d.retries, time.Time.Compare), true
}

// Send sends one event to one target, once.
func (d *Deliverer) Send(ctx context.Context, t model.Target, e model.Event) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	switch t.Kind {
	case model.TargetWebhook:
		return d.webhook(ctx, t, e)
	case model.TargetHealthchecks:
		return d.healthchecks(ctx, t, e)
	case model.TargetCommand:
		return d.command(ctx, t, e)
	case model.TargetChannel:
		return d.channel(ctx, t, e)
	}
	return fmt.Errorf("target %s: unknown kind %q", t.Name, t.Kind)
}

func (d *Deliverer) webhook(ctx context.Context, t model.Target, e model.Event) error {
	body, err := Payload(e)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderEvent, e.Event)
	req.Header.Set(HeaderIdempotency, e.ID.String())
	if t.SecretFile != "" {
		// Read as root at every send, from a path whoever writes the database chose.
		key, err := credentials.ReadSecret(t.SecretFile)
		if err != nil {
			return fmt.Errorf("secret file: %w", err)
		}
		if key = bytes.TrimSpace(key); len(key) == 0 {
			return fmt.Errorf("secret file %s is empty", t.SecretFile)
		}
		req.Header.Set(HeaderSignature, Sign(key, body))
	}
	return d.do(req)
}

// healthchecks pings as healthchecks.io expects: /start when a run starts, the check's URL on
// success, /fail otherwise, with the run's id as rid and the run's log tail as the body. Events
// without a run (overdue, recovered, host_down, host_back) ping /fail and the URL.
func (d *Deliverer) healthchecks(ctx context.Context, t model.Target, e model.Event) error {
	suffix := "/fail"
	switch e.Event {
	case "started":
		suffix = "/start"
	case "succeeded", "recovered", "host_back", "verified", "skipped", "restore_requested": // a skip is the job's own choice
		suffix = ""
	}
	u, err := url.Parse(strings.TrimSuffix(t.URL, "/") + suffix)
	if err != nil {
		return err
	}
	if e.Run != nil {
		q := u.Query()
		q.Set("rid", e.Run.String())
		u.RawQuery = q.Encode()
	}
	about := e.Job
	if about == "" {
		about = "host " + e.Host
	}
	body := fmt.Sprintf("holdfast: %s %s: %s\n", about, e.Event, e.Reason)
	if e.Run != nil && e.Event != "started" {
		body += d.logTail(ctx, e)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	return d.do(req)
}

// logTail is the last lines of the run's journal lines (trusted sources only, bounded), a note
// if too many tails are being read at once, or nothing if they cannot be read.
func (d *Deliverer) logTail(ctx context.Context, e model.Event) string {
	attempts, err := d.cfg.Store.AttemptList(ctx, *e.Run)
	if err != nil {
		return ""
	}
	tail, err := journallog.RunTail(ctx, d.cfg.JournalDir, *e.Run, model.UnitNames(attempts), logTailLines)
	if errors.Is(err, journallog.ErrBusy) {
		return "(no log tail: " + err.Error() + ")\n"
	}
	if tail == "" {
		return ""
	}
	return tail + "\n"
}

func (d *Deliverer) do(req *http.Request) error {
	resp, err := d.cfg.client.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = Redact(ue.URL) // kept in the delivery log: the URL may be the secret
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBodyRead))
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		return fmt.Errorf("%s %s: %s: redirects are not followed (give the target's final URL)", req.Method, Redact(req.URL.String()), resp.Status)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s %s: %s", req.Method, Redact(req.URL.String()), resp.Status)
	}
	return nil
}

// command runs the target's program with the event as JSON on its standard input, if this
// daemon allows command targets, as CommandUser, in a process group of its own that is killed
// at the send's timeout; a process it leaves holding its standard error is waited for no longer
// than waitDelay.
func (d *Deliverer) command(ctx context.Context, t model.Target, e model.Event) error {
	if !d.cfg.AllowCommands {
		return ErrCommandsRefused
	}
	body, err := Payload(e)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, t.Command[0], t.Command[1:]...)
	cmd.Stdin = bytes.NewReader(body)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/",
		"HOLDFAST_EVENT=" + e.Event, "HOLDFAST_EVENT_ID=" + e.ID.String()}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: d.cfg.credential}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = d.cfg.waitDelay
	stderr := &tailBuffer{max: maxStderr}
	cmd.Stderr = stderr
	err = cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		// It exited 0; something it started kept its standard error open.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("%s: %v: %s", t.Command[0], err, strings.TrimSpace(lastLine(string(stderr.b))))
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// Redact keeps a URL's scheme and host: the path and query of a webhook or a check may be its
// secret (a Slack webhook, a healthchecks ping URL). A channel whose service takes its key as
// the host (secretHost) keeps its scheme only.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(a URL)"
	}
	if slices.Contains(secretHost, u.Scheme) {
		return u.Scheme + "://…"
	}
	if u.Path == "" && u.RawQuery == "" {
		return u.Scheme + "://" + u.Host
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// targetName is a target's name but for its length, at most 63: a counted repetition would
// compile to a program as long, at the start of every holdfast process.
var targetName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`) })

// urlSetting names the URL of a target of each kind that is given one.
var urlSetting = map[string]string{model.TargetWebhook: "{TargetWebhook.URL}", model.TargetHealthchecks: "{TargetHealthchecks.URL}"}

// ValidateTarget checks a target before it is stored, and gives it the default events.
func ValidateTarget(t *model.Target) error {
	if len(t.Name) > 63 || !targetName().MatchString(t.Name) {
		return fmt.Errorf("invalid target name %q: use 1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit", t.Name)
	}
	switch t.Kind {
	case model.TargetWebhook, model.TargetHealthchecks:
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: give an http:// or https:// URL", setting.Render(urlSetting[t.Kind]))
		}
	case model.TargetCommand:
		if len(t.Command) == 0 || !filepath.IsAbs(t.Command[0]) {
			return setting.Errorf("{Target.Command}: give the program as an absolute path, then its arguments, one per {Target.Command}")
		}
	case model.TargetChannel:
		if err := credentials.CheckFile("{TargetChannel.SecretFile}", t.SecretFile); err != nil {
			return err
		}
		raw, err := ChannelURL(t.SecretFile)
		if err != nil {
			return setting.Errorf("{TargetChannel.SecretFile}: %w", err)
		}
		if _, err := channelService(raw); err != nil {
			return setting.Errorf("{TargetChannel.SecretFile}: %w", err)
		}
		t.URL = Redact(raw)
	default:
		return setting.Errorf("give one of {TargetWebhook.URL} URL, {TargetHealthchecks.URL} URL, {Target.Command} PROGRAM or {TargetChannel.SecretFile} FILE")
	}
	if t.SecretFile != "" && t.Kind != model.TargetChannel {
		if t.Kind != model.TargetWebhook {
			return setting.Errorf("{TargetWebhook.SecretFile} signs webhook requests: give it with {TargetWebhook.URL}")
		}
		if err := credentials.CheckFile("{TargetWebhook.SecretFile}", t.SecretFile); err != nil {
			return err
		}
		if err := credentials.CheckSecret(t.SecretFile); err != nil {
			return setting.Errorf("{TargetWebhook.SecretFile}: %w", err)
		}
	}
	if len(t.Events) == 0 {
		t.Events = DefaultEvents
	}
	for _, e := range t.Events {
		if !slices.Contains(Events, e) {
			return fmt.Errorf("unknown event %q: use some of %s", e, strings.Join(Events, ","))
		}
	}
	return nil
}
