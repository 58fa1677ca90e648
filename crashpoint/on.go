//go:build holdfast_crashpoints

package crashpoint

import (
	"fmt"
	"os"
	"slices"
	"syscall"
)

var at = os.Getenv(Env)

func init() {
	if at != "" && !slices.Contains(Points, at) {
		// A misspelt point would never fire, and a test would wait for a crash that never comes.
		fmt.Fprintf(os.Stderr, "holdfast: %s=%q is no crash point; see package crashpoint\n", Env, at)
		os.Exit(2)
	}
}

// At SIGKILLs the process if HOLDFAST_CRASH_AT names point.
func At(point string) {
	if at == "" || point != at {
		return
	}
	// SIGKILL, not os.Exit: no deferred cleanup, no rollback sent, exactly like a crash.
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
