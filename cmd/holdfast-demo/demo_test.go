package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The README's first command, `make demo`, as a new user runs it: twice in a row on the same
// machine (the second run wipes and reuses the first one's directory), each to a succeeded
// backup, and each leaving no process behind. A daemon that dies at its start is reported with
// its log's last line, and nothing is left running either.
//
// The runs are in sequence, not parallel: each one builds bin/holdfast in the checkout.
func TestMakeDemo(t *testing.T) {
	requireDemoPrerequisites(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	parent, err := os.MkdirTemp("", "holdfast-demo-test-*")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o755); err != nil { // units run as nobody and PostgreSQL as postgres
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	dir := filepath.Join(parent, "demo")

	for _, round := range []string{"first", "second"} {
		out, code := makeDemo(t, root, dir, "--sample-size 8")
		if code != 0 {
			t.Fatalf("make demo, %s run: exit %d\n%s", round, code, out)
		}
		for _, want := range []string{
			"==> the daemon is ready",
			"$ holdfast run start sample --wait",
			" succeeded: backup complete: snapshot ",
			"$ holdfast run show ",
			"status:    succeeded",
			"$ holdfast retention plan sample --preset 7d",
			"1 snapshots",
			"==> stopping the holdfast daemon, the systemd manager and PostgreSQL",
			"==> demo done in ",
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("make demo, %s run, printed no %q:\n%s", round, want, out)
			}
		}
		// The steps in their order: the daemon ready before the run is started.
		if strings.Index(out, "==> the daemon is ready") > strings.Index(out, "$ holdfast run start sample --wait") {
			t.Fatalf("make demo, %s run, started the run before the daemon was ready:\n%s", round, out)
		}
		noProcessUses(t, dir)
	}

	// A daemon that exits at once: the demo says so, with the daemon's last log line.
	fake := filepath.Join(parent, "holdfast")
	script := "#!/bin/sh\nif [ \"$1\" = daemon ]; then echo 'fake daemon: refusing to start' >&2; exit 1; fi\nexec " +
		strconv.Quote(filepath.Join(root, "bin", "holdfast")) + " \"$@\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := makeDemo(t, root, dir, "--sample-size 1 --holdfast "+fake)
	if code == 0 {
		t.Fatalf("make demo with a daemon that exits: exit 0\n%s", out)
	}
	// The demo's last line, before make's own ("make: ***", "make[1]: ***" when nested).
	var last string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !makeLine.MatchString(line) {
			last = line
		}
	}
	if want := "holdfast daemon exited (exit status 1); its last log line: fake daemon: refusing to start"; !strings.Contains(last, want) {
		t.Fatalf("make demo with a daemon that exits ends with %q, want it to contain %q\n%s", last, want, out)
	}
	if strings.Contains(out, "$ holdfast run start") {
		t.Fatalf("make demo started a run although its daemon had exited:\n%s", out)
	}
	noProcessUses(t, dir)
}

var makeLine = regexp.MustCompile(`^make(\[[0-9]+\])?: `)

// makeDemo runs `make demo` in root with the demo directory dir and DEMOFLAGS flags, and returns
// what it printed (stdout and stderr together) and its exit code.
func makeDemo(t *testing.T, root, dir, flags string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "demo", "DEMOFLAGS="+flags)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "HOLDFAST_DEMO_DIR="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("make demo: %v\n%s", err, out.String())
	}
	return out.String(), 0
}

// noProcessUses fails if a live process names dir in its command line or environment: the
// demo's PostgreSQL, manager, journald, daemon and units all do while they run.
func noProcessUses(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err != nil || zombie(stat) {
			continue // gone meanwhile, or dead and waiting for a reaper
		}
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile("/proc/" + e.Name() + "/" + f)
			if err == nil && bytes.Contains(b, []byte(dir)) {
				cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
				t.Fatalf("process %d is left behind by the demo: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
			}
		}
	}
}

func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// requireDemoPrerequisites skips the test where the demo cannot run (not root), unless CI=true
// makes that a failure; the demo installs what else it needs (scripts/install-deps).
func requireDemoPrerequisites(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal("make demo needs root (CI=true, so this fails instead of skipping)")
	}
	t.Skip("make demo needs root")
}
