package testenv

import (
	"syscall"
	"testing"
)

// Freeze stops the private manager's process (SIGSTOP) without touching its units: D-Bus calls
// to it hang until Thaw, as with a manager that cannot answer.
func (m *Manager) Freeze(t testing.TB) {
	t.Helper()
	m.signalManager(t, "freeze", syscall.SIGSTOP)
	t.Cleanup(func() { m.signalManager(t, "thaw", syscall.SIGCONT) })
}

// Thaw lets a frozen manager go on (SIGCONT).
func (m *Manager) Thaw(t testing.TB) {
	t.Helper()
	m.signalManager(t, "thaw", syscall.SIGCONT)
}

func (m *Manager) signalManager(t testing.TB, op string, sig syscall.Signal) {
	t.Helper()
	m.requirePrivate(t, op)
	m.mu.Lock()
	inst := m.inst
	m.mu.Unlock()
	if inst == nil {
		t.Fatalf("testenv: %s: the manager is not running", op)
	}
	if err := syscall.Kill(inst.proc.pid(), sig); err != nil {
		t.Fatalf("testenv: %s the manager: %v", op, err)
	}
}
