// Package unitcmd holds the commands holdfast's transient units run: exec (the engine, writing
// the run journal), credexec (a command with the unit's credentials), marker (the exit marker,
// from ExecStopPost) and drill (a verify's sample restore). The holdfast binary has them, hidden,
// and so does holdfast-unit, a binary with these alone: a backup runs two of them on its way,
// and holdfast-unit starts in a third of the time the whole CLI takes (Binary). See
// docs/ARCHITECTURE.md §3.
package unitcmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/textsafe"
)

// BinaryName is the name of the binary with the units' commands alone.
const BinaryName = "holdfast-unit"

// StopAckVariable names a file that a command creates once it has taken a SIGINT or SIGTERM (the
// tests' way to know a stop reached it before they go on).
const StopAckVariable = "HOLDFAST_TEST_STOP_ACK"

// Commands are the units' commands; marker writes under *stateDir, read when it runs.
func Commands(stateDir *string) []*cobra.Command {
	return []*cobra.Command{execCmd(), credexec(), marker(stateDir), drill()}
}

// Binary is what units run for holdfast installed as self: holdfast-unit beside self, or in
// libexec/holdfast beside self's bin directory (as the packages install it), else self, which
// has the same commands.
func Binary(self string) string {
	dir := filepath.Dir(self)
	for _, path := range []string{filepath.Join(dir, BinaryName), filepath.Join(filepath.Dir(dir), "libexec", "holdfast", BinaryName)} {
		if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 == 0o111 {
			return path
		}
	}
	return self
}

// ExitStatus is an exit status without a message: the command has said what happened, or it is
// the engine's own status, passed on.
type ExitStatus int

func (e ExitStatus) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// InputError is an error in the command line the unit was given: exit 2.
type InputError struct{ Err error }

func (e InputError) Error() string { return e.Err.Error() }
func (e InputError) Unwrap() error { return e.Err }

func badInput(format string, args ...any) error { return InputError{fmt.Errorf(format, args...)} }

// ExitCode is the exit status for err, said on stderr as name's unless it is an ExitStatus.
func ExitCode(name string, err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var status ExitStatus
	if errors.As(err, &status) {
		return int(status)
	}
	fmt.Fprintln(textsafe.NewWriter(stderr), name+": "+err.Error())
	var input InputError
	if errors.As(err, &input) {
		return 2
	}
	return 1
}
