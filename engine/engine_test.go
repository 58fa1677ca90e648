package engine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The files in testdata are output of restic 0.14.0 (Debian 12), captured
// with `restic backup --json` as root and as nobody; see testdata/README.

func fixtureLines(t *testing.T, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

func TestArgv(t *testing.T) {
	run := uuid.MustParse("6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a11")
	job := Job{
		Name:         "docs",
		Repository:   "/srv/restic",
		PasswordFile: "/etc/holdfast/docs.pw",
		Paths:        []string{"/data", "/-odd"},
		Excludes:     []string{"*.tmp", "-x"},
	}
	cached := job
	cached.CacheDir = "/var/cache/holdfast"
	limited := job
	limited.LimitUpload = 2048
	common := []string{"restic", "--repo", "/srv/restic", "--password-file", "/etc/holdfast/docs.pw", "--no-cache"}
	cat := func(parts ...[]string) []string {
		var all []string
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"backup", Restic{}.BackupArgv(job, run), cat(common, []string{
			"backup", "--json", "--tag", "holdfast-job=docs", "--tag", "holdfast-run=6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a11",
			"--exclude", "*.tmp", "--exclude", "-x", "--", "/data", "/-odd"})},
		{"backup with cache", Restic{Binary: "/usr/bin/restic"}.BackupArgv(cached, run), []string{
			"/usr/bin/restic", "--repo", "/srv/restic", "--password-file", "/etc/holdfast/docs.pw", "--cache-dir", "/var/cache/holdfast",
			"backup", "--json", "--tag", "holdfast-job=docs", "--tag", "holdfast-run=6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a11",
			"--exclude", "*.tmp", "--exclude", "-x", "--", "/data", "/-odd"}},
		{"unlock", Restic{}.UnlockArgv(job), cat(common, []string{"unlock"})},
		{"backup with an upload limit", Restic{}.BackupArgv(limited, run), cat(common[:len(common)-1], []string{
			"--limit-upload", "2048", "--no-cache",
			"backup", "--json", "--tag", "holdfast-job=docs", "--tag", "holdfast-run=6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a11",
			"--exclude", "*.tmp", "--exclude", "-x", "--", "/data", "/-odd"})},
		{"snapshots", Restic{}.SnapshotsArgv(job, run), cat(common, []string{
			"--no-lock", "snapshots", "--json", "--tag", "holdfast-run=6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a11"})},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestParseStdout(t *testing.T) {
	tests := []struct {
		fixture string
		line    int
		want    Event
		ok      bool
	}{
		{"ok.stdout", 0, Event{TypeProgress, Progress{FilesDone: 1}}, true},
		{"ok.stdout", 1, Event{TypeSummary, Summary{
			FilesNew: 2, FilesUnmodified: 2, DirsNew: 1, DirsChanged: 3, DirsUnmodified: 1,
			DataBlobs: 2, TreeBlobs: 5, DataAdded: 2934, TotalFilesProcessed: 4, TotalBytesProcessed: 2000011,
			TotalDuration: 0.209153709, SnapshotID: "acd0d4a4"}}, true},
		{"partial.stdout", 1, Event{TypeProgress, Progress{
			PercentDone: 0.99999850000675, FilesDone: 2, TotalFiles: 3, BytesDone: 2000006, TotalBytes: 2000009, ErrorCount: 2}}, true},
		{"partial.stdout", 2, Event{TypeSummary, Summary{
			FilesNew: 2, DirsNew: 4, DataBlobs: 3, TreeBlobs: 5, DataAdded: 2002247, TotalFilesProcessed: 2,
			TotalBytesProcessed: 2000006, TotalDuration: 0.226637487, SnapshotID: "0a36237c"}}, true},
		{"interrupted.stdout", 3, Event{TypeProgress, Progress{
			PercentDone: 0.8665078266666667, TotalFiles: 1, BytesDone: 259952348, TotalBytes: 300000000, SecondsElapsed: 2}}, true},
		{"snapshots.json", 0, Event{}, false},
		{"wrong_password.stderr", 0, Event{}, false},
	}
	for _, tt := range tests {
		line := fixtureLines(t, tt.fixture)[tt.line]
		got, ok := Restic{}.ParseStdout(line)
		if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:%d: got %#v, %v; want %#v, %v", tt.fixture, tt.line+1, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseStderr(t *testing.T) {
	fatal := func(m string) Event { return Event{TypeFatal, Fatal{m}} }
	warning := func(m string) Event { return Event{TypeWarning, Warning{m}} }
	itemError := func(item, during, m string) Event { return Event{TypeItemError, ItemError{item, during, m}} }
	tests := []struct {
		fixture string // "" for a literal line
		line    int
		literal string
		want    Event
		ok      bool
	}{
		{fixture: "partial.stderr", line: 0, want: warning("unable to open cache: mkdir /nonexistent: permission denied"), ok: true},
		{fixture: "partial.stderr", line: 1, want: itemError("/tmp/hf/data/private", "scan", "restic gave no details"), ok: true},
		{fixture: "partial.stderr", line: 2, want: itemError("/tmp/hf/data/c", "archival", "open /tmp/hf/data/c: permission denied"), ok: true},
		{fixture: "partial.stderr", line: 4, want: warning("Warning: at least one source file could not be read"), ok: true},
		{fixture: "wrong_password.stderr", line: 0, want: fatal("Fatal: wrong password or no key found"), ok: true},
		{fixture: "no_repository.stderr", line: 0, want: fatal("Fatal: unable to open config file: stat /tmp/hf/nope/config: no such file or directory"), ok: true},
		{fixture: "no_password_file.stderr", line: 0, want: fatal("Resolving password failed: Fatal: /tmp/hf/nopw does not exist"), ok: true},
		{fixture: "no_paths.stderr", line: 1, want: fatal("Fatal: all target directories/files do not exist"), ok: true},
		{fixture: "locked.stderr", line: 0, want: fatal("unable to create lock in backend: repository is already locked exclusively by PID 12349 on vm by root (UID 0, GID 0)"), ok: true},
		{fixture: "missing_path.stderr", line: 0, want: itemError("/tmp/hf/missing", "target", "does not exist"), ok: true},
		{fixture: "interrupted.stderr", line: 0, want: warning("signal interrupt received, cleaning up"), ok: true},
		{fixture: "repository_unreadable.stderr", line: 10, want: warning("Error loading snapshot d91d8f40: open /tmp/rx/repo/snapshots/d91d8f4073be4552d85f8555c5c41327e39ec4217f448a07de4f2208b055c7c7: permission denied"), ok: true},
		{fixture: "repository_unreadable.stderr", line: 11},
		{fixture: "repository_unreadable.stderr", line: 12},
		{fixture: "repository_unreadable.stderr", line: 15},
		{fixture: "repository_unreadable.stderr", line: 16},
		// Later restic versions write the message itself.
		{literal: `{"message_type":"error","error":{"message":"open /d/x: permission denied"},"during":"archival","item":"/d/x"}`,
			want: itemError("/d/x", "archival", "open /d/x: permission denied"), ok: true},
		{literal: `{"message_type":"error","error":{"Op":"lstat","Path":"/d/y","Err":2},"during":"scan","item":"/d/y"}`,
			want: itemError("/d/y", "scan", "lstat /d/y: no such file or directory"), ok: true},
		{literal: `Ignoring "4c791751d384": no matching ID found for prefix "4c791751d384"`,
			want: itemError("4c791751d384", "forget", "no such snapshot in the repository"), ok: true},
		{literal: `Ignoring "4c791751", could not load snapshot: unexpected EOF`,
			want: itemError("4c791751", "forget", "could not load snapshot: unexpected EOF"), ok: true},
		// restic 0.18 and later end with their final error as JSON (captured from 0.18.1).
		{literal: `{"message_type":"exit_error","code":10,"message":"Fatal: repository does not exist: unable to open config file: stat /r/config: no such file or directory\nIs there a repository at the following location?\n/r"}`,
			want: fatal("Fatal: repository does not exist: unable to open config file: stat /r/config: no such file or directory\nIs there a repository at the following location?\n/r"), ok: true},
		{literal: `{"message_type":"exit_error","code":1,"message":"Fatal: Resolving password failed: Fatal: /nonexist does not exist\n"}`,
			want: fatal("Fatal: Resolving password failed: Fatal: /nonexist does not exist"), ok: true},
		{literal: `{"message_type":"exit_error","code":1,"message":"Fatal: all source directories/files do not exist"}`,
			want: fatal("Fatal: all source directories/files do not exist"), ok: true},
		// restic 0.16.4's forget of a snapshot gone from the repository but still in its cache.
		{literal: "unable to remove <snapshot/510bb8c780> from the repository",
			want: itemError("510bb8c780", "forget", "could not be removed: gone already, or the repository refused (an append-only server)"), ok: true},
		{literal: "github.com/cenkalti/backoff/v4.doRetryNotify[...]"},
		{literal: `{"message_type":"verbose_status","action":"new","item":"/d/z"}`},
		{literal: `{"message_type":"error","error":{},"during":`}, // cut at 1 MiB
		{literal: "   "},
	}
	for _, tt := range tests {
		line := []byte(tt.literal)
		name := tt.literal
		if tt.fixture != "" {
			line = fixtureLines(t, tt.fixture)[tt.line]
			name = fmt.Sprintf("%s:%d", tt.fixture, tt.line+1)
		}
		got, ok := Restic{}.ParseStderr(line)
		if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %#v, %v; want %#v, %v", name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestItemErrorString(t *testing.T) {
	tests := []struct {
		e    ItemError
		want string
	}{
		{ItemError{"/d/c", "archival", "open /d/c: permission denied"}, "open /d/c: permission denied"},
		{ItemError{"/d/p", "scan", "restic gave no details"}, "/d/p: restic gave no details"},
	}
	for _, tt := range tests {
		if got := tt.e.String(); got != tt.want {
			t.Errorf("%+v: got %q, want %q", tt.e, got, tt.want)
		}
	}
}

func TestClassify(t *testing.T) {
	sum := &Summary{SnapshotID: "4b925b96", TotalFilesProcessed: 2, DataAdded: 2003000}
	noRepo := "Fatal: unable to open config file: stat /x/config: no such file or directory\nIs there a repository at the following location?\n/x"
	locked := strings.Join([]string{
		"unable to create lock in backend: repository is already locked exclusively by PID 12349 on vm by root (UID 0, GID 0)",
		"lock was created at 2026-11-29 23:21:05 (518.098304ms ago)",
		"storage ID 3de14a51",
		"the `unlock` command can be used to remove stale locks"}, "\n")
	unreachable := "Fatal: unable to open config file: client.Head: Head \"http://127.0.0.1:1/config\": dial tcp 127.0.0.1:1: connect: connection refused\nIs there a repository at the following location?\nrest:http://127.0.0.1:1/"
	tests := []struct {
		name string
		ev   Evidence
		want Outcome
	}{
		{"success", Evidence{ExitStatus: 0, Summary: sum},
			Outcome{Succeeded, "", "backup complete: snapshot 4b925b96, 2 files, 1.9 MiB added"}},
		{"success without summary", Evidence{ExitStatus: 0},
			Outcome{Succeeded, "", "backup complete, but no summary was recorded"}},
		{"forget", Evidence{ExitStatus: 0, Operation: "forget"}, Outcome{Succeeded, "", "forget complete"}},
		{"forget of a vanished id", Evidence{ExitStatus: 0, Operation: "forget", ItemErrors: 1, FirstItemError: "4c791751: no such snapshot"},
			Outcome{Partial, "", "partial: forget: 1 item not done, first: 4c791751: no such snapshot"}},
		{"forget of a vanished id, 0.16", Evidence{ExitStatus: 1, Operation: "forget", ItemErrors: 1,
			FirstItemError: "510bb8c780: could not be removed: gone already, or the repository refused (an append-only server)", Fatal: "chmod /r/snapshots/510bb8c780: no such file or directory"},
			Outcome{Partial, "", "partial: forget: 1 item not done, first: 510bb8c780: could not be removed: gone already, or the repository refused (an append-only server)"}},
		{"exit 0 with a skipped path", Evidence{ExitStatus: 0, Summary: sum, ItemErrors: 1, FirstItemError: "/data/gone: does not exist"},
			Outcome{Partial, "", "partial: 1 item skipped, first: /data/gone: does not exist (snapshot 4b925b96)"}},
		{"partial", Evidence{ExitStatus: 3, Summary: sum, ItemErrors: 1, FirstItemError: "/data/c: permission denied"},
			Outcome{Partial, "", "partial: 1 item skipped, first: /data/c: permission denied (snapshot 4b925b96)"}},
		{"partial, items not journaled", Evidence{ExitStatus: 3},
			Outcome{Partial, "", "partial: restic could not read some source data (no summary recorded)"}},
		{"partial, three errors", Evidence{ExitStatus: 3, Summary: sum, ItemErrors: 3, FirstItemError: "open /d/c: permission denied"},
			Outcome{Partial, "", "partial: 3 items skipped, first: open /d/c: permission denied (snapshot 4b925b96)"}},
		{"sigint", Evidence{ExitStatus: 130, Fatal: ""},
			Outcome{Interrupted, "", "interrupted: restic was stopped with SIGINT (exit status 130)"}},
		{"sigterm", Evidence{ExitStatus: 143},
			Outcome{Interrupted, "", "interrupted: restic was killed by SIGTERM (exit status 143) and may have left a stale lock"}},
		{"sighup", Evidence{ExitStatus: 129},
			Outcome{Interrupted, "", "interrupted: restic was killed by SIGHUP (exit status 129) and may have left a stale lock"}},
		{"sigkill", Evidence{ExitStatus: 137},
			Outcome{Failed, "", "restic was killed by SIGKILL (exit status 137)"}},
		{"wrong password", Evidence{ExitStatus: 1, Fatal: "Fatal: wrong password or no key found"},
			Outcome{Failed, Permanent, "repository password is wrong (restic: Fatal: wrong password or no key found)"}},
		{"exit 12", Evidence{ExitStatus: 12},
			Outcome{Failed, Permanent, "repository password is wrong (restic exit status 12)"}},
		{"no password file", Evidence{ExitStatus: 1, Fatal: "Resolving password failed: Fatal: /etc/pw does not exist"},
			Outcome{Failed, Permanent, "the repository password could not be read (restic: Resolving password failed: Fatal: /etc/pw does not exist)"}},
		{"no repository", Evidence{ExitStatus: 1, Fatal: noRepo},
			Outcome{Failed, Permanent, "no repository at /x (restic: Fatal: unable to open config file: stat /x/config: no such file or directory)"}},
		{"exit 10", Evidence{ExitStatus: 10, Fatal: "Fatal: repository does not exist: unable to open config file: stat /x/config: no such file or directory\nIs there a repository at the following location?\n/x"},
			Outcome{Failed, Permanent, "no repository at /x (restic: Fatal: repository does not exist: unable to open config file: stat /x/config: no such file or directory)"}},
		{"exit 10 without message", Evidence{ExitStatus: 10},
			Outcome{Failed, Permanent, "no repository at the configured location (restic exit status 10)"}},
		{"repository unreachable", Evidence{ExitStatus: 1, Fatal: unreachable},
			Outcome{Failed, Transient, "repository is unreachable (restic: " + firstLine(unreachable) + ")"}},
		{"locked", Evidence{ExitStatus: 1, Fatal: locked},
			Outcome{Failed, Transient, "repository is locked by another process (restic: " + firstLine(locked) + ")"}},
		{"exit 11", Evidence{ExitStatus: 11},
			Outcome{Failed, Transient, "repository is locked by another process (restic exit status 11)"}},
		{"no paths exist", Evidence{ExitStatus: 1, Fatal: "Fatal: all target directories/files do not exist"},
			Outcome{Failed, Permanent, "none of the paths to back up exist (restic: Fatal: all target directories/files do not exist)"}},
		{"no paths exist, 0.18", Evidence{ExitStatus: 1, Fatal: "Fatal: all source directories/files do not exist"},
			Outcome{Failed, Permanent, "none of the paths to back up exist (restic: Fatal: all source directories/files do not exist)"}},
		{"no password file, 0.18", Evidence{ExitStatus: 1, Fatal: "Fatal: Resolving password failed: Fatal: /etc/pw does not exist"},
			Outcome{Failed, Permanent, "the repository password could not be read (restic: Fatal: Resolving password failed: Fatal: /etc/pw does not exist)"}},
		{"no paths, 0.18", Evidence{ExitStatus: 1, Fatal: "Fatal: nothing to backup, please specify source files/dirs"},
			Outcome{Failed, Permanent, "no paths to back up (restic: Fatal: nothing to backup, please specify source files/dirs)"}},
		{"no paths", Evidence{ExitStatus: 1, Fatal: "Fatal: nothing to backup, please specify target files/dirs"},
			Outcome{Failed, Permanent, "no paths to back up (restic: Fatal: nothing to backup, please specify target files/dirs)"}},
		{"other fatal", Evidence{ExitStatus: 1, Fatal: "Fatal: unable to save snapshot: disk full"},
			Outcome{Failed, Transient, "restic failed: Fatal: unable to save snapshot: disk full"}},
		{"unexpected error", Evidence{ExitStatus: 1, Fatal: "Error loading snapshot d91d8f40: open /r/snapshots/d91d: permission denied"},
			Outcome{Failed, Transient, "restic failed: Error loading snapshot d91d8f40: open /r/snapshots/d91d: permission denied"}},
		{"exit 1 in silence", Evidence{ExitStatus: 1},
			Outcome{Failed, Transient, "restic failed without an error message (restic exit status 1)"}},
		{"unknown status", Evidence{ExitStatus: 2, Fatal: "Fatal: unknown flag"},
			Outcome{Failed, "", "restic exited with status 2: Fatal: unknown flag"}},
		{"not started", Evidence{ExitStatus: 127},
			Outcome{Failed, "", "restic exited with status 127"}},
	}
	for _, tt := range tests {
		if got := (Restic{}).Classify(tt.ev); got != tt.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

func TestCommandClassify(t *testing.T) {
	tests := []struct {
		ev   Evidence
		want Outcome
	}{
		{Evidence{ExitStatus: 0}, Outcome{Succeeded, "", "command exited with status 0"}},
		{Evidence{ExitStatus: 1}, Outcome{Failed, "", "command exited with status 1"}},
		{Evidence{ExitStatus: 3, ItemErrors: 2}, Outcome{Failed, "", "command exited with status 3"}},
		{Evidence{ExitStatus: 130}, Outcome{Interrupted, "", "interrupted: command ended by SIGINT (exit status 130)"}},
		{Evidence{ExitStatus: 143}, Outcome{Interrupted, "", "interrupted: command ended by SIGTERM (exit status 143)"}},
		{Evidence{ExitStatus: 137}, Outcome{Failed, "", "command was killed by SIGKILL (exit status 137)"}},
	}
	for _, tt := range tests {
		if got := (Command{}).Classify(tt.ev); got != tt.want {
			t.Errorf("%+v:\n got %+v\nwant %+v", tt.ev, got, tt.want)
		}
	}
	if _, ok := (Command{}).ParseStdout([]byte(`{"message_type":"summary"}`)); ok {
		t.Error("Command.ParseStdout reported an event")
	}
	if _, ok := (Command{}).ParseStderr([]byte("Fatal: x")); ok {
		t.Error("Command.ParseStderr reported an event")
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{2003000, "1.9 MiB"},
		{1024*1024 - 1, "1.0 MiB"},
		{5 << 30, "5.0 GiB"},
		{3 << 40, "3.0 TiB"},
		{1 << 62, "4.0 EiB"},
	}
	for _, tt := range tests {
		if got := FormatBytes(tt.n); got != tt.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestParseSnapshots(t *testing.T) {
	id := strings.Repeat("4c", 32)
	snaps, err := ParseSnapshots([]byte(`[{"time":"2021-01-04T10:00:00Z","hostname":"h1","tags":["holdfast-job=a"],"paths":["/d"],"id":"` + id + `","short_id":"4c4c4c4c"}]`))
	if err != nil || len(snaps) != 1 || snaps[0].ID != id || snaps[0].Hostname != "h1" || snaps[0].ShortID != "4c4c4c4c" {
		t.Fatalf("ParseSnapshots = %+v, %v", snaps, err)
	}
	// restic 0.17 and later keep what the backup did in the snapshot.
	withSummary := `[{"time":"2026-12-01T03:00:00.25Z","hostname":"h1","id":"` + id + `","summary":{"backup_start":"2026-12-01T03:00:00.25Z",` +
		`"backup_end":"2026-12-01T03:02:00Z","files_new":3,"data_added":4096,"total_files_processed":10,"total_bytes_processed":8192}}]`
	snaps, err = ParseSnapshots([]byte(withSummary))
	if err != nil || len(snaps) != 1 || snaps[0].Summary == nil || snaps[0].Summary.DataAdded != 4096 || snaps[0].Summary.TotalFilesProcessed != 10 ||
		snaps[0].Summary.TotalBytesProcessed != 8192 || !snaps[0].Summary.BackupEnd.Equal(time.Date(2026, 12, 1, 3, 2, 0, 0, time.UTC)) {
		t.Fatalf("ParseSnapshots with a summary = %+v, %v", snaps, err)
	}
	for in, want := range map[string]string{
		`{}`:                                "not the JSON array",
		`[{"id":"abc"}]`:                    `entry 1: id "abc" is not a full restic id`,
		`[{"id":"` + id + `"}]`:             "snapshot 4c4c4c4c has no time",
		`[{"group_key":{},"snapshots":[]}]`: "entry 1 is a group",
	} {
		if _, err := ParseSnapshots([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSnapshots(%s) = %v, want an error with %q", in, err, want)
		}
	}
}

// FuzzParseSnapshots: a listing is taken whole or refused, never in part; every snapshot taken
// has a full id and a time.
func FuzzParseSnapshots(f *testing.F) {
	id := strings.Repeat("4c", 32)
	f.Add([]byte(`[{"time":"2021-01-04T10:00:00Z","hostname":"h1","tags":["holdfast-job=a","holdfast-run=x"],"paths":["/d"],"id":"` + id + `"}]`))
	f.Add([]byte(`[{"time":"2026-12-01T03:00:00Z","id":"` + id + `","summary":{"backup_start":"2026-12-01T03:00:00Z","backup_end":"2026-12-01T03:01:00Z","data_added":1}}]`))
	f.Add([]byte(`[{"group_key":{},"snapshots":[]}]`))
	f.Add([]byte(`[null]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		snaps, err := ParseSnapshots(data)
		if err != nil {
			if snaps != nil {
				t.Fatalf("an error (%v) with %d snapshots", err, len(snaps))
			}
			return
		}
		for _, s := range snaps {
			if !fullID().MatchString(s.ID) || s.Time.IsZero() {
				t.Fatalf("took a snapshot without a full id or a time: %+v", s)
			}
		}
	})
}

// A query that skipped a snapshot it could not load is no answer: restic 0.16.4's words, captured
// with its cache's snapshots/ linked to a directory the job's user cannot write.
func TestQueryPartial(t *testing.T) {
	skipped := "Load(<snapshot/a2ddc21778>, 0, 0) returned error, retrying after 19.2s: mkdir /c/snapshots/a2: permission denied\n" +
		`Ignoring "a2ddc2177844a8c762a7c289507898a667fe97343bb39126e2a7540cb288a408": failed to load snapshot a2ddc217: mkdir /c/snapshots/a2: permission denied` + "\n"
	err := QueryPartial([]byte(skipped))
	if err == nil || !strings.Contains(err.Error(), "restic left out snapshot a2ddc217, which it could not load (failed to load snapshot a2ddc217: mkdir /c/snapshots/a2: permission denied)") {
		t.Errorf("QueryPartial = %v", err)
	}
	for _, whole := range []string{"", "unable to open cache: mkdir /nonexistent: permission denied\n", "Ignoring nothing\n"} {
		if err := QueryPartial([]byte(whole)); err != nil {
			t.Errorf("QueryPartial(%q) = %v, want nil", whole, err)
		}
	}
}
