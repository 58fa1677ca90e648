package spawn

import (
	"testing"

	"github.com/holdfast-backup/holdfast/model"
)

// How an attempt ended says whether restic may have left its lock behind.
func TestStaleLock(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		result, code, status string
		stale                bool
	}{
		{"succeeded", "success", "exited", "0", false},
		{"fatal error: restic unlocks as it exits", "exit-code", "exited", "1", false},
		{"partial", "exit-code", "exited", "3", false},
		{"no repository", "exit-code", "exited", "10", false},
		{"wrong password", "exit-code", "exited", "12", false},
		{"SIGINT: restic unlocks", "exit-code", "exited", "130", false},
		{"runtime limit, SIGINT honoured", "timeout", "exited", "130", false},
		{"could not lock: the lock it met may be stale", "exit-code", "exited", "11", true},
		{"go runtime panic", "exit-code", "exited", "2", true},
		{"SIGTERM through holdfast exec", "exit-code", "exited", "143", true},
		{"SIGKILL", "signal", "killed", "KILL", true},
		{"core dump", "core-dump", "dumped", "SEGV", true},
		{"no marker: power loss or a vanished unit", "", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clean := model.AttemptEnd{Attempt: 1, ServiceResult: "success", ExitCode: "exited", ExitStatus: "0"}
			e := model.AttemptEnd{Attempt: 2, ServiceResult: tc.result, ExitCode: tc.code, ExitStatus: tc.status}
			if why := staleLock([]model.AttemptEnd{clean, e}); (why != "") != tc.stale {
				t.Fatalf("staleLock = %q, want stale %v", why, tc.stale)
			}
		})
	}
	if why := staleLock(nil); why != "" {
		t.Fatalf("no endings: %q", why)
	}
}
