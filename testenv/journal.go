package testenv

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Journald is the pid of m's journald: the one whose /run/log/journal is m.JournalDir. A process
// that joins its mount namespace reaches its sockets (/run/systemd/journal).
func (m *Manager) Journald(t testing.TB) int {
	t.Helper()
	var want syscall.Stat_t
	if err := syscall.Stat(m.JournalDir, &want); err != nil {
		t.Fatal(err)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
		var st syscall.Stat_t
		if strings.TrimSpace(string(comm)) == "systemd-journal" &&
			syscall.Stat(filepath.Join("/proc", p.Name(), "root", "run", "log", "journal"), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			return pid
		}
	}
	t.Fatalf("no journald writes %s", m.JournalDir)
	return 0
}

// JournalEntryAs sends one journal entry of fields (NAME=value each) to the journald of pid
// journald with `logger --journald`, from outside every unit: as uid with nothing else of its own
// (setpriv), or as root (uid 0). The entry's file is written to dir, which uid can read.
func JournalEntryAs(t testing.TB, journald int, dir string, uid int, fields ...string) {
	t.Helper()
	f, err := os.CreateTemp(dir, "entry-*")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	// Field by field: a field may be tens of MiB, which a joined copy would double (and the
	// race detector's bookkeeping of each copy costs seconds).
	for _, field := range fields {
		if _, err := f.WriteString(field); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Chmod(0o644); err != nil {
		t.Fatal(err)
	}
	f.Close()
	argv := []string{"nsenter", "-t", strconv.Itoa(journald), "-m", "--"}
	if uid != 0 {
		argv = append(argv, "setpriv", "--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(uid), "--clear-groups", "--")
	}
	cmd := exec.Command(argv[0], append(argv[1:], "logger", "--journald="+f.Name())...)
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args[:len(cmd.Args)-1], " "), err, out)
	}
}

// JournalCount is how many entries of the journal in dir carry FORGE=mark.
func JournalCount(t testing.TB, dir, mark string) int {
	t.Helper()
	return JournalMatches(t, dir, "FORGE="+mark)
}

// JournalMatches is how many entries of the journal in dir journalctl's match (FIELD=VALUE, the
// whole value) selects: journald's index answers it without reading the other entries, however
// large they are.
func JournalMatches(t testing.TB, dir, match string) int {
	t.Helper()
	field, _, _ := strings.Cut(match, "=")
	out, err := exec.Command("journalctl", "--directory", dir, "--no-pager", "--quiet", "--output", "json", "--output-fields", field, match).Output()
	if err != nil {
		t.Fatalf("journalctl %s: %v", match, err)
	}
	return bytes.Count(out, []byte("\n"))
}

// JournalLineAt returns when the first line in the journal in dir that concerns unit (written by
// it, or by its manager about it) and contains text was written, and whether there is one. A line
// with control characters (restic's "\r") comes from journalctl's JSON as its bytes; it is matched
// as text too.
func JournalLineAt(t testing.TB, dir, unit, text string) (time.Time, bool) {
	t.Helper()
	out, err := exec.Command("journalctl", "--directory", dir, "--no-pager", "--output", "json",
		"--output-fields", "MESSAGE,_SYSTEMD_USER_UNIT,USER_UNIT,_SYSTEMD_UNIT").Output()
	if err != nil {
		t.Fatalf("journalctl --directory %s: %v", dir, err)
	}
	for _, line := range bytes.Split(out, []byte("\n")) {
		var e struct {
			Message  any    `json:"MESSAGE"` // a string, or its bytes as numbers
			Realtime string `json:"__REALTIME_TIMESTAMP"`
			Unit     string `json:"_SYSTEMD_USER_UNIT"`
			UserUnit string `json:"USER_UNIT"`
			SysUnit  string `json:"_SYSTEMD_UNIT"`
		}
		if json.Unmarshal(line, &e) != nil || (e.Unit != unit && e.UserUnit != unit && e.SysUnit != unit) {
			continue
		}
		msg, _ := e.Message.(string)
		if raw, ok := e.Message.([]any); ok {
			b := make([]byte, 0, len(raw))
			for _, c := range raw {
				n, _ := c.(float64)
				b = append(b, byte(n))
			}
			msg = string(b)
		}
		if usec, err := strconv.ParseInt(e.Realtime, 10, 64); err == nil && strings.Contains(msg, text) {
			return time.UnixMicro(usec), true
		}
	}
	return time.Time{}, false
}
