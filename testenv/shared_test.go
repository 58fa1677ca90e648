package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

// Every test of a binary gets the same shared manager; a unit left on it is stopped by
// StopUnits, which skips units that are not loaded; the manager refuses what would act on it
// for every test at once.
func TestSharedSystemd(t *testing.T) {
	t.Parallel()
	m := testenv.SharedSystemd(t)
	if other := testenv.SharedSystemd(t); other != m || !m.Shared {
		t.Fatalf("SharedSystemd returned %p and %p (shared %v), want one shared manager", m, other, m.Shared)
	}
	conn := m.Conn(t)
	name := unitName()
	startUnit(t, m, conn, name, execProp("ExecStart", "/bin/sleep", "1000"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.StopUnits(ctx, []string{name, unitName()}); err != nil {
		t.Fatalf("stop units: %v", err)
	}
	props, err := conn.GetUnitPropertiesContext(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if props["ActiveState"] != "inactive" { // a unit collected reads as inactive too
		t.Fatalf("%s after StopUnits: %v", name, props["ActiveState"])
	}
	for _, verb := range []string{"daemon-reexec", "exit"} {
		if _, err := m.SystemctlErr(verb); err == nil {
			t.Fatalf("systemctl %s on the shared manager was not refused", verb)
		}
	}
}
