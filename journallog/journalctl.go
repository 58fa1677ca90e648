package journallog

import (
	"context"
	"os/exec"
	"strconv"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/textsafe"
)

// RunArgv is the journalctl command line that shows a run's lines: what its units' processes
// wrote (_SYSTEMD_UNIT, or _SYSTEMD_USER_UNIT under a regular user manager), what the manager
// said about the units (UNIT, USER_UNIT), and every line with the run's field (HOLDFAST_RUN): the
// daemon's about the run, and the units' on the system manager (LogExtraFields). dir is a journal
// directory to read instead of the system journal (""), lines the newest lines only (0: all).
// nil if the run has no unit.
func RunArgv(dir string, run uuid.UUID, units []string, follow bool, lines int) []string {
	argv := []string{"journalctl", "--no-pager", "--output", "short-iso"}
	if dir != "" {
		argv = append(argv, "--directory", dir)
	}
	if follow {
		argv = append(argv, "--follow")
	}
	if lines > 0 {
		argv = append(argv, "--lines", strconv.Itoa(lines))
	}
	n := 0
	for _, unit := range units {
		for _, field := range []string{"_SYSTEMD_UNIT", "_SYSTEMD_USER_UNIT", "UNIT", "USER_UNIT"} {
			if n > 0 {
				argv = append(argv, "+")
			}
			argv = append(argv, field+"="+unit)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return append(argv, "+", FieldName("run")+"="+run.String())
}

// RunTail is the last lines of a run's journal lines (RunArgv), escaped for a terminal; "" when
// the run has no unit or journalctl cannot read them.
func RunTail(ctx context.Context, dir string, run uuid.UUID, units []string, lines int) string {
	argv := RunArgv(dir, run, units, false, lines)
	if argv == nil {
		return ""
	}
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
	if err != nil {
		return ""
	}
	return textsafe.String(string(out))
}
