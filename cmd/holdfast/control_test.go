package main_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// `run start` on the daemon's host has the daemon admit the run over its control socket; a
// command for another database, or one that finds no daemon there, admits through the database,
// and the run is the same.
func TestRunStartAsksTheDaemon(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	w.binaryCLI = true // the socket as an operator's command reaches it
	w.mustRun("job", "add", "echo", "--engine", "command", "--command", "/bin/echo", "--command", "hello")
	d := w.startDaemon()
	admittedBy := func(id string) bool {
		return strings.Contains(d.log.String(), `msg="run admitted over the control socket" run=`+id)
	}
	start := func(env []string, args ...string) runJSON {
		t.Helper()
		cmd := exec.Command(w.bin, append([]string{"run", "start", "echo", "--json"}, args...)...)
		cmd.Env = append(w.env(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("run start %v: %v\n%s\n%s", args, err, stdout.String(), stderr.String())
		}
		var r runJSON
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatalf("run start %v: %v\n%s", args, err, stdout.String())
		}
		return r
	}

	byDaemon := start(nil, "--wait")
	if byDaemon.Status != "succeeded" || !admittedBy(byDaemon.ID) {
		t.Fatalf("run %+v, admitted by the daemon: %v; want succeeded, by the daemon", byDaemon, admittedBy(byDaemon.ID))
	}

	// The same database under another DSN is another database to the socket.
	other := w.addr.DSN + "&application_name=cli"
	if !strings.Contains(w.addr.DSN, "?") {
		other = w.addr.DSN + "?application_name=cli"
	}
	byDatabase := start([]string{"HOLDFAST_DSN=" + other}, "--wait")
	if byDatabase.Status != "succeeded" || admittedBy(byDatabase.ID) {
		t.Fatalf("run %+v, admitted by the daemon: %v; want succeeded, through the database", byDatabase, admittedBy(byDatabase.ID))
	}

	// A daemon gone leaves its socket behind: the command admits through the database.
	d.kill()
	queued := start(nil)
	if queued.Status != "queued" || admittedBy(queued.ID) {
		t.Fatalf("run %+v with the daemon gone, want queued through the database", queued)
	}
}
