package journallog

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

// forgedEntryBytes is the size of the forged and the root's big messages: the 40 MiB.
// journald took entries of up to 120 MiB here and refused 127 MiB ("Argument list too long": a
// journal file's maximum size is 128 MiB).
const forgedEntryBytes = 40 << 20

// syncBuffer is a bytes.Buffer that RunLogs writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An unprivileged user (uid 65534, outside every unit) writes journal entries that name a live
// run's unit and run in every field a client may set, one of them of 40 MiB, and root writes two
// more of 40 MiB about the run (a trusted source, so they are in the tail's selection): the run's
// tail (RunTail), its logs (RunLogs) and their --follow show none of the user's, show the unit's
// lines and its manager's, each escaped and clipped on a line of its own, keep within TailBytes,
// and read 120 MiB of entries allocating a few MiB.
func TestForgedEntries(t *testing.T) {
	m := testenv.PrivateSystemd(t)
	dir := testenv.SharedDir(t)
	run := uuid.New()
	unit := "holdfast-forge-" + run.String()[:8] + "-a1.service"
	units := []string{unit}
	// The unit's own output: 80 lines of control characters (escaped, then clipped), a line of
	// 10 KiB (which journalctl leaves out), and lines the test waits for.
	ctrl := strings.Repeat(strings.Repeat("\x01", 1500)+"\n", 80)
	if err := os.WriteFile(filepath.Join(dir, "ctrl"), []byte(ctrl), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wide"), []byte(strings.Repeat("w", 10<<10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Written by the unit's main process (builtins): journald attributes each write to its
	// writer, and a process that exits before journald reads its cgroup leaves no _SYSTEMD_UNIT
	// (a line of `cat` or `/bin/echo` in the unit lacks it). holdfast exec, which relays what the
	// engine prints, lives as long as its unit. $$ is systemd's $.
	script := fmt.Sprintf(`while read -r l; do echo "$$l"; done <%[1]s/ctrl; echo real line one; read -r l <%[1]s/wide; echo "$$l"
while [ ! -e %[1]s/go ]; do sleep 0.1; done; echo real line two
while [ ! -e %[1]s/release ]; do sleep 0.1; done; echo real last line`, dir)
	start := exec.Command("systemd-run", "--user", "--quiet", "--unit", unit, "--description", "holdfast forge test",
		"-p", "User=nobody", "/bin/sh", "-c", script)
	start.Env = append(os.Environ(), m.Env()...)
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("systemd-run: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = m.StopUnits(context.Background(), units) })
	ctx := context.Background()
	tailNow := func(lines int) string {
		t.Helper()
		out, err := RunTail(ctx, m.JournalDir, run, units, lines)
		if err != nil {
			t.Fatalf("RunTail: %v\n%.2000s", err, out)
		}
		return out
	}
	if !testenv.Eventually(time.Minute, func() bool { return strings.Contains(tailNow(100), "real line one") }) {
		t.Fatalf("the unit's first line never came:\n%.2000s", tailNow(100))
	}

	journald := m.Journald(t)
	token := uuid.NewString()
	big := "MESSAGE=FORGED big " + strings.Repeat("A", forgedEntryBytes)
	forged := [][]string{
		{"MESSAGE=FORGED by HOLDFAST_RUN", "HOLDFAST_RUN=" + run.String()},
		{"MESSAGE=FORGED by UNIT", "UNIT=" + unit, "SYSLOG_IDENTIFIER=systemd"},
		{"MESSAGE=FORGED by USER_UNIT", "USER_UNIT=" + unit, "SYSLOG_IDENTIFIER=systemd"},
		// journald drops the fields a client gives that only it may set
		{"MESSAGE=FORGED by trusted fields", "_SYSTEMD_UNIT=" + unit, "_PID=1", "_UID=0", "_COMM=systemd", "UNIT=" + unit},
		{big, "HOLDFAST_RUN=" + run.String(), "UNIT=" + unit, "USER_UNIT=" + unit},
	}
	for _, fields := range forged {
		testenv.JournalEntryAs(t, journald, dir, 65534, append(fields, "FORGE="+token)...)
	}
	// Root's, in the selection: a tail reads them, and must not hold them.
	rootBig := "MESSAGE=root's big " + strings.Repeat("R", forgedEntryBytes)
	for i := 0; i < 2; i++ {
		testenv.JournalEntryAs(t, journald, dir, 0, rootBig, "HOLDFAST_RUN="+run.String(), "FORGE="+token)
	}
	if !testenv.Eventually(time.Minute, func() bool { return testenv.JournalCount(t, m.JournalDir, token) == len(forged)+2 }) {
		t.Fatalf("journald holds %d of the %d entries written", testenv.JournalCount(t, m.JournalDir, token), len(forged)+2)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Asked of journald's index: a tail now reads the 120 MiB of entries written above.
	if !testenv.Eventually(time.Minute, func() bool { return testenv.JournalMatches(t, m.JournalDir, "MESSAGE=real line two") > 0 }) {
		t.Fatalf("the unit's second line never came:\n%.2000s", tailNow(100))
	}

	check := func(what, out string, want ...string) {
		t.Helper()
		for _, w := range append([]string{"real line one", "real line two"}, want...) {
			if !strings.Contains(out, w) {
				t.Errorf("%s lacks %q; its lines without \\x01:\n%s", what, w, grepLines(strings.ReplaceAll(out, `\x01`, ""), ""))
			}
		}
		if strings.Contains(out, "FORGED") {
			t.Errorf("%s shows a forged entry:\n%s", what, grepLines(out, "FORGED"))
		}
		if n := strings.Count(out, "[holdfast: a message of 4096 bytes or more is not shown]"); n < 3 {
			t.Errorf("%s notes %d messages left out, want root's two and the wide line", what, n)
		}
		for i, line := range strings.Split(out, "\n") {
			if len(line) > LineBytes+len(" [holdfast: line clipped: 4096 of 100000 bytes shown]") {
				t.Errorf("%s line %d has %d bytes", what, i, len(line))
			}
			if strings.ContainsAny(line, "\x01\r\x1b") {
				t.Errorf("%s line %d is not escaped: %.100q", what, i, line)
			}
		}
	}

	// The tail: bounded, newest lines kept, and little allocated while reading 120 MiB of entries.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out := tailNow(1000)
	runtime.ReadMemStats(&after)
	// (The manager's line that the unit started is among the oldest, left out.)
	check("RunTail", out, "[holdfast: line clipped", "older lines are not shown")
	if len(out) > TailBytes+200 {
		t.Errorf("RunTail gave %d bytes, more than TailBytes", len(out))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("RunTail allocated %d MiB reading 120 MiB of entries", alloc>>20)
	} else {
		t.Logf("RunTail allocated %.1f MiB for a tail of %d KiB", float64(alloc)/(1<<20), len(out)>>10)
	}

	// The logs, whole.
	var logs, complaints syncBuffer
	if err := RunLogs(ctx, &logs, &complaints, m.JournalDir, run, units, false); err != nil {
		t.Fatalf("RunLogs: %v\n%s", err, complaints.String())
	}
	check("RunLogs", logs.String(), "[holdfast: line clipped", "systemd[", "Started "+unit+" - holdfast forge test.")
	if n := strings.Count(logs.String(), "[holdfast: line clipped"); n != 80 {
		t.Errorf("RunLogs clipped %d lines, want the 80 of control characters", n)
	}

	// --follow: the last line comes as it is written, and the forged ones still do not.
	var followed syncBuffer
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- RunLogs(fctx, &followed, &complaints, m.JournalDir, run, units, true) }()
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !testenv.Eventually(time.Minute, func() bool { return strings.Contains(followed.String(), "real last line") }) {
		cancel()
		t.Fatalf("RunLogs --follow never showed the last line:\n%s", grepLines(followed.String(), "real"))
	}
	// A forged entry while following, then one of root's: once root's is shown, the forged one,
	// written before it, would have been too.
	testenv.JournalEntryAs(t, journald, dir, 65534, "MESSAGE=FORGED while following", "HOLDFAST_RUN="+run.String(), "UNIT="+unit, "FORGE="+token)
	testenv.JournalEntryAs(t, journald, dir, 0, "MESSAGE=root's line after the forged one", "HOLDFAST_RUN="+run.String(), "FORGE="+token)
	if !testenv.Eventually(time.Minute, func() bool { return strings.Contains(followed.String(), "root's line after the forged one") }) {
		t.Errorf("RunLogs --follow never showed root's line:\n%s", grepLines(followed.String(), "root"))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunLogs --follow, interrupted: %v", err)
	}
	if strings.Contains(followed.String(), "FORGED") {
		t.Errorf("RunLogs --follow shows a forged entry:\n%s", grepLines(followed.String(), "FORGED"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, fmt.Sprintf("%.200s", l))
		}
	}
	return strings.Join(out, "\n")
}
