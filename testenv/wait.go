package testenv

import (
	"net"
	"testing"
	"time"
)

// The polling of Eventually: often at first, then less often as the wait goes on, so that a
// condition met at once is seen at once and one that takes its time costs a loaded machine
// little. A poll is a query or a command, and the scenarios wait six at a time: at most four
// polls a second leave the loaded machine's CPU to the work waited for.
const (
	firstPoll = 10 * time.Millisecond
	lastPoll  = 250 * time.Millisecond
)

// Patience is how long a test waits for systemd, PostgreSQL or a run to end before it calls
// the wait a failure. On a loaded machine a private user manager can go quiet for tens of
// seconds (it waits up to 10 s for each line its journald has no room for): longer than the
// daemon's budgets that guard against a hung systemd (systemd.DefaultCallTimeout,
// reconcile.DefaultRunBudget), which a test that does not test them sets to Patience.
const Patience = 5 * time.Minute

// Eventually polls cond until it returns true, and reports whether it did before d passed; cond
// is asked once more after the last wait. d is a generous bound for a test to give up, never a
// measure of speed: a test asserts what happened and in which order, not how soon.
func Eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for every := firstPoll; !cond(); every = min(every*2, lastPoll) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
	return true
}

// WaitFor polls cond as Eventually does and fails the test unless it is true within a minute;
// what names what the test waits for.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Eventually(time.Minute, cond) {
		t.Fatalf("waited a minute for %s", what)
	}
}

// FreeAddr is a loopback address with a TCP port that is free now, for a listener the test
// starts (a daemon's --listen).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
