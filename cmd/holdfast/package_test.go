package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-backup/holdfast/testenv"
)

// debPackage builds holdfast's .deb at version as `make package` does (packaging/build) and
// returns its path.
func debPackage(t *testing.T, version string) string {
	t.Helper()
	return buildPackage(t, version, "deb")
}

// buildPackage returns the package of holdfast at version in format (deb or rpm), as `make
// package` builds it (packaging/build). Each version is built once, in both formats, for every
// test of the binary: a build costs seconds of CPU, and four tests install 1.0.0.
func buildPackage(t *testing.T, version, format string) string {
	t.Helper()
	v, _ := packageBuilds.LoadOrStore(version, &packageBuild{})
	b := v.(*packageBuild)
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp(testenv.ProcessDir(t), "packages-*")
		if b.err != nil {
			return
		}
		out, err := exec.Command(filepath.Join("..", "..", "packaging", "build"), version, b.dir, "deb", "rpm").CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("packaging/build %s: %v\n%s", version, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	pkgs, err := filepath.Glob(filepath.Join(b.dir, "*."+format))
	if err != nil || len(pkgs) != 1 {
		t.Fatalf("packaging/build made %v (%v), want one .%s", pkgs, err, format)
	}
	return pkgs[0]
}

var packageBuilds sync.Map // version → *packageBuild

type packageBuild struct {
	once sync.Once
	dir  string
	err  error
}

// The .rpm passes rpmlint with no error (its filters, each with a reason, are in
// packaging/rpm/holdfast.rpmlintrc); the man pages are its documentation, the changelog is rpm's
// own, and the environment file is root's alone.
func TestRPMPackage(t *testing.T) {
	parallel(t)
	rpm := buildPackage(t, "1.0.0", "rpm")
	out, err := exec.Command(testenv.Rpmlint(t), "-r", filepath.Join("..", "..", "packaging", "rpm", "holdfast.rpmlintrc"), rpm).CombinedOutput()
	if err != nil || !strings.Contains(string(out), " 0 errors,") {
		t.Fatalf("rpmlint %s: %v\n%s", filepath.Base(rpm), err, out)
	}
	query := func(format string) string {
		out, err := exec.Command("rpm", "-qp", "--qf", format, rpm).Output()
		if err != nil {
			t.Fatalf("rpm -qp --qf %q: %v", format, err)
		}
		return string(out)
	}
	if docs := query(`[%{FILEFLAGS:fflags} %{FILENAMES}\n]`); !strings.Contains(docs, "d /usr/share/man/man1/holdfast.1.gz\n") {
		t.Fatalf("holdfast.1.gz is not documentation in the .rpm:\n%s", docs)
	}
	if env := query(`[%{FILEMODES:perms} %{FILEUSERNAME} %{FILENAMES}\n]`); !strings.Contains(env, "-rw------- root /etc/holdfast/holdfast.env\n") {
		t.Fatalf("the environment file in the .rpm:\n%s", env)
	}
	if log := query(`%{CHANGELOGNAME}`); !strings.Contains(log, "holdfast developers") {
		t.Fatalf("the .rpm's changelog: %q", log)
	}
}

// isActive is what `systemctl is-active` says of unit inside the host.
func (b *bootedWorld) isActive(unit string) string {
	out, _ := b.h.Output(context.Background(), "systemctl", "is-active", unit)
	return strings.TrimSpace(string(out))
}

// The package installed with dpkg as an operator would: its files where they belong, with their
// owners and modes, and nothing started before the database is configured. Upgraded while a
// restic backup is live, the daemon runs the new version and the run ends in its first attempt, recorded once.
// Removed, the daemon stops, a live run's unit goes on, and configuration and state stay; only a
// purge removes them.
func TestBootedHostPackage(t *testing.T) {
	parallelLong(t)
	debA, debB := debPackage(t, "1.0.0"), debPackage(t, "1.0.1")
	lintian := testenv.Lintian(t)
	// Clean: no error, no warning; each override (packaging/holdfast.lintian-overrides) says why.
	// lintian takes as long as the boot: it runs meanwhile.
	linted := make(chan error, 1)
	go func() {
		if out, err := exec.Command(lintian, "--fail-on", "error,warning", debA).CombinedOutput(); err != nil {
			linted <- fmt.Errorf("lintian %s: %v\n%s", filepath.Base(debA), err, out)
		}
		close(linted)
	}()
	b := bootHost(t)
	h := b.h
	if err := <-linted; err != nil {
		t.Fatal(err)
	}
	h.CopyIn(t, debA, "/root/holdfast_1.0.0.deb", 0o644)
	h.CopyIn(t, debB, "/root/holdfast_1.0.1.deb", 0o644)
	h.Run(t, "dpkg", "-i", "/root/holdfast_1.0.0.deb")

	for _, f := range []struct{ path, want string }{
		{"/usr/bin/holdfast", "root root 755 regular file"},
		{"/usr/libexec/holdfast/holdfast-unit", "root root 755 regular file"},
		{"/etc/holdfast/holdfast.env", "root root 600 regular file"},
		{"/etc/holdfast/holdfast.d", "root root 755 directory"},
		{"/lib/systemd/system/holdfast.service", "root root 644 regular file"},
		{"/usr/lib/tmpfiles.d/holdfast.conf", "root root 644 regular file"},
		{"/usr/share/man/man1/holdfast.1.gz", "root root 644 regular file"},
		{"/usr/share/doc/holdfast/changelog.gz", "root root 644 regular file"},
		{"/usr/share/doc/holdfast/copyright", "root root 644 regular file"},
		{"/var/lib/holdfast", "root root 755 directory"},
		{"/var/lib/holdfast/markers", "root root 755 directory"},
	} {
		if got := strings.TrimSpace(h.Run(t, "stat", "-c", "%U %G %a %F", f.path)); got != f.want {
			t.Errorf("%s: %s, want %s", f.path, got, f.want)
		}
	}
	// The units' binary loads no library at each of a run's two starts: built without cgo.
	if out := h.Run(t, "ldd", "/usr/libexec/holdfast/holdfast-unit"); strings.TrimSpace(out) != "statically linked" {
		t.Errorf("ldd /usr/libexec/holdfast/holdfast-unit: %s, want statically linked (CGO_ENABLED=0 in packaging/build)", out)
	}
	if s := b.isActive("holdfast.service"); s != "inactive" {
		t.Fatalf("holdfast.service is %s after a first install, want inactive until the database is configured", s)
	}
	maintainerScriptsFollowNoLink(t, b)

	// Configured by hand as the operator would (the DSN, the schema), then enabled and started.
	env := h.Run(t, "cat", "/etc/holdfast/holdfast.env")
	h.WriteFile(t, "/etc/holdfast/holdfast.env", append([]byte(env), b.envSettings()...), 0o600)
	b.mustHoldfast("migrate")
	h.Run(t, "systemctl", "enable", "--now", "holdfast.service")
	before := b.serviceProps("MainPID", "ActiveState")
	if before["ActiveState"] != "active" {
		t.Fatalf("holdfast.service after enable --now: %v", before)
	}
	// A restic backup that lasts (6 MiB at 256 KiB/s) while using little CPU.
	h.Run(t, "mkdir", "-p", "/srv/data")
	h.Run(t, "dd", "if=/dev/urandom", "of=/srv/data/a", "bs=1M", "count=6", "status=none")
	h.WriteFile(t, "/root/pw", []byte("package password\n"), 0o600)
	b.resticRepoAs("/srv/repo", "/root/pw", "nobody")
	b.mustHoldfast("job", "add", "long", "--repo", "/srv/repo", "--password-file", "/root/pw", "--path", "/srv/data",
		"--user", "nobody", "--limit-upload", "256")
	id := b.startRun("long")
	b.waitRun(id, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })

	h.Run(t, "dpkg", "-i", "/root/holdfast_1.0.1.deb")
	after := b.serviceProps("MainPID", "ActiveState")
	if after["ActiveState"] != "active" || after["MainPID"] == before["MainPID"] {
		t.Fatalf("after the upgrade: %v (before %v); want the daemon restarted", after, before)
	}
	if v := strings.TrimSpace(b.mustHoldfast("--version")); v != "holdfast version 1.0.1" {
		t.Fatalf("installed: %q, want 1.0.1", v)
	}
	started := h.Run(t, "journalctl", "--no-pager", "-o", "cat", "-u", "holdfast.service", "_PID="+after["MainPID"])
	if !strings.Contains(started, "holdfast daemon started version=1.0.1 ") || !strings.Contains(started, " unit_binary=/usr/libexec/holdfast/holdfast-unit") {
		t.Fatalf("the daemon's journal (pid %s) does not say it runs 1.0.1 with the package's holdfast-unit:\n%s", after["MainPID"], started)
	}
	r := b.waitRun(id, "the end", ended)
	if r.Status != "succeeded" || len(r.Attempts) != 1 {
		t.Fatalf("run %s over the upgrade: %s (%s) in %d attempt(s); want succeeded in its first", id, r.Status, r.Reason, len(r.Attempts))
	}
	var runs []runJSON
	if err := json.Unmarshal([]byte(b.mustHoldfast("run", "list", "--job", "long", "--json")), &runs); err != nil || len(runs) != 1 {
		t.Fatalf("job long has %d run(s) (%v), want the one", len(runs), err)
	}
	if c := b.holdfast("check"); c.code != 0 {
		t.Fatalf("holdfast check: exit %d\n%s%s", c.code, c.stdout, c.stderr)
	}

	// Removal stops the daemon and leaves a live run's unit running; configuration and state stay.
	// This run crawls (6 MiB at 4 KiB/s: 25 minutes): its unit is live when it is looked at.
	h.Run(t, "dd", "if=/dev/urandom", "of=/srv/data/a", "bs=1M", "count=6", "status=none")
	b.mustHoldfast("job", "edit", "long", "--limit-upload", "4")
	id = b.startRun("long")
	// Progress means restic runs: the unit's holdfast credexec has been executed and handed over,
	// so removing the binary cannot fail a unit that systemd has not yet started.
	live := b.waitRun(id, "progress", func(r runJSON) bool { return r.Progress != nil && len(r.Attempts) > 0 || ended(r) })
	if ended(live) {
		t.Fatalf("run %s ended before the removal: %s (%s)", id, live.Status, live.Reason)
	}
	unit := live.Attempts[0].Unit
	// The installed daemon's units run the package's holdfast-unit, not the whole CLI.
	for _, prop := range []string{"ExecStart", "ExecStopPost"} {
		if v := h.Run(t, "systemctl", "show", "-p", prop, "--value", unit); !strings.Contains(v, "path=/usr/libexec/holdfast/holdfast-unit ") {
			t.Errorf("unit %s %s: %s, want /usr/libexec/holdfast/holdfast-unit", unit, prop, v)
		}
	}
	h.Run(t, "dpkg", "-r", "holdfast")
	if s := b.isActive("holdfast.service"); s == "active" {
		t.Fatal("holdfast.service still active after the package was removed")
	}
	if s := b.isActive(unit); s != "active" {
		t.Fatalf("the run's unit %s is %s after the package was removed, want active", unit, s)
	}
	h.Run(t, "test", "-f", "/etc/holdfast/holdfast.env")
	h.Run(t, "test", "-d", "/var/lib/holdfast/runs")
	// Only a purge removes them.
	h.Run(t, "dpkg", "-P", "holdfast")
	for _, path := range []string{"/etc/holdfast", "/var/lib/holdfast"} {
		if _, err := h.Output(context.Background(), "test", "-e", path); err == nil {
			t.Errorf("%s is left after a purge", path)
		}
	}
}

// maintainerScriptsFollowNoLink runs the installed .deb's postinst and the .rpm's post script
// with the environment file replaced by a link to a file of another user's: the link and what it
// names are left as they are, and the script says so. A regular file left open is made root's,
// mode 0600. The host is left with the environment file it had.
func maintainerScriptsFollowNoLink(t *testing.T, b *bootedWorld) {
	t.Helper()
	h := b.h
	const env = "/etc/holdfast/holdfast.env"
	h.CopyIn(t, filepath.Join("..", "..", "packaging", "rpm", "post"), "/root/rpm-post", 0o755)
	h.Run(t, "cp", "-a", env, "/root/env.kept")
	for _, script := range [][]string{
		{"/var/lib/dpkg/info/holdfast.postinst", "configure", "1.0.0"},
		{"/root/rpm-post", "2"},
	} {
		name := filepath.Base(script[0])
		h.Run(t, "sh", "-c", "printf 'HOLDFAST_X=1\\n' >/root/victim && chown nobody:nogroup /root/victim && chmod 0644 /root/victim && ln -sfn /root/victim "+env)
		out := h.Run(t, script...)
		if !strings.Contains(out, env+" is a symbolic link: left as it is") {
			t.Errorf("%s with a link at %s says:\n%s\nwant that the link is left as it is", name, env, out)
		}
		if got := strings.TrimSpace(h.Run(t, "stat", "-c", "%U %G %a", "/root/victim")); got != "nobody nogroup 644" {
			t.Errorf("%s followed the link at %s: what it names is now %s, want nobody nogroup 644", name, env, got)
		}
		if got := strings.TrimSpace(h.Run(t, "stat", "-c", "%F", env)); got != "symbolic link" {
			t.Errorf("%s replaced the link at %s: it is a %s", name, env, got)
		}
		// An open regular file there is made root's alone.
		h.Run(t, "sh", "-c", "rm "+env+" && cp /root/victim "+env+" && chown nobody:nogroup "+env+" && chmod 0644 "+env)
		h.Run(t, script...)
		if got := strings.TrimSpace(h.Run(t, "stat", "-c", "%U %G %a %F", env)); got != "root root 600 regular file" {
			t.Errorf("%s left the open file at %s %s, want root root 600 regular file", name, env, got)
		}
	}
	h.Run(t, "sh", "-c", "rm -f /root/victim /root/rpm-post && mv /root/env.kept "+env)
}
