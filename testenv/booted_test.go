package testenv_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/holdfast-backup/holdfast/testenv"
)

// hostEventually polls argv inside h until its output, trimmed, is want.
func hostEventually(t *testing.T, h *testenv.Host, d time.Duration, want string, argv ...string) {
	t.Helper()
	var got string
	if !testenv.Eventually(d, func() bool {
		out, _ := h.Output(context.Background(), argv...)
		got = strings.TrimSpace(string(out))
		return got == want
	}) {
		t.Fatalf("%s on %s: %q after %v, want %q", strings.Join(argv, " "), h.Name, got, d, want)
	}
}

// execCommandEx is the D-Bus form of an Exec*Ex line: a(sasas).
type execCommandEx struct {
	Path  string
	Args  []string
	Flags []string
}

func TestBootedHost(t *testing.T) {
	t.Parallel()
	h := testenv.BootedHost(t)
	t.Logf("boot: %v", h.BootDuration())

	if comm, err := os.ReadFile("/proc/" + strconv.Itoa(h.PID1()) + "/comm"); err != nil || strings.TrimSpace(string(comm)) != "systemd" {
		t.Fatalf("PID1 %d outside: comm %q, %v", h.PID1(), comm, err)
	}
	if got := strings.TrimSpace(h.Run(t, "cat", "/proc/1/comm")); got != "systemd" {
		t.Fatalf("PID 1 inside is %q, want systemd", got)
	}
	if got := strings.TrimSpace(h.Run(t, "hostname")); got != h.Name {
		t.Fatalf("host name %q, want %q", got, h.Name)
	}

	// A transient unit over the host's system bus: it runs as nobody, reads a
	// credential from a root-only file (the system manager hands it to
	// User=), exports a LogExtraFields field, and a privileged ExecStopPost
	// writes its marker.
	h.WriteFile(t, "/root/secret", []byte("booted-credential\n"), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := h.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	name := unitName()
	ch := make(chan string, 1)
	_, err = conn.StartTransientUnitContext(ctx, name, "fail", []sdbus.Property{
		sdbus.PropType("exec"),
		sdbus.PropExecStart([]string{"/bin/sh", "-c", `id -un; cat "$${CREDENTIALS_DIRECTORY}/pw"; sleep 0.2`}, false),
		{Name: "User", Value: dbus.MakeVariant("nobody")},
		{Name: "LoadCredential", Value: dbus.MakeVariant([]struct{ ID, Path string }{{"pw", "/root/secret"}})},
		{Name: "LogExtraFields", Value: dbus.MakeVariant([][]byte{[]byte("HOLDFAST_TESTENV=" + name)})},
		{Name: "ExecStopPostEx", Value: dbus.MakeVariant([]execCommandEx{{
			Path:  "/bin/sh",
			Args:  []string{"/bin/sh", "-c", `echo "$$SERVICE_RESULT $$EXIT_CODE $$EXIT_STATUS" >/root/marker`},
			Flags: []string{"privileged"},
		}})},
	}, ch)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	select {
	case res := <-ch:
		if res != "done" {
			t.Fatalf("start %s: job %s", name, res)
		}
	case <-ctx.Done():
		t.Fatalf("start %s: no job result", name)
	}
	hostEventually(t, h, time.Minute, "success exited 0", "cat", "/root/marker")
	hostEventually(t, h, time.Minute, "nobody\nbooted-credential",
		"journalctl", "--no-pager", "-o", "cat", "HOLDFAST_TESTENV="+name)
}

func TestBootedHostReboot(t *testing.T) {
	t.Parallel()
	h := testenv.BootedHost(t)
	h.WriteFile(t, "/root/kept", []byte("kept\n"), 0o644)
	// A unit that outlives the boot; a graceful reboot runs its stop logic.
	h.Run(t, "systemd-run", "--unit", "sleeper", "-p", "ExecStopPost=/usr/bin/touch /root/stopped", "sleep", "infinity")
	before := h.PID1()

	h.Reboot(t)
	t.Logf("boot after reboot: %v", h.BootDuration())
	if h.PID1() == before {
		t.Fatalf("PID 1 is still %d after the reboot", before)
	}
	if got := h.Run(t, "cat", "/root/kept"); got != "kept\n" {
		t.Fatalf("/root/kept after reboot: %q", got)
	}
	h.Run(t, "test", "-e", "/root/stopped")
	if out, _ := h.Output(context.Background(), "systemctl", "is-active", "sleeper.service"); strings.TrimSpace(string(out)) != "inactive" {
		t.Fatalf("the transient unit is %q after reboot, want inactive (gone)", out)
	}

	// Another host never sees this one's files.
	other := testenv.BootedHost(t)
	if out, err := other.Output(context.Background(), "test", "-e", "/root/kept"); err == nil {
		t.Fatalf("/root/kept of %s is visible on %s (%s)", h.Name, other.Name, out)
	}
}

func TestBootedHostPowerLoss(t *testing.T) {
	t.Parallel()
	h := testenv.BootedHost(t)
	h.WriteFile(t, "/root/kept", []byte("kept\n"), 0o644)
	h.Run(t, "systemd-run", "--unit", "sleeper", "-p", "ExecStopPost=/usr/bin/touch /root/stopped", "sleep", "infinity")
	h.Run(t, "systemctl", "is-active", "sleeper.service")
	before := h.PID1()

	h.PowerLoss(t)
	t.Logf("boot after power loss: %v", h.BootDuration())
	if h.PID1() == before {
		t.Fatalf("PID 1 is still %d after the power loss", before)
	}
	if got := h.Run(t, "cat", "/root/kept"); got != "kept\n" {
		t.Fatalf("/root/kept after power loss: %q", got)
	}
	if out, err := h.Output(context.Background(), "test", "-e", "/root/stopped"); err == nil {
		t.Fatalf("ExecStopPost ran although the host lost power (%s)", out)
	}
	if out, _ := h.Output(context.Background(), "systemctl", "is-active", "sleeper.service"); strings.TrimSpace(string(out)) != "inactive" {
		t.Fatalf("the transient unit is %q after the power loss, want inactive (gone)", out)
	}
}
