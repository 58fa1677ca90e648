package main_test

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/testenv"
)

// Two booted hosts, holdfast a system service on each, one database, and storage both reach:
// a job added on a host is pinned there; when that host loses power with a run of an any-host
// job and a run of its pinned job in flight, the other host takes the any-host run over once the
// lost host's lease expired and the takeover grace passed, and it succeeds, while the pinned run
// waits, visibly, and is restarted on its host when it boots again.
func TestBootedHosts(t *testing.T) {
	parallelLong(t)
	shared, err := os.MkdirTemp("/var/tmp", "holdfast-hosts-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	repo, pw, data := filepath.Join(shared, "repo"), filepath.Join(shared, "repo.pw"), filepath.Join(shared, "data")
	testenv.ResticRepo(t, repo)
	if err := os.WriteFile(pw, []byte(testenv.ResticPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, 2<<20)
	_, _ = rand.Read(blob)
	if err := os.WriteFile(filepath.Join(data, "blob"), blob, 0o644); err != nil {
		t.Fatal(err)
	}

	// A lease no slow database call on a loaded machine lets lapse, short enough that the test
	// waits out the lease of the host it powers off. The grace is the daemons' own, not the default.
	const lease, grace = 8 * time.Second, 2 * time.Second
	dsn := testenv.Postgres(t)
	cfg := testenv.HostConfig{Postgres: true, Binds: []string{shared}}
	one, two := bootHostWith(t, dsn, cfg), bootHostWith(t, dsn, cfg)
	for _, b := range []*bootedWorld{one, two} {
		b.install("--lease", lease.String(), "--takeover-grace", grace.String())
		b.h.Run(t, "systemctl", "enable", "holdfast.service")
	}
	one.h.Run(t, "chown", "-R", "nobody:nogroup", repo)
	one.h.Run(t, "mkdir", "-p", "/srv/local")
	one.h.Run(t, "dd", "if=/dev/urandom", "of=/srv/local/data", "bs=1M", "count=2", "status=none")
	one.resticRepo("/srv/backup", pw)
	// Added on the first host: pinned there. Both upload at 4 KiB/s until the power loss ends
	// them: 2 MiB would take over eight minutes.
	one.mustHoldfast("job", "add", "local", "--repo", "/srv/backup", "--password-file", pw, "--path", "/srv/local",
		"--user", "nobody", "--limit-upload", "4")
	one.mustHoldfast("job", "add", "roam", "--any-host", "--repo", repo, "--password-file", pw, "--path", data,
		"--user", "nobody", "--limit-upload", "4")
	if j := one.mustHoldfast("job", "show", "local"); !strings.Contains(j, "host:          "+one.h.Name+" (pinned)") {
		t.Fatalf("job added on %s:\n%s", one.h.Name, j)
	}

	// Both runs start on the first host: the second is drained meanwhile.
	one.mustHoldfast("host", "drain", two.h.Name)
	roam, local := one.startRun("roam"), one.startRun("local")
	for _, id := range []string{roam, local} {
		one.waitRun(id, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	}
	two.mustHoldfast("host", "undrain", two.h.Name)
	if out := two.mustHoldfast("host", "list"); strings.Count(out, "alive") != 2 {
		t.Fatalf("host list:\n%s", out)
	}

	// Its lease runs out by time, with no daemon to renew it.
	one.h.PowerOff(t)
	two.mustHoldfast("job", "edit", "roam", "--limit-upload", "0") // the next attempts need not crawl
	two.mustHoldfast("job", "edit", "local", "--limit-upload", "0")
	r := two.waitRun(roam, "a second attempt", func(r runJSON) bool { return len(r.Attempts) > 1 || ended(r) })
	if len(r.Attempts) < 2 {
		t.Fatalf("any-host run after its host lost power: %+v", r)
	}
	two.waitRun(roam, "its second attempt spawned", func(r runJSON) bool { return r.Attempts[1].SpawnedAt != "" || ended(r) })
	// Taken over because the first host's lease had expired, once the second's --takeover-grace
	// had passed since, and spawned after that: the database's own times.
	tookOver(t, two.st, roam, one.h.Name, grace)
	attempts, err := two.st.AttemptList(context.Background(), mustUUID(t, roam))
	if err != nil || attempts[0].Host != one.h.Name || attempts[1].Host != two.h.Name {
		t.Fatalf("attempts of the any-host run: %+v %v", attempts, err)
	}
	if r := two.waitRun(roam, "the end", ended); r.Status != "succeeded" {
		t.Fatalf("any-host run taken over: %s (%s)", r.Status, r.Reason)
	}
	if r := two.show(local); r.Status != "running" || len(r.Attempts) != 1 ||
		!strings.Contains(r.WaitingReason, "host "+one.h.Name+" is down since") {
		t.Fatalf("pinned run of the host without power: %+v", r)
	}
	if c := two.holdfast("check"); c.code != 0 {
		t.Fatalf("holdfast check with a host down: exit %d\n%s%s", c.code, c.stdout, c.stderr)
	}

	one.h.Boot(t)
	r = one.waitRun(local, "the end", ended)
	if r.Status != "succeeded" || len(r.Attempts) != 2 {
		t.Fatalf("pinned run after its host booted again: %s (%s) in %d attempts", r.Status, r.Reason, len(r.Attempts))
	}
	if attempts, err := one.st.AttemptList(context.Background(), mustUUID(t, local)); err != nil || attempts[1].Host != one.h.Name {
		t.Fatalf("pinned run restarted on %+v %v", attempts, err)
	}
	for _, rp := range []string{repo, "/srv/backup"} {
		locks := one.h.Run(t, "restic", "--repo", rp, "--password-file", pw, "--no-cache", "list", "locks", "--no-lock")
		if strings.TrimSpace(locks) != "" {
			t.Errorf("repository %s keeps locks: %s", rp, locks)
		}
	}
	if c := one.holdfast("check"); c.code != 0 {
		t.Fatalf("holdfast check: exit %d\n%s%s", c.code, c.stdout, c.stderr)
	}
}

func mustUUID(t *testing.T, id string) uuid.UUID {
	t.Helper()
	u, err := uuid.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
