package job

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/mattn/go-shellwords"
)

// MaxHooks bounds a job's hooks of one kind.
const MaxHooks = 16

// SplitHook splits a hook's command line into argv by shell word rules (quotes and backslashes),
// with no expansion of variables, globs or commands: a hook is never run by a shell. One command
// only: a shell operator (; | & < >) is refused, and the program must be an absolute path.
func SplitHook(line string) ([]string, error) {
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

// validateHooks checks a job's hooks of one kind (flag names them).
func validateHooks(flag string, hooks []string) error {
	if len(hooks) > MaxHooks {
		return fmt.Errorf("%s: %d hooks, at most %d", flag, len(hooks), MaxHooks)
	}
	for _, h := range hooks {
		if _, err := SplitHook(h); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	return nil
}
