// Package setting lets a message name an operator's setting by what it is, never by how the
// operator gives it. A message names a setting by a placeholder of its path, {Job.PasswordFile}
// (model.Job's PasswordFile); the command that owns the settings' names (cmd/holdfast, whose
// flags are also the keys of its configuration files) states them once, through Use, and every
// message renders each placeholder as that name (--password-file). Without Use a placeholder
// reads as its path.
//
// A path is rooted at what holds the setting:
//
//   - Job: a field of model.Job (Job.Copy.To, Job.Backup.StdinFrom).
//   - Target, TargetWebhook, TargetHealthchecks, TargetChannel: a field of model.Target, of any
//     kind or of that kind (TargetWebhook.URL, TargetChannel.SecretFile).
//   - Policy, Change, Guardrail: a field of retention's types (Policy.KeepLast, Change.Preset).
//   - Restore, Verify: a field of the model's request of that kind (Restore.Target,
//     Verify.DrillFiles).
//   - Account: a field of model.Account (Account.GrantedBytes).
//   - Setup: a field of setup.Config, or what setup.DSNFrom reads (Setup.DSNFile).
//   - Restic: the restic executable a command runs.
//   - The daemon's settings: their path in supervisor.Config (SweepInterval, Notify.Timeout,
//     Reconcile.AllowUsers).
//   - An option of one command that sets no field of these: the command's words and the
//     option (RunList.Job: `run list`'s job; RetentionApply.Force).
package setting

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// Names is what the operator calls each setting, given its path.
type Names func(path string) string

var names atomic.Pointer[Names]

// Use makes n the names of every setting a message of this process names. The command that owns
// the names calls it once, before it does anything else.
func Use(n Names) {
	names.Store(&n)
}

// Name is what the operator calls the setting at path: the name Use gave it, else the path.
func Name(path string) string {
	if n := names.Load(); n != nil && *n != nil {
		return (*n)(path)
	}
	return path
}

// Render is s with each placeholder in it replaced by the name of its setting (Name).
func Render(s string) string {
	if !strings.Contains(s, "{") {
		return s
	}
	var b strings.Builder
	for {
		start, end := next(s)
		if start < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:start])
		b.WriteString(Name(s[start+1 : end-1]))
		s = s[end:]
	}
}

// Placeholders are the paths of the placeholders in s, in order.
func Placeholders(s string) []string {
	var paths []string
	for {
		start, end := next(s)
		if start < 0 {
			return paths
		}
		paths = append(paths, s[start+1:end-1])
		s = s[end:]
	}
}

// next finds the first placeholder in s: s[start:end] is "{" path "}", where a path is one or
// more words, each an upper-case letter and letters or digits, joined by dots. start is -1 if
// there is none.
func next(s string) (start, end int) {
	for i := 0; i < len(s); i++ {
		if s[i] == '{' {
			if end := pathEnd(s, i+1); end > 0 {
				return i, end
			}
		}
	}
	return -1, -1
}

// pathEnd is the index after the "}" that ends a path beginning at s[from], or -1 if no path
// begins there.
func pathEnd(s string, from int) int {
	word := false // within a word of the path
	for j := from; j < len(s); j++ {
		c := s[j]
		switch {
		case !word && 'A' <= c && c <= 'Z':
			word = true
		case word && ('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'):
		case word && c == '.':
			word = false
		case word && c == '}':
			return j + 1
		default:
			return -1
		}
	}
	return -1
}

// Sprintf is fmt.Sprintf with each placeholder of format named (Render).
func Sprintf(format string, a ...any) string {
	return fmt.Sprintf(Render(format), a...)
}

// Errorf is fmt.Errorf with each placeholder of format named as the error's text is asked for:
// an error made before Use (a package's variable) names the settings all the same. It wraps
// what a %w of format wraps.
func Errorf(format string, a ...any) error {
	return &message{format: format, args: a, wrapped: fmt.Errorf(format, a...)}
}

// message is an error of Errorf.
type message struct {
	format  string
	args    []any
	wrapped error // fmt.Errorf of format, unnamed: what it wraps is what the message wraps
}

func (m *message) Error() string {
	return fmt.Errorf(Render(m.format), m.args...).Error()
}

func (m *message) Unwrap() []error {
	switch w := m.wrapped.(type) {
	case interface{ Unwrap() error }:
		if err := w.Unwrap(); err != nil {
			return []error{err}
		}
	case interface{ Unwrap() []error }:
		return w.Unwrap()
	}
	return nil
}
