package engine

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/testenv"
)

func TestHookEnv(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		vars    []string
		want    []string
	}{
		{"nothing", nil, nil, []string{}},
		{"the basics stay, in order",
			[]string{"PATH=/usr/bin:/bin", "HOME=/var/lib/x", "USER=x", "LOGNAME=x", "SHELL=/bin/sh", "LANG=C.UTF-8",
				"LANGUAGE=en", "LC_ALL=C", "LC_TIME=en_GB.UTF-8", "TZ=UTC", "TMPDIR=/var/cache/x", "INVOCATION_ID=0123abcd", "JOURNAL_STREAM=8:1234"},
			nil,
			[]string{"PATH=/usr/bin:/bin", "HOME=/var/lib/x", "USER=x", "LOGNAME=x", "SHELL=/bin/sh", "LANG=C.UTF-8",
				"LANGUAGE=en", "LC_ALL=C", "LC_TIME=en_GB.UTF-8", "TZ=UTC", "TMPDIR=/var/cache/x", "INVOCATION_ID=0123abcd", "JOURNAL_STREAM=8:1234"}},
		{"secrets and the rest go",
			[]string{"CREDENTIALS_DIRECTORY=/run/credentials/u.service", "RESTIC_PASSWORD=s", "RESTIC_PASSWORD_FILE=/p",
				"RESTIC_REPOSITORY=s3:x", "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "B2_ACCOUNT_KEY=s", "XYZZY=plugh",
				"SYSTEMD_EXEC_PID=7", "NOTIFY_SOCKET=/run/n", "PATH=/bin", "NOEQUALS", "LCX=1", "PATHX=1", "path=1"},
			nil, []string{"PATH=/bin"}},
		{"the run's variables last",
			[]string{"HOLDFAST_RUN=forged", "PATH=/bin"}, []string{"HOLDFAST_RUN=r", "HOLDFAST_ATTEMPT=2"},
			[]string{"PATH=/bin", "HOLDFAST_RUN=r", "HOLDFAST_ATTEMPT=2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HookEnv(tt.environ, tt.vars...); !slices.Equal(got, tt.want) {
				t.Errorf("HookEnv = %q, want %q", got, tt.want)
			}
		})
	}
}

// pollute sets, for the test, what a unit's environment may hold beside the basics: the
// credentials directory, restic's variables and an env file's (a user manager's
// EnvironmentFile=), and a variable of no known kind. It returns the names that must not pass.
func pollute(t *testing.T) []string {
	t.Helper()
	secret := map[string]string{
		"CREDENTIALS_DIRECTORY": t.TempDir(),
		"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-env-file-secret",
		"AWS_ACCESS_KEY_ID":     "AKIA-env-file",
		"RESTIC_REPOSITORY":     "s3:example.invalid/bucket",
		"XYZZY_RANDOM_17":       "plugh",
	}
	var names []string
	for k, v := range secret {
		t.Setenv(k, v)
		names = append(names, k)
	}
	return names
}

// setBasics sets, for the test, the basics systemd gives a unit, and returns them.
func setBasics(t *testing.T) []string {
	t.Helper()
	basics := []string{"HOME=/var/lib/holdfast-hook-test", "USER=hooktest", "LOGNAME=hooktest", "SHELL=/bin/sh",
		"LANG=C.UTF-8", "LC_TIME=C", "TZ=Europe/Berlin", "TMPDIR=" + t.TempDir(), "INVOCATION_ID=5f1e2d3c4b5a69788796a5b4c3d2e1f0",
		"JOURNAL_STREAM=8:123456"}
	for _, kv := range basics {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return basics
}

// checkHookEnv checks what a hook or producer printed as its environment (env's output):
// only the basics and the run's variables, the basics set with their values, no secret.
func checkHookEnv(t *testing.T, printed string, basics, secrets, vars []string) {
	t.Helper()
	seen := strings.Split(strings.TrimSpace(printed), "\n")
	for _, kv := range seen {
		name, _, _ := strings.Cut(kv, "=")
		if !hookBasics[name] && !strings.HasPrefix(name, "LC_") && !strings.HasPrefix(name, "HOLDFAST_") {
			t.Errorf("the child saw %s, not on the list", name)
		}
		for _, s := range secrets {
			if name == s {
				t.Errorf("the child saw %s", kv)
			}
		}
	}
	for _, kv := range append(basics, vars...) {
		if !slices.Contains(seen, kv) {
			t.Errorf("the child did not see %s; it saw %q", kv, seen)
		}
	}
}

// A stream's producer gets the basics and the run's variables, and none of the unit's secrets,
// while restic, beside it, still reads its password from the environment. The producer is
// /usr/bin/env, whose output restic backs up: the snapshot holds what it saw. Not parallel: it
// sets the process's environment.
func TestProducerEnv(t *testing.T) {
	dir := t.TempDir()
	job := newRepo(t, dir)
	job.StdinFilename = "env.txt"
	secrets := pollute(t)
	basics := setBasics(t)
	// restic finds its password only in the environment.
	t.Setenv("RESTIC_PASSWORD", testenv.ResticPassword)
	job.PasswordFile = ""
	secrets = append(secrets, "RESTIC_PASSWORD")
	vars := []string{"HOLDFAST_RUN=" + uuid.NewString(), "HOLDFAST_ATTEMPT=1", "HOLDFAST_HOOK=stdin"}

	var rec recorder
	var stderr bytes.Buffer
	status, err := Exec(context.Background(), ExecConfig{Argv: Restic{}.BackupArgv(job, uuid.New()), Parser: Restic{}, Emit: rec.emit,
		Stderr: &stderr, Producer: &Producer{Argv: []string{"/usr/bin/env"}, Vars: vars, Line: "/usr/bin/env"}})
	ev := rec.evidence(status)
	if err != nil || status != 0 || ev.Summary == nil {
		t.Fatalf("Exec = %d, %v, summary %v; stderr:\n%s", status, err, ev.Summary, stderr.Bytes())
	}
	argv := append(Restic{}.global(job), "dump", ev.Summary.SnapshotID, "/env.txt")
	printed, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("restic dump: %v", err)
	}
	checkHookEnv(t, string(printed), basics, secrets, vars)
}
