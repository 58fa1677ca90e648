package main_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

// installedHost boots a host and installs holdfast on it with the README's two commands,
// `apt install ./holdfast_*.deb postgresql` and `holdfast setup`, and nothing else. It returns
// what setup printed.
func installedHost(t *testing.T) (*bootedWorld, string) {
	t.Helper()
	deb := debPackage(t, "1.0.0")
	h := testenv.BootedHost(t)
	b := &bootedWorld{t: t, h: h}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := h.Output(context.Background(), "journalctl", "--no-pager", "-b", "-u", "holdfast.service")
			t.Logf("holdfast.service:\n%s", out)
		}
	})
	h.CopyIn(t, deb, "/root/holdfast_1.0.0_amd64.deb", 0o644)
	// The README's commands, as written; apt asks nothing (an operator would answer yes).
	h.WriteFile(t, "/etc/apt/apt.conf.d/90yes", []byte("APT::Get::Assume-Yes \"true\";\n"), 0o644)
	install := readmeBlock(t, "## Install on a server")
	if len(install) != 2 || !strings.HasPrefix(install[1], "holdfast setup") {
		t.Fatalf("the README's install commands: %q, want apt install and holdfast setup", install)
	}
	h.Run(t, "sh", "-c", "cd /root && "+install[0])
	// Nothing runs before the database is configured, nor at the next boot.
	if out, _ := h.Output(context.Background(), "systemctl", "is-enabled", "holdfast.service"); strings.TrimSpace(string(out)) != "disabled" {
		t.Fatalf("holdfast.service is %s after the install, want disabled until holdfast setup", out)
	}
	return b, h.Run(t, "sh", "-c", install[1])
}

// holdfast installed on a booted host as the README says: the CLI as root needs no environment,
// the service tells systemd what it does, setup run again changes nothing, a backup as the system
// user backup with a root-only password file succeeds and journald files its lines under its run,
// and the README's backup of /home as a dedicated system user works as written on a home of
// gigabytes, which the README's restore gives back whole. The README's other examples run on a
// host of their own with a small home (TestBootedHostReadme): they need no gigabytes, and the two
// hosts run side by side.
func TestBootedHostInstall(t *testing.T) {
	parallelLong(t)
	b, out := installedHost(t)
	h := b.h
	t.Logf("holdfast setup:\n%s", out)
	for _, want := range []string{"database: role holdfast created, database holdfast created", "schema: ", "service: holdfast.service enabled and started"} {
		if !strings.Contains(out, want) {
			t.Fatalf("holdfast setup says:\n%s\nwant %q", out, want)
		}
	}
	if got := strings.TrimSpace(h.Run(t, "stat", "-c", "%U %G %a", "/etc/holdfast/holdfast.env")); got != "root root 600" {
		t.Fatalf("/etc/holdfast/holdfast.env: %s, want root root 600", got)
	}
	env := h.Run(t, "cat", "/etc/holdfast/holdfast.env")
	p := b.serviceProps("Type", "WatchdogUSec", "StatusText", "ActiveState", "MainPID")
	if p["Type"] != "notify" || p["WatchdogUSec"] != "30s" || p["StatusText"] == "" || p["ActiveState"] != "active" {
		t.Fatalf("holdfast.service after setup: %v; want Type=notify, a 30s watchdog, a status, active", p)
	}
	if s := b.isActive("holdfast.service"); s != "active" {
		t.Fatalf("systemctl is-active holdfast: %s", s)
	}
	// Again: nothing changes.
	again := b.mustHoldfast("setup")
	for _, want := range []string{"database: HOLDFAST_DSN in /etc/holdfast/holdfast.env answers", "schema: current", "service: holdfast.service enabled and active"} {
		if !strings.Contains(again, want) {
			t.Fatalf("holdfast setup, again, says:\n%s\nwant %q", again, want)
		}
	}
	if h.Run(t, "cat", "/etc/holdfast/holdfast.env") != env || b.serviceProps("MainPID")["MainPID"] != p["MainPID"] {
		t.Fatal("holdfast setup, run again, changed the environment file or restarted the daemon")
	}

	// A backup of /srv/data as the system user backup; the password file is root's alone.
	h.Run(t, "mkdir", "-p", "/srv/data", "/srv/backup")
	h.WriteFile(t, "/etc/holdfast/srv.pw", []byte("srv password\n"), 0o600)
	h.Run(t, "dd", "if=/dev/urandom", "of=/srv/data/a", "bs=1M", "count=4", "status=none")
	h.WriteFile(t, "/srv/data/b.txt", []byte("hello from an installed host\n"), 0o644)
	b.resticRepoAs("/srv/backup/srv", "/etc/holdfast/srv.pw", "backup")
	b.mustHoldfast("job", "add", "srv", "--repo", "/srv/backup/srv", "--password-file", "/etc/holdfast/srv.pw",
		"--path", "/srv/data", "--user", "backup")
	id := b.startRun("srv")
	r := b.waitRun(id, "the end", ended)
	if r.Status != "succeeded" || r.SnapshotID == "" {
		t.Fatalf("run %s: %s (%s), snapshot %q; want succeeded with a snapshot", id, r.Status, r.Reason, r.SnapshotID)
	}
	b.journalHasRun(id, r.Attempts[len(r.Attempts)-1].Unit, "srv")
	if c := b.holdfast("check"); c.code != 0 {
		t.Fatalf("holdfast check: exit %d\n%s%s", c.code, c.stdout, c.stderr)
	}

	// A real home is gigabytes: more than any guess would have held for a first backup.
	readmeHomeBackup(t, b, "for i in 1 2 3; do head -c 1G /dev/urandom >/home/alice/big-$i; done")
	// The first backup, with no ceiling and no history, held what /home holds, measured as its
	// unit started, and was charged what it added: one attempt, never paused.
	first := b.runsOf("home")
	if len(first) != 1 {
		t.Fatalf("runs of home after the README's first backup: %+v, want one", first)
	}
	r = b.show(first[0].ID)
	if len(r.Attempts) != 1 || r.Status != "succeeded" || !strings.Contains(r.Attempts[0].HoldNote, "twice what the job's paths hold, 3.0 GiB in ") ||
		r.BytesAdded == nil || *r.BytesAdded < 3<<30 || r.SettledBytes < *r.BytesAdded || r.Attempts[0].Settlement == "" {
		t.Fatalf("the README's first backup of /home: %+v; want succeeded in one attempt, held from the 3 GiB its paths hold, charged what it added", r)
	}
	// The README's `run start` asked the packaged daemon over its control socket: root's, closed
	// to others, and the daemon's journal names the run it admitted.
	if st := h.Run(t, "stat", "-c", "%F %U %a", "/var/lib/holdfast/daemon.sock"); st != "socket root 600\n" {
		t.Fatalf("the daemon's control socket: %q, want a socket of root's with mode 600", st)
	}
	if j := h.Run(t, "journalctl", "--no-pager", "-o", "cat", "-u", "holdfast"); !strings.Contains(j, "run admitted over the control socket run="+first[0].ID) {
		t.Fatalf("the daemon's journal does not name run %s as admitted over its control socket:\n%s", first[0].ID, j)
	}

	// The README's restore of it, as homebackup into a target it made: every byte back.
	restore := readmeBlock(t, "Restores and verification (restic jobs)")
	if len(restore) < 2 || !strings.HasPrefix(restore[0], "install -d") || !strings.HasPrefix(restore[1], "holdfast restore home --target /srv/restore/home --wait") {
		t.Fatalf("the README's restore commands: %q, want the target made and then the latest snapshot restored", restore)
	}
	for _, line := range restore[:2] {
		h.Run(t, "sh", "-c", line)
	}
	restored := b.runsOf("home")
	if len(restored) != 2 || restored[0].Kind != "restore" || restored[0].Status != "succeeded" {
		t.Fatalf("runs of home after the README's restore: %+v, want the restore succeeded", restored)
	}
	if d := h.Run(t, "sh", "-c", "diff -r /home/alice /srv/restore/home/home/alice && echo same"); d != "same\n" {
		t.Fatalf("alice's home restored from its first backup differs from hers:\n%s", d)
	}
	// The README's look inside the snapshot, through the system manager's query units as
	// homebackup: alice's files, each with its size.
	if !strings.HasPrefix(restore[2], "holdfast snapshot ls home latest /home/alice") || !strings.HasPrefix(restore[3], "holdfast snapshot find home") {
		t.Fatalf("the README's look inside a snapshot: %q", restore[2:4])
	}
	if ls := h.Run(t, "sh", "-c", restore[2]); !strings.Contains(ls, "/home/alice/notes.txt") || strings.Count(ls, "1.0 GiB") != 3 {
		t.Fatalf("snapshot ls of /home/alice:\n%s", ls)
	}
	if found := h.Run(t, "sh", "-c", restore[3]+" 2>&1"); !strings.Contains(found, "/home/alice/notes.txt") || !strings.Contains(found, "1 entry in 1 snapshot\n") {
		t.Fatalf("snapshot find of alice's notes:\n%s", found)
	}
}

// setup --encrypt on a host set up with the README's setup: the database's address (with the
// role's password) moves out of the environment file into a credential systemd-creds encrypted
// with the host's key; the service is given a drop-in that loads it (LoadCredentialEncrypted=)
// and restarted, and its daemon no longer has the password in its environment; the CLI as root
// still reaches the database with nothing exported, and a backup runs; setup run again, without
// --encrypt, changes nothing and keeps it encrypted.
func TestBootedHostEncryptedDatabaseAddress(t *testing.T) {
	parallel(t)
	b, _ := installedHost(t)
	h := b.h
	env := h.Run(t, "cat", "/etc/holdfast/holdfast.env")
	m := regexp.MustCompile(`(?m)^HOLDFAST_DSN=postgres://holdfast:([^@]+)@`).FindStringSubmatch(env)
	if m == nil {
		t.Fatalf("no address with a password in the environment file after setup:\n%s", env)
	}
	password := m[1]
	daemonEnv := func() string {
		pid := b.serviceProps("MainPID")["MainPID"]
		return h.Run(t, "sh", "-c", `tr '\0' '\n' </proc/"$1"/environ`, "sh", pid)
	}
	if !strings.Contains(daemonEnv(), password) {
		t.Fatal("the daemon's environment lacks the role's password before setup --encrypt: the test checks nothing")
	}

	out := b.mustHoldfast("setup", "--encrypt")
	t.Logf("holdfast setup --encrypt:\n%s", out)
	for _, want := range []string{"moved out of /etc/holdfast/holdfast.env, encrypted into /etc/holdfast/database.cred",
		"given the encrypted address (/etc/systemd/system/holdfast.service.d/database-credential.conf)", "restarted to load the encrypted address"} {
		if !strings.Contains(out, want) {
			t.Fatalf("holdfast setup --encrypt says:\n%s\nwant %q", out, want)
		}
	}
	env = h.Run(t, "cat", "/etc/holdfast/holdfast.env")
	sealed := h.Run(t, "cat", "/etc/holdfast/database.cred")
	if strings.Contains(env, password) || !strings.Contains(env, "HOLDFAST_DSN_CREDENTIAL=/etc/holdfast/database.cred\n") ||
		strings.Contains(sealed, password) || len(sealed) < 100 {
		t.Fatalf("after setup --encrypt, the environment file:\n%s\nthe credential:\n%s", env, sealed)
	}
	if st := h.Run(t, "stat", "-c", "%U %a", "/etc/holdfast/database.cred"); st != "root 600\n" {
		t.Fatalf("/etc/holdfast/database.cred: %s, want root's, 600", st)
	}
	if s := b.isActive("holdfast.service"); s != "active" {
		t.Fatalf("holdfast.service after setup --encrypt: %s", s)
	}
	if strings.Contains(daemonEnv(), password) {
		t.Fatal("the restarted daemon still has the role's password in its environment")
	}
	// The service manager decrypted it for the daemon, which read it there.
	if st := h.Run(t, "stat", "-c", "%U %a", "/run/credentials/holdfast.service/holdfast-dsn"); st != "root 400\n" {
		t.Fatalf("the daemon's credential holdfast-dsn: %q, want one of root's, 400", st)
	}
	if !strings.Contains(out, "give it a new one with --rotate-password --encrypt") {
		t.Fatalf("setup --encrypt moved the address without saying its password still opens the database:\n%s", out)
	}
	pid := b.serviceProps("MainPID")["MainPID"]

	// The CLI as root reads the address through systemd-creds; the daemon runs a backup.
	h.Run(t, "mkdir", "-p", "/srv/data", "/srv/backup")
	h.WriteFile(t, "/etc/holdfast/srv.pw", []byte("srv password\n"), 0o600)
	h.WriteFile(t, "/srv/data/b.txt", []byte("hello\n"), 0o644)
	b.resticRepoAs("/srv/backup/srv", "/etc/holdfast/srv.pw", "backup")
	b.mustHoldfast("job", "add", "srv", "--repo", "/srv/backup/srv", "--password-file", "/etc/holdfast/srv.pw", "--path", "/srv/data", "--user", "backup")
	if r := b.waitRun(b.startRun("srv"), "the end", ended); r.Status != "succeeded" {
		t.Fatalf("a backup after setup --encrypt: %s (%s)", r.Status, r.Reason)
	}

	again := b.mustHoldfast("setup")
	if !strings.Contains(again, "database: the address in /etc/holdfast/database.cred (encrypted by systemd-creds) answers") ||
		h.Run(t, "cat", "/etc/holdfast/holdfast.env") != env || h.Run(t, "cat", "/etc/holdfast/database.cred") != sealed ||
		b.serviceProps("MainPID")["MainPID"] != pid {
		t.Fatalf("holdfast setup, again, changed the address's files or restarted the daemon:\n%s", again)
	}
}

// readmeHomeBackup makes alice's home, fills it with what fill writes (a shell line run in
// /home/alice, as root) and runs the README's backup of /home as a dedicated system user, as
// written. The snapshot must hold alice's files.
func readmeHomeBackup(t *testing.T, b *bootedWorld, fill string) {
	t.Helper()
	h := b.h
	// Each home is its owner's alone.
	h.Run(t, "useradd", "--create-home", "alice")
	h.WriteFile(t, "/home/alice/notes.txt", []byte("alice's notes\n"), 0o600)
	h.Run(t, "chown", "alice:alice", "/home/alice/notes.txt")
	h.Run(t, "chmod", "0700", "/home/alice")
	h.Run(t, "sh", "-c", "cd /home/alice && "+fill+" && chown alice:alice /home/alice/big-* && chmod 0600 /home/alice/big-*")
	home := readmeBlock(t, "Backing up `/home` as a dedicated system user")
	if len(home) == 0 || !strings.HasPrefix(home[len(home)-1], "holdfast run start home --wait") {
		t.Fatalf("the README's /home commands: %q", home)
	}
	for _, line := range home {
		h.Run(t, "sh", "-c", line)
	}
	ls := h.Run(t, "restic", "--repo", "/srv/backup/home", "--password-file", "/etc/holdfast/home.pw", "--no-cache", "ls", "latest")
	if !strings.Contains(ls, "/home/alice/notes.txt") || !strings.Contains(ls, "/home/alice/big-") {
		t.Fatalf("the snapshot of /home lacks alice's files:\n%s", ls)
	}
}

// The README's operator examples after its backup of /home, as written (readmeExamples), on a
// host where holdfast was installed as the README says, over a home of a few megabytes.
func TestBootedHostReadme(t *testing.T) {
	parallelLong(t)
	b, _ := installedHost(t)
	readmeHomeBackup(t, b, "for i in 1 2 3; do head -c 2M /dev/urandom >/home/alice/big-$i; done")
	readmeExamples(t, b)
}

// A host where holdfast was installed as the README says reboots, gracefully and, on another
// host at the same time, by a power loss, with three backups in flight, one of them stopped by the
// operator: after the boot the interrupted two are restarted as new attempts and succeed, though
// the daemon's lease and spawn grace are an hour (it neither waits its own lease of the boot
// before out nor the units of that boot to appear), the stopped one stays stopped, no restic lock
// is left and the invariants hold.
func TestBootedHostReboot(t *testing.T) {
	defer parallelParent(t, true)()
	for _, round := range []struct {
		name   string
		reboot func(*testenv.Host, testing.TB)
	}{{"graceful reboot", (*testenv.Host).Reboot}, {"power loss", (*testenv.Host).PowerLoss}} {
		t.Run(round.name, func(t *testing.T) {
			parallelLong(t)
			b, _ := installedHost(t)
			h := b.h
			// An hour's lease and spawn grace, far past every wait here: a run restarted within
			// them was restarted because the daemon knew its lease of the boot before for its own
			// (the machine id) and the attempts for an earlier boot's, not because one ran out.
			h.Run(t, "mkdir", "-p", "/etc/systemd/system/holdfast.service.d")
			h.WriteFile(t, "/etc/systemd/system/holdfast.service.d/test.conf",
				[]byte("[Service]\nExecStart=\nExecStart=/usr/bin/holdfast daemon --lease 1h --spawn-grace 1h\n"), 0o644)
			h.Run(t, "systemctl", "daemon-reload")
			h.Run(t, "systemctl", "restart", "holdfast.service")
			h.Run(t, "mkdir", "-p", "/srv/backup")
			h.WriteFile(t, "/etc/holdfast/srv.pw", []byte("srv password\n"), 0o600)
			// Three backups in flight, slowed by an upload limit (6 MiB at 4 KiB/s: 25 minutes)
			// rather than by work for the CPU, until the reboot or the stop ends them.
			jobs := []string{"one", "two", "three"}
			ids := map[string]string{}
			for _, j := range jobs {
				h.Run(t, "mkdir", "-p", "/srv/"+j)
				h.Run(t, "dd", "if=/dev/urandom", "of=/srv/"+j+"/data", "bs=1M", "count=6", "status=none")
				b.resticRepoAs("/srv/backup/"+j, "/etc/holdfast/srv.pw", "backup")
				b.mustHoldfast("job", "add", j, "--repo", "/srv/backup/"+j, "--password-file", "/etc/holdfast/srv.pw",
					"--path", "/srv/"+j, "--user", "backup", "--limit-upload", "4")
			}
			// All three at once: setting a job up takes seconds on a loaded machine.
			for _, j := range jobs {
				ids[j] = b.startRun(j)
			}
			for _, j := range jobs {
				b.waitRun(ids[j], "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
			}
			b.mustHoldfast("run", "stop", ids["three"])
			if r := b.waitRun(ids["three"], "stopped", ended); r.Status != "stopped" {
				t.Fatalf("run three: %s (%s), want stopped", r.Status, r.Reason)
			}
			for _, j := range jobs[:2] {
				if r := b.show(ids[j]); r.Status != "running" {
					t.Fatalf("run %s is %s (%s) before the reboot, want running", j, r.Status, r.Reason)
				}
				b.mustHoldfast("job", "edit", j, "--limit-upload", "0") // the attempts after the boot
			}
			// The daemon knows its own lease of the boot before as gone by the machine id: a
			// fresh id at each boot would make it wait the lease out.
			machineID := h.Run(t, "cat", "/etc/machine-id")
			round.reboot(h, t)
			if after := h.Run(t, "cat", "/etc/machine-id"); after != machineID || strings.TrimSpace(after) == "" {
				t.Errorf("machine id %q before the reboot and %q after, want one id kept", machineID, after)
			}
			for _, j := range jobs[:2] {
				r := b.waitRun(ids[j], "the end", ended)
				if r.Status != "succeeded" || len(r.Attempts) != 2 {
					t.Fatalf("run %s: %s (%s) in %d attempt(s); want succeeded in a second attempt", j, r.Status, r.Reason, len(r.Attempts))
				}
				t.Logf("run %s restarted (attempt 1: %s %s)", j, r.Attempts[0].ServiceResult, r.Attempts[0].ExitStatus)
				if r.Attempts[0].BootID == "" || r.Attempts[0].BootID == r.Attempts[1].BootID {
					t.Errorf("run %s: attempts of boots %q and %q, want two boots", j, r.Attempts[0].BootID, r.Attempts[1].BootID)
				}
			}
			if r := b.show(ids["three"]); r.Status != "stopped" || len(r.Attempts) != 1 {
				t.Fatalf("run three: %s in %d attempt(s), want stopped in its one", r.Status, len(r.Attempts))
			}
			for _, j := range jobs {
				locks := h.Run(t, "restic", "--repo", "/srv/backup/"+j, "--password-file", "/etc/holdfast/srv.pw", "--no-cache", "list", "locks", "--no-lock")
				if strings.TrimSpace(locks) != "" {
					t.Errorf("repository %s keeps locks: %s", j, locks)
				}
			}
			if c := b.holdfast("check"); c.code != 0 {
				t.Fatalf("holdfast check: exit %d\n%s%s", c.code, c.stdout, c.stderr)
			}
		})
	}
}

// readmeBlock returns the commands of the README's first sh block after the line that starts
// with heading, a continued line joined into one.
func readmeBlock(t *testing.T, heading string) []string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in, found := false, false
	for _, line := range strings.Split(string(text), "\n") {
		switch {
		case !found:
			found = strings.HasPrefix(line, heading)
		case !in && line == "```sh":
			in = true
		case in && line == "```":
			return cmds
		case in && len(cmds) > 0 && strings.HasSuffix(cmds[len(cmds)-1], "\\"):
			cmds[len(cmds)-1] = strings.TrimSuffix(cmds[len(cmds)-1], "\\") + strings.TrimSpace(line)
		case in && strings.TrimSpace(line) != "":
			cmds = append(cmds, line)
		}
	}
	t.Fatalf("README.md has no sh block after %q", heading)
	return nil
}

// resticRepoAs initializes a repository at dir with the password file pw and gives it to user.
func (b *bootedWorld) resticRepoAs(dir, pw, user string) {
	b.t.Helper()
	b.h.Run(b.t, "restic", "--repo", dir, "--password-file", pw, "--no-cache", "init")
	b.h.Run(b.t, "chown", "-R", user+":", dir)
}

// journalHasRun checks that journald files the unit's lines and the daemon's under the run.
func (b *bootedWorld) journalHasRun(id, unit, job string) {
	t, h := b.t, b.h
	t.Helper()
	// journald may lag behind the unit's end.
	var export string
	if !testenv.Eventually(time.Minute, func() bool {
		out, _ := h.Output(context.Background(), "journalctl", "--no-pager", "-o", "export", "HOLDFAST_RUN="+id)
		export = string(out)
		return strings.Contains(export, "_SYSTEMD_UNIT="+unit+"\n")
	}) {
		t.Fatalf("journalctl HOLDFAST_RUN=%s finds no line of %s:\n%s", id, unit, export)
	}
	for _, field := range []string{"HOLDFAST_JOB=" + job + "\n", "HOLDFAST_ATTEMPT=1\n"} {
		if !strings.Contains(export, field) {
			t.Fatalf("the run's journal lines lack %q:\n%s", field, export)
		}
	}
	// The daemon's own lines about the run, as journal fields with priorities.
	daemonLines := h.Run(t, "journalctl", "--no-pager", "-o", "export", "-u", "holdfast.service", "HOLDFAST_RUN="+id)
	for _, want := range []string{"MESSAGE=run spawned run=" + id, "MESSAGE=run finished run=" + id, "PRIORITY=6\n", "HOLDFAST_ATTEMPT=1\n"} {
		if !strings.Contains(daemonLines, want) {
			t.Fatalf("journalctl -u holdfast HOLDFAST_RUN=%s lacks %q:\n%s", id, want, daemonLines)
		}
	}
	if logs := b.mustHoldfast("run", "logs", id); !strings.Contains(logs, "run finished run="+id) {
		t.Fatalf("run logs lacks the daemon's line about the run's end:\n%s", logs)
	}
}
