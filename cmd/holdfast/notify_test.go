package main_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/notify"
	"github.com/holdfast-backup/holdfast/testenv"
)

// receiver is a local HTTP server that records each request; while failing is set it answers 503.
type receiver struct {
	*httptest.Server
	failing atomic.Bool
	answer  atomic.Value // a string: the body of a success, as the service's API answers
	mu      sync.Mutex
	got     []received
}

type received struct {
	path, rawQuery, body string
	header               http.Header
	refused              bool // answered 503
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		refused := r.failing.Load()
		r.mu.Lock()
		r.got = append(r.got, received{req.URL.Path, req.URL.RawQuery, string(body), req.Header.Clone(), refused})
		r.mu.Unlock()
		if refused {
			http.Error(w, "not now", http.StatusServiceUnavailable)
			return
		}
		if a, ok := r.answer.Load().(string); ok {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, a)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// webhookEvents are the events a webhook receiver accepted, by idempotency key (each once, as a
// receiver deduplicates), checking every request's signature and key against its body.
func webhookEvents(t *testing.T, r *receiver, key []byte) map[string]map[string]any {
	t.Helper()
	events := map[string]map[string]any{}
	for _, req := range r.requests() {
		if got, want := req.header.Get(notify.HeaderSignature), notify.Sign(key, []byte(req.body)); got != want {
			t.Fatalf("webhook signature %q, want %q for %s", got, want, req.body)
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(req.body), &e); err != nil {
			t.Fatalf("webhook body: %v: %s", err, req.body)
		}
		if req.header.Get(notify.HeaderIdempotency) != e["id"] || req.header.Get(notify.HeaderEvent) != e["event"] {
			t.Fatalf("webhook headers %v do not match the body %s", req.header, req.body)
		}
		events[e["id"].(string)] = e
	}
	return events
}

// notifyFlags make retries quick, and a send that a killed daemon held free again soon.
var notifyFlags = []string{"--notify-backoff", "200ms", "--notify-max-tries", "3", "--notify-timeout", "1s", "--notify-lease", "2s"}

// Every outcome of a run reaches a signed webhook and a healthchecks check with the run's ids;
// a daemon killed before it delivered an event delivers it after its restart, each key arriving
// once after deduplication; a receiver that keeps failing is tried again, then kept as failed,
// and status and notify log say so.
func TestNotifications(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	keyFile := filepath.Join(w.dir, "hook.key")
	if err := os.WriteFile(keyFile, []byte("hook secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := []byte("hook secret")
	hook, hc, broken := newReceiver(t), newReceiver(t), newReceiver(t)
	broken.failing.Store(true)
	w.mustRun("notify", "add", "hook", "--webhook", hook.URL+"/hooks/secret-path", "--secret-file", keyFile,
		"--events", "started,succeeded,failed,stopped")
	w.mustRun("notify", "add", "hc", "--healthchecks", hc.URL+"/ping/check-uuid", "--events", "started,succeeded,failed")
	if list := w.mustRun("notify", "list"); strings.Contains(list, "secret-path") || strings.Contains(list, "check-uuid") {
		t.Fatalf("notify list shows a URL's secret path:\n%s", list)
	}
	if out := w.mustRun("notify", "test", "hook"); !strings.Contains(out, "delivered") || len(hook.requests()) != 1 {
		t.Fatalf("notify test: %s; the receiver got %d request(s)", out, len(hook.requests()))
	}
	testKey := hook.requests()[0].header.Get(notify.HeaderIdempotency)
	for _, j := range []struct{ name, program string }{{"ok", "/bin/true"}, {"bad", "/bin/false"}} {
		w.mustRun("job", "add", j.name, "--engine", "command", "--command", j.program)
	}
	w.mustRun("job", "add", "long", "--engine", "command", "--command", "/bin/sleep", "--command", "60")
	w.mustRun("notify", "add", "broken", "--webhook", broken.URL+"/x", "--job", "ok", "--events", "succeeded")

	daemon := w.startDaemon(notifyFlags...)
	ok, bad, long := w.startRun("ok"), w.startRun("bad"), w.startRun("long")
	w.waitEnd(ok)
	w.waitEnd(bad)
	w.waitRun(long, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	w.mustRun("run", "stop", long)
	w.waitEnd(long)

	want := map[string]string{ok: "succeeded", bad: "failed", long: "stopped"}
	if !testenv.Eventually(time.Minute, func() bool { return len(webhookEvents(t, hook, key)) == 1+6 }) {
		t.Fatalf("the webhook got %d distinct events, want the test's and 6", len(webhookEvents(t, hook, key)))
	}
	ends := map[string]string{}
	starts := 0
	for id, e := range webhookEvents(t, hook, key) {
		if id == testKey {
			continue
		}
		run, _ := e["run"].(string)
		switch e["event"] {
		case "started":
			starts++
		default:
			ends[run] = e["event"].(string)
			if e["status"] != e["event"] || e["attempt"] != 1.0 || e["job"] == "" || e["at"] == "" {
				t.Errorf("event %v: want its status, attempt 1, job and time", e)
			}
		}
	}
	if starts != 3 || len(ends) != 3 || ends[ok] != want[ok] || ends[bad] != want[bad] || ends[long] != want[long] {
		t.Fatalf("the webhook got %d starts and ends %v, want 3 starts and %v", starts, ends, want)
	}
	// healthchecks: /start for each run, success for ok, /fail for bad (stopped is not asked for).
	if !testenv.Eventually(time.Minute, func() bool { return len(hc.requests()) == 5 }) {
		t.Fatalf("the check got %d pings, want 5: %+v", len(hc.requests()), hc.requests())
	}
	pings := map[string]int{}
	for _, p := range hc.requests() {
		pings[p.path+"?"+p.rawQuery]++
	}
	for _, p := range []string{"/ping/check-uuid?rid=" + ok, "/ping/check-uuid/fail?rid=" + bad, "/ping/check-uuid/start?rid=" + long} {
		if pings[p] != 1 {
			t.Errorf("the check got %v, want one %s", pings, p)
		}
	}

	// A run ends while the webhook fails; the daemon dies before it could deliver; a new one
	// delivers once the webhook answers.
	hook.failing.Store(true)
	again := w.startRun("ok")
	w.waitEnd(again)
	if !testenv.Eventually(time.Minute, func() bool {
		for _, r := range hook.requests() {
			if strings.Contains(r.body, again) && strings.Contains(r.body, `"succeeded"`) {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the end of the run was never tried while the webhook failed")
	}
	daemon.kill()
	hook.failing.Store(false)
	w.startDaemon(notifyFlags...)
	var delivered bool
	if !testenv.Eventually(time.Minute, func() bool {
		events := webhookEvents(t, hook, key)
		for _, e := range events {
			if e["run"] == again && e["event"] == "succeeded" {
				delivered = true
			}
		}
		return delivered
	}) {
		t.Fatal("the restarted daemon never delivered the event the killed one could not")
	}

	// The broken target: tried three times, then kept as failed.
	var log []struct {
		Target    string `json:"target"`
		State     string `json:"state"`
		LastError string `json:"last_error"`
		Tries     int    `json:"tries"`
	}
	if !testenv.Eventually(time.Minute, func() bool {
		_ = json.Unmarshal([]byte(w.mustRun("notify", "log", "--target", "broken", "--json")), &log)
		return len(log) == 2 && log[0].State == "failed" && log[1].State == "failed"
	}) {
		t.Fatalf("notify log of broken: %+v; want its two events failed", log)
	}
	if log[0].Tries != 3 || !strings.Contains(log[0].LastError, "503") || strings.Contains(log[0].LastError, "/x") {
		t.Fatalf("notify log of broken: %+v; want 3 tries and a 503 without the URL's path", log)
	}
	// A try is its claim: one the killed daemon claimed and never sent counts, once at most.
	if tries := len(broken.requests()); tries < 5 || tries > 6 {
		t.Fatalf("the broken receiver got %d requests, want 3 for each of 2 events (one fewer if the kill took one)", tries)
	}
	// Status counts every target's failures: broken's two, and on a loaded machine one of hc's
	// whose tries all timed out.
	var all []struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("notify", "log", "--json")), &all); err != nil {
		t.Fatal(err)
	}
	failed := int64(0)
	for _, d := range all {
		if d.State == "failed" {
			failed++
		}
	}
	s := w.run("status", "--json")
	var report struct {
		FailedDeliveries int64 `json:"failed_deliveries"`
	}
	if err := json.Unmarshal([]byte(s.stdout), &report); err != nil || report.FailedDeliveries != failed || failed < 2 || s.code == 0 {
		t.Fatalf("status with %d failed deliveries (notify log): exit %d, %s", failed, s.code, s.stdout)
	}
	w.checkInvariants()
}

// The host's policy over notifications, against a real daemon and database. Under the default
// policy a command target's program does not run at delivery: the delivery fails, saying why,
// in notify log. A webhook that answers with a redirect is not followed: the place it points to
// receives nothing, and the try fails with the redirect's status. A daemon allowed to run
// command targets runs them as nobody.
func TestNotificationPolicy(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	proofs := filepath.Join(w.dir, "proofs")
	if err := os.Mkdir(proofs, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(proofs, 0o777); err != nil { // nobody writes here
		t.Fatal(err)
	}
	refusedProof := filepath.Join(proofs, "refused-ran")
	w.mustRun("notify", "add", "sh", "--command", "/bin/sh", "--command", "-c", "--command", "id -u >"+refusedProof, "--events", "succeeded")
	stolen := newReceiver(t)
	redirecting := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		http.Redirect(rw, r, stolen.URL+"/stolen", http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	keyFile := filepath.Join(w.dir, "hook.key")
	if err := os.WriteFile(keyFile, []byte("hook secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.mustRun("notify", "add", "moved", "--webhook", redirecting.URL+"/hook", "--secret-file", keyFile, "--events", "succeeded")
	w.mustRun("job", "add", "ok", "--engine", "command", "--command", "/bin/true")

	daemon := w.startDaemon(notifyFlags...)
	w.waitEnd(w.startRun("ok"))
	type logEntry struct {
		Target    string `json:"target"`
		State     string `json:"state"`
		LastError string `json:"last_error"`
		Tries     int    `json:"tries"`
	}
	failedFor := func(target string) logEntry {
		t.Helper()
		var log []logEntry
		if !testenv.Eventually(time.Minute, func() bool {
			_ = json.Unmarshal([]byte(w.mustRun("notify", "log", "--target", target, "--json")), &log)
			return len(log) == 1 && log[0].State == "failed"
		}) {
			t.Fatalf("notify log of %s: %+v; want its one delivery failed", target, log)
		}
		return log[0]
	}
	if got := failedFor("sh"); got.Tries != 3 || !strings.Contains(got.LastError, "refused") || !strings.Contains(got.LastError, "--allow-notify-commands") {
		t.Fatalf("the command target's delivery: %+v; want 3 tries refused, naming --allow-notify-commands", got)
	}
	if _, err := os.Stat(refusedProof); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused command ran: %v", err)
	}
	if got := failedFor("moved"); !strings.Contains(got.LastError, "307") || !strings.Contains(got.LastError, "redirects are not followed") {
		t.Fatalf("the redirecting webhook's delivery: %+v; want failed on its 307", got)
	}
	if got := stolen.requests(); len(got) != 0 {
		t.Fatalf("the redirect's destination received %d request(s): %+v", len(got), got)
	}

	// Allowed, a command target runs as nobody, not as the daemon's root.
	daemon.kill()
	w.mustRun("notify", "remove", "sh")
	allowedProof := filepath.Join(proofs, "allowed-ran")
	w.mustRun("notify", "add", "allowed", "--command", "/bin/sh", "--command", "-c", "--command", "id -u >"+allowedProof, "--events", "succeeded")
	w.startDaemon(append([]string{"--allow-notify-commands"}, notifyFlags...)...)
	w.waitEnd(w.startRun("ok"))
	var uid []byte
	if !testenv.Eventually(time.Minute, func() bool {
		var err error
		uid, err = os.ReadFile(allowedProof)
		return err == nil && len(uid) > 0
	}) {
		t.Fatal("the allowed command target never ran")
	}
	if strings.TrimSpace(string(uid)) != "65534" {
		t.Fatalf("the command target ran as uid %s, want nobody's 65534", uid)
	}
	if _, err := os.Stat(refusedProof); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused command ran later: %v", err)
	}
}

// A channel target sends through a service by URL, here an ntfy-compatible receiver: a message
// answered 503 is tried again and then delivered, once per event; the URL, kept in a file of
// root's, is never shown.
func TestNotifyChannel(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	ntfy := newReceiver(t)
	ntfy.answer.Store(`{"id":"hf1","time":1764770000,"event":"message","topic":"backups-s3cret"}`)
	ntfy.failing.Store(true)
	urlFile := filepath.Join(w.dir, "ntfy.url")
	host := strings.TrimPrefix(ntfy.URL, "http://")
	if err := os.WriteFile(urlFile, []byte("ntfy://"+host+"/backups-s3cret?scheme=http\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.mustRun("notify", "add", "phone", "--channel-url-file", urlFile, "--events", "failed")
	if list := w.mustRun("notify", "list"); strings.Contains(list, "s3cret") || !strings.Contains(list, "ntfy://"+host) {
		t.Fatalf("notify list shows the channel's URL, or not its service:\n%s", list)
	}
	w.mustRun("job", "add", "bad", "--engine", "command", "--command", "/bin/false")
	w.startDaemon(append(notifyFlags, "--notify-max-tries", "20")...) // however slow the test is to stop refusing
	first := w.startRun("bad")
	w.waitEnd(first)
	if !testenv.Eventually(time.Minute, func() bool { return len(ntfy.requests()) >= 1 }) {
		t.Fatal("the channel never got the first try")
	}
	ntfy.failing.Store(false)
	// The second event is sent after the first's retry: once it arrived, the first is settled.
	second := w.startRun("bad")
	w.waitEnd(second)
	if !testenv.Eventually(time.Minute, func() bool {
		for _, r := range ntfy.requests() {
			if strings.Contains(r.body, second) {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the second event never arrived: %+v", ntfy.requests())
	}
	var log []struct {
		Run   *string `json:"run"`
		State string  `json:"state"`
		Tries int     `json:"tries"`
	}
	if !testenv.Eventually(time.Minute, func() bool {
		log = nil
		if json.Unmarshal([]byte(w.mustRun("notify", "log", "--json")), &log) != nil || len(log) != 2 {
			return false
		}
		return log[0].State == "delivered" && log[1].State == "delivered"
	}) {
		t.Fatalf("the deliveries: %+v, want both delivered", log)
	}
	// Each event is accepted once: after the refusals, if any, of its earlier tries, and
	// its delivery counts every try the receiver saw.
	tries := map[string]int{}
	for _, d := range log {
		tries[*d.Run] = d.Tries
	}
	accepted, refused := map[string]int{}, map[string]int{}
	for _, r := range ntfy.requests() {
		if r.path != "/backups-s3cret" || !strings.HasPrefix(r.body, "holdfast: bad failed: ") {
			t.Fatalf("the channel got %q at %s, want an ntfy message about bad", r.body, r.path)
		}
		for _, id := range []string{first, second} {
			switch {
			case !strings.Contains(r.body, id):
			case r.refused:
				refused[id]++
			default:
				accepted[id]++
			}
		}
	}
	for _, id := range []string{first, second} {
		if accepted[id] != 1 || accepted[id]+refused[id] != tries[id] {
			t.Fatalf("run %s: accepted %d times after %d refusals in %d tries, want once, the tries all seen", id, accepted[id], refused[id], tries[id])
		}
	}
	if refused[first] == 0 {
		t.Fatal("the first message was never refused: the retry after a 503 was not shown")
	}
	if log := w.mustRun("notify", "log"); strings.Contains(log, "s3cret") {
		t.Fatalf("notify log shows the channel's URL:\n%s", log)
	}
}
