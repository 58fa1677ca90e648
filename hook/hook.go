// Package hook reads a job's hook line (a before or after hook, a stream's producer) into the
// argv a unit runs. A hook is one command, never run by a shell: jobdef checks each line with
// Split when the job is written, and the unit (unitcmd) splits it again, the same way, to run it.
// It is a package of its own so that the units' binary links no more than this for it.
package hook

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/mattn/go-shellwords"
)

// Split splits a hook's command line into argv by shell word rules (quotes and backslashes),
// with no expansion of variables, globs or commands: a hook is never run by a shell. One command
// only: a shell operator (; | & < >) is refused, and the program must be an absolute path.
func Split(line string) ([]string, error) {
	p := shellwords.NewParser()
	argv, err := p.Parse(line)
	switch {
	case err != nil:
		return nil, fmt.Errorf("hook %q: %v: close its quotes", line, err)
	case p.Position >= 0:
		return nil, fmt.Errorf("hook %q: one command only, never run by a shell (no ;, |, &, < or >): put a pipeline in a script", line)
	case len(argv) == 0:
		return nil, errors.New("an empty hook: give a command, such as /usr/local/bin/flush-db")
	case !filepath.IsAbs(argv[0]):
		return nil, fmt.Errorf("hook %q: give its program as an absolute path, such as /usr/bin/%s", line, filepath.Base(argv[0]))
	case strings.ContainsRune(line, 0):
		return nil, fmt.Errorf("hook %q holds a NUL byte", line)
	}
	return argv, nil
}
