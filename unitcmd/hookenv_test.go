package unitcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
)

// TestEnvHelper is the hook, the stream's producer and the engine of TestHookEnvironment: run
// as `unitcmd.test -test.run=^TestEnvHelper$ -- ROLE FILE` it writes its environment to FILE;
// the producer then writes a line to its stdout, the engine reads its stdin to the end. It
// learns its role from its arguments: a variable would not reach a hook.
func TestEnvHelper(t *testing.T) {
	args := flag.Args()
	if len(args) != 2 {
		t.Skip("run by TestHookEnvironment")
	}
	if err := os.WriteFile(args[1], []byte(strings.Join(os.Environ(), "\n")+"\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	switch args[0] {
	case "stdin":
		fmt.Println("a dump")
	case "engine":
		_, _ = io.Copy(io.Discard, os.Stdin)
	}
	os.Exit(0)
}

// `holdfast exec` gives its before and after hooks and its stream's producer the process basics
// and the run's variables, and nothing else of the unit's environment: not the credentials
// directory, not restic's variables, not what a user manager's EnvironmentFile= put there, not
// a variable of no known kind. The engine, beside them, still gets all of it and the
// credentials' variables. Not parallel: it sets the process's environment.
func TestHookEnvironment(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{credentials.Password: "correct horse\n",
		credentials.Env: "AWS_ACCESS_KEY_ID=AKIA-credential\nAWS_SECRET_ACCESS_KEY=credential-secret\n"} {
		if err := os.WriteFile(filepath.Join(creds, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The unit's environment: the basics systemd gives it, its credentials directory, and what
	// a user manager reads from the job's env file.
	basics := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/var/lib/hooktest", "USER=hooktest", "LOGNAME=hooktest",
		"SHELL=/bin/sh", "LANG=C.UTF-8", "LC_TIME=C", "TZ=UTC", "TMPDIR=" + dir, "INVOCATION_ID=5f1e2d3c4b5a69788796a5b4c3d2e1f0",
		"JOURNAL_STREAM=8:123456"}
	polluted := []string{credentials.DirVariable + "=" + creds, "RESTIC_PASSWORD=env-file-password",
		"B2_ACCOUNT_KEY=env-file-secret", "XYZZY_RANDOM_17=plugh"}
	// Nothing of the kind passes but what the test sets: the child must see exactly basics.
	for _, kv := range engine.HookEnv(os.Environ()) {
		k, _, _ := strings.Cut(kv, "=")
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for _, kv := range append(basics, polluted...) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}

	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	seen := func(role string) string { return filepath.Join(dir, role+".env") }
	helper := func(role string) string {
		return fmt.Sprintf("'%s' '-test.run=^TestEnvHelper$' -- %s '%s'", self, role, seen(role))
	}
	run := uuid.NewString()
	cmd := execCmd()
	cmd.SetArgs([]string{"--run", run, "--attempt", "2", "--journal", filepath.Join(dir, "journal"), "--engine", "command",
		"--kind", "backup", "--password-credential", "--env-credential",
		"--hook-before", helper("before"), "--hook-after", helper("after"), "--stdin-from", helper("stdin"),
		"--", self, "-test.run=^TestEnvHelper$", "--", "engine", seen("engine")})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	var status ExitStatus
	if err := cmd.ExecuteContext(context.Background()); !errors.As(err, &status) || status != 0 {
		t.Fatalf("exec: %v", err)
	}

	read := func(role string) []string {
		t.Helper()
		b, err := os.ReadFile(seen(role))
		if err != nil {
			t.Fatalf("the %s did not run: %v", role, err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	for _, tc := range []struct {
		role string
		vars []string
	}{
		{"before", []string{"HOLDFAST_RUN=" + run, "HOLDFAST_ATTEMPT=2", "HOLDFAST_HOOK=before"}},
		{"stdin", []string{"HOLDFAST_RUN=" + run, "HOLDFAST_ATTEMPT=2", "HOLDFAST_HOOK=stdin"}},
		{"after", []string{"HOLDFAST_RUN=" + run, "HOLDFAST_ATTEMPT=2", "HOLDFAST_HOOK=after",
			"HOLDFAST_OUTCOME=succeeded", "HOLDFAST_EXIT_STATUS=0"}},
	} {
		t.Run(tc.role, func(t *testing.T) {
			got := read(tc.role)
			slices.Sort(got)
			want := append(slices.Clone(basics), tc.vars...)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("the %s saw\n%s\nwant exactly\n%s", tc.role, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
	t.Run("engine", func(t *testing.T) {
		got := read("engine")
		for _, kv := range append(append(basics, polluted...), "RESTIC_PASSWORD_FILE="+filepath.Join(creds, credentials.Password),
			"AWS_ACCESS_KEY_ID=AKIA-credential", "AWS_SECRET_ACCESS_KEY=credential-secret") {
			if !slices.Contains(got, kv) {
				t.Errorf("the engine did not see %s; it saw\n%s", kv, strings.Join(got, "\n"))
			}
		}
	})
}
