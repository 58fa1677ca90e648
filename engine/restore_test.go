package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// restic restore's lines about what the sandbox refused, as each version words them
// (testdata/restore/README), and lines it must leave alone.
func TestSandboxLoss(t *testing.T) {
	restore := Restic{Operation: OpRestore}
	setID := LostSetID + " (the chmod failed whole: restic set none of its mode)"
	tests := []struct {
		line string
		item string
		msg  string
	}{
		{"ignoring error for /tmp/hfr/src/blk: operation not permitted", "/tmp/hfr/src/blk", LostDevice}, // 0.14.0 to 0.17.1
		{"ignoring error for /tmp/hfr/src/chr: mknod /tmp/hfr/target/tmp/hfr/src/chr: operation not permitted", "/tmp/hfr/src/chr", LostDevice},
		{"ignoring error for /tmp/hfr/src/suid: chmod /tmp/hfr/target/tmp/hfr/src/suid: operation not permitted", "/tmp/hfr/src/suid", setID},
		{"ignoring error for /a b/c: d: chmod /t/a b/c: d: operation not permitted", "/a b/c: d", setID},
		{"ignoring error for /a: b: mknod /t/a: b: operation not permitted", "/a: b", LostDevice},
		{"ignoring error for /a: b: operation not permitted", "/a", "b: operation not permitted"}, // bare: not taken
		{"ignoring error for /src/a: chmod /t/src/other: operation not permitted", "/src/a", "chmod /t/src/other: operation not permitted"},
		{"ignoring error for /src/a: ciphertext verification failed", "/src/a", "ciphertext verification failed"},
		{"ignoring error for /src/a: chmod /t/src/a: read-only file system", "/src/a", "chmod /t/src/a: read-only file system"},
		{"ignoring error for /src/a: Lchown: lchown /t/src/a: operation not permitted", "/src/a", "Lchown: lchown /t/src/a: operation not permitted"},
		{"ignoring error for /src/a: mknod /t/src/a: file exists", "/src/a", "mknod /t/src/a: file exists"},
	}
	// restore --json (0.17.1 and later) says the same as JSON lines: item and message apart.
	for _, tt := range tests[1:5] {
		item, msg, _ := strings.Cut(strings.TrimPrefix(tt.line, "ignoring error for "), ": ")
		if tt.item != item {
			// An item with ": " in it: restic names it whole.
			item, msg = tt.item, strings.TrimPrefix(tt.line, "ignoring error for "+tt.item+": ")
		}
		line, _ := json.Marshal(map[string]any{"message_type": "error", "error": map[string]string{"message": msg}, "during": "restore", "item": item})
		tests = append(tests, struct {
			line string
			item string
			msg  string
		}{string(line), tt.item, tt.msg})
	}
	for _, tt := range tests {
		ev, ok := restore.ParseStderr([]byte(tt.line))
		want := Event{TypeItemError, ItemError{Item: tt.item, During: "restore", Message: tt.msg}}
		if !ok || !reflect.DeepEqual(ev, want) {
			t.Errorf("%q: %+v, %v; want %+v", tt.line, ev, ok, want)
		}
	}
	// A drill's sandbox is not a restore's: its lines keep restic's words.
	if ev, _ := (Restic{Operation: OpDrill}).ParseStderr([]byte(tests[1].line)); ev.Payload.(ItemError).Message == LostDevice {
		t.Errorf("a drill's mknod line read as the restore sandbox's: %+v", ev)
	}
}

func TestReportsModes(t *testing.T) {
	tests := []struct {
		version string
		euid    int
		want    bool
	}{
		{"restic 0.14.0 compiled with go1.19.8 on linux/amd64\n", 0, false},
		{"restic 0.16.5 compiled with go1.26.8 on linux/amd64\n", 0, false},
		{"restic 0.17.0 compiled with go1.22.5 on linux/amd64\n", 0, false},
		{"restic 0.17.1 compiled with go1.26.8 on linux/amd64\n", 0, true},
		{"restic 0.17.3 compiled with go1.26.8 on linux/amd64\n", 0, true},
		{"restic 0.18.1 compiled with go1.26.8 on linux/amd64\n", 0, true},
		{"restic 0.19.0 compiled with go1.26.8 on linux/amd64\n", 0, true},
		{"restic 0.19.0-dev (compiled manually) compiled with go1.26.8 on linux/amd64\n", 0, true},
		{"restic 1.0.0 compiled with go1.30 on linux/amd64\n", 0, true},
		{"restic 0.19.0 compiled with go1.26.8 on linux/amd64\n", 65534, false}, // restic drops EPERM when not root
		{"restic (v0.19.0) compiled with go1.26.8\n", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		if got := reportsModes(tt.version, tt.euid); got != tt.want {
			t.Errorf("reportsModes(%q, %d) = %v, want %v", tt.version, tt.euid, got, tt.want)
		}
	}
}

// fakeRestic writes a script that answers `restic version` as version does and anything else
// (the listing) with the file listing and status; each listing it gives appends a line to the
// returned file.
func fakeRestic(t *testing.T, version, listing string, status int) (bin, ran string) {
	t.Helper()
	dir := t.TempDir()
	bin, ran = filepath.Join(dir, "restic"), filepath.Join(dir, "listed")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = version ]; then echo %q; exit 0; fi\necho listed >>%q\ncat %q\nexit %d\n",
		version, ran, listing, status)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, ran
}

// restoredAsSandboxed makes under target what a sandboxed restic leaves of the setuid/setgid
// files and directories of listing (testdata/restore/README): each with its mode as restic
// created it, 0600 or 0700.
func restoredAsSandboxed(t *testing.T, target, listing string) {
	t.Helper()
	b, err := os.ReadFile(listing)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var n lsNode
		if json.Unmarshal(line, &n) != nil || n.StructType != "node" || n.Mode&setID == 0 {
			continue
		}
		p := filepath.Join(target, n.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if n.Type == "dir" {
			err = os.Mkdir(p, 0o700)
		} else {
			err = os.WriteFile(p, nil, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// printing is a command line that prints lines to stderr, as restic would, and exits status.
func printing(status int, lines ...string) []string {
	return append([]string{"sh", "-c", `s=$1; shift; printf '%s\n' "$@" >&2; exit "$s"`, "sh", strconv.Itoa(status)}, lines...)
}

// Each version's real restore in the sandbox (testdata/restore), as root and as another user,
// ends partial, exit status 3, with one item error for each of what the sandbox refused: the two
// device nodes and the three setuid/setgid bits, whether restic reported them or the listing
// showed them. Not parallel: the tests for another user stand in for it (geteuid).
func TestRestoreReplay(t *testing.T) {
	const src = "/tmp/hfr/src"
	wantItems := map[string]string{src + "/blk": LostDevice, src + "/chr": LostDevice,
		src + "/suid": LostSetID, src + "/sgid": LostSetID, src + "/sgiddir": LostSetID}
	for _, version := range []string{"0.14.0", "0.15.2", "0.16.5", "0.17.1", "0.17.3", "0.18.1", "0.19.0"} {
		for _, who := range []string{"root", "nobody"} {
			t.Run(version+"-"+who, func(t *testing.T) {
				euid := 0
				if who == "nobody" {
					euid = 65534
				}
				geteuid = func() int { return euid }
				t.Cleanup(func() { geteuid = os.Geteuid })
				fixture := filepath.Join("restore", "v"+version+"-"+who)
				listing, err := filepath.Abs(filepath.Join("testdata", "restore", "v"+version+".ls.json"))
				if err != nil {
					t.Fatal(err)
				}
				target := t.TempDir()
				restoredAsSandboxed(t, target, listing)
				bin, listed := fakeRestic(t, "restic "+version+" compiled with go1.26.8 on linux/amd64", listing, 0)
				r := &Restore{Restic: Restic{Operation: OpRestore}, Target: target, List: []string{bin, "ls", "--json", "ID"},
					Since: time.Now()}
				var rec recorder
				var stderr bytes.Buffer
				status, err := Exec(context.Background(), ExecConfig{Argv: replay(fixture+".stdout", fixture+".stderr", 1),
					Parser: r, Emit: rec.emit, Stderr: &stderr})
				if err != nil || status != 3 {
					t.Fatalf("Exec = %d, %v; want 3; stderr:\n%s", status, err, stderr.Bytes())
				}
				checkExit(t, &rec, Exit{ExitStatus: 3})
				got := map[string]string{}
				for _, ev := range rec.of(TypeItemError) {
					ie := ev.Payload.(ItemError)
					if _, dup := got[ie.Item]; dup {
						t.Errorf("%s reported twice", ie.Item)
					}
					got[ie.Item] = ie.Message
					if want := wantItems[ie.Item]; want == "" || !strings.HasPrefix(ie.Message, want) {
						t.Errorf("item error %s: %q, want it to start %q", ie.Item, ie.Message, want)
					}
				}
				if len(got) != len(wantItems) {
					t.Errorf("item errors %v, want one for each of %v", got, wantItems)
				}
				// The listing is asked only where restic says nothing of the modes.
				_, err = os.Stat(listed)
				if silent := who == "nobody" || version < "0.17.1"; silent != (err == nil) {
					t.Errorf("listed %v, want %v", err == nil, silent)
				}
				if n := len(rec.of(TypeFatal)); n != 0 {
					t.Errorf("%d fatal events: restic's count of the sandbox's losses is no failure", n)
				}
				ev := rec.evidence(status)
				ev.Operation = OpRestore
				o := Restic{}.Classify(ev)
				if o.Status != Partial || !strings.HasPrefix(o.Reason, "partial: restore: 5 items not done, first: "+src+"/blk: "+LostDevice) {
					t.Errorf("outcome %+v", o)
				}
				if want := "restic exited 1 after "; !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.Bytes())
				}
			})
		}
	}
}

// What Restore makes of a restore's end beside the sandbox's losses alone: restic's own
// failures stand, the listing is asked only after a restore that ran to its end, an item restic
// reported is not reported again, and a file the restore did not change is not its loss. As
// root, whoever runs the test; not parallel, for that.
func TestRestoreFinish(t *testing.T) {
	geteuid = func() int { return 0 }
	t.Cleanup(func() { geteuid = os.Geteuid })
	listing, err := filepath.Abs(filepath.Join("testdata", "restore", "v0.14.0.ls.json"))
	if err != nil {
		t.Fatal(err)
	}
	const (
		src    = "/tmp/hfr/src"
		blk    = "ignoring error for " + src + "/blk: operation not permitted"
		v014   = "restic 0.14.0 compiled with go1.19.8 on linux/amd64"
		v018   = "restic 0.18.1 compiled with go1.26.8 on linux/amd64"
		silent = 3 // the setuid/setgid files of the listing
	)
	tests := []struct {
		name        string
		lines       []string
		status      int
		version     string
		lsStatus    int
		since       time.Duration // after now
		wantStatus  int
		wantItems   int
		wantListed  bool
		wantFatal   string
		wantWarning string
		wantOutcome string
	}{
		{name: "a real error beside a loss", lines: []string{blk, "ignoring error for " + src + "/plain: ciphertext verification failed",
			"Fatal: There were 2 errors"}, status: 1, version: v014,
			wantStatus: 1, wantItems: 2 + silent, wantListed: true, wantFatal: "Fatal: There were 2 errors", wantOutcome: Failed},
		{name: "restic stopped short", lines: []string{"Fatal: wrong password or no key found"}, status: 1, version: v014,
			wantStatus: 1, wantFatal: "Fatal: wrong password or no key found", wantOutcome: Failed},
		{name: "interrupted", lines: []string{"signal interrupt received, cleaning up"}, status: 130, version: v014,
			wantStatus: 130, wantOutcome: Interrupted},
		{name: "only the losses restic says nothing of", status: 0, version: v014,
			wantStatus: 0, wantItems: silent, wantListed: true, wantOutcome: Partial},
		{name: "restic reports them itself", status: 0, version: v018, wantStatus: 0, wantOutcome: Succeeded},
		{name: "an unreadable version is taken as silent", status: 0, version: "restic (devel)",
			wantStatus: 0, wantItems: silent, wantListed: true, wantOutcome: Partial},
		{name: "the listing fails", lines: []string{blk, "Fatal: There were 1 errors"}, status: 1, version: v014, lsStatus: 1,
			wantStatus: 3, wantItems: 1 + silent, wantListed: true, wantWarning: "setuid/setgid bits could not be checked", wantOutcome: Partial},
		{name: "an item restic reported", lines: []string{"ignoring error for " + src + "/suid: ciphertext verification failed",
			"Fatal: There were 1 errors"}, status: 1, version: v014,
			wantStatus: 1, wantItems: silent, wantListed: true, wantFatal: "Fatal: There were 1 errors", wantOutcome: Failed},
		{name: "files the restore did not change (--overwrite)", status: 0, version: v014, since: time.Hour,
			wantStatus: 0, wantListed: true, wantOutcome: Succeeded},
		// restore --json: 0.18 and later end with an exit_error, without "Fatal: ".
		{name: "only losses, said as JSON", lines: []string{
			`{"message_type":"error","error":{"message":"mknod /t/tmp/hfr/src/blk: operation not permitted"},"during":"restore","item":"/tmp/hfr/src/blk"}`,
			`{"message_type":"error","error":{"message":"chmod /t/tmp/hfr/src/suid: operation not permitted"},"during":"restore","item":"/tmp/hfr/src/suid"}`,
			`{"message_type":"exit_error","code":1,"message":"There were 2 errors"}`}, status: 1, version: v018,
			wantStatus: 3, wantItems: 2, wantOutcome: Partial},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := t.TempDir()
			restoredAsSandboxed(t, target, listing)
			bin, listed := fakeRestic(t, tt.version, listing, tt.lsStatus)
			r := &Restore{Restic: Restic{Operation: OpRestore}, Target: target, List: []string{bin, "ls", "--json", "ID"},
				Since: time.Now().Add(tt.since)}
			var rec recorder
			var stderr bytes.Buffer
			status, err := Exec(context.Background(), ExecConfig{Argv: printing(tt.status, tt.lines...), Parser: r, Emit: rec.emit, Stderr: &stderr})
			if err != nil || status != tt.wantStatus {
				t.Fatalf("Exec = %d, %v; want %d; stderr:\n%s", status, err, tt.wantStatus, stderr.Bytes())
			}
			checkExit(t, &rec, Exit{ExitStatus: tt.wantStatus})
			items := map[string]bool{}
			for _, ev := range rec.of(TypeItemError) {
				ie := ev.Payload.(ItemError)
				if items[ie.Item] {
					t.Errorf("%s reported twice", ie.Item)
				}
				items[ie.Item] = true
			}
			if len(items) != tt.wantItems {
				t.Errorf("item errors for %v, want %d", items, tt.wantItems)
			}
			if _, err := os.Stat(listed); (err == nil) != tt.wantListed {
				t.Errorf("listed %v, want %v", err == nil, tt.wantListed)
			}
			ev := rec.evidence(status)
			if ev.Fatal != tt.wantFatal {
				t.Errorf("fatal %q, want %q", ev.Fatal, tt.wantFatal)
			}
			var warnings []string
			for _, w := range rec.of(TypeWarning) {
				warnings = append(warnings, w.Payload.(Warning).Message)
			}
			if tt.wantWarning != "" && !strings.Contains(strings.Join(warnings, "\n"), tt.wantWarning) {
				t.Errorf("warnings %q, want one with %q", warnings, tt.wantWarning)
			}
			ev.Operation = OpRestore
			if o := (Restic{}).Classify(ev); o.Status != tt.wantOutcome {
				t.Errorf("outcome %+v, want %s", o, tt.wantOutcome)
			}
		})
	}
}

// The comparison reports at most maxSetIDLosses bits one by one, and counts the rest in a
// warning: the job's user can make as many setuid files of its own as it likes.
func TestSetIDLossesBounded(t *testing.T) {
	t.Parallel()
	target := t.TempDir()
	var listing strings.Builder
	const n = maxSetIDLosses + 5
	for i := range n {
		name := fmt.Sprintf("/d/f%d", i)
		fmt.Fprintf(&listing, `{"name":"f%d","type":"file","path":%q,"mode":%d,"struct_type":"node"}`+"\n", i, name, uint32(0o755|setID))
		if i == 0 {
			if err := os.Mkdir(filepath.Join(target, "d"), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(target, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := &Restore{Restic: Restic{Operation: OpRestore}, Target: target}
	evs, err := r.lostSetIDs(strings.NewReader(listing.String()), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != maxSetIDLosses+1 || evs[maxSetIDLosses].Type != TypeWarning ||
		!strings.HasPrefix(evs[maxSetIDLosses].Payload.(Warning).Message, "5 more setuid/setgid bits not restored") {
		t.Fatalf("%d events, the last %+v; want %d item errors and a warning counting 5 more", len(evs), evs[len(evs)-1], maxSetIDLosses)
	}
	if ie := evs[0].Payload.(ItemError); ie.Item != "/d/f0" || ie.Message != LostSetID+" (mode 6755 in the snapshot, 0600 restored)" {
		t.Fatalf("first item error %+v", ie)
	}
}

// restic restore --json (0.17 and later): its status lines are the restore's progress, what it
// skipped counted as done, and its summary the last, remembered and said in the unit's log.
func TestRestoreJSONProgress(t *testing.T) {
	r := &Restore{Restic: Restic{Operation: OpRestore}, Target: "/srv/restore"}
	for _, tt := range []struct {
		line string
		want Progress
	}{
		{`{"message_type":"status","seconds_elapsed":2,"percent_done":0.25,"total_files":8,"files_restored":2,"total_bytes":4000,"bytes_restored":1000}`,
			Progress{PercentDone: 0.25, FilesDone: 2, TotalFiles: 8, BytesDone: 1000, TotalBytes: 4000, SecondsElapsed: 2}},
		{`{"message_type":"status","seconds_elapsed":3,"percent_done":0.25,"total_files":8,"files_restored":2,"files_skipped":2,"total_bytes":4000,"bytes_restored":1000,"bytes_skipped":1000}`,
			Progress{PercentDone: 0.5, FilesDone: 4, TotalFiles: 8, BytesDone: 2000, TotalBytes: 4000, SecondsElapsed: 3}},
		{`{"message_type":"status","percent_done":0}`, Progress{}},
		{`{"message_type":"summary","seconds_elapsed":4,"total_files":8,"files_restored":8,"total_bytes":4000,"bytes_restored":4000}`,
			Progress{PercentDone: 1, FilesDone: 8, TotalFiles: 8, BytesDone: 4000, TotalBytes: 4000, SecondsElapsed: 4}},
	} {
		ev, ok := r.ParseStdout([]byte(tt.line))
		if !ok || ev.Type != TypeProgress || ev.Payload.(Progress) != tt.want {
			t.Errorf("%s: %+v, %v; want progress %+v", tt.line, ev, ok, tt.want)
		}
	}
	for _, line := range []string{`{"message_type":"verbose_status","action":"restored","item":"/a","size":3}`,
		"restoring snapshot 25a5aaf6 of [/srv] at ... to /srv/restore"} {
		if ev, ok := r.ParseStdout([]byte(line)); ok {
			t.Errorf("%s: %+v, want nothing", line, ev)
		}
	}
	var stderr bytes.Buffer
	if _, status, _ := r.Finish(context.Background(), 0, nil, &stderr); status != 0 ||
		stderr.String() != "holdfast: restic restored 8 files of 8 (3.9 KiB of 3.9 KiB) into /srv/restore\n" {
		t.Errorf("Finish: %d, said %q", status, stderr.String())
	}
}
