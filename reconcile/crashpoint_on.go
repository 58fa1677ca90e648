//go:build holdfast_crashpoints

package reconcile

import (
	"os"
	"syscall"
)

func init() {
	at := os.Getenv("HOLDFAST_CRASH_AT")
	if at == "" {
		return
	}
	crash = func(point string) {
		if point == at {
			// SIGKILL, not os.Exit: no deferred cleanup, exactly like a crash.
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}
