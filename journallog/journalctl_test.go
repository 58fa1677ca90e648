package journallog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

var (
	testRun  = uuid.MustParse("3e99c0de-0000-4000-8000-000000000001")
	otherRun = uuid.MustParse("3e99c0de-0000-4000-8000-000000000002")
	units    = []string{"holdfast-web-3e99-a1.service", "holdfast-web-3e99-a2.service"}
)

// The match selects only what journald itself vouches for: the units' own processes, PID 1 and a
// root user manager about them, root's lines about the run; never a field a client sets alone.
func TestRunArgv(t *testing.T) {
	want := []string{"journalctl", "--no-pager", "--quiet", "--output", "json", "--output-fields",
		"MESSAGE,SYSLOG_IDENTIFIER,_COMM,_PID,_UID,_HOSTNAME,_SYSTEMD_UNIT,UNIT,USER_UNIT,HOLDFAST_RUN",
		"--directory", "/j", "--follow", "--lines", "50",
		"_SYSTEMD_UNIT=holdfast-web-3e99-a1.service", "_SYSTEMD_UNIT=holdfast-web-3e99-a2.service",
		"+", "_PID=1", "UNIT=holdfast-web-3e99-a1.service", "UNIT=holdfast-web-3e99-a2.service",
		"+", "_UID=0", "_COMM=systemd", "USER_UNIT=holdfast-web-3e99-a1.service", "USER_UNIT=holdfast-web-3e99-a2.service",
		"+", "_UID=0", "HOLDFAST_RUN=" + testRun.String()}
	if got := runArgv("/j", testRun, units, true, 50); !slices.Equal(got, want) {
		t.Fatalf("runArgv =\n%q\nwant\n%q", got, want)
	}
	if got := runArgv("", testRun, nil, false, 0); got != nil {
		t.Fatalf("runArgv without units = %q, want nil", got)
	}
	got := strings.Join(runArgv("", testRun, units[:1], false, 0), " ")
	for _, forbidden := range []string{"_SYSTEMD_USER_UNIT", "--directory", "--follow", "--lines", "short"} {
		if strings.Contains(got, forbidden) {
			t.Errorf("runArgv = %s; has %q", got, forbidden)
		}
	}
	for _, field := range []string{"_SYSTEMD_UNIT", "UNIT", "USER_UNIT", "HOLDFAST_RUN"} {
		for _, term := range strings.Split(got, " + ") {
			if strings.Contains(" "+term, " "+field+"=") && field != "_SYSTEMD_UNIT" && !strings.Contains(term, "_PID=1") && !strings.Contains(term, "_UID=0") {
				t.Errorf("term %q selects by %s, which any client sets, without a field journald sets", term, field)
			}
		}
	}
}

func TestEntryLines(t *testing.T) {
	const ts = "1796236613215640"
	at := time.UnixMicro(1796236613215640).Format("2006-01-02T15:04:05-0700")
	unit := units[0]
	// fields of a journal entry as journalctl's JSON output has them
	entry := func(fields ...string) string {
		var b strings.Builder
		b.WriteString(`{"__REALTIME_TIMESTAMP":"` + ts + `","_HOSTNAME":"vm"`)
		for i := 0; i+1 < len(fields); i += 2 {
			v := fields[i+1]
			if !strings.HasPrefix(v, "[") && v != "null" {
				v = fmt.Sprintf("%q", v)
			}
			fmt.Fprintf(&b, ",%q:%s", fields[i], v)
		}
		return b.String() + "}"
	}
	long := strings.Repeat("é", 3000) // 6000 bytes
	tests := []struct {
		name string
		raw  string
		want string // "" for an entry that is left out
	}{
		{"the unit's own line", entry("_SYSTEMD_UNIT", unit, "_UID", "65534", "_PID", "42", "SYSLOG_IDENTIFIER", "restic", "MESSAGE", "summary: {}"),
			at + " vm restic[42]: summary: {}"},
		{"the second attempt's unit", entry("_SYSTEMD_UNIT", units[1], "_PID", "43", "_COMM", "sh", "MESSAGE", "hi"), at + " vm sh[43]: hi"},
		{"PID 1 about the unit", entry("_PID", "1", "_UID", "0", "_COMM", "systemd", "SYSLOG_IDENTIFIER", "systemd", "UNIT", unit, "MESSAGE", "Started x."),
			at + " vm systemd[1]: Started x."},
		{"PID 1 about several units", entry("_PID", "1", "SYSLOG_IDENTIFIER", "systemd", "UNIT", `["a.service","`+unit+`"]`, "MESSAGE", "m"),
			at + " vm systemd[1]: m"},
		{"a root user manager about the unit", entry("_PID", "900", "_UID", "0", "_COMM", "systemd", "SYSLOG_IDENTIFIER", "systemd", "USER_UNIT", unit, "MESSAGE", "Started x."),
			at + " vm systemd[900]: Started x."},
		{"the daemon about the run", entry("_UID", "0", "_PID", "7", "_COMM", "holdfast", "SYSLOG_IDENTIFIER", "holdfast", "_SYSTEMD_UNIT", "holdfast.service",
			"HOLDFAST_RUN", testRun.String(), "MESSAGE", "run spawned"), at + " vm holdfast[7]: run spawned"},

		{"a user's HOLDFAST_RUN", entry("_UID", "65534", "_PID", "66", "HOLDFAST_RUN", testRun.String(), "MESSAGE", "FORGED"), ""},
		{"a user's UNIT", entry("_UID", "65534", "_PID", "66", "_COMM", "systemd", "UNIT", unit, "MESSAGE", "FORGED"), ""},
		{"a user's USER_UNIT", entry("_UID", "65534", "_PID", "66", "USER_UNIT", unit, "MESSAGE", "FORGED"), ""},
		{"a user manager's unit of the same name", entry("_UID", "65534", "_SYSTEMD_UNIT", "user@65534.service", "MESSAGE", "FORGED"), ""},
		{"a user manager about a unit of the same name", entry("_UID", "65534", "_PID", "77", "_COMM", "systemd", "USER_UNIT", unit, "MESSAGE", "FORGED"), ""},
		{"root's lines about another run", entry("_UID", "0", "HOLDFAST_RUN", otherRun.String(), "MESSAGE", "other"), ""},
		{"a root process's UNIT that is not PID 1", entry("_UID", "0", "_PID", "5", "_COMM", "sh", "UNIT", unit, "MESSAGE", "x"), ""},
		{"no source at all", entry("MESSAGE", "x"), ""},

		{"a message journalctl leaves out (4096 bytes or more)", entry("_SYSTEMD_UNIT", unit, "_PID", "42", "_COMM", "logger", "MESSAGE", "null"),
			at + " vm logger[42]: [holdfast: a message of 4096 bytes or more is not shown]"},
		{"bytes that are not printable", entry("_SYSTEMD_UNIT", unit, "_PID", "42", "_COMM", "sh", "MESSAGE", "[27,91,50,74,104,105]"),
			at + ` vm sh[42]: \x1b[2Jhi`},
		{"a newline in a message stays in its line", entry("_SYSTEMD_UNIT", unit, "_PID", "42", "_COMM", "sh", "MESSAGE", "one\nvm systemd[1]: Started forged."),
			at + ` vm sh[42]: one\nvm systemd[1]: Started forged.`},
		{"an identifier that turns the text around", entry("_SYSTEMD_UNIT", unit, "_PID", "42", "SYSLOG_IDENTIFIER", "a\u202eb", "MESSAGE", "m"),
			at + ` vm a\u202eb[42]: m`},
		{"a message given twice", entry("_SYSTEMD_UNIT", unit, "_PID", "42", "_COMM", "sh", "MESSAGE", `["a","b"]`), at + " vm sh[42]: a b"},
		{"a long line is clipped", entry("_SYSTEMD_UNIT", unit, "_PID", "42", "_COMM", "sh", "MESSAGE", long),
			clip(at+" vm sh[42]: "+long, LineBytes)},
		{"what is not JSON", `{"MESSAGE":`, "[holdfast: an entry journalctl wrote cannot be read: unexpected end of JSON input]"},
		{"a byte array out of range", entry("_SYSTEMD_UNIT", unit, "MESSAGE", "[300]"), "[holdfast: an entry journalctl wrote cannot be read: field MESSAGE: not a byte]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseEntry([]byte(tt.raw), testRun, units)
			if !ok {
				got = ""
			}
			if got != tt.want {
				t.Fatalf("line of %s\n= %q\nwant %q", tt.raw, got, tt.want)
			}
			if len(got) > LineBytes+100 {
				t.Fatalf("a line of %d bytes", len(got))
			}
		})
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456789 [holdfast: line clipped: 10 of 13 bytes shown]"},
		{"ab\u00e9\u00e9", 3, "ab [holdfast: line clipped: 2 of 6 bytes shown]"}, // not inside é
		{"\u00e9\u00e9", 1, " [holdfast: line clipped: 0 of 4 bytes shown]"},
	}
	for _, tt := range tests {
		if got := clip(tt.in, tt.max); got != tt.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

// scan reads entry by entry within its bounds: an entry over entryBytes is skipped with a note,
// more than the limit stops it, and its memory stays within one entry whatever it reads.
func TestScan(t *testing.T) {
	line := func(msg string) string {
		return `{"_SYSTEMD_UNIT":"` + units[0] + `","_COMM":"sh","_PID":"1","_HOSTNAME":"h","MESSAGE":"` + msg + `"}` + "\n"
	}
	forged := `{"_UID":"65534","HOLDFAST_RUN":"` + testRun.String() + `","MESSAGE":"FORGED"}` + "\n"
	huge := `{"_SYSTEMD_UNIT":"` + units[0] + `","MESSAGE":["` + strings.Repeat("x\",\"", entryBytes) + `"]}` + "\n"
	tests := []struct {
		name    string
		in      string
		limit   int64
		want    []string // each line's end
		wantErr error
	}{
		{"lines", line("a") + "\n" + forged + line("b"), 0, []string{"sh[1]: a", "sh[1]: b"}, nil},
		{"the last line without its newline", line("a") + strings.TrimSuffix(line("b"), "\n"), 0, []string{"sh[1]: a", "sh[1]: b"}, nil},
		{"an entry over entryBytes", line("a") + huge + line("b"), 0,
			[]string{"sh[1]: a", "[holdfast: an entry of more than 64 KiB is not shown]", "sh[1]: b"}, nil},
		{"an entry over entryBytes at the end", line("a") + strings.TrimSuffix(huge, "\n"), 0,
			[]string{"sh[1]: a", "[holdfast: an entry of more than 64 KiB is not shown]"}, nil},
		{"more than the limit", line("a") + line("b") + line("c"), int64(len(line("a")) + 5), []string{"sh[1]: a"}, errTooMuch},
		{"more than the limit in one entry", huge + huge, entryBytes * 3, nil, errTooMuch},
		{"nothing", "", 0, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := scan(strings.NewReader(tt.in), testRun, units, tt.limit, func(l string) error { got = append(got, l); return nil })
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("scan: %v, want %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("scan gave %q, want lines ending %q", got, tt.want)
			}
			for i := range got {
				if !strings.HasSuffix(got[i], tt.want[i]) {
					t.Errorf("line %d = %q, want it to end %q", i, got[i], tt.want[i])
				}
			}
		})
	}
	// A write error stops it.
	stop := errors.New("stop")
	if err := scan(strings.NewReader(line("a")+line("b")), testRun, units, 0, func(string) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("scan after a failed write: %v", err)
	}
}

// A tail keeps its newest lines within TailBytes and says how many older ones it left out.
func TestTail(t *testing.T) {
	tests := []struct {
		name      string
		lines     int
		size      int
		wantFirst string
		wantLast  string
	}{
		{"none", 0, 10, "", ""},
		{"a few", 3, 10, "line 0 ", "line 2 "},
		{"more than TailBytes", 200, LineBytes, "[holdfast: 137 older lines are not shown: a tail keeps its newest 256 KiB]", "line 199 "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tl tail
			for i := 0; i < tt.lines; i++ {
				tl.add(fmt.Sprintf("line %d %s", i, strings.Repeat("x", tt.size-len(fmt.Sprintf("line %d ", i)))))
			}
			s := tl.String()
			if len(s) > TailBytes+200 {
				t.Fatalf("tail of %d bytes", len(s))
			}
			lines := strings.Split(s, "\n")
			if !strings.HasPrefix(lines[0], tt.wantFirst) || !strings.HasPrefix(lines[len(lines)-1], tt.wantLast) {
				t.Fatalf("tail from %.80q to %.80q; want from %q to %q", lines[0], lines[len(lines)-1], tt.wantFirst, tt.wantLast)
			}
		})
	}
}

// MaxTails tails at once; the next waits, then is told the daemon is busy.
func TestTailSlots(t *testing.T) {
	var releases []func()
	for i := 0; i < MaxTails; i++ {
		release, err := AcquireTail(context.Background(), time.Second)
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		releases = append(releases, release)
	}
	if _, err := AcquireTail(context.Background(), 10*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Fatalf("slot %d: %v, want ErrBusy", MaxTails+1, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if out, err := RunTail(ctx, t.TempDir(), testRun, units, 10); !errors.Is(err, ErrBusy) || out != "" || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("RunTail with every slot taken: %q, %v; want ErrBusy", out, err)
	}
	releases[0]()
	release, err := AcquireTail(context.Background(), time.Second)
	if err != nil {
		t.Fatalf("a slot once one is free: %v", err)
	}
	release()
	for _, r := range releases[1:] {
		r()
	}
}

// capped keeps journalctl's first KiB of complaints.
func TestCapped(t *testing.T) {
	var c capped
	for i := 0; i < 100; i++ {
		if n, err := io.WriteString(&c, strings.Repeat("e", 100)); n != 100 || err != nil {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
	if c.Len() != 1024 {
		t.Fatalf("kept %d bytes, want 1024", c.Len())
	}
}
