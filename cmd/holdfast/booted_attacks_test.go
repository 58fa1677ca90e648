package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

// Attacks of a local user, alice, on root through what the daemon hands to systemd by path: a
// restore's target (ReadWritePaths=) and a job's secret files (LoadCredential=). systemd (PID 1,
// root) follows links in both, so a path that alice can change between the operator's command and
// the unit's start must be refused by holdfast, at admission or at the spawn, and nothing of root's
// reach alice or be written outside the target.

// asAlice runs the rest of an argv inside the host as alice, with her own groups.
var asAlice = []string{"setpriv", "--reuid", "alice", "--regid", "alice", "--init-groups", "--"}

// addAlice creates the local user alice on the host.
func (b *bootedWorld) addAlice() {
	b.t.Helper()
	b.h.Run(b.t, "useradd", "--create-home", "--shell", "/bin/sh", "alice")
}

// alice runs a shell script inside the host as alice (set -eu) and returns its output.
func (b *bootedWorld) alice(script string) string {
	b.t.Helper()
	return b.h.Run(b.t, append(slices.Clone(asAlice), "sh", "-euc", script)...)
}

// sub is the world as a subtest uses it: its failures are the subtest's.
func (b *bootedWorld) sub(t *testing.T) *bootedWorld {
	c := *b
	c.t = t
	return &c
}

func randomToken(t *testing.T) string {
	t.Helper()
	buf := make([]byte, 12)
	if _, err := rand.Read(buf); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(buf)
}

// The root job of the restore attacks: no --user, so its restores run as root with CAP_CHOWN,
// CAP_FOWNER and CAP_DAC_OVERRIDE; its repository and password file are root's.
const (
	rootJob     = "rootjob"
	rootRepo    = "/srv/rootrepo"
	rootRepoPw  = "/root/rootrepo.pw"
	rootJobData = "/srv/data"
)

// rootJobSnapshots adds the root job and backs it up once for each name: each snapshot holds
// /srv/data with a single file of that name, so a restore of it is known by where that name
// appears. It returns the snapshots' ids, in order.
func (b *bootedWorld) rootJobSnapshots(names ...string) []string {
	t, h := b.t, b.h
	t.Helper()
	h.WriteFile(t, rootRepoPw, []byte("root's own repository password\n"), 0o600)
	h.Run(t, "restic", "--repo", rootRepo, "--password-file", rootRepoPw, "--no-cache", "init")
	b.mustHoldfast("job", "add", rootJob, "--repo", rootRepo, "--password-file", rootRepoPw, "--path", rootJobData)
	var snaps []string
	for _, name := range names {
		h.Run(t, "sh", "-euc", "rm -rf "+rootJobData+"/* && head -c 65536 /dev/urandom >"+rootJobData+"/"+name)
		id := b.startRun(rootJob)
		r := b.waitRun(id, "the end", ended)
		if r.Status != "succeeded" || r.SnapshotID == "" {
			t.Fatalf("backup %s of the root job: %s (%s), snapshot %q; want succeeded with a snapshot", id, r.Status, r.Reason, r.SnapshotID)
		}
		snaps = append(snaps, r.SnapshotID)
	}
	return snaps
}

// restoreRuns counts the root job's runs of kind restore.
func (b *bootedWorld) restoreRuns() int {
	b.t.Helper()
	var runs []listedRun
	if err := json.Unmarshal([]byte(b.mustHoldfast("run", "list", "--job", rootJob, "--limit", "1000", "--json")), &runs); err != nil {
		b.t.Fatal(err)
	}
	n := 0
	for _, r := range runs {
		if r.Kind == "restore" {
			n++
		}
	}
	return n
}

// etcGuard is /etc and root's repository as they were before an attack.
type etcGuard struct {
	b      *bootedWorld
	mark   string // a file outside /etc touched before the attack: /etc has nothing newer
	config string // sha256sum of root's repository's config
}

// guardEtc records /etc and root's repository before an attack.
func (b *bootedWorld) guardEtc(name string) *etcGuard {
	b.t.Helper()
	g := &etcGuard{b: b, mark: "/root/etc-before-" + name}
	g.config = b.h.Run(b.t, "sha256sum", rootRepo+"/config")
	b.h.Run(b.t, "touch", g.mark)
	if newer := strings.TrimSpace(b.h.Run(b.t, "find", "/etc", "-newer", g.mark)); newer != "" {
		b.t.Fatalf("/etc has files newer than the mark just touched:\n%s", newer)
	}
	return g
}

// untouched reports what was written outside the target: anything under /etc newer than the
// mark, the snapshot's file (by its name) anywhere under /etc, a changed config of root's
// repository, or the repository no longer answering restic snapshots.
func (g *etcGuard) untouched(snapshotFile string) {
	t, h := g.b.t, g.b.h
	t.Helper()
	if newer := strings.TrimSpace(h.Run(t, "find", "/etc", "-newer", g.mark)); newer != "" {
		t.Errorf("written under /etc since the restore was asked for (find /etc -newer %s):\n%s", g.mark, newer)
	}
	if found := strings.TrimSpace(h.Run(t, "find", "/etc", "-name", snapshotFile)); found != "" {
		t.Errorf("the snapshot's file %s was restored under /etc:\n%s", snapshotFile, found)
	}
	if now := h.Run(t, "sha256sum", rootRepo+"/config"); now != g.config {
		t.Errorf("root's repository's config changed: %s, was %s", now, g.config)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := h.Output(ctx, "restic", "--repo", rootRepo, "--password-file", rootRepoPw, "--no-cache", "snapshots"); err != nil {
		t.Errorf("restic snapshots of root's repository after the attack: %v\n%s", err, out)
	}
}

// restoreRefused checks that a restore was refused, naming the refused path (one of paths: the
// fix may name the target, the link or the directory alice owns): either holdfast restore exited
// 2 saying so and queued nothing (before: the restore runs then), or its run ended failed with a
// reason saying so.
func (b *bootedWorld) restoreRefused(adm result, before int, r *runJSON, paths ...string) {
	t := b.t
	t.Helper()
	names := func(s string) bool {
		for _, p := range paths {
			if strings.Contains(s, p) {
				return true
			}
		}
		return false
	}
	if r == nil {
		if adm.code != 2 || !names(adm.stderr) {
			t.Errorf("holdfast restore: exit %d, stderr %q; want exit 2 naming one of %q", adm.code, adm.stderr, paths)
		}
		if n := b.restoreRuns(); n != before {
			t.Errorf("holdfast restore refused, but %d restore run(s) were queued", n-before)
		}
		return
	}
	if r.Status != "failed" || !names(r.Reason) {
		t.Errorf("restore run %s ended %s (%s); want failed with a reason naming one of %q", r.ID, r.Status, r.Reason, paths)
	}
}

// restoreEnd waits for the restore run id to end and returns it; nil for no run (it was refused
// at admission).
func (b *bootedWorld) restoreEnd(id string) *runJSON {
	b.t.Helper()
	if id == "" {
		return nil
	}
	end := b.waitRun(id, "the end", ended)
	b.t.Logf("restore run %s: %s (%s)", id, end.Status, end.Reason)
	return &end
}

// admitRestore asks for a restore of the root job as the operator would, with the daemon stopped
// so that the run waits (holdfast restore queues it, saying no live daemon runs it). It returns
// what the command did and the run's id ("" if it was refused). However the test ends, the daemon
// runs again after it and the run is no longer live (stopped first if it is: what runs next on the
// host is not disturbed by it).
func (b *bootedWorld) admitRestore(snapshot, target string) (result, string) {
	t := b.t
	t.Helper()
	b.h.Run(t, "systemctl", "stop", "holdfast.service")
	adm := b.holdfast("restore", rootJob, "--snapshot", snapshot, "--target", target, "--json")
	t.Logf("holdfast restore --target %s: exit %d, stderr: %s", target, adm.code, adm.stderr)
	var r runJSON
	if adm.code == 0 {
		if err := json.Unmarshal([]byte(adm.stdout), &r); err != nil || r.ID == "" {
			t.Fatalf("holdfast restore --json printed %q: %v", adm.stdout, err)
		}
	}
	t.Cleanup(func() {
		if r.ID != "" && !ended(b.show(r.ID)) {
			b.holdfast("run", "stop", r.ID)
		}
		b.h.Run(t, "systemctl", "start", "holdfast.service")
		if r.ID != "" {
			b.waitRun(r.ID, "the end", ended)
		}
	})
	return adm, r.ID
}

// stillWaiting fails the test unless the restore run (if one was admitted) is still queued with no
// attempt spawned: what alice changes next, she changes before any unit of it starts.
func (b *bootedWorld) stillWaiting(id string) {
	b.t.Helper()
	if id == "" {
		return
	}
	r := b.show(id)
	spawned := false
	for _, a := range r.Attempts {
		spawned = spawned || a.SpawnedAt != ""
	}
	if r.Status != "queued" || spawned {
		b.t.Fatalf("restore run %s before alice's move: %s, attempts %+v; want queued, none spawned", id, r.Status, r.Attempts)
	}
}

// A root job's restore into a directory alice controls, redirected to /etc after the operator's
// command checked it and before the unit starts, by the daemon being down in between (the
// restore waits queued):
//   - target swapped: /srv/alice is alice's (0755); the target /srv/alice/restoreC, made by
//     holdfast restore, becomes alice's link to /etc;
//   - intermediate link: the target /srv/alice/link/default, where /srv/alice/link is alice's link
//     to /srv/alice/real at admission, which she points at /etc: the target is then /etc/default
//     (a directory of /etc that exists, as the sandbox skips a writable path that does not).
//
// systemd follows the link as it makes the target writable in the unit, and restic, as root with
// CAP_DAC_OVERRIDE, restores under it. Nothing may be written outside the target: the restore is
// refused, at admission or at the spawn, naming the path.
func TestBootedAttackRestoreLink(t *testing.T) {
	parallel(t)
	b := newBootedWorld(t)
	h := b.h
	b.addAlice()
	swapFile, linkFile := "hf-tree-swap-"+randomToken(t)[:8], "hf-tree-link-"+randomToken(t)[:8]
	snaps := b.rootJobSnapshots(swapFile, linkFile)
	h.Run(t, "install", "-d", "-o", "alice", "-g", "alice", "-m", "0755", "/srv/alice")

	t.Run("target swapped for a link", func(t *testing.T) {
		b := b.sub(t)
		const target = "/srv/alice/restoreC"
		before := b.restoreRuns()
		adm, id := b.admitRestore(snaps[0], target)
		b.stillWaiting(id)
		// alice, after the operator's command, before the unit starts: the directory made for
		// the restore (empty, in her directory) becomes her link to /etc.
		b.alice("rmdir " + target + " 2>/dev/null || true; ln -s /etc " + target)
		t.Logf("alice: %s", h.Run(t, "ls", "-ld", target))
		g := b.guardEtc("swap")
		h.Run(t, "systemctl", "start", "holdfast.service")
		r := b.restoreEnd(id)
		g.untouched(swapFile)
		b.restoreRefused(adm, before, r, "/srv/alice")
	})

	t.Run("intermediate link re-pointed", func(t *testing.T) {
		b := b.sub(t)
		const target = "/srv/alice/link/default"
		// alice's: a directory, an empty directory in it, and a link to the first.
		b.alice("mkdir -p /srv/alice/real/default && ln -s /srv/alice/real /srv/alice/link")
		before := b.restoreRuns()
		adm, id := b.admitRestore(snaps[1], target)
		b.stillWaiting(id)
		b.alice("ln -sfn /etc /srv/alice/link")
		t.Logf("alice: %s", h.Run(t, "ls", "-ld", "/srv/alice/link", target))
		g := b.guardEtc("link")
		h.Run(t, "systemctl", "start", "holdfast.service")
		r := b.restoreEnd(id)
		g.untouched(linkFile)
		b.restoreRefused(adm, before, r, "/srv/alice")
	})
}

// A root job's restore into /srv/share/r, all root's when it is asked for, is in its first
// attempt when the host reboots gracefully; holdfast.service does not start at the boot. Then
// alice is given /srv/share and replaces r with a link to /etc, and the daemon starts: it restarts
// the interrupted restore (attempt 2). Its target is no longer what was checked: the restart must
// be refused, naming the path, and nothing be written outside the target.
//
// The first attempt is kept running until the reboot by the repository: its data packs are FIFOs
// while it runs (restic blocks opening one), and are put back before the daemon starts again.
func TestBootedAttackRestoreLinkAfterReboot(t *testing.T) {
	parallel(t)
	b := newBootedWorld(t)
	h := b.h
	b.addAlice()
	file := "hf-tree-reboot-" + randomToken(t)[:8]
	snaps := b.rootJobSnapshots(file)
	h.Run(t, "install", "-d", "-o", "root", "-g", "root", "-m", "0755", "/srv/share")
	const target = "/srv/share/r"
	before := b.restoreRuns()
	adm, id := b.admitRestore(snaps[0], target)
	if id == "" {
		// A target all root's at admission: no check may refuse it.
		t.Fatalf("holdfast restore --target %s refused: exit %d: %s", target, adm.code, adm.stderr)
	}
	if n := b.restoreRuns(); n != before+1 {
		t.Fatalf("%d restore runs queued, want 1", n-before)
	}
	h.Run(t, "sh", "-euc", `mkdir -p /root/packs
for f in `+rootRepo+`/data/*/*; do
	mv "$f" /root/packs/
	mkfifo -m 0600 "$f"
	echo "$f" >>/root/packs.list
done`)
	h.Run(t, "systemctl", "start", "holdfast.service")
	r := b.waitRun(id, "its first attempt spawned", func(r runJSON) bool {
		return len(r.Attempts) > 0 && r.Attempts[0].SpawnedAt != "" && r.Attempts[0].Unit != "" || ended(r)
	})
	if ended(r) {
		t.Fatalf("restore run %s ended before the reboot: %s (%s)", id, r.Status, r.Reason)
	}
	unit := r.Attempts[0].Unit
	var state string
	if !testenv.Eventually(time.Minute, func() bool {
		out, _ := h.Output(context.Background(), "systemctl", "is-active", unit)
		state = strings.TrimSpace(string(out))
		return state == "active"
	}) {
		t.Fatalf("the first attempt's unit %s is %q, want active", unit, state)
	}
	// restic waits on a pack. The daemon must not start at the boot (install started it, never
	// enabled it: disabled, whatever enabled it since).
	h.Run(t, "systemctl", "disable", "holdfast.service")
	if r := b.show(id); r.Status != "running" || len(r.Attempts) != 1 {
		t.Fatalf("restore run %s before the reboot: %s (%s) in %d attempt(s), want running in its first", id, r.Status, r.Reason, len(r.Attempts))
	}
	h.Reboot(t)
	if out, _ := h.Output(context.Background(), "systemctl", "is-active", "holdfast.service"); strings.TrimSpace(string(out)) == "active" {
		t.Fatal("holdfast.service started at the boot")
	}
	h.Run(t, "sh", "-euc", `while read -r f; do
	rm -f "$f"
	mv "/root/packs/$(basename "$f")" "$f"
done </root/packs.list`)
	h.Run(t, "chown", "alice", "/srv/share")
	// What the first attempt restored stays, moved aside (a rename in her own directory).
	b.alice("mv " + target + " /srv/share/r.old && ln -s /etc " + target)
	t.Logf("alice: %s", h.Run(t, "ls", "-ld", "/srv/share", target))
	g := b.guardEtc("reboot")
	h.Run(t, "systemctl", "start", "holdfast.service")
	end := b.waitRun(id, "the end", ended)
	for _, a := range end.Attempts {
		t.Logf("attempt %d: unit %s, boot %s, %s %s %s", a.Attempt, a.Unit, a.BootID, a.ServiceResult, a.ExitCode, a.ExitStatus)
	}
	t.Logf("restore run %s: %s (%s)", id, end.Status, end.Reason)
	if len(end.Attempts) == 0 || end.Attempts[0].ExitStatus != "130" {
		t.Errorf("restore run %s: attempts %+v; want the first interrupted by the reboot (130)", id, end.Attempts)
	}
	g.untouched(file)
	b.restoreRefused(adm, before, &end, "/srv/share")
}

// pollCredentials is alice's own process: it reads every credential it can under
// /run/credentials while units come and go, appending each file's content once to OUT and each
// unit's directory it saw to OUT.dirs, until the file STOP exists. Args: OUT STOP.
const pollCredentials = `use strict;
my ($out, $stop) = @ARGV;
my (%dirs, %got);
sub entries {
	my $dir = shift;
	opendir(my $dh, $dir) or return ();
	my @e = grep { $_ ne '.' && $_ ne '..' } readdir($dh);
	closedir($dh);
	return map { "$dir/$_" } @e;
}
sub append {
	my ($file, $text) = @_;
	open(my $fh, '>>', $file) or die "$file: $!";
	print $fh $text;
	close($fh);
}
append("$out.ready", "ready\n");
my $deadline = time + 900;
while (!-e $stop && time < $deadline) {
	for my $d (entries('/run/credentials')) {
		append("$out.dirs", "$d\n") unless $dirs{$d}++;
		for my $f (entries($d)) {
			next if $got{$f};
			open(my $fh, '<', $f) or next;
			local $/;
			my $data = <$fh>;
			close($fh);
			next unless defined $data && length $data;
			$got{$f} = 1;
			append($out, "== $f\n$data\n");
		}
	}
	select(undef, undef, undef, 0.002);
}
`

// alice's before hook: it copies every credential it can read into the job's path, which a unit
// with hooks makes writable. Arg: the directory.
const lootHook = `#!/bin/sh
echo ran >>"$1/hook-ran"
for f in "$CREDENTIALS_DIRECTORY"/* /run/credentials/*/*; do
	if [ -f "$f" ] && [ -r "$f" ]; then
		{ echo "== $f"; cat "$f"; } >>"$1/loot"
	fi
done
exit 0
`

// alice's job, --user alice, names a secret file of hers that its units get as a systemd
// credential (LoadCredential=): --password-file and --env-file in its backups, --copy-password-file
// and --copy-env-file in its copies. After job add she replaces it with a link to
// /etc/holdfast/holdfast.env (root's, 0600: the database's DSN, and a canary). systemd, as root,
// follows the link, and the unit's credential, which alice reads (her before hook in a backup, her
// own process polling /run/credentials during a copy), is root's file. The spawn must refuse the
// credential before the unit starts: the run ends failed naming the file, and no byte of the
// canary reaches alice, in her files or in logs she can read.
func TestBootedAttackCredentialLink(t *testing.T) {
	parallel(t)
	b := newBootedWorld(t)
	h := b.h
	b.addAlice()
	h.WriteFile(t, "/home/alice/poll.pl", []byte(pollCredentials), 0o644)
	h.Run(t, "chown", "alice:alice", "/home/alice/poll.pl")
	h.Run(t, "install", "-d", "-o", "alice", "-g", "alice", "-m", "0755", "/srv/alice")
	env := h.Run(t, "cat", "/etc/holdfast/holdfast.env")
	for _, v := range []struct {
		job, flag, file string // the job, the flag naming alice's file, its name in her directory
		copy            bool   // the file is a copy's: the copy run, after the backup, is attacked
	}{
		{"alicepw", "--password-file", "pw", false},
		{"aliceenv", "--env-file", "job.env", false},
		{"alicecopypw", "--copy-password-file", "copy.pw", true},
		{"alicecopyenv", "--copy-env-file", "copy.env", true},
	} {
		t.Run(v.flag, func(t *testing.T) {
			b := b.sub(t)
			canary := "canary-" + randomToken(t)
			h.WriteFile(t, "/etc/holdfast/holdfast.env", []byte(env+"HOLDFAST_CANARY="+canary+"\n"), 0o600)
			home, srv := "/home/alice/"+v.job, "/srv/alice/"+v.job
			data, file := home+"/data", home+"/"+v.file
			repo, copyRepo := srv+"/repo", srv+"/copy"
			rootPw, rootCopyPw := "/etc/holdfast/"+v.job+".pw", "/etc/holdfast/"+v.job+"-copy.pw"
			h.WriteFile(t, rootPw, []byte("root's password of "+v.job+"\n"), 0o600)
			h.WriteFile(t, rootCopyPw, []byte("root's copy password of "+v.job+"\n"), 0o600)
			// alice's files: her data, her secret file (a password, or an environment), her hook.
			secret := "RESTIC_COMPRESSION=auto"
			if strings.HasSuffix(v.file, "pw") {
				secret = "alice-password-of-" + v.job
			}
			b.alice("mkdir -p " + data + " " + srv + " && echo alice-data >" + data + "/notes && umask 077 && echo " + secret + " >" + file)
			h.WriteFile(t, home+"/hook.sh", []byte(lootHook), 0o755)
			h.Run(t, "chown", "alice:alice", home+"/hook.sh")
			repoPw, copyPw := rootPw, rootCopyPw
			switch v.flag {
			case "--password-file":
				repoPw = file
			case "--copy-password-file":
				copyPw = file
			}
			b.resticRepoAs(repo, repoPw, "alice")
			args := []string{"job", "add", v.job, "--user", "alice", "--repo", repo, "--password-file", repoPw, "--path", data}
			if v.copy {
				b.resticRepoAs(copyRepo, copyPw, "alice")
				args = append(args, "--copy-to", copyRepo, "--copy-password-file", copyPw)
				if v.flag == "--copy-env-file" {
					args = append(args, "--copy-env-file", file)
				}
			} else {
				args = append(args, "--before", home+"/hook.sh "+data)
				if v.flag == "--env-file" {
					args = append(args, "--env-file", file)
				}
			}
			b.mustHoldfast(args...)

			// alice's poller, started as she would start any process of hers.
			polled, stop := home+"/polled", home+"/stop-polling"
			pollUnit := "alice-poll-" + v.job + ".service"
			h.Run(t, "systemd-run", "--quiet", "--collect", "--unit", pollUnit, "--uid", "alice", "--gid", "alice",
				"perl", "/home/alice/poll.pl", polled, stop)
			t.Cleanup(func() { _, _ = h.Output(context.Background(), "systemctl", "stop", pollUnit) })
			if !testenv.Eventually(time.Minute, func() bool {
				_, err := h.Output(context.Background(), "test", "-e", polled+".ready")
				return err == nil
			}) {
				t.Fatalf("alice's poller never started: %s", h.Run(t, "systemctl", "status", "--no-pager", pollUnit))
			}
			// The attack: after job add, her file becomes a link to root's environment file.
			b.alice("ln -sf /etc/holdfast/holdfast.env " + file)
			t.Logf("alice: %s", h.Run(t, "ls", "-l", file))

			id := b.startRun(v.job)
			backup := b.waitRun(id, "the end", ended)
			t.Logf("backup run %s: %s (%s)", id, backup.Status, backup.Reason)
			runs := []string{id}
			attacked := backup
			if v.copy {
				if backup.Status != "succeeded" {
					t.Fatalf("backup run %s: %s (%s); want succeeded, for the copy after it", id, backup.Status, backup.Reason)
				}
				copyRun := b.waitCopy(v.job)
				attacked = b.show(copyRun.ID)
				t.Logf("copy run %s: %s (%s)", attacked.ID, attacked.Status, attacked.Reason)
				runs = append(runs, attacked.ID)
			}
			h.Run(t, "touch", stop)
			if !testenv.Eventually(time.Minute, func() bool {
				out, _ := h.Output(context.Background(), "systemctl", "is-active", pollUnit)
				return strings.TrimSpace(string(out)) != "active"
			}) {
				t.Errorf("alice's poller did not stop")
			}
			if out, err := h.Output(context.Background(), "cat", polled+".dirs"); err == nil {
				t.Logf("credential directories alice saw:\n%s", out)
			}

			// No byte of root's file reached alice: not in her files, not in what the run's logs or
			// her journal show.
			found, _ := h.Output(context.Background(), "grep", "-rlF", canary, "/home/alice", "/srv/alice")
			if s := strings.TrimSpace(string(found)); s != "" {
				t.Errorf("root's /etc/holdfast/holdfast.env (its canary) reached alice's files:\n%s", s)
				for _, f := range strings.Fields(s) {
					// The canary's line as the file holds it, and whether the DSN's came along
					// (its value is not printed: it may carry a password).
					line, _ := h.Output(context.Background(), "grep", "-m1", "-F", canary, f)
					_, dsn := h.Output(context.Background(), "grep", "-q", "^HOLDFAST_DSN=", f)
					t.Logf("%s holds %s and HOLDFAST_DSN=...: %v", f, strings.TrimSpace(string(line)), dsn == nil)
				}
			}
			for _, rid := range runs {
				if logs := b.mustHoldfast("run", "logs", rid); strings.Contains(logs, canary) {
					t.Errorf("run logs %s shows the canary:\n%s", rid, logs)
				}
			}
			journal, _ := h.Output(context.Background(), append(slices.Clone(asAlice), "journalctl", "--no-pager", "-o", "cat")...)
			if strings.Contains(string(journal), canary) {
				t.Errorf("alice's journalctl shows the canary")
			}
			t.Logf("alice's journalctl: %d lines, none with the canary unless said above", strings.Count(string(journal), "\n"))

			// Refused at the spawn, before the unit started, naming her file.
			if attacked.Status != "failed" || !strings.Contains(attacked.Reason, file) {
				t.Errorf("run %s ended %s (%s); want failed with a reason naming %s", attacked.ID, attacked.Status, attacked.Reason, file)
			}
			if dirs, _ := h.Output(context.Background(), "cat", polled+".dirs"); strings.Contains(string(dirs), attacked.ID) {
				t.Errorf("a unit of run %s started with credentials: alice saw its directory", attacked.ID)
			}
			if !v.copy {
				if _, err := h.Output(context.Background(), "test", "-e", data+"/hook-ran"); err == nil {
					t.Errorf("alice's before hook ran in a unit of run %s", id)
				}
			}
		})
	}
}

// waitCopy waits for the job's copy run (the one after its backup) to end and returns it.
func (b *bootedWorld) waitCopy(job string) listedRun {
	b.t.Helper()
	var copied listedRun
	list := func() []listedRun {
		var runs []listedRun
		if err := json.Unmarshal([]byte(b.mustHoldfast("run", "list", "--job", job, "--json")), &runs); err != nil {
			b.t.Fatal(err)
		}
		return runs
	}
	second := func() string { return time.Now().Format(time.TimeOnly) }
	await(b.t, "job "+job+": its copy run's end", second, list, func(runs []listedRun) bool {
		for _, r := range runs {
			if r.Kind == "copy" && r.Status != "queued" && r.Status != "running" {
				copied = r
				return true
			}
		}
		return false
	})
	return copied
}
