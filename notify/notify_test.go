package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

func TestPayload(t *testing.T) {
	run := uuid.MustParse("6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a11")
	attempt := 2
	e := model.Event{ID: uuid.MustParse("0b3c2f0f-5a11-4a44-9d7e-6f1c1f8e3d0a"), Event: "succeeded", Job: "home", Run: &run,
		Attempt: &attempt, Status: "succeeded", Reason: "backup complete", At: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC),
		Host: "h", Details: json.RawMessage(`{"bytes_added": 42, "snapshot_id": "abc"}`)}
	body, err := Payload(e)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": e.ID.String(), "event": "succeeded", "job": "home", "run": run.String(), "attempt": 2.0,
		"status": "succeeded", "reason": "backup complete", "at": "2026-12-02T03:00:00Z", "host": "h", "bytes_added": 42.0,
		"snapshot_id": "abc"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// HMAC-SHA256("k", "hello"), as openssl dgst -sha256 -hmac k computes it.
	if got := Sign([]byte("k"), []byte("hello")); got != "sha256=406e4b43f87095aa86ca6299d25e875921fefa180f02043bb29bec5681c0c2d0" {
		t.Fatalf("Sign = %s", got)
	}
}

func TestValidateTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    model.Target
		want string
	}{
		{"bad name", model.Target{Name: "Ops!", Kind: model.TargetWebhook, URL: "https://x"}, "invalid target name"},
		{"no kind", model.Target{Name: "ops"}, "give one of TargetWebhook.URL URL"},
		{"not a URL", model.Target{Name: "ops", Kind: model.TargetWebhook, URL: "hooks.example.com"}, "TargetWebhook.URL: give an http:// or https:// URL"},
		{"relative program", model.Target{Name: "ops", Kind: model.TargetCommand, Command: []string{"mail"}}, "absolute path"},
		{"secret for a check", model.Target{Name: "ops", Kind: model.TargetHealthchecks, URL: "https://hc", SecretFile: "/k"}, "give it with TargetWebhook.URL"},
		{"unknown event", model.Target{Name: "ops", Kind: model.TargetWebhook, URL: "https://x", Events: []string{"done"}}, `unknown event "done"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidateTarget(&tc.t); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ValidateTarget = %v, want %q", err, tc.want)
			}
		})
	}
	ok := model.Target{Name: "ops", Kind: model.TargetWebhook, URL: "https://hooks.example.com/T0/B0/secret"}
	if err := ValidateTarget(&ok); err != nil || len(ok.Events) != len(DefaultEvents) {
		t.Fatalf("a good target: %v, events %v", err, ok.Events)
	}
	if got := Redact(ok.URL); got != "https://hooks.example.com/…" {
		t.Fatalf("Redact = %q", got)
	}
}

// newTestDeliverer is a Deliverer for Send alone (Send reads no store for these events).
func newTestDeliverer(t *testing.T, cfg Config) *Deliverer {
	t.Helper()
	cfg.Store = new(store.Store)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func testEvent() model.Event {
	return model.Event{ID: uuid.New(), Event: "failed", Job: "home", Status: "failed", Reason: "r", At: time.Now()}
}

// A webhook or a check that answers with a redirect is not followed there: whatever the code,
// the place it points to receives nothing, and the try fails naming the status.
func TestRedirectsNotFollowed(t *testing.T) {
	var mu sync.Mutex
	var elsewhere []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		elsewhere = append(elsewhere, r.Method+" "+r.URL.Path+" "+r.Header.Get(HeaderSignature)+" "+string(body))
		mu.Unlock()
	}))
	defer other.Close()
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("hook secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newTestDeliverer(t, Config{})
	for _, code := range []int{301, 302, 303, 307, 308} {
		for _, kind := range []string{model.TargetWebhook, model.TargetHealthchecks} {
			t.Run(fmt.Sprintf("%s %d", kind, code), func(t *testing.T) {
				redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, other.URL+"/stolen", code)
				}))
				defer redirecting.Close()
				target := model.Target{Name: "x", Kind: kind, URL: redirecting.URL + "/hook/secret-path"}
				if kind == model.TargetWebhook {
					target.SecretFile = keyFile
				}
				err := d.Send(context.Background(), target, testEvent())
				if err == nil || !strings.Contains(err.Error(), strconv.Itoa(code)) || !strings.Contains(err.Error(), "redirects are not followed") {
					t.Fatalf("Send = %v, want a failed try naming %d", err, code)
				}
				if strings.Contains(err.Error(), "secret-path") || strings.Contains(err.Error(), "stolen") {
					t.Fatalf("the error shows a URL's path: %v", err)
				}
			})
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(elsewhere) > 0 {
		t.Fatalf("the redirects' destination received %q", elsewhere)
	}
}

// The webhook's secret file is read at each send as a secret: a FIFO, a link, a file others can
// read, an empty or an oversized one fails the try (at once: a FIFO does not block it); a good
// one signs.
func TestWebhookSecretFile(t *testing.T) {
	var got []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get(HeaderSignature))
	}))
	defer hook.Close()
	dir := t.TempDir()
	file := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good", []byte("hook secret\n"), 0o600)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	d := newTestDeliverer(t, Config{})
	for _, tc := range []struct{ name, path, want string }{
		{"a FIFO", fifo, "is not a regular file"},
		{"a link", link, "is a symbolic link"},
		{"readable by others", file("open", []byte("hook secret\n"), 0o644), "has mode 0644"},
		{"empty", file("empty", []byte(" \n"), 0o600), "is empty"},
		{"over 4 KiB", file("big", bytes.Repeat([]byte("k"), 5000), 0o600), "larger than 4 KiB"},
		{"good", good, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(got)
			err := d.Send(context.Background(), model.Target{Name: "x", Kind: model.TargetWebhook, URL: hook.URL, SecretFile: tc.path}, testEvent())
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Send: %v", err)
			case tc.want == "" && (len(got) != before+1 || !strings.HasPrefix(got[before], "sha256=")):
				t.Fatalf("the hook got %q, want one signed request", got[before:])
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Send = %v, want an error with %q", err, tc.want)
			case tc.want != "" && len(got) != before:
				t.Fatal("a request went out without its signature")
			}
		})
	}
}

// A command target runs only where the daemon allows it: by default its delivery fails with the
// reason and the program does not run. Allowed, it runs as the command user (nobody), not root;
// something it leaves holding its standard error does not hold the send, and at the send's
// timeout its whole process group is killed.
func TestCommandTargets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs the command as nobody: needs root")
	}
	dir, err := os.MkdirTemp("", "holdfast-notify-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil { // nobody writes its proof here
		t.Fatal(err)
	}
	proof := filepath.Join(dir, "ran")
	script := func(body string) model.Target {
		return model.Target{Name: "x", Kind: model.TargetCommand, Command: []string{"/bin/sh", "-c", body}}
	}

	refusing := newTestDeliverer(t, Config{})
	err = refusing.Send(context.Background(), script("id -u >"+proof), testEvent())
	if !errors.Is(err, ErrCommandsRefused) || !strings.Contains(err.Error(), "Notify.AllowCommands") {
		t.Fatalf("Send under the default policy = %v, want the refusal", err)
	}
	if _, err := os.Stat(proof); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused program ran: %v", err)
	}

	d := newTestDeliverer(t, Config{AllowCommands: true, Timeout: 2 * time.Second, Lease: time.Minute})
	if err := d.Send(context.Background(), script("cat >"+proof+".json; id -u >"+proof), testEvent()); err != nil {
		t.Fatal(err)
	}
	if uid, err := os.ReadFile(proof); err != nil || strings.TrimSpace(string(uid)) != "65534" {
		t.Fatalf("the command ran as uid %q (%v), want nobody's 65534", uid, err)
	}
	if body, err := os.ReadFile(proof + ".json"); err != nil || !strings.Contains(string(body), `"event":"failed"`) {
		t.Fatalf("the command's stdin: %s %v", body, err)
	}

	// A grandchild keeps standard error open and lives on: the send ends while it is alive.
	pidFile := filepath.Join(dir, "grandchild")
	if err := d.Send(context.Background(), script("sleep 300 & echo $! >"+pidFile+"; exit 0"), testEvent()); err != nil {
		t.Fatalf("a command that exited 0, leaving a process holding its stderr: %v", err)
	}
	pid := readPid(t, pidFile)
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the grandchild %d was gone before the send ended (%v): the test shows nothing", pid, err)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)

	// A command that outlives the send's timeout: it and its children are killed.
	err = d.Send(context.Background(), script("sleep 300 & echo $! >"+pidFile+"; echo "+strings.Repeat("x", 10000)+" >&2; echo last words >&2; wait"), testEvent())
	if err == nil || !strings.Contains(err.Error(), "killed") || !strings.HasSuffix(err.Error(), "last words") {
		t.Fatalf("Send of a command past its timeout = %v, want killed with its last line", err)
	}
	pid = readPid(t, pidFile)
	for syscall.Kill(pid, 0) == nil {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(b), ") Z ") {
			break // killed, not yet reaped by its init
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// A deliverer remembers when the tries it saw fail are due again, earliest first, and forgets
// those that passed: its daemon looks for due deliveries then, since no notification says so.
func TestNextRetry(t *testing.T) {
	d := newTestDeliverer(t, Config{})
	t0 := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	if at, ok := d.NextRetry(t0); ok {
		t.Fatalf("no try failed: next retry %s", at)
	}
	d.retryAt(t0.Add(10 * time.Second))
	d.retryAt(t0.Add(5 * time.Second))
	d.retryAt(t0.Add(20 * time.Second))
	for _, c := range []struct {
		now  time.Time
		want time.Duration // after t0; 0: none
	}{
		{t0, 5 * time.Second},
		{t0.Add(5 * time.Second), 10 * time.Second}, // a retry due at now has passed
		{t0.Add(12 * time.Second), 20 * time.Second},
		{t0.Add(time.Minute), 0},
		{t0, 0}, // forgotten, not merely behind
	} {
		at, ok := d.NextRetry(c.now)
		if ok != (c.want != 0) || ok && !at.Equal(t0.Add(c.want)) {
			t.Fatalf("NextRetry(t0+%s) = %s, %v; want t0+%s", c.now.Sub(t0), at, ok, c.want)
		}
	}
	for i := range maxRetriesKept + 1 {
		d.retryAt(t0.Add(time.Duration(i+1) * time.Second))
	}
	if len(d.retries) != maxRetriesKept {
		t.Fatalf("%d retry times kept, want at most %d", len(d.retries), maxRetriesKept)
	}
}
