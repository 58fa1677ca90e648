// Package unitcmd holds the commands holdfast's transient units run: exec (the engine, writing
// the run journal), credexec (a command with the unit's credentials), marker (the exit marker,
// from ExecStopPost) and drill (a verify's sample restore). The holdfast binary has them, hidden,
// and so does holdfast-unit, a binary with these alone: a backup runs two of them on its way,
// and holdfast-unit starts in less than half the time the whole CLI takes (Binary). See
// docs/ARCHITECTURE.md §8.
package unitcmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

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
	return []*cobra.Command{execCmd(), credexec(), marker(stateDir), drill(), fsSnapshotTake(), fsSnapshotRelease()}
}

// Binary is what units run for holdfast installed as self: holdfast-unit beside self, or in
// libexec/holdfast beside self's bin directory (as the packages install it), else self, which
// has the same commands. Root runs it (the exit marker), so it is taken only if no one else
// could have put it there: it and every directory above it belong to root or to this process's
// user and are writable by no one else (but for a sticky directory of theirs, such as /tmp).
func Binary(self string) string {
	dir := filepath.Dir(self)
	for _, path := range []string{filepath.Join(dir, BinaryName), filepath.Join(filepath.Dir(dir), "libexec", "holdfast", BinaryName)} {
		if trusted(path) {
			return path
		}
	}
	return self
}

// trusted reports whether path is an executable regular file (not a link) that only root or
// this process's user could have written or put there.
func trusted(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 != 0o111 || !ownedSafely(fi) {
		return false
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() || !owned(fi) || fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
			return false
		}
		if dir == filepath.Dir(dir) {
			return true
		}
	}
}

// ownedSafely: owned by root or this process's user, and writable by no one else.
func ownedSafely(fi os.FileInfo) bool { return owned(fi) && fi.Mode().Perm()&0o022 == 0 }

// owned: by root or by this process's user.
func owned(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && (st.Uid == 0 || int(st.Uid) == os.Geteuid())
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
	if errors.As(err, &input) || UsageError(err) {
		return 2
	}
	return 1
}

// UsageError reports whether err is cobra's word on a command line it could not parse.
func UsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "required flag", "accepts ", "requires "} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, " "+p) {
			return true
		}
	}
	return false
}

// noArgs refuses arguments, as the holdfast binary's commands say it.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) != 0 {
		return badInput("expected no arguments, got %d argument(s)", len(args))
	}
	return nil
}
