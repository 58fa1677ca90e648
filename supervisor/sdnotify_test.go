package supervisor_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// notifySocket listens where the daemon's sd_notify messages go, as systemd does for a
// Type=notify service with a watchdog, and returns the messages as they come.
func notifySocket(t *testing.T, watchdog time.Duration) <-chan string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", strconv.FormatInt(watchdog.Microseconds(), 10))
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	msgs := make(chan string, 1000)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return msgs
}

// next returns the next message that contains want, failing the test after within.
func next(t *testing.T, msgs <-chan string, want string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("the notification socket closed before %q came", want)
			}
			if strings.Contains(m, want) {
				return m
			}
		case <-deadline:
			t.Fatalf("no notification with %q within %s", want, within)
		}
	}
}

// Under a service manager that asked for notifications, the daemon says READY=1 once its first
// pass ended, keeps STATUS= current (live runs, the next due slot), pings the watchdog while its
// passes go on, and says STOPPING=1 when it stops. No t.Parallel: the setting is the process's
// environment, as under systemd.
func TestServiceManagerNotifications(t *testing.T) {
	msgs := notifySocket(t, 2*time.Second)
	e := newEnv(t)
	e.cfg.SweepInterval = 200 * time.Millisecond
	slot := time.Now().Add(time.Hour).Truncate(time.Second)
	e.scheduled(t, "later", "@every 2h", slot, "/bin/true")
	sup := e.start(t)

	ready := next(t, msgs, "READY=1", 30*time.Second)
	if !strings.Contains(ready, "STATUS=0 live run(s); ") {
		t.Fatalf("READY=1 without the status: %q", ready)
	}
	// With the next due slot, at once or as soon as a loaded database answered.
	if !strings.Contains(ready, "next due "+slot.UTC().Format("2006-01-02 15:04:05Z")) {
		next(t, msgs, "STATUS=0 live run(s); next due "+slot.UTC().Format("2006-01-02 15:04:05Z"), 30*time.Second)
	}
	// Pings while the sweep goes on. How often is pingEvery's (TestPingEvery): a quarter of
	// the period here; this test asks only that they come.
	for range 3 {
		next(t, msgs, "WATCHDOG=1", time.Minute)
	}
	e.job(t, "long", "/bin/sleep", "30")
	e.admit(t, "long")
	sup.WakeSweep()
	next(t, msgs, "STATUS=1 live run(s)", 30*time.Second)

	sup.Stop()
	next(t, msgs, "STOPPING=1", time.Minute)
	// Stopped: no more pings.
	select {
	case m := <-msgs:
		t.Fatalf("a notification after STOPPING=1: %q", m)
	case <-time.After(time.Second):
	}
}
