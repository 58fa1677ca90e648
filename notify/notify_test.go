package notify

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/store"
)

func TestPayload(t *testing.T) {
	run := uuid.MustParse("6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a11")
	attempt := 2
	e := store.Event{ID: uuid.MustParse("0b3c2f0f-5a11-4a44-9d7e-6f1c1f8e3d0a"), Event: "succeeded", Job: "home", Run: &run,
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
		t    store.Target
		want string
	}{
		{"bad name", store.Target{Name: "Ops!", Kind: store.TargetWebhook, URL: "https://x"}, "invalid target name"},
		{"no kind", store.Target{Name: "ops"}, "give one of --webhook"},
		{"not a URL", store.Target{Name: "ops", Kind: store.TargetWebhook, URL: "hooks.example.com"}, "--webhook: give an http:// or https:// URL"},
		{"relative program", store.Target{Name: "ops", Kind: store.TargetCommand, Command: []string{"mail"}}, "absolute path"},
		{"secret for a check", store.Target{Name: "ops", Kind: store.TargetHealthchecks, URL: "https://hc", SecretFile: "/k"}, "give it with --webhook"},
		{"unknown event", store.Target{Name: "ops", Kind: store.TargetWebhook, URL: "https://x", Events: []string{"done"}}, `unknown event "done"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidateTarget(&tc.t); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ValidateTarget = %v, want %q", err, tc.want)
			}
		})
	}
	ok := store.Target{Name: "ops", Kind: store.TargetWebhook, URL: "https://hooks.example.com/T0/B0/secret"}
	if err := ValidateTarget(&ok); err != nil || len(ok.Events) != len(DefaultEvents) {
		t.Fatalf("a good target: %v, events %v", err, ok.Events)
	}
	if got := Redact(ok.URL); got != "https://hooks.example.com/…" {
		t.Fatalf("Redact = %q", got)
	}
}
