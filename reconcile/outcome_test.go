package reconcile

import (
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/systemd"
)

func TestOutcome(t *testing.T) {
	restic := engine.Restic{}
	exited := func(status string) systemd.Marker {
		result := "exit-code"
		if status == "0" {
			result = "success"
		}
		return systemd.Marker{ServiceResult: result, ExitCode: "exited", ExitStatus: status}
	}
	summary := &engine.Summary{SnapshotID: "4b925b96", DataAdded: 2 << 20, TotalFilesProcessed: 2}
	cases := []struct {
		name          string
		m             systemd.Marker
		ev            engine.Evidence
		stopRequested bool
		paused        string
		wantStatus    string
		wantClass     string
		wantReason    string
	}{
		{"clean exit", exited("0"), engine.Evidence{Summary: summary}, false, "", "succeeded", "", "4b925b96"},
		{"partial is never success", exited("3"), engine.Evidence{Summary: summary, ItemErrors: 1, FirstItemError: "open /d/c: permission denied"}, false, "", "partial", "", "/d/c"},
		{"exit 0 with skipped items is partial", exited("0"), engine.Evidence{Summary: summary, ItemErrors: 1, FirstItemError: "/x does not exist, skipping"}, false, "", "partial", "", "/x"},
		{"wrong password", exited("1"), engine.Evidence{Fatal: "wrong password or no key found"}, false, "", "failed", "permanent", "password"},
		{"interrupted on request", exited("130"), engine.Evidence{}, true, "", "stopped", "", "stopped by the operator"},
		{"killed on request", systemd.Marker{ServiceResult: "signal", ExitCode: "killed", ExitStatus: "KILL"}, engine.Evidence{}, true, "", "stopped", "", "SIGKILL"},
		{"paused reason wins", exited("130"), engine.Evidence{}, false, "run_ceiling", "paused", "", "run_ceiling"},
		{"paused reason wins over success", exited("0"), engine.Evidence{Summary: summary}, false, "quota_exhausted", "paused", "", "quota_exhausted"},
		{"runtime limit", systemd.Marker{ServiceResult: "timeout", ExitCode: "exited", ExitStatus: "130"}, engine.Evidence{}, false, "", "failed", "transient", "runtime limit"},
		{"oom", systemd.Marker{ServiceResult: "oom-kill", ExitCode: "killed", ExitStatus: "KILL"}, engine.Evidence{}, false, "", "failed", "transient", "out-of-memory"},
		{"core dump", systemd.Marker{ServiceResult: "core-dump", ExitCode: "dumped", ExitStatus: "SEGV"}, engine.Evidence{}, false, "", "failed", "", "core dumped"},
		{"no such user", exited("217"), engine.Evidence{}, false, "", "failed", "permanent", "217/USER"},
		{"no executable", exited("203"), engine.Evidence{}, false, "", "failed", "permanent", "203/EXEC"},
		{"unknown exit", exited("42"), engine.Evidence{}, false, "", "failed", "", "42"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := outcome(tc.m, tc.ev, restic, tc.stopRequested, "", tc.paused)
			if v.status != tc.wantStatus || v.class != tc.wantClass || !strings.Contains(v.reason, tc.wantReason) {
				t.Fatalf("outcome = %+v, want status %s class %q reason containing %q", v, tc.wantStatus, tc.wantClass, tc.wantReason)
			}
		})
	}
}

func TestInterrupted(t *testing.T) {
	restic := engine.Restic{}
	cases := []struct {
		m    systemd.Marker
		want bool
	}{
		{systemd.Marker{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "130"}, true},
		{systemd.Marker{ServiceResult: "signal", ExitCode: "killed", ExitStatus: "TERM"}, true},
		{systemd.Marker{ServiceResult: "success", ExitCode: "killed", ExitStatus: "INT"}, true},
		{systemd.Marker{ServiceResult: "timeout", ExitCode: "exited", ExitStatus: "130"}, false},
		{systemd.Marker{ServiceResult: "oom-kill", ExitCode: "killed", ExitStatus: "KILL"}, false},
		{systemd.Marker{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "1"}, false},
		{systemd.Marker{ServiceResult: "success", ExitCode: "exited", ExitStatus: "0"}, false},
	}
	for _, tc := range cases {
		if got := interrupted(tc.m, restic); got != tc.want {
			t.Errorf("interrupted(%+v) = %v, want %v", tc.m, got, tc.want)
		}
	}
}
