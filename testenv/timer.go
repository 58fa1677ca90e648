package testenv

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TimerElapsesAt is when the manager's timer unit will next elapse on its monotonic clock
// (NextElapseUSecMonotonic, as holdfast's armed timers do), as a wall-clock time.
func (m *Manager) TimerElapsesAt(t testing.TB, timer string) time.Time {
	t.Helper()
	p, err := m.Conn(t).GetUnitTypePropertyContext(context.Background(), timer, "Timer", "NextElapseUSecMonotonic")
	if err != nil {
		t.Fatal(err)
	}
	next, _ := p.Value.Value().(uint64)
	var mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		t.Fatal(err)
	}
	return time.Now().Add(time.Duration(next)*time.Microsecond - time.Duration(mono.Nano()))
}
