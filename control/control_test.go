package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/control"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/testenv"
)

const dsn = "postgres:///holdfast?host=/run/postgresql"

// fakeStore admits runs as the database would, from what a case set, and counts the asks.
type fakeStore struct {
	mu       sync.Mutex
	able     model.Runnable // the answer for any host
	on       model.Runnable // the answer for the daemon's host (JobRunnableParams.On)
	spawner  string         // the daemon's host, if it spawns the runs it admits
	admitErr error
	asked    int // JobRunnable and RunAdmit calls
	admitted []store.RunAdmitParams
}

func (f *fakeStore) JobRunnable(_ context.Context, p store.JobRunnableParams) (model.Runnable, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	switch {
	case p.Job == "missing":
		return model.Runnable{}, fmt.Errorf("job %q: %w", p.Job, store.ErrNotFound)
	case p.On != "":
		return f.on, nil
	}
	return f.able, nil
}

func (f *fakeStore) spawnerHost() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.spawner
}

func (f *fakeStore) RunAdmit(_ context.Context, p store.RunAdmitParams) (model.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	if f.admitErr != nil {
		return model.Run{}, f.admitErr
	}
	f.admitted = append(f.admitted, p)
	return model.Run{ID: uuid.New(), JobName: p.Job, Kind: p.Kind, Verify: p.Verify, Status: model.StatusQueued, CreatedAt: time.Now().UTC()}, nil
}

type bundle struct {
	path     string
	store    *fakeStore
	admitted chan uuid.UUID
}

func setup(t *testing.T) bundle {
	t.Helper()
	return setupIn(t, t.TempDir())
}

// setupIn is setup with the socket in stateDir.
func setupIn(t *testing.T, stateDir string) bundle {
	t.Helper()
	b := bundle{path: control.SocketPath(stateDir), store: &fakeStore{able: model.Runnable{Host: "h"}}, admitted: make(chan uuid.UUID, 10)}
	srv, err := control.NewServer(control.Config{Path: b.path, DSN: dsn, Store: b.store, Admitted: func(id uuid.UUID) { b.admitted <- id },
		Spawner: b.store.spawnerHost})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return b
}

func TestStartRun(t *testing.T) {
	backup := runctl.StartParams{Job: "j", Kind: model.KindBackup}
	for _, c := range []struct {
		name    string
		prepare func(b *bundle)
		dsn     string
		params  runctl.StartParams
		// want: "admitted", "not served", "input", "unavailable" or "failed"
		want    string
		message string
		asked   int
		by      string // the admission's AdmittedBy
	}{
		{name: "admitted, and handed to the spawns", params: backup, want: "admitted", asked: 2},
		{name: "a daemon that spawns what it admits, on a host that may run the job: no other daemon is woken",
			prepare: func(b *bundle) { b.store.spawner, b.store.on = "h", model.Runnable{Host: "h"} },
			params:  backup, want: "admitted", asked: 2, by: "h"},
		{name: "a daemon that spawns what it admits, on a host that may not run the job: the others are woken",
			prepare: func(b *bundle) {
				b.store.spawner, b.store.on, b.store.able = "h", model.Runnable{Why: "job j is pinned to host g"}, model.Runnable{Host: "g"}
			},
			params: backup, want: "admitted", asked: 3},
		{name: "a verification's figures reach the admission",
			params: runctl.StartParams{Job: "j", Kind: model.KindVerify, Verify: model.Verify{ReadDataSubset: "5%"}}, want: "admitted", asked: 2},
		{name: "queued though no daemon can run it yet", prepare: func(b *bundle) { b.store.able = model.Runnable{Why: "host h is down"} },
			params: backup, want: "admitted", asked: 2},
		{name: "another database: not served, nothing asked", dsn: dsn + "&sslmode=disable", params: backup, want: "not served"},
		{name: "no socket: not served", prepare: func(b *bundle) { b.path += ".none" }, params: backup, want: "not served"},
		{name: "a job that does not exist", params: runctl.StartParams{Job: "missing", Kind: model.KindBackup},
			want: "input", message: `job "missing": not found`, asked: 1},
		{name: "a live run already", prepare: func(b *bundle) { b.store.admitErr = &store.ConflictError{Msg: "job j already has a live run"} },
			params: backup, want: "input", message: "job j already has a live run", asked: 2},
		{name: "waiting for a run no daemon can take: nothing queued",
			prepare: func(b *bundle) { b.store.able = model.Runnable{Why: "host h is down"} },
			params:  runctl.StartParams{Job: "j", Kind: model.KindBackup, Wait: true},
			want:    "unavailable", message: "host h is down; nothing was queued", asked: 1},
		{name: "the admission failed", prepare: func(b *bundle) { b.store.admitErr = errors.New("admit run of j: connection reset") },
			params: backup, want: "failed", message: "admit run of j: connection reset", asked: 2},
		{name: "a kind run start does not ask for", params: runctl.StartParams{Job: "j", Kind: model.KindRestore},
			want: "input", message: `run kind "restore" cannot be started over the control socket`},
		{name: "a job name no job can have", params: runctl.StartParams{Job: "../x", Kind: model.KindBackup}, want: "input"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t)
			if c.prepare != nil {
				c.prepare(&b)
			}
			d := dsn
			if c.dsn != "" {
				d = c.dsn
			}
			started, err := control.StartRun(context.Background(), b.path, d, c.params)
			var refused *control.Refused
			got := "admitted"
			switch {
			case errors.Is(err, control.ErrNotServed):
				got = "not served"
			case errors.As(err, &refused) && refused.Input:
				got = "input"
			case errors.As(err, &refused) && refused.Unavailable:
				got = "unavailable"
			case errors.As(err, &refused):
				got = "failed"
			case err != nil:
				t.Fatalf("StartRun: %v", err)
			}
			if got != c.want || c.message != "" && (err == nil || err.Error() != c.message) {
				t.Fatalf("StartRun = %+v, %v: want %s %q", started, err, c.want, c.message)
			}
			if b.store.asked != c.asked {
				t.Errorf("the store was asked %d times, want %d", b.store.asked, c.asked)
			}
			if got != "admitted" {
				select {
				case id := <-b.admitted:
					t.Errorf("run %s handed to the spawns, though none was admitted", id)
				default:
				}
				return
			}
			if started.Run.JobName != c.params.Job || started.Run.Kind != c.params.Kind || started.Run.Verify != c.params.Verify ||
				started.Unable != b.store.able.Why {
				t.Errorf("started %+v, want a run of %+v (unable %q)", started, c.params, b.store.able.Why)
			}
			if p := b.store.admitted[0]; p.Trigger != model.TriggerManual || p.Verify != c.params.Verify || p.AdmittedBy != c.by {
				t.Errorf("admitted %+v, want a manual run with %+v, admitted by %q", p, c.params.Verify, c.by)
			}
			select {
			case id := <-b.admitted:
				if id != started.Run.ID {
					t.Errorf("run %s handed to the spawns, want %s", id, started.Run.ID)
				}
			case <-time.After(10 * time.Second):
				t.Error("the admitted run was not handed to the spawns")
			}
		})
	}
}

// A request the daemon does not understand (a newer command's) is answered as not served, so
// the command admits through the database; so is one of another protocol.
func TestStartRunOtherProtocol(t *testing.T) {
	b := setup(t)
	for _, req := range []string{
		`{"protocol":1,"database":"x","job":"j","kind":"backup","newer":true}`,
		`{"protocol":2,"job":"j","kind":"backup"}`,
		`not json`,
	} {
		reply := ask(t, b.path, req)
		if !strings.Contains(reply, `"class":"not-served"`) {
			t.Errorf("request %s: reply %s, want not served", req, reply)
		}
	}
	if b.store.asked != 0 {
		t.Errorf("the store was asked %d times", b.store.asked)
	}
}

// ask sends one raw request and returns the raw reply.
func ask(t *testing.T, path, req string) string {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req+"\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.UnixConn).CloseWrite()
	reply, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	return string(reply)
}

// The socket is root's: a socket another user could have made is never asked, and the daemon's
// socket is closed to others.
func TestStartRunOnlyRootsSocket(t *testing.T) {
	b := setup(t)
	fi, err := os.Stat(b.path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v, %v; want mode 0600", fi, err)
	}
	// Another user's socket where the daemon's would be.
	dir := testenv.SharedDir(t)
	path := control.SocketPath(dir)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, err = control.StartRun(context.Background(), path, dsn, runctl.StartParams{Job: "j", Kind: model.KindBackup})
	if !errors.Is(err, control.ErrNotServed) || !strings.Contains(err.Error(), "not a socket of root's") {
		t.Fatalf("StartRun on nobody's socket: %v; want not served", err)
	}
	select {
	case <-accepted:
		t.Error("nobody's socket was connected to")
	case <-time.After(100 * time.Millisecond):
	}
}

// The daemon answers only root (or its own user): a connection from another user's process is
// closed unanswered, even where the socket's mode lets it connect.
func TestServerRefusesOthers(t *testing.T) {
	if path := os.Getenv("CONTROL_TEST_SOCKET"); path != "" {
		return // the helper below, as nobody
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to run a process as nobody")
		}
		t.Skip("needs root to run a process as nobody")
	}
	b := setupIn(t, testenv.SharedDir(t)) // a directory nobody can reach
	if err := os.Chmod(b.path, 0o666); err != nil {
		t.Fatal(err)
	}
	// This test binary, where nobody can run it, asks as nobody (TestPeerHelper).
	bin := filepath.Join(testenv.SharedDir(t), "control.test")
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^TestPeerHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "CONTROL_TEST_SOCKET="+b.path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reply: \"\"") {
		t.Fatalf("nobody's request: %v\n%s\nwant no reply", err, out)
	}
	if b.store.asked != 0 {
		t.Errorf("nobody's request asked the store %d times", b.store.asked)
	}
}

// TestPeerHelper is TestServerRefusesOthers' process as nobody: it sends a valid request.
func TestPeerHelper(t *testing.T) {
	path := os.Getenv("CONTROL_TEST_SOCKET")
	if path == "" {
		t.Skip("run by TestServerRefusesOthers")
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("nobody could not connect: %v", err)
	}
	defer conn.Close()
	// The daemon may close the connection before the request is written: a write error is that.
	_ = json.NewEncoder(conn).Encode(map[string]any{"protocol": 1, "job": "j", "kind": "backup"})
	reply, _ := io.ReadAll(conn)
	fmt.Printf("reply: %q\n", reply)
}
