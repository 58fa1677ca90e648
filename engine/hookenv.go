package engine

import (
	"os"
	"strings"
)

// hookBasics are the variables of the unit's environment a hook or a stream's producer keeps:
// what systemd gives every service's process (the search path, the user's identity and home,
// the locale, the time zone, the temporary directory), none of them a secret. INVOCATION_ID
// (the unit's run, which systemctl and the journal show anyone) and JOURNAL_STREAM (the
// device:inode of its stderr, by which a program sees it writes to journald) name the unit, not
// the repository, and let a hook's own logging join the unit's. Everything else stays out:
// CREDENTIALS_DIRECTORY (the password and environment credentials), RESTIC_*, and what a user
// manager's EnvironmentFile= (the job's --env-file: AWS_*, B2_*, ...) put in the unit. A name on
// this list that the env file sets passes with its value: secrets do not go in these.
var hookBasics = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "SHELL": true,
	"LANG": true, "LANGUAGE": true, "TZ": true, "TMPDIR": true,
	"INVOCATION_ID": true, "JOURNAL_STREAM": true,
}

// HookEnv is the whole environment of a program holdfast runs beside the engine for the job (a
// hook, a stream's producer): environ's variables on hookBasics and LC_*, then vars (the run's).
func HookEnv(environ []string, vars ...string) []string {
	env := make([]string, 0, len(hookBasics)+len(vars))
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if ok && (hookBasics[name] || strings.HasPrefix(name, "LC_")) {
			env = append(env, kv)
		}
	}
	return append(env, vars...)
}

// hookEnviron is HookEnv of this process's environment.
func hookEnviron(vars []string) []string { return HookEnv(os.Environ(), vars...) }
