package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

// On a booted host, where the system manager and the daemon's own journal lines are real: nobody
// (uid 65534) writes journal entries naming a live run (HOLDFAST_RUN=, UNIT=, USER_UNIT=) and
// runs, under its own user manager, a unit named as the run's: journald files them all under the
// run's names, and `run logs` shows none of them, while it shows the unit's lines (which carry
// HOLDFAST_RUN too, from LogExtraFields, under nobody's uid), PID 1's lines about the unit and
// the daemon's lines about the run (holdfast.service, as root). The service's cgroup is bounded.
func TestBootedHostForgedLogs(t *testing.T) {
	parallel(t)
	b := bootHost(t)
	b.install("--allow-command-jobs")
	h := b.h
	// The daemon's cgroup, its log tails' journalctl among it, is bounded.
	if p := b.serviceProps("MemoryMax", "TasksMax"); p["MemoryMax"] != "536870912" || p["TasksMax"] != "256" {
		t.Errorf("holdfast.service: %v, want MemoryMax 512M and TasksMax 256", p)
	}
	h.Run(t, "mkdir", "-p", "/srv/gate")
	b.mustHoldfast("job", "add", "forge", "--engine", "command", "--user", "nobody", "--command", "/bin/sh", "--command", "-c",
		"--command", "echo real line one; while [ ! -e /srv/gate/open ]; do sleep 0.1; done; echo real line two")
	id := b.startRun("forge")
	r := b.waitRun(id, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	if r.Status != "running" || len(r.Attempts) != 1 || r.Attempts[0].Unit == "" {
		t.Fatalf("run %s: %+v, want it running in a unit", id, r)
	}
	unit := r.Attempts[0].Unit
	if !testenv.Eventually(time.Minute, func() bool { return strings.Contains(b.mustHoldfast("run", "logs", id), "real line one") }) {
		t.Fatalf("run logs never showed the unit's first line:\n%s", b.mustHoldfast("run", "logs", id))
	}

	asNobody := []string{"setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--"}
	for i, fields := range [][]string{
		{"MESSAGE=FORGED by HOLDFAST_RUN", "HOLDFAST_RUN=" + id},
		{"MESSAGE=FORGED by UNIT", "UNIT=" + unit, "SYSLOG_IDENTIFIER=systemd"},
		{"MESSAGE=FORGED by USER_UNIT", "USER_UNIT=" + unit, "SYSLOG_IDENTIFIER=systemd"},
		{"MESSAGE=FORGED by journald's fields", "_SYSTEMD_UNIT=" + unit, "_PID=1", "_UID=0", "UNIT=" + unit},
	} {
		path := "/srv/forged-" + string(rune('a'+i))
		h.WriteFile(t, path, []byte(strings.Join(fields, "\n")+"\n"), 0o644)
		h.Run(t, append(asNobody, "logger", "--journald="+path)...)
	}
	// nobody's own manager (as a login or lingering would start it), and in it a unit of the run's
	// unit's name, which nobody writes to its runtime directory (there is no user bus here for
	// systemd-run --user; systemctl --user talks to the manager's private socket).
	h.Run(t, "systemctl", "start", "user@65534.service")
	h.Run(t, append(asNobody, "env", "XDG_RUNTIME_DIR=/run/user/65534", "sh", "-c", `set -e
mkdir -p /run/user/65534/systemd/user
printf '[Service]\nType=oneshot\nExecStart=/bin/sh -c "echo FORGED by a user unit of the same name; sleep 1"\n' >/run/user/65534/systemd/user/`+unit+`
systemctl --user daemon-reload
systemctl --user start `+unit)...)
	// journald files each under the run's names: the attacks landed.
	for _, landed := range []struct{ match, want string }{
		{"HOLDFAST_RUN=" + id, "FORGED by HOLDFAST_RUN"},
		{"UNIT=" + unit, "FORGED by UNIT"},
		{"UNIT=" + unit, "FORGED by journald's fields"},
		{"USER_UNIT=" + unit, "FORGED by USER_UNIT"},
		{"USER_UNIT=" + unit, "Finished " + unit}, // nobody's manager about its unit
		{"_SYSTEMD_USER_UNIT=" + unit, "FORGED by a user unit of the same name"},
	} {
		var out string
		if !testenv.Eventually(time.Minute, func() bool {
			out = h.Run(t, "journalctl", "--no-pager", "--output", "cat", "_UID=65534", landed.match)
			return strings.Contains(out, landed.want)
		}) {
			t.Fatalf("journalctl _UID=65534 %s lacks %q:\n%s", landed.match, landed.want, out)
		}
	}

	h.WriteFile(t, "/srv/gate/open", nil, 0o644)
	if r := b.waitRun(id, "the end", ended); r.Status != "succeeded" {
		t.Fatalf("run %s: %s (%s)", id, r.Status, r.Reason)
	}
	var logs string
	if !testenv.Eventually(time.Minute, func() bool {
		logs = b.mustHoldfast("run", "logs", id)
		return strings.Contains(logs, "run finished run="+id)
	}) {
		t.Fatalf("run logs never showed the daemon's line about the run's end:\n%s", logs)
	}
	for _, want := range []string{"real line one", "real line two", "systemd[1]: Started " + unit, "run spawned run=" + id, "holdfast["} {
		if !strings.Contains(logs, want) {
			t.Errorf("run logs lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "FORGED") {
		t.Errorf("run logs shows forged entries:\n%s", logs)
	}
	// The unit's own lines are nobody's, and carry the run's field; they are shown by their unit.
	export, _ := h.Output(context.Background(), "journalctl", "--no-pager", "-o", "export", "_SYSTEMD_UNIT="+unit, "MESSAGE=real line one")
	if s := string(export); !strings.Contains(s, "_UID=65534\n") || !strings.Contains(s, "HOLDFAST_RUN="+id+"\n") {
		t.Errorf("the unit's line is not nobody's with the run's field:\n%s", s)
	}
}
