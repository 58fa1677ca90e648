// Command holdfast-unit runs inside holdfast's transient units: the engine with its run journal
// (exec), a command with the unit's credentials (credexec), the exit marker (marker) and a
// verify's drill. It is the holdfast binary's hidden commands of the same names, alone, so that
// it starts fast; the daemon runs it when it is installed beside holdfast (package unitcmd).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/unitcmd"
)

func main() {
	// From the start: a stop that comes before the engine does must not kill this process alone.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if path := os.Getenv(unitcmd.StopAckVariable); path != "" {
		context.AfterFunc(ctx, func() { _ = os.WriteFile(path, nil, 0o600) })
	}
	stateDir := os.Getenv("HOLDFAST_STATE_DIR")
	if stateDir == "" {
		stateDir = "/var/lib/holdfast"
	}
	root := &cobra.Command{
		Use:           unitcmd.BinaryName,
		Short:         "The commands holdfast's units run (not for direct use)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return unitcmd.InputError{Err: err} })
	root.PersistentFlags().StringVar(&stateDir, "state-dir", stateDir, "state directory for run journals and exit markers (env HOLDFAST_STATE_DIR)")
	root.AddCommand(unitcmd.Commands(&stateDir)...)
	root.CompletionOptions.DisableDefaultCmd = true
	code := unitcmd.ExitCode(unitcmd.BinaryName, root.ExecuteContext(ctx), os.Stderr)
	stop()
	os.Exit(code)
}
