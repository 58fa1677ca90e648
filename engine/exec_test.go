package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/testenv"
)

// recorder is an Emit that keeps the events, as the run journal would.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) emit(typ string, payload any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{typ, payload})
	return nil
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

func (r *recorder) of(typ string) []Event {
	var evs []Event
	for _, ev := range r.all() {
		if ev.Type == typ {
			evs = append(evs, ev)
		}
	}
	return evs
}

// evidence projects the events the way the daemon does.
func (r *recorder) evidence(status int) Evidence {
	ev := Evidence{ExitStatus: status}
	for _, e := range r.all() {
		switch p := e.Payload.(type) {
		case Summary:
			ev.Summary = &p
		case ItemError:
			if ev.ItemErrors == 0 {
				ev.FirstItemError = p.String()
			}
			ev.ItemErrors++
		case Fatal:
			if ev.Fatal == "" {
				ev.Fatal = p.Message
			}
		}
	}
	return ev
}

// checkExit checks that the last event is "exit" with the given payload.
func checkExit(t *testing.T, rec *recorder, want Exit) {
	t.Helper()
	evs := rec.all()
	if len(evs) == 0 || !eventIs(evs[len(evs)-1], TypeExit, want) {
		t.Errorf("last event is not %+v: %+v", want, evs)
	}
	if n := len(rec.of(TypeExit)); n != 1 {
		t.Errorf("%d exit events, want 1", n)
	}
}

func eventIs(ev Event, typ string, payload any) bool {
	return ev.Type == typ && ev.Payload == payload
}

// replay runs sh to print two fixtures as an engine would and exit.
func replay(stdout, stderr string, status int) []string {
	path := func(name string) string {
		if name == "" {
			return "/dev/null"
		}
		return filepath.Join("testdata", name)
	}
	return []string{"sh", "-c", `cat "$1"; cat "$2" >&2; exit "$3"`, "sh", path(stdout), path(stderr), strconv.Itoa(status)}
}

func TestExecReplay(t *testing.T) {
	tests := []struct {
		name           string
		stdout, stderr string
		status         int
		counts         map[string]int
		fatal          string
		outcome        Outcome
	}{
		{
			name: "partial", stdout: "partial.stdout", stderr: "partial.stderr", status: 3,
			counts:  map[string]int{TypeProgress: 2, TypeItemError: 3, TypeWarning: 2, TypeSummary: 1, TypeFatal: 0},
			outcome: Outcome{Partial, "", "partial: 3 items skipped, first: /tmp/hf/data/private: restic gave no details (snapshot 0a36237c)"},
		},
		{
			name: "missing path", stdout: "ok.stdout", stderr: "missing_path.stderr", status: 0,
			counts:  map[string]int{TypeItemError: 1, TypeSummary: 1},
			outcome: Outcome{Partial, "", "partial: 1 item skipped, first: /tmp/hf/missing: does not exist (snapshot acd0d4a4)"},
		},
		{
			name: "no repository", stderr: "no_repository.stderr", status: 1,
			counts: map[string]int{TypeFatal: 1, TypeWarning: 0},
			fatal:  "Fatal: unable to open config file: stat /tmp/hf/nope/config: no such file or directory\nIs there a repository at the following location?\n/tmp/hf/nope",
			outcome: Outcome{Failed, Permanent,
				"no repository at /tmp/hf/nope (restic: Fatal: unable to open config file: stat /tmp/hf/nope/config: no such file or directory)"},
		},
		{
			name: "locked", stderr: "locked.stderr", status: 1,
			counts: map[string]int{TypeFatal: 1, TypeWarning: 0},
			fatal: "unable to create lock in backend: repository is already locked exclusively by PID 12349 on vm by root (UID 0, GID 0)\n" +
				"lock was created at 2026-11-29 23:21:05 (518.098304ms ago)\nstorage ID 3de14a51\nthe `unlock` command can be used to remove stale locks",
			outcome: Outcome{Failed, Transient,
				"repository is locked by another process (restic: unable to create lock in backend: repository is already locked exclusively by PID 12349 on vm by root (UID 0, GID 0))"},
		},
		{
			name: "unexpected error", stderr: "repository_unreadable.stderr", status: 1,
			counts: map[string]int{TypeFatal: 1, TypeWarning: 11},
			fatal:  "Error loading snapshot d91d8f40: open /tmp/rx/repo/snapshots/d91d8f4073be4552d85f8555c5c41327e39ec4217f448a07de4f2208b055c7c7: permission denied",
			outcome: Outcome{Failed, Transient,
				"restic failed: Error loading snapshot d91d8f40: open /tmp/rx/repo/snapshots/d91d8f4073be4552d85f8555c5c41327e39ec4217f448a07de4f2208b055c7c7: permission denied"},
		},
		{
			name: "interrupted", stdout: "interrupted.stdout", stderr: "interrupted.stderr", status: 130,
			counts:  map[string]int{TypeProgress: 2, TypeWarning: 1, TypeSummary: 0, TypeFatal: 0},
			outcome: Outcome{Interrupted, "", "interrupted: restic was stopped with SIGINT (exit status 130)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var rec recorder
			var stderr bytes.Buffer
			status, err := Exec(context.Background(), ExecConfig{
				Argv: replay(tt.stdout, tt.stderr, tt.status), Parser: Restic{}, Emit: rec.emit, Stderr: &stderr,
			})
			if err != nil || status != tt.status {
				t.Fatalf("Exec = %d, %v; want %d", status, err, tt.status)
			}
			checkExit(t, &rec, Exit{ExitStatus: tt.status})
			for typ, n := range tt.counts {
				if got := len(rec.of(typ)); got != n {
					t.Errorf("%d %s events, want %d: %+v", got, typ, n, rec.all())
				}
			}
			if tt.fatal != "" {
				if got := rec.evidence(status).Fatal; got != tt.fatal {
					t.Errorf("fatal:\n got %q\nwant %q", got, tt.fatal)
				}
			}
			if got := (Restic{}).Classify(rec.evidence(status)); got != tt.outcome {
				t.Errorf("outcome:\n got %+v\nwant %+v", got, tt.outcome)
			}
			if tt.stderr != "" {
				want, _ := os.ReadFile(filepath.Join("testdata", tt.stderr))
				if !bytes.Equal(stderr.Bytes(), want) {
					t.Errorf("stderr copy:\n got %q\nwant %q", stderr.Bytes(), want)
				}
			}
		})
	}
}

func TestExecThrottlesProgress(t *testing.T) {
	script := `i=0
while [ $i -lt 500 ]; do echo "{\"message_type\":\"status\",\"files_done\":$i}"; i=$((i+1)); done
echo '{"message_type":"status","files_done":500}'
echo '{"message_type":"summary","snapshot_id":"0a36237c"}'`
	var rec recorder
	start := time.Now()
	status, err := Exec(context.Background(), ExecConfig{Argv: []string{"sh", "-c", script}, Parser: Restic{}, Emit: rec.emit})
	if err != nil || status != 0 {
		t.Fatalf("Exec = %d, %v", status, err)
	}
	took := time.Since(start)
	evs := rec.all()
	progress := rec.of(TypeProgress)
	// The first at once, then one an interval at most, then the one held back before the summary.
	if most := 2 + int(took/progressEvery); len(progress) < 2 || len(progress) > most {
		t.Errorf("%d progress events for 501 status lines in %s, want 2 to %d", len(progress), took, most)
	}
	if len(evs) < 3 || !eventIs(evs[len(evs)-3], TypeProgress, Progress{FilesDone: 500}) ||
		!eventIs(evs[len(evs)-2], TypeSummary, Summary{SnapshotID: "0a36237c"}) {
		t.Errorf("the last progress does not come right before the summary: %+v", evs)
	}
}

func TestExecLongLines(t *testing.T) {
	script := `head -c 3000000 /dev/zero | tr '\0' x; echo
echo '{"message_type":"summary","snapshot_id":"0a36237c"}'
head -c 2000000 /dev/zero | tr '\0' y >&2; echo >&2
echo 'Fatal: wrong password or no key found' >&2
exit 1`
	var rec recorder
	var stdout, stderr bytes.Buffer
	status, err := Exec(context.Background(), ExecConfig{
		Argv: []string{"sh", "-c", script}, Parser: Restic{}, Emit: rec.emit, Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil || status != 1 {
		t.Fatalf("Exec = %d, %v", status, err)
	}
	if want := strings.Repeat("x", maxLine) + "\n"; stdout.String() != want {
		t.Errorf("stdout copy has %d bytes, want %d", stdout.Len(), len(want))
	}
	if want := strings.Repeat("y", maxLine) + "\nFatal: wrong password or no key found\n"; stderr.String() != want {
		t.Errorf("stderr copy has %d bytes, want %d", stderr.Len(), len(want))
	}
	if len(rec.of(TypeSummary)) != 1 {
		t.Errorf("summary after a long line is lost: %v", rec.of(TypeSummary))
	}
	if got := rec.evidence(status).Fatal; got != "Fatal: wrong password or no key found" {
		t.Errorf("fatal after a long line: %q", got)
	}
	for _, w := range rec.of(TypeWarning) {
		if n := len(w.Payload.(Warning).Message); n > 5000 {
			t.Errorf("warning of %d bytes", n)
		}
	}
}

func TestExecKilledBySignal(t *testing.T) {
	var rec recorder
	status, err := Exec(context.Background(), ExecConfig{Argv: []string{"sh", "-c", "kill -KILL $$"}, Emit: rec.emit})
	if err != nil || status != 137 {
		t.Fatalf("Exec = %d, %v; want 137", status, err)
	}
	checkExit(t, &rec, Exit{ExitStatus: 137, Signal: "SIGKILL"})
}

// The end of ctx is passed on to the engine as SIGINT: the engine ends by it (130, SIGINT), long
// before its own end, which would outlast the test.
func TestExecContextEndSendsSIGINT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var rec recorder
	status, err := Exec(ctx, ExecConfig{Argv: []string{"sleep", "1000"}, Emit: rec.emit})
	if err != nil || status != 130 {
		t.Fatalf("Exec = %d, %v; want 130", status, err)
	}
	checkExit(t, &rec, Exit{ExitStatus: 130, Signal: "SIGINT"})
}

// A stop passed on ends the attempt as interrupted whatever the engine makes of its SIGINT: an
// engine that exits 1 on it (restic 0.17 and 0.18), one that exits 3 on it without a summary,
// one that ignores it (restic waiting on its rate limiter, or on stdin) and is killed after the
// grace. The exit event keeps how the engine itself ended; one that made its snapshot keeps its
// status. A job's own command (the Command engine, no StopGracer) is not killed after a grace: it
// may clean up as long as it needs (systemd's stop timeout bounds it).
func TestExecStopEndsAsInterrupted(t *testing.T) {
	tests := []struct {
		name    string
		onInt   string // the shell's SIGINT trap
		summary bool   // the engine makes a snapshot before the stop
		parser  Parser
		grace   time.Duration
		want    Exit
		killed  bool
	}{
		{name: "exits 1", onInt: "exit 1", parser: Restic{}, grace: 300 * time.Millisecond, want: Exit{ExitStatus: 130, EngineStatus: 1}},
		{name: "exits 3", onInt: "exit 3", parser: Restic{}, grace: 300 * time.Millisecond, want: Exit{ExitStatus: 130, EngineStatus: 3}},
		{name: "ignores it", onInt: "", parser: Restic{}, grace: 300 * time.Millisecond,
			want: Exit{ExitStatus: 130, EngineStatus: 137, EngineSignal: "SIGKILL"}, killed: true},
		{name: "made its snapshot", onInt: "exit 3", summary: true, parser: Restic{}, grace: 300 * time.Millisecond, want: Exit{ExitStatus: 3}},
		// It cleans up for about 1.5 s after the SIGINT, longer than restic's grace.
		{name: "a command cleans up", onInt: "j=0; while [ $j -lt 15 ]; do sleep 0.1; j=$((j+1)); done; exit 4", parser: Command{},
			want: Exit{ExitStatus: 130, EngineStatus: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			print := "echo ready"
			if tt.summary {
				print = `echo '{"message_type":"summary","snapshot_id":"abc"}'`
			}
			// The loop runs in the shell itself, so that a SIGKILL ends every process of it.
			script := fmt.Sprintf(`trap '%s' INT; %s; i=0; while [ $i -lt 20000000 ]; do i=$((i+1)); done`, tt.onInt, print)
			out := &lines{ch: make(chan string, 8)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var rec recorder
			done := make(chan int, 1)
			go func() {
				status, err := Exec(ctx, ExecConfig{Argv: []string{"sh", "-c", script}, Parser: tt.parser, Emit: rec.emit,
					Stdout: out, StopGrace: tt.grace})
				if err != nil {
					t.Errorf("Exec: %v", err)
				}
				done <- status
			}()
			if !tt.summary {
				out.await(t, "ready", "the engine did not start")
			} else {
				for deadline := time.Now().Add(30 * time.Second); len(rec.of(TypeSummary)) == 0; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("no summary event 30 s after the start")
					}
				}
			}
			cancel()
			var status int
			select {
			case status = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the engine outlived its stop")
			}
			if status != tt.want.ExitStatus {
				t.Errorf("Exec = %d, want %d", status, tt.want.ExitStatus)
			}
			checkExit(t, &rec, tt.want)
			warned := false
			for _, ev := range rec.of(TypeWarning) {
				warned = warned || ev.Payload == Warning{Message: "sh did not exit within 300ms of its SIGINT: holdfast killed it"}
			}
			if warned != tt.killed {
				t.Errorf("a warning that it was killed: %v, want %v: %+v", warned, tt.killed, rec.of(TypeWarning))
			}
		})
	}
}

// A stop that came before the start (the context ended already) starts nothing: the run ends
// as one SIGINT ended at once. RunBefore, likewise, runs nothing.
func TestExecStoppedBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	started := filepath.Join(t.TempDir(), "started")
	var rec recorder
	status, err := Exec(ctx, ExecConfig{Argv: []string{"touch", started}, Emit: rec.emit})
	if err != nil || status != 130 {
		t.Fatalf("Exec = %d, %v; want 130", status, err)
	}
	checkExit(t, &rec, Exit{ExitStatus: 130, Signal: "SIGINT"})
	if status, stopped := RunBefore(ctx, []string{"touch", started}, nil); !stopped || status != 130 {
		t.Fatalf("RunBefore = %d, %v; want 130, stopped", status, stopped)
	}
	if _, err := os.Stat(started); !os.IsNotExist(err) {
		t.Fatalf("the command ran after the stop: %v", err)
	}
}

// The end of ctx while the command before the engine runs is passed on to it as SIGINT: it ends
// by it (130), long before its own end, which would outlast the test.
func TestRunBeforeContextEndSendsSIGINT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if status, stopped := RunBefore(ctx, []string{"sleep", "1000"}, nil); !stopped || status != 130 {
		t.Fatalf("RunBefore = %d, %v; want 130, stopped", status, stopped)
	}
}

// notifier is a Writer that closes ch at the first write.
// lines hands on each line written to it.
type lines struct {
	mu   sync.Mutex
	part []byte
	ch   chan string
}

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, b...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			return len(b), nil
		}
		l.ch <- string(l.part[:i])
		l.part = l.part[i+1:]
	}
}

func (l *lines) await(t *testing.T, want, what string) {
	t.Helper()
	select {
	case got := <-l.ch:
		if got != want {
			t.Fatalf("the command printed %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

func TestExecForwardsSignals(t *testing.T) {
	// The shell counts SIGINTs aloud and exits 5 after the second. Each signal is sent once
	// the one before was counted: two at once may reach the shell as one. It gives up after
	// 30s, so a failed run leaves no shell behind.
	script := `n=0; i=0; trap 'n=$((n+1)); echo "got $n"' INT; echo ready
while [ $n -lt 2 ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; [ $n -ge 2 ] && exit 5; exit 9`
	out := &lines{ch: make(chan string, 8)}
	var rec recorder
	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		status, err := Exec(context.Background(), ExecConfig{Argv: []string{"sh", "-c", script}, Emit: rec.emit, Stdout: out, StopGrace: time.Minute})
		done <- result{status, err}
	}()
	out.await(t, "ready", "the command did not start")
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	out.await(t, "got 1", "SIGTERM did not reach the command as a SIGINT")
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	out.await(t, "got 2", "SIGINT did not reach the command")
	select {
	case r := <-done:
		if r.err != nil || r.status != 130 {
			t.Fatalf("Exec = %d, %v; want 130: a stop ended it", r.status, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not exit after two SIGINTs")
	}
	checkExit(t, &rec, Exit{ExitStatus: 130, EngineStatus: 5})
}

func TestExecNotStarted(t *testing.T) {
	var rec recorder
	status, err := Exec(context.Background(), ExecConfig{Argv: []string{"/nonexistent/restic", "version"}, Emit: rec.emit})
	if err == nil || status != -1 {
		t.Fatalf("Exec = %d, %v; want -1 and an error", status, err)
	}
	if evs := rec.all(); len(evs) != 0 {
		t.Errorf("events from a command that did not start: %+v", evs)
	}
	if _, err := Exec(context.Background(), ExecConfig{}); err == nil {
		t.Error("Exec without a command line succeeded")
	}
}

// The child exits while a background process keeps its stdout open: Exec returns the child's
// status without waiting for the background process, which is still alive when it returns (it
// would outlast the test).
func TestExecLeftBehindProcess(t *testing.T) {
	var stdout bytes.Buffer
	status, err := Exec(context.Background(), ExecConfig{
		Argv: []string{"sh", "-c", "sleep 1000 & echo $!; exit 7"}, Stdout: &stdout,
	})
	pid, perr := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if perr != nil {
		t.Fatalf("no pid of the background process: %q", stdout.String())
	}
	alive := syscall.Kill(pid, 0) == nil
	syscall.Kill(pid, syscall.SIGKILL)
	if err != nil || status != 7 {
		t.Fatalf("Exec = %d, %v; want 7", status, err)
	}
	if !alive {
		t.Fatalf("the background process %d was gone when Exec returned: Exec waited for it", pid)
	}
}

func TestExecEmitError(t *testing.T) {
	errJournal := errors.New("journal is full")
	calls := 0
	var stderr bytes.Buffer
	status, err := Exec(context.Background(), ExecConfig{
		Argv:   []string{"sh", "-c", `echo '{"message_type":"status"}'; sleep 0.1; echo '{"message_type":"summary"}'; exit 3`},
		Parser: Restic{},
		Emit:   func(string, any) error { calls++; return errJournal },
		Stderr: &stderr,
	})
	if status != 3 || !errors.Is(err, errJournal) {
		t.Fatalf("Exec = %d, %v; want 3 and the journal's error", status, err)
	}
	if calls != 1 {
		t.Errorf("Emit called %d times after failing", calls)
	}
	if !strings.Contains(stderr.String(), "journal is full") {
		t.Errorf("the failure is not on stderr: %q", stderr.String())
	}
}

// The integration tests below run the real restic.

// resticTraits is what the restic the tests run does differently (testenv.Restic).
func resticTraits(t *testing.T) ResticTraits {
	t.Helper()
	v, err := ResticVersionOf(context.Background(), testenv.Restic(t))
	if err != nil {
		t.Fatal(err)
	}
	return v.Traits()
}

// newRepo puts a fresh repository and its password file into dir.
func newRepo(t *testing.T, dir string) Job {
	t.Helper()
	testenv.Restic(t)
	pw := filepath.Join(dir, "password")
	if err := os.WriteFile(pw, []byte(testenv.ResticPassword+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.ResticRepo(t, filepath.Join(dir, "repo"))
	return Job{Name: "docs", Repository: filepath.Join(dir, "repo"), PasswordFile: pw}
}

func writeRandom(t *testing.T, path string, size int64) {
	t.Helper()
	src, err := os.Open("/dev/urandom")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(f, src, size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestResticBackup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	job := newRepo(t, dir)
	job.Paths = []string{filepath.Join(dir, "data")}
	if err := os.Mkdir(job.Paths[0], 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		writeRandom(t, filepath.Join(job.Paths[0], name), 1<<20)
	}
	run := uuid.New()
	var rec recorder
	var stderr bytes.Buffer
	status, err := Exec(context.Background(), ExecConfig{Argv: Restic{}.BackupArgv(job, run), Parser: Restic{}, Emit: rec.emit, Stderr: &stderr})
	if err != nil || status != 0 {
		t.Fatalf("Exec = %d, %v; stderr:\n%s", status, err, stderr.Bytes())
	}
	checkExit(t, &rec, Exit{})
	ev := rec.evidence(status)
	idLen := 8
	if resticTraits(t).FullSnapshotID {
		idLen = 64
	}
	if ev.Summary == nil || ev.Summary.DataAdded < 3<<20 || len(ev.Summary.SnapshotID) != idLen || ev.Summary.FilesNew != 3 {
		t.Fatalf("summary %+v, want a snapshot id of %d digits", ev.Summary, idLen)
	}
	want := fmt.Sprintf("backup complete: snapshot %s, 3 files, ", ev.Summary.SnapshotID)
	if out := (Restic{}).Classify(ev); out.Status != Succeeded || !strings.HasPrefix(out.Reason, want) {
		t.Errorf("outcome %+v", out)
	}

	// The repair channel finds the snapshot by its run.
	out, err := exec.Command(Restic{}.SnapshotsArgv(job, run)[0], Restic{}.SnapshotsArgv(job, run)[1:]...).Output()
	if err != nil {
		t.Fatal(err)
	}
	var snaps []struct {
		ID   string   `json:"id"`
		Tags []string `json:"tags"`
	}
	if err := json.Unmarshal(out, &snaps); err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 1 || snaps[0].ID[:idLen] != ev.Summary.SnapshotID {
		t.Errorf("snapshots of run %s: %s", run, out)
	}
}

func TestResticUnreadableFile(t *testing.T) {
	t.Parallel()
	nobody, err := user.Lookup("nobody")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and user nobody")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)

	// nobody must reach the repository: t.TempDir is private to root.
	dir, err := os.MkdirTemp("", "holdfast-engine-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	job := newRepo(t, dir)
	data := filepath.Join(dir, "data")
	secret := filepath.Join(data, "secret")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRandom(t, filepath.Join(data, "public"), 64<<10)
	writeRandom(t, secret, 1<<10)
	err = filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(secret, 0); err != nil {
		t.Fatal(err)
	}
	job.Paths = []string{data}

	argv := append([]string{"setpriv", "--reuid=nobody", "--regid=" + nobody.Gid, "--clear-groups", "--"},
		Restic{}.BackupArgv(job, uuid.New())...)
	var rec recorder
	var stderr bytes.Buffer
	status, err := Exec(context.Background(), ExecConfig{
		Argv: argv, Env: []string{"HOME=/nonexistent", "PATH=" + os.Getenv("PATH")},
		Parser: Restic{}, Emit: rec.emit, Stderr: &stderr,
	})
	if err != nil || status != 3 {
		t.Fatalf("Exec = %d, %v; want 3; stderr:\n%s", status, err, stderr.Bytes())
	}
	checkExit(t, &rec, Exit{ExitStatus: 3})
	wantErr := Event{TypeItemError, ItemError{Item: secret, During: "archival", Message: "open " + secret + ": permission denied"}}
	if evs := rec.of(TypeItemError); len(evs) != 1 || !eventIs(evs[0], wantErr.Type, wantErr.Payload) {
		t.Errorf("item errors %+v, want %+v", evs, wantErr)
	}
	ev := rec.evidence(status)
	if ev.Summary == nil {
		t.Fatal("no summary: restic 0.14 makes a snapshot despite unreadable files")
	}
	want := fmt.Sprintf("partial: 1 item skipped, first: open %s: permission denied (snapshot %s)", secret, ev.Summary.SnapshotID)
	if out := (Restic{}).Classify(ev); out != (Outcome{Partial, "", want}) {
		t.Errorf("outcome %+v, want %q", out, want)
	}
}

func TestResticFatal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	job := newRepo(t, dir)
	job.Paths = []string{dir}
	wrongPassword := job
	wrongPassword.PasswordFile = filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrongPassword.PasswordFile, []byte("battery staple\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noRepo := job
	noRepo.Repository = filepath.Join(dir, "none")
	noPaths := job
	noPaths.Paths = []string{filepath.Join(dir, "gone"), filepath.Join(dir, "gone too")}
	noPasswordFile := job
	noPasswordFile.PasswordFile = filepath.Join(dir, "no password")

	// What each restic says: 0.17 and later exit 10 and 12 and name a missing repository so;
	// 0.18 and later print their fatal error as JSON, which reads as the same message.
	tr := resticTraits(t)
	noRepoFatal := "Fatal: unable to open config file: stat " + noRepo.Repository + "/config: no such file or directory"
	wrongStatus, noRepoStatus := 1, 1
	if tr.FailureExitCodes {
		noRepoFatal = "Fatal: repository does not exist: unable to open config file: stat " + noRepo.Repository + "/config: no such file or directory"
		wrongStatus, noRepoStatus = 12, 10
	}
	noPathsFatal, noPasswordFatal := "Fatal: all target directories/files do not exist", "Resolving password failed: Fatal: "+noPasswordFile.PasswordFile+" does not exist"
	if tr.ExitErrorJSON {
		noPathsFatal, noPasswordFatal = "Fatal: all source directories/files do not exist", "Fatal: "+noPasswordFatal
	}
	tests := []struct {
		name    string
		job     Job
		status  int
		fatal   string
		outcome Outcome
	}{
		{"wrong password", wrongPassword, wrongStatus, "Fatal: wrong password or no key found",
			Outcome{Failed, Permanent, "repository password is wrong (restic: Fatal: wrong password or no key found)"}},
		{"no repository", noRepo, noRepoStatus,
			noRepoFatal + "\nIs there a repository at the following location?\n" + noRepo.Repository,
			Outcome{Failed, Permanent, "no repository at " + noRepo.Repository + " (restic: " + noRepoFatal + ")"}},
		{"no path exists", noPaths, 1, noPathsFatal,
			Outcome{Failed, Permanent, "none of the paths to back up exist (restic: " + noPathsFatal + ")"}},
		{"no password file", noPasswordFile, 1, noPasswordFatal,
			Outcome{Failed, Permanent, "the repository password could not be read (restic: " + noPasswordFatal + ")"}},
	}
	for _, tt := range tests {
		var rec recorder
		status, err := Exec(context.Background(), ExecConfig{Argv: Restic{}.BackupArgv(tt.job, uuid.New()), Parser: Restic{}, Emit: rec.emit})
		if err != nil || status != tt.status {
			t.Fatalf("%s: Exec = %d, %v; want %d", tt.name, status, err, tt.status)
		}
		checkExit(t, &rec, Exit{ExitStatus: tt.status})
		ev := rec.evidence(status)
		if ev.Fatal != tt.fatal || len(rec.of(TypeFatal)) != 1 {
			t.Errorf("%s: fatal events %+v, want %q", tt.name, rec.of(TypeFatal), tt.fatal)
		}
		if out := (Restic{}).Classify(ev); out != tt.outcome {
			t.Errorf("%s: outcome\n got %+v\nwant %+v", tt.name, out, tt.outcome)
		}
	}
}

// TestHelperProcess is the `holdfast exec` of TestResticInterrupt: it runs
// Exec on the command line in $HOLDFAST_ENGINE_ARGV and writes the events to
// stdout as JSON lines.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("HOLDFAST_ENGINE_HELPER") != "1" {
		t.Skip("run by TestResticInterrupt")
	}
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv("HOLDFAST_ENGINE_ARGV")), &argv); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
	enc := json.NewEncoder(os.Stdout)
	status, err := Exec(context.Background(), ExecConfig{
		Argv: argv, Parser: Restic{}, Stderr: os.Stderr,
		Emit: func(typ string, payload any) error {
			return enc.Encode(map[string]any{"type": typ, "payload": payload})
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
	os.Exit(status)
}

// Not parallel: `restic list locks` must see only this test's repository.
func TestResticInterrupt(t *testing.T) {
	dir := t.TempDir()
	job := newRepo(t, dir)
	job.Paths = []string{filepath.Join(dir, "big")}
	// At 64 KiB/s its upload takes minutes: restic cannot have finished when its first progress
	// came, and the signal with it. The signal must come while restic reads, though: restic acts
	// on none while its rate limiter holds a transfer back (StopGrace), and the data, less than
	// one pack (16 MiB), is uploaded only once all of it was read. Status lines 60 times a second
	// (restic 0.19 prints its first after 0.1 s, when a few MiB were read on a fast machine)
	// put the first well inside the read of 15 MiB.
	writeRandom(t, job.Paths[0], 15<<20)
	job.LimitUpload = 64

	argv, _ := json.Marshal(Restic{}.BackupArgv(job, uuid.New()))
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "HOLDFAST_ENGINE_HELPER=1", "HOLDFAST_ENGINE_ARGV="+string(argv), "RESTIC_PROGRESS_FPS=60")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var events []helperEvent
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var ev helperEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("helper output %q: %v", sc.Bytes(), err)
		}
		if ev.Type == TypeProgress && !hasType(events, TypeProgress) {
			// systemd's stop; restic 0.14 would die on it and leave its lock.
			cmd.Process.Signal(syscall.SIGTERM)
		}
		events = append(events, ev)
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit status %d, want 130; stderr:\n%s", code, stderr.Bytes())
	}
	if hasType(events, TypeSummary) {
		t.Error("restic finished before the signal: the test data is too small")
	}
	// restic exits 130 on SIGINT up to 0.16 and from 0.19, 1 in 0.17 and 0.18; either is the stop's 130.
	last := events[len(events)-1]
	want := `{"exit_status":130}`
	if st := resticTraits(t).StoppedBackupExit; st != 130 {
		want = fmt.Sprintf(`{"exit_status":130,"engine_exit_status":%d}`, st)
	}
	if last.Type != TypeExit || string(last.Payload) != want {
		t.Errorf("last event %s %s, want %s", last.Type, last.Payload, want)
	}
	if !strings.Contains(stderr.String(), "signal interrupt received, cleaning up") {
		t.Errorf("restic did not see a SIGINT; stderr:\n%s", stderr.Bytes())
	}

	list := append(Restic{}.global(job), "list", "locks")
	out, err := exec.Command(list[0], list[1:]...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("restic list locks: %v: %q", err, out)
	}
	if out := (Restic{}).Classify(Evidence{ExitStatus: 130}); out.Status != Interrupted {
		t.Errorf("outcome %+v", out)
	}
}

type helperEvent struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

func hasType(events []helperEvent, typ string) bool {
	for _, ev := range events {
		if ev.Type == typ {
			return true
		}
	}
	return false
}
