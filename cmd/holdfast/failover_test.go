package main_test

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/testenv"
)

// A PostgreSQL outage longer than a lease and the takeover grace, with runs live on two hosts,
// moves nothing: no run is taken over or restarted, no host is reported down, and every run
// ends succeeded in its first attempt. The same across a failover: the primary is killed and
// its streaming replica promoted, and the daemons, given both servers and
// target_session_attrs=read-write, go on against the new primary.
func TestDatabaseOutageAndFailover(t *testing.T) {
	parallel(t)
	primary, _ := testenv.PrivatePostgres(t, testenv.ReplicationSettings...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := primary.CreateDatabase(ctx, "holdfast"); err != nil {
		t.Fatal(err)
	}
	replica := primary.StartReplica(t, filepath.Join(testenv.SharedDir(t), "replica"))
	dsn := (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/holdfast", RawQuery: url.Values{
		"host": {primary.Dir + "," + replica.Dir}, "sslmode": {"disable"}, "target_session_attrs": {"read-write"}}.Encode()}).String()

	// Straight to the servers, also under HOLDFAST_TEST_PGBOUNCER: the failover is PostgreSQL's.
	w := &world{t: t, bin: testenv.HoldfastBinary(t), dir: testenv.SharedDir(t), dsn: dsn, addr: store.Address{DSN: dsn},
		spawnGrace: "10s", pool: newTestPool(t)}
	w.mgr = testenv.PrivateSystemd(t)
	w.state = filepath.Join(w.dir, "state")
	w.mustRun("migrate")
	c := &cluster{w: w, hosts: map[string]*clusterHost{}}
	for _, name := range []string{"h1", "h2"} {
		c.hosts[name] = &clusterHost{name: name, mgr: testenv.PrivateSystemd(t), state: filepath.Join(w.dir, "state-"+name)}
	}
	repo, pw := w.resticRepo("repo")
	w.slowBackups()
	// Short leases, so that the outages outlast them; long enough not to lapse on a loaded machine.
	const lease, grace = 6 * time.Second, 4 * time.Second
	for _, h := range []string{"h1", "h2"} {
		c.start(h, "--lease", lease.String(), "--takeover-grace", grace.String(), "--db-statement-timeout", "5s")
	}
	// Two any-host runs on each host, held in their units across each outage.
	round := func(n int) []string {
		var ids []string
		for _, pair := range [][2]string{{"h1", "h2"}, {"h2", "h1"}} {
			on, other := pair[0], pair[1]
			w.mustRun("host", "drain", other)
			for i := range 2 {
				job := on + "-" + string(rune('a'+i))
				data := w.sampleData("data-"+job, 6, slowData)
				if n == 0 {
					w.mustRun("job", "add", job, "--any-host", "--repo", repo, "--password-file", pw, "--path", data)
				}
				ids = append(ids, w.startRun(job))
			}
			for _, id := range ids[len(ids)-2:] {
				w.waitRun(id, "progress", func(r runJSON) bool { return r.Progress != nil && r.Progress.BytesDone > 0 || ended(r) })
			}
			w.mustRun("host", "undrain", other)
		}
		return ids
	}
	movedNothing := func(what string, ids []string) {
		t.Helper()
		w.endedRight(ids)
		for _, id := range ids {
			if a := c.attemptHosts(id); len(a) != 1 {
				t.Fatalf("%s: run %s has attempts %+v, want its first only", what, id, a)
			}
		}
		events, err := w.store().EventList(context.Background(), store.EventListParams{Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Event == "host_down" {
				t.Fatalf("%s: host %s reported down: %s", what, e.Host, e.Reason)
			}
		}
		if out := w.mustRun("host", "list"); strings.Count(out, "alive") != 2 {
			t.Fatalf("%s: host list:\n%s", what, out)
		}
		w.checkInvariants()
	}

	// An outage: the server is down for longer than a lease and the grace.
	release := w.holdBackups()
	ids := round(0)
	if err := primary.RestartAfter(testenv.Fast, lease+grace+2*time.Second); err != nil {
		t.Fatal(err)
	}
	release()
	movedNothing("after an outage", ids)

	// A failover: the primary dies, and its replica, with everything it wrote, is promoted after
	// as long an outage.
	release = w.holdBackups()
	ids = round(1)
	if err := primary.WaitReplayed(replica); err != nil {
		t.Fatal(err)
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lease + grace + 2*time.Second)
	if err := replica.Promote(); err != nil {
		t.Fatal(err)
	}
	release()
	movedNothing("after a failover", ids)
}
