package systemd

import (
	"context"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/testenv"
)

// current returns the connection the client holds now.
func (r *Client) current() *sddbus.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn
}

// stays fails the test if conn is closed or replaced within d: godbus closes a connection as
// soon as the context it was dialed with ends, so a connection tied to a caller's context is
// gone within milliseconds of the call.
func stays(t *testing.T, r *Client, conn *sddbus.Conn, d time.Duration, what string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if r.current() != conn || !conn.Connected() {
			t.Fatalf("%s: the connection was closed or replaced after its dialing call returned", what)
		}
	}
}

// A connection outlives the call that dialed it, the first one and the one redialed after
// daemon-reexec: later calls use it instead of each dialing anew.
func TestConnectionOutlivesDialingCall(t *testing.T) {
	m := testenv.PrivateSystemd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	r, err := New(ctx, Config{Address: m.Address})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	name := UnitName("reexec", uuid.New(), 1)
	stays(t, r, r.current(), 500*time.Millisecond, "after New")

	m.Systemctl(t, "daemon-reexec")
	// The manager drops its clients when it re-executes: the next calls redial, possibly after
	// a failure or two while it comes back.
	deadline := time.Now().Add(30 * time.Second)
	for {
		callCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := r.Alive(callCtx, name)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer from systemd 30s after daemon-reexec: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	conn := r.current()
	stays(t, r, conn, 500*time.Millisecond, "after the redial")
	for i := range 20 {
		callCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := r.Alive(callCtx, name)
		cancel()
		if err != nil {
			t.Fatalf("call %d after the redial: %v", i, err)
		}
	}
	if r.current() != conn {
		t.Fatal("calls after the redial dialed again")
	}
}

// A call is bounded by CallTimeout even when the caller's context has no deadline; a closed
// client refuses calls instead of dialing.
func TestCallTimeoutAndClose(t *testing.T) {
	cfg := Config{CallTimeout: -time.Second}
	if err := cfg.Validate(); err == nil {
		t.Fatal("a negative call timeout was accepted")
	}
	cfg = Config{}
	if err := cfg.Validate(); err != nil || cfg.CallTimeout != DefaultCallTimeout {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	m := testenv.PrivateSystemd(t)
	r, err := New(context.Background(), Config{Address: m.Address, CallTimeout: time.Nanosecond})
	if err == nil {
		r.Close()
		t.Fatal("a dial within 1ns succeeded: the timeout does not bound it")
	}
	r, err = New(context.Background(), Config{Address: m.Address})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, _, err := r.Alive(context.Background(), UnitName("closed", uuid.New(), 1)); err == nil {
		t.Fatal("a closed client answered")
	}
}
