package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/servicefiles"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/testenv"
)

// bootedWorld is holdfast installed on a booted host as an operator would: the binary in
// /usr/bin, the shipped holdfast.service, tmpfiles.d snippet and environment file (with the DSN
// of the test's own database, reached through the bind-mounted socket directory), the daemon
// running as a system service of the host's PID 1.
type bootedWorld struct {
	t   *testing.T
	h   *testenv.Host
	dsn string // the server's own; "": the CLI reads the host's /etc/holdfast/holdfast.env, as root on a set-up host
	// addr is what holdfast connects with: dsn, or through PgBouncer (testenv.Pooled).
	addr store.Address
	st   *store.Store // the test's own reader of the database, as world's; nil if out of reach
}

func newBootedWorld(t *testing.T) *bootedWorld {
	t.Helper()
	b := bootHost(t)
	b.install()
	return b
}

// install installs holdfast's binary, unit, tmpfiles.d snippet and environment file (with the
// world's DSN) as the package does, migrates, and starts the service with the daemon's args.
func (b *bootedWorld) install(daemonArgs ...string) {
	t, h := b.t, b.h
	t.Helper()
	env, err := os.ReadFile(filepath.Join("..", "..", "servicefiles", "holdfast.env"))
	if err != nil {
		t.Fatal(err)
	}
	h.CopyIn(t, testenv.HoldfastBinary(t), "/usr/bin/holdfast", 0o755)
	h.Run(t, "mkdir", "-p", "/etc/holdfast", "/srv/data")
	h.WriteFile(t, "/etc/holdfast/holdfast.env", append(env, b.envSettings()...), 0o600)
	h.WriteFile(t, "/etc/systemd/system/holdfast.service", []byte(servicefiles.Service), 0o644)
	if len(daemonArgs) > 0 { // a drop-in, as an operator gives the daemon flags
		h.Run(t, "mkdir", "-p", "/etc/systemd/system/holdfast.service.d")
		h.WriteFile(t, "/etc/systemd/system/holdfast.service.d/flags.conf",
			[]byte("[Service]\nExecStart=\nExecStart=/usr/bin/holdfast daemon "+strings.Join(daemonArgs, " ")+"\n"), 0o644)
	}
	h.WriteFile(t, "/etc/tmpfiles.d/holdfast.conf", []byte(servicefiles.Tmpfiles), 0o644)
	h.Run(t, "systemd-tmpfiles", "--create", "/etc/tmpfiles.d/holdfast.conf")
	b.mustHoldfast("migrate")
	h.Run(t, "systemctl", "daemon-reload")
	h.Run(t, "systemctl", "start", "holdfast.service")
}

// envSettings are the database's lines of the host's environment file.
func (b *bootedWorld) envSettings() []byte {
	lines := "HOLDFAST_DSN=" + b.addr.DSN + "\n"
	if b.addr.SessionDSN != "" {
		lines += "HOLDFAST_SESSION_DSN=" + b.addr.SessionDSN + "\n"
	}
	return []byte(lines)
}

// bootHost boots a host that reaches the test's own database, with nothing of holdfast on it.
func bootHost(t *testing.T) *bootedWorld {
	t.Helper()
	return bootHostWith(t, testenv.Postgres(t), testenv.HostConfig{Postgres: true})
}

// bootHostWith is bootHost on the database at dsn, with cfg.
func bootHostWith(t *testing.T, dsn string, cfg testenv.HostConfig) *bootedWorld {
	t.Helper()
	h := testenv.BootedHostWith(t, cfg)
	b := &bootedWorld{t: t, h: h, dsn: dsn}
	b.addr.DSN, b.addr.SessionDSN = testenv.Pooled(t, dsn)
	st, err := store.Connect(context.Background(), b.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	b.st = st
	// What the host runs, so that a run's log shows which Debian it proved (HOLDFAST_TEST_DEBIAN).
	release := strings.TrimSpace(h.Run(t, "cat", "/etc/debian_version"))
	systemd, _, _ := strings.Cut(h.Run(t, "systemctl", "--version"), "\n")
	restic, _, _ := strings.Cut(h.Run(t, "restic", "version"), " compiled")
	t.Logf("%s booted in %v: Debian %s, %s, %s", h.Name, h.BootDuration(), release, systemd, restic)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := h.Output(context.Background(), "journalctl", "--no-pager", "-u", "holdfast.service")
			t.Logf("holdfast.service:\n%s", out)
		}
	})
	return b
}

// holdfast runs the CLI inside the host, as root, with only the DSN set (if the world has one).
func (b *bootedWorld) holdfast(args ...string) result {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	argv := append([]string{"holdfast"}, args...)
	if b.dsn != "" {
		argv = append([]string{"env", "HOLDFAST_DSN=" + b.addr.DSN, "HOLDFAST_SESSION_DSN=" + b.addr.SessionDSN}, argv...)
	}
	cmd := b.h.Command(ctx, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	code := 0
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		b.t.Fatalf("holdfast %s on %s: %v", strings.Join(args, " "), b.h.Name, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

func (b *bootedWorld) mustHoldfast(args ...string) string {
	b.t.Helper()
	r := b.holdfast(args...)
	if r.code != 0 {
		b.t.Fatalf("holdfast %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func (b *bootedWorld) show(id string) runJSON {
	b.t.Helper()
	var r runJSON
	if err := json.Unmarshal([]byte(b.mustHoldfast("run", "show", id, "--json")), &r); err != nil {
		b.t.Fatal(err)
	}
	return r
}

func (b *bootedWorld) startRun(job string) string {
	b.t.Helper()
	var r runJSON
	if err := json.Unmarshal([]byte(b.mustHoldfast("run", "start", job, "--json")), &r); err != nil {
		b.t.Fatal(err)
	}
	return r.ID
}

// waitRun polls until cond holds for the run as `run show --json` inside the host shows it,
// running that command only when the store's view of the run changed (see await), or once a
// second when the test cannot read the store.
func (b *bootedWorld) waitRun(id, what string, cond func(runJSON) bool) runJSON {
	b.t.Helper()
	fingerprint := func() string { return strconv.FormatInt(time.Now().Unix(), 10) }
	if b.st != nil {
		fingerprint = func() string { return runFingerprint(b.st, id) }
	}
	return await(b.t, "run "+id+": "+what, fingerprint, func() runJSON { return b.show(id) }, cond)
}

// resticRepo initializes a repository at dir with the password file pw (both inside the host)
// and gives it to nobody, the jobs' user.
func (b *bootedWorld) resticRepo(dir, pw string) {
	b.t.Helper()
	b.h.Run(b.t, "restic", "--repo", dir, "--password-file", pw, "--no-cache", "init")
	b.h.Run(b.t, "chown", "-R", "nobody:nogroup", dir)
}

// A --user nobody job whose password file and environment file are root's 0600 files succeeds,
// and neither secret ever shows: not in a process's argv, a unit property, a database row, a
// journal line or the output of job show, run show and run logs. The files reach the unit as
// systemd credentials (LoadCredential=), which only the system manager hands to User=.
func TestBootedHostSecrets(t *testing.T) {
	parallel(t)
	b := newBootedWorld(t)
	h := b.h
	password, awsSecret := "pw-"+randomToken(t), "aws-"+randomToken(t)
	secrets := []string{password, awsSecret}
	h.WriteFile(t, "/root/pw", []byte(password+"\n"), 0o600)
	h.WriteFile(t, "/root/job.env", []byte("RESTIC_COMPRESSION=auto\nAWS_SECRET_ACCESS_KEY="+awsSecret+"\n"), 0o600)
	b.resticRepo("/srv/repo", "/root/pw")
	// An upload limit keeps the unit alive to be sampled (8 MiB at 512 KiB/s: 16s) at little CPU.
	h.Run(t, "dd", "if=/dev/urandom", "of=/srv/data/big", "bs=1M", "count=8", "status=none")
	b.mustHoldfast("job", "add", "secret", "--repo", "/srv/repo", "--password-file", "/root/pw",
		"--env-file", "/root/job.env", "--path", "/srv/data", "--user", "nobody", "--limit-upload", "512")

	leaks := newLeakLog(secrets)
	// Every process on the machine (the host's are among them), sampled while the run lives.
	stop := sampleProcesses(leaks, false, nil)

	id := b.startRun("secret")
	var propsWhileActive int
	sample := func(r runJSON) {
		if len(r.Attempts) > 0 && r.Attempts[0].Unit != "" && !ended(r) {
			out, err := h.Output(context.Background(), "systemctl", "show", "--no-pager", r.Attempts[0].Unit)
			if err == nil {
				leaks.check("systemctl show "+r.Attempts[0].Unit, string(out))
				if regexp.MustCompile(`(?m)^ActiveState=(active|activating)$`).Match(out) {
					propsWhileActive++
				}
			}
		}
	}
	// The unit's properties, read as soon as it runs, then whenever the run changes.
	testenv.Eventually(3*time.Minute, func() bool { r := b.show(id); sample(r); return propsWhileActive > 0 || ended(r) })
	r := b.waitRun(id, "the end", func(r runJSON) bool { sample(r); return ended(r) })
	samples := stop()
	t.Logf("sampled every process's argv %d times; the unit's properties %d times while it ran", samples, propsWhileActive)
	if r.Status != "succeeded" {
		t.Fatalf("run %s: %s (%s), want succeeded", id, r.Status, r.Reason)
	}
	if propsWhileActive == 0 {
		t.Fatal("never read the unit's properties while it ran; nothing was checked there")
	}

	dump, err := exec.Command("pg_dump", "--no-owner", "--dbname", b.dsn).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, dump)
	}
	leaks.check("pg_dump", string(dump))
	journal := h.Run(t, "journalctl", "--no-pager", "-b", "-o", "export")
	if !strings.Contains(journal, "HOLDFAST_RUN="+id) {
		t.Fatal("the journal has no line of the run; nothing was checked there")
	}
	leaks.check("journalctl -o export -b", journal)
	leaks.check("job show", b.mustHoldfast("job", "show", "secret"))
	leaks.check("job show --json", b.mustHoldfast("job", "show", "secret", "--json"))
	leaks.check("run show --json", b.mustHoldfast("run", "show", id, "--json"))
	leaks.check("run logs", b.mustHoldfast("run", "logs", id))
	if c := b.holdfast("check"); c.code != 0 {
		t.Fatalf("holdfast check: exit %d\n%s%s", c.code, c.stdout, c.stderr)
	}
	leaks.report(t)
}

// A --user nobody job whose password file and environment file are credentials encrypted with
// the host's key (systemd-creds encrypt) succeeds: the files on disk hold neither secret; the
// daemon stages them as they are and the unit names them by LoadCredentialEncrypted=, so that
// the system manager decrypts them for the unit alone; no process outside the job's units has
// either secret in its argv or environment, and neither is in the staged copies, the state
// directory, the journal or the database. A credential encrypted under another name fails the
// run with systemd's reason, before restic runs.
func TestBootedHostEncryptedSecrets(t *testing.T) {
	parallel(t)
	b := newBootedWorld(t)
	h := b.h
	password, awsSecret := "pw-"+randomToken(t), "aws-"+randomToken(t)
	leaks := newLeakLog([]string{password, awsSecret})
	h.WriteFile(t, "/root/pw.plain", []byte(password+"\n"), 0o600)
	b.resticRepo("/srv/repo", "/root/pw.plain")
	h.WriteFile(t, "/root/job.env.plain", []byte("RESTIC_COMPRESSION=auto\nAWS_SECRET_ACCESS_KEY="+awsSecret+"\n"), 0o600)
	// As the README says: the host's key, and no name, so that the unit's name for it serves.
	for _, f := range []string{"pw", "job.env"} {
		h.Run(t, "systemd-creds", "encrypt", "--with-key=host", "--name=", "/root/"+f+".plain", "/root/"+f+".cred")
	}
	h.Run(t, "systemd-creds", "encrypt", "--with-key=host", "--name=other", "/root/pw.plain", "/root/misnamed.cred")
	h.Run(t, "rm", "/root/pw.plain", "/root/job.env.plain")
	h.Run(t, "chmod", "0600", "/root/pw.cred", "/root/job.env.cred", "/root/misnamed.cred") // systemd-creds writes 0644
	for _, f := range []string{"/root/pw.cred", "/root/job.env.cred", "/root/misnamed.cred"} {
		sealed := h.Run(t, "cat", f)
		if len(sealed) < 100 {
			t.Fatalf("%s: %q, not an encrypted credential", f, sealed)
		}
		leaks.check("the file "+f, sealed)
	}
	h.Run(t, "dd", "if=/dev/urandom", "of=/srv/data/big", "bs=1M", "count=8", "status=none")
	b.mustHoldfast("job", "add", "sealed", "--repo", "/srv/repo", "--password-file", "/root/pw.cred",
		"--env-file", "/root/job.env.cred", "--path", "/srv/data", "--user", "nobody", "--limit-upload", "512")

	// Processes of the job's units (holdfast-sealed-…) are inside; every other is sampled.
	stop := sampleProcesses(leaks, true, func(pid string) bool {
		cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
		return strings.Contains(string(cg), "/holdfast-sealed-")
	})
	id := b.startRun("sealed")
	var propsWhileActive, stagedSeen int
	sample := func(r runJSON) {
		if len(r.Attempts) == 0 || r.Attempts[0].Unit == "" || ended(r) {
			return
		}
		// systemctl show prints these properties as [unprintable]; the transient unit's file
		// holds them as systemd was given them.
		out, err := h.Output(context.Background(), "sh", "-c", `systemctl is-active "$1" && cat "/run/systemd/transient/$1"`, "sh", r.Attempts[0].Unit)
		if err != nil {
			return
		}
		propsWhileActive++
		leaks.check("the transient unit", string(out))
		if !regexp.MustCompile(`(?m)^LoadCredentialEncrypted=restic-password:/var/lib/holdfast/credentials/`).Match(out) ||
			!regexp.MustCompile(`(?m)^LoadCredentialEncrypted=job-env:/var/lib/holdfast/credentials/`).Match(out) ||
			regexp.MustCompile(`(?m)^LoadCredential=`).Match(out) {
			t.Errorf("the unit's credentials while it ran:\n%s\nwant both by LoadCredentialEncrypted=, from the staged copies", out)
		}
		if staged, err := h.Output(context.Background(), "sh", "-c", "cat /var/lib/holdfast/credentials/*/*"); err == nil && len(staged) > 0 {
			stagedSeen++
			leaks.check("the staged credentials", string(staged))
		}
	}
	testenv.Eventually(3*time.Minute, func() bool { r := b.show(id); sample(r); return propsWhileActive > 0 || ended(r) })
	r := b.waitRun(id, "the end", func(r runJSON) bool { sample(r); return ended(r) })
	samples := stop()
	t.Logf("sampled every process's argv and environment %d times; the unit's properties %d times while it ran, its staged credentials %d", samples, propsWhileActive, stagedSeen)
	if r.Status != "succeeded" {
		t.Fatalf("run %s: %s (%s), want succeeded", id, r.Status, r.Reason)
	}
	if propsWhileActive == 0 || stagedSeen == 0 {
		t.Fatal("never read the unit's properties or its staged credentials while it ran; nothing was checked there")
	}
	leaks.check("the state directory", h.Run(t, "sh", "-c", "find /var/lib/holdfast -type f -size -1M -exec cat {} +"))
	dump, err := exec.Command("pg_dump", "--no-owner", "--dbname", b.dsn).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, dump)
	}
	leaks.check("pg_dump", string(dump))
	leaks.check("journalctl -o export -b", h.Run(t, "journalctl", "--no-pager", "-b", "-o", "export"))
	leaks.check("run logs", b.mustHoldfast("run", "logs", id))
	leaks.report(t)

	// Encrypted under another name, the credential is not this unit's: systemd refuses it and
	// the run fails with its reason, permanently, before restic ran.
	b.mustHoldfast("job", "edit", "sealed", "--password-file", "/root/misnamed.cred")
	id = b.startRun("sealed")
	r = b.waitRun(id, "the end", ended)
	if r.Status != "failed" || r.FailureClass != "permanent" || !strings.Contains(r.Reason, "243/CREDENTIALS") {
		t.Fatalf("run with a credential encrypted under another name: %s %s (%s); want failed, permanent, naming 243/CREDENTIALS", r.Status, r.FailureClass, r.Reason)
	}
}

// sampleProcesses checks the argv of every process on the machine (the booted hosts' are among
// them) for the secrets every 20ms, and with environ its environment too, until the returned stop
// is called, which says how many times it looked. A process inside reports true of (its pid) is
// left out.
func sampleProcesses(leaks *leakLog, environ bool, inside func(pid string) bool) (stop func() int) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var samples int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			samples++
			dirs, _ := filepath.Glob("/proc/[0-9]*")
			for _, dir := range dirs {
				if inside != nil && inside(filepath.Base(dir)) {
					continue
				}
				argv, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
				leaks.check("argv of "+dir, string(argv))
				if environ {
					env, _ := os.ReadFile(filepath.Join(dir, "environ"))
					leaks.check("environment of "+dir, string(env))
				}
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() int {
		close(done)
		wg.Wait()
		return samples
	}
}

// leakLog collects where secrets were seen.
type leakLog struct {
	secrets []string
	mu      sync.Mutex
	seen    map[string]bool
}

func newLeakLog(secrets []string) *leakLog {
	return &leakLog{secrets: secrets, seen: make(map[string]bool)}
}

func (l *leakLog) check(where, text string) {
	for i, s := range l.secrets {
		if strings.Contains(text, s) {
			l.mu.Lock()
			l.seen["secret "+strconv.Itoa(i+1)+" in "+where] = true
			l.mu.Unlock()
		}
	}
}

func (l *leakLog) report(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) > 0 {
		var where []string
		for w := range l.seen {
			where = append(where, w)
		}
		t.Fatalf("secrets leaked (1 = password, 2 = env file): %s", strings.Join(where, "; "))
	}
}

// maxExposure is the most systemd-analyze security may rate a backup unit or the daemon's own
// (0 safe .. 10 unsafe).
const maxExposure = 3.0

// exposureRE reads systemd-analyze security's summary line.
var exposureRE = regexp.MustCompile(`(?m)^→ Overall exposure level for (\S+): ([0-9.]+) (\S+)`)

// TestBootedHostSecurity prints `systemd-analyze security` of a backup unit exactly as the
// daemon starts it: a restic job as nobody reading a 50 GiB sparse file keeps its unit running
// while it is analysed, then the run is stopped. Run with -v to see the figure and the table; above maxExposure it fails.
func TestBootedHostSecurity(t *testing.T) {
	parallel(t)
	b := newBootedWorld(t)
	h := b.h
	h.WriteFile(t, "/srv/pw", []byte("booted password\n"), 0o600) // root's secret: closed to others, as every credential source of root's must be
	b.resticRepo("/srv/repo", "/srv/pw")
	h.Run(t, "truncate", "-s", "50G", "/srv/data/sparse")
	b.mustHoldfast("job", "add", "analysed", "--repo", "/srv/repo", "--password-file", "/srv/pw",
		"--path", "/srv/data", "--user", "nobody")

	id := b.startRun("analysed")
	var unit string
	r := b.waitRun(id, "a running unit", func(r runJSON) bool {
		if len(r.Attempts) == 0 || r.Attempts[0].Unit == "" {
			return ended(r)
		}
		unit = r.Attempts[0].Unit
		out, _ := h.Output(context.Background(), "systemctl", "show", "-p", "ActiveState,SubState", unit)
		return strings.Contains(string(out), "ActiveState=active\nSubState=running\n") || ended(r)
	})
	if ended(r) {
		t.Fatalf("run %s ended (%s: %s) before its unit could be analysed", id, r.Status, r.Reason)
	}
	out, err := h.Output(context.Background(), "systemd-analyze", "security", "--no-pager", unit)
	// systemd-analyze exits non-zero when the exposure passes --threshold (default 100: never).
	if err != nil {
		t.Fatalf("systemd-analyze security %s: %v\n%s", unit, err, out)
	}
	m := exposureRE.FindSubmatch(out)
	if m == nil || string(m[1]) != unit {
		t.Fatalf("no overall exposure for %s in:\n%s", unit, out)
	}
	if r := b.show(id); r.Status != "running" {
		t.Fatalf("run %s is %s (%s) after the analysis; the figure may be of a unit that was ending", id, r.Status, r.Reason)
	}
	exposure, err := strconv.ParseFloat(string(m[2]), 64)
	if err != nil || exposure < 0 || exposure > 10 {
		t.Fatalf("exposure %q: not a figure 0..10", m[2])
	}
	t.Logf("systemd-analyze security %s:\n%s", unit, out)
	t.Logf("backup unit exposure: %.1f %s", exposure, m[3])
	if exposure > maxExposure {
		t.Errorf("backup unit exposure %.1f is above the target %.1f", exposure, maxExposure)
	}

	// The daemon's own unit, as the package ships it.
	out, err = h.Output(context.Background(), "systemd-analyze", "security", "--no-pager", "holdfast.service")
	if err != nil {
		t.Fatalf("systemd-analyze security holdfast.service: %v\n%s", err, out)
	}
	if m = exposureRE.FindSubmatch(out); m == nil || string(m[1]) != "holdfast.service" {
		t.Fatalf("no overall exposure for holdfast.service in:\n%s", out)
	}
	t.Logf("systemd-analyze security holdfast.service:\n%s", out)
	if daemon, err := strconv.ParseFloat(string(m[2]), 64); err != nil || daemon > maxExposure {
		t.Errorf("holdfast.service exposure %s is above the target %.1f", m[2], maxExposure)
	}

	b.mustHoldfast("run", "stop", id)
	if r := b.waitRun(id, "the end", ended); r.Status != "stopped" {
		t.Fatalf("run %s: %s (%s) after run stop, want stopped", id, r.Status, r.Reason)
	}
}

// serviceProps reads properties of holdfast.service from the host's system manager.
func (b *bootedWorld) serviceProps(names ...string) map[string]string {
	b.t.Helper()
	out := b.h.Run(b.t, "systemctl", "show", "holdfast.service", "--property", strings.Join(names, ","))
	props := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			props[k] = v
		}
	}
	return props
}

// The daemon is a Type=notify service: systemd learns when it is ready and what it does (its
// status line), and restarts it through the watchdog when it stops answering (here frozen with
// SIGSTOP), within the watchdog period, while the run it supervised goes on untouched in its unit
// and ends in its first attempt.
func TestBootedHostWatchdog(t *testing.T) {
	parallel(t)
	b := newBootedWorld(t)
	h := b.h
	// The shipped period is 30s; a shorter one keeps the test short. Command jobs for a run that
	// lasts without using the CPU.
	const watchdog = 10 * time.Second
	h.Run(t, "mkdir", "-p", "/etc/systemd/system/holdfast.service.d")
	h.WriteFile(t, "/etc/systemd/system/holdfast.service.d/test.conf",
		[]byte("[Service]\nWatchdogSec=10\nEnvironment=HOLDFAST_ALLOW_COMMAND_JOBS=true\n"), 0o644)
	h.Run(t, "systemctl", "daemon-reload")
	h.Run(t, "systemctl", "restart", "holdfast.service")

	p := b.serviceProps("Type", "WatchdogUSec", "StatusText", "ActiveState", "NRestarts")
	if p["Type"] != "notify" || p["WatchdogUSec"] != "10s" || p["ActiveState"] != "active" {
		t.Fatalf("holdfast.service: %v; want Type=notify, a 10s watchdog, active", p)
	}
	if !strings.Contains(p["StatusText"], "live run(s)") {
		t.Fatalf("holdfast.service status %q, want the daemon's status line", p["StatusText"])
	}
	// The run lasts until the test lets it end, after the restart.
	b.mustHoldfast("job", "add", "long", "--engine", "command", "--command", "/bin/sh", "--command", "-c",
		"--command", "while [ ! -e /run/holdfast-test-go ]; do sleep 0.1; done")
	id := b.startRun("long")
	b.waitRun(id, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	if !testenv.Eventually(time.Minute, func() bool {
		return strings.HasPrefix(b.serviceProps("StatusText")["StatusText"], "1 live run(s)")
	}) {
		t.Fatalf("the status never showed the live run: %v", b.serviceProps("StatusText"))
	}

	before := b.serviceProps("MainPID", "NRestarts")
	h.Run(t, "systemctl", "kill", "--kill-who=main", "--signal=SIGSTOP", "holdfast.service")
	var after map[string]string
	if !testenv.Eventually(watchdog+time.Minute, func() bool {
		after = b.serviceProps("MainPID", "NRestarts", "ActiveState")
		return after["MainPID"] != before["MainPID"] && after["MainPID"] != "0" && after["ActiveState"] == "active"
	}) {
		t.Fatalf("a frozen daemon was not restarted: before %v, now %v", before, after)
	}
	// The cause: NRestarts went up, and the journal says the watchdog's timeout did it.
	t.Logf("frozen daemon restarted: %v -> %v", before, after)
	if after["NRestarts"] == before["NRestarts"] {
		t.Fatalf("NRestarts stayed %s", after["NRestarts"])
	}
	if log := h.Run(t, "journalctl", "--no-pager", "-u", "holdfast.service"); !strings.Contains(log, "Watchdog timeout") {
		t.Fatalf("the journal does not say the watchdog restarted the daemon:\n%s", log)
	}

	if r := b.show(id); r.Status != "running" || len(r.Attempts) != 1 {
		t.Fatalf("run %s after the restart: %s (%s) in %d attempt(s); want running in its first", id, r.Status, r.Reason, len(r.Attempts))
	}
	h.Run(t, "touch", "/run/holdfast-test-go")
	r := b.waitRun(id, "the end", ended)
	if r.Status != "succeeded" || len(r.Attempts) != 1 {
		t.Fatalf("run %s: %s (%s) in %d attempt(s); want succeeded in its first", id, r.Status, r.Reason, len(r.Attempts))
	}
	if c := b.holdfast("check"); c.code != 0 {
		t.Fatalf("holdfast check: exit %d\n%s%s", c.code, c.stdout, c.stderr)
	}
}
