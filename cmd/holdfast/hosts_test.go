package main_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/testenv"
)

// cluster is hosts sharing one database, as machines would: each host has its own systemd
// manager, state directory and daemon (with its own --host). The world's CLI runs as h1's.
type cluster struct {
	w     *world
	hosts map[string]*clusterHost
	// The daemons' --lease, --takeover-grace and --sweep-interval; zero: clusterLease, clusterGrace, 500ms.
	lease, grace, sweep time.Duration
}

type clusterHost struct {
	name    string
	mgr     *testenv.Manager
	state   string
	d       *daemon
	metrics string // the daemon's /metrics
}

// The cluster's daemons hold leases long enough that no slow database call on a loaded machine
// lets one lapse; a test that has a host go down waits its lease out, as the hosts left do. The
// others take its any-host runs over 2s after that, not at the default grace.
const (
	clusterLease = 8 * time.Second
	clusterGrace = 2 * time.Second
)

func newCluster(t *testing.T, names ...string) *cluster {
	t.Helper()
	return newClusterOn(t, newWorld(t), names...)
}

// newClusterOwnManagers is a cluster whose first host (the CLI's) has a private manager too, so
// that a test may kill any host.
func newClusterOwnManagers(t *testing.T, names ...string) *cluster {
	t.Helper()
	return newClusterOn(t, newWorldOwnManager(t), names...)
}

func newClusterOn(t *testing.T, w *world, names ...string) *cluster {
	t.Helper()
	w.spawnGrace = "3s" // a daemon that asked its own manager about another host's unit would restart it soon
	c := &cluster{w: w, hosts: map[string]*clusterHost{}, lease: clusterLease, grace: clusterGrace, sweep: 500 * time.Millisecond}
	for i, name := range names {
		h := &clusterHost{name: name, mgr: w.mgr, state: w.state}
		if i > 0 {
			h.mgr = testenv.PrivateSystemd(t)
			h.state = filepath.Join(w.dir, "state-"+name)
		}
		c.hosts[name] = h
	}
	return c
}

// start starts the host's daemon and waits until it holds its lease.
func (c *cluster) start(name string, args ...string) {
	c.w.t.Helper()
	h := c.hosts[name]
	env := append([]string{"HOLDFAST_SYSTEMD_ADDRESS=" + h.mgr.Address, "HOLDFAST_STATE_DIR=" + h.state,
		"HOLDFAST_JOURNAL_DIR=" + h.mgr.JournalDir}, h.mgr.Env()...)
	addr := testenv.FreeAddr(c.w.t)
	args = append([]string{"--host", name, "--lease", cmp.Or(c.lease, clusterLease).String(),
		"--takeover-grace", cmp.Or(c.grace, clusterGrace).String(), "--sweep-interval", cmp.Or(c.sweep, 500*time.Millisecond).String(), "--listen", addr, "--web-auth-file", webAuthFile(c.w.t)}, args...)
	h.d = c.w.startDaemonEnv(env, args...)
	h.metrics = "http://" + addr + "/metrics"
}

// sweeps is how many reconciler passes the host's daemon has ended without an error.
func (c *cluster) sweeps(name string) uint64 {
	c.w.t.Helper()
	f, ok := scrape(c.w.t, c.hosts[name].metrics)["holdfast_sweep_duration_seconds"]
	if !ok || len(f.Metric) != 1 || f.Metric[0].Histogram == nil {
		c.w.t.Fatalf("host %s: no sweep histogram in its metrics", name)
	}
	return f.Metric[0].Histogram.GetSampleCount()
}

// sweptPast waits until the database's clock is d past the spawn claim of each run's first
// attempt, then until each of the hosts' daemons has ended two passes more: one of them began
// after that time, so whatever a daemon would do about what d made true, it has done.
func (c *cluster) sweptPast(d time.Duration, ids []string, hosts ...string) {
	c.w.t.Helper()
	var after time.Time
	for _, id := range ids {
		a := c.attemptHosts(id)
		spawned, err := time.Parse(time.RFC3339Nano, a[0].Spawned)
		if err != nil {
			c.w.t.Fatalf("run %s attempt 1: spawned_at %q: %v", id, a[0].Spawned, err)
		}
		if spawned.Add(d).After(after) {
			after = spawned.Add(d)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		hs, err := c.w.store().HostList(context.Background())
		if err == nil && len(hs) > 0 && hs[0].ReadAt.After(after) {
			break
		}
		if time.Now().After(deadline) {
			c.w.t.Fatalf("the database's clock never passed %s: %v", after, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, h := range hosts {
		from := c.sweeps(h)
		for c.sweeps(h) < from+2 {
			if time.Now().After(deadline) {
				c.w.t.Fatalf("host %s ended %d passes in 3 minutes, want 2", h, c.sweeps(h)-from)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// ranOn returns the hosts whose state directory holds the exit marker of the run's attempt.
func (c *cluster) ranOn(id string, attempt int) []string {
	var on []string
	for name, h := range c.hosts {
		if _, err := os.Stat(filepath.Join(h.state, "markers", fmt.Sprintf("%s.a%d.json", id, attempt))); err == nil {
			on = append(on, name)
		}
	}
	return on
}

// waitBackup waits until the run's restic backup is underway: its unit may run restic
// unlock first, and a rate changed before restic backup started would apply to it.
func (w *world) waitBackup(id string) {
	w.t.Helper()
	if r := w.waitRun(id, "the backup's progress", w.underway); ended(r) {
		w.t.Fatalf("run %s ended before the test could act on it: %+v", id, r)
	}
}

type attemptHost struct {
	Attempt int    `json:"attempt"`
	Host    string `json:"host"`
	Unit    string `json:"unit"`
	Spawned string `json:"spawned_at"`
	Ended   string `json:"ended_at"`
	Result  string `json:"service_result"`
	// SupersededBy is the host that took the run over from this attempt.
	SupersededBy string `json:"superseded_by"`
}

// attemptHosts reads the run's attempts with the hosts that claimed them.
func (c *cluster) attemptHosts(id string) []attemptHost {
	c.w.t.Helper()
	var out struct {
		Attempts []attemptHost `json:"attempts"`
	}
	if err := json.Unmarshal([]byte(c.w.mustRun("run", "show", id, "--json")), &out); err != nil {
		c.w.t.Fatal(err)
	}
	return out.Attempts
}

// tookOver checks, by the database's own times, that the run's first attempt, on host from, was
// taken over because from's lease had expired: no sooner than grace after its lease_until (as the
// host_down event recorded it), by a host whose --takeover-grace is grace; and that the second
// attempt was spawned after that.
func tookOver(t *testing.T, st *store.Store, run, from string, grace time.Duration) {
	t.Helper()
	ctx := context.Background()
	id, err := uuid.Parse(run)
	if err != nil {
		t.Fatal(err)
	}
	attempts, err := st.AttemptList(ctx, id)
	if err != nil || len(attempts) < 2 || attempts[0].Host != from || attempts[0].SupersededAt == nil || attempts[1].SpawnClaimedAt == nil {
		t.Fatalf("run %s: attempts %+v (%v), want the first on %s superseded and a second spawned", run, attempts, err, from)
	}
	first, second := attempts[0], attempts[1]
	events, err := st.EventList(ctx, store.EventListParams{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var leaseUntil time.Time
	for _, e := range events {
		if e.Event != "host_down" || e.Host != from {
			continue
		}
		var details struct {
			LeaseUntil time.Time `json:"lease_until"`
		}
		if err := json.Unmarshal(e.Details, &details); err != nil {
			t.Fatalf("host_down event of %s: %s: %v", from, e.Details, err)
		}
		leaseUntil = details.LeaseUntil
	}
	if leaseUntil.IsZero() {
		t.Fatalf("no host_down event of host %s before its run was taken over", from)
	}
	if earliest := leaseUntil.Add(grace); first.SupersededAt.Before(earliest) {
		t.Fatalf("run %s taken over from %s at %s, before its lease (until %s) was %s past", run, from, first.SupersededAt, leaseUntil, grace)
	}
	if second.SpawnClaimedAt.Before(*first.SupersededAt) {
		t.Fatalf("run %s: attempt 2 spawned at %s, before attempt 1 was taken over at %s", run, second.SpawnClaimedAt, first.SupersededAt)
	}
	hosts, err := st.HostList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if h.Name == first.SupersededBy && h.TakeoverGrace != grace {
			t.Fatalf("host %s took run %s over with a takeover grace of %s, want its --takeover-grace %s", h.Name, run, h.TakeoverGrace, grace)
		}
	}
	t.Logf("run %s: %s's lease until %s; taken over by %s at %s; attempt 2 spawned at %s", run, from,
		leaseUntil.Format(time.RFC3339Nano), first.SupersededBy, first.SupersededAt.Format(time.RFC3339Nano), second.SpawnClaimedAt.Format(time.RFC3339Nano))
}

// Scenario 1: what pinning is to the binary and each host's own manager. With no daemon, a
// waited start is refused, as nothing would take the run. Three daemons show alive with their
// restic; a pinned run is spawned by its host's daemon on that host's manager, an any-host run by
// the host that claimed it. Once killed, the hosts show down when their leases lapse. (That
// each slot runs once, and pinned runs only on their host, over many slots and three
// supervisors: supervisor's TestSupervisorsEachSlotOnce.)
func TestHostsPinning(t *testing.T) {
	parallel(t)
	c := newCluster(t, "h1", "h2", "h3")
	w := c.w
	// Before any daemon runs, waiting for a run would wait for ever: it is refused at once.
	w.mustRun("job", "add", "early", "--engine", "command", "--command", "/bin/true")
	r := w.run("run", "start", "--wait", "early")
	if r.code != 69 || !strings.Contains(r.stderr, "no holdfast daemon") || !strings.Contains(r.stderr, "nothing was queued") {
		t.Fatalf("run start --wait with no daemon: exit %d, %q; want 69 saying no daemon runs", r.code, r.stderr)
	}
	if runs, err := w.storeRuns("early"); err != nil || len(runs) != 0 {
		t.Fatalf("a refused start queued runs: %+v %v", runs, err)
	}

	for _, job := range [][]string{{"pinned-1", "--host", "h1"}, {"pinned-2", "--host", "h2"}, {"roam", "--any-host"}} {
		w.mustRun(append([]string{"job", "add", job[0], "--engine", "command", "--command", "/bin/true"}, job[1:]...)...)
	}
	for _, host := range []string{"h1", "h2", "h3"} {
		c.start(host)
	}
	var hosts []struct {
		Name          string `json:"name"`
		Alive         bool   `json:"alive"`
		ResticVersion string `json:"restic_version"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("host", "list", "--json")), &hosts); err != nil || len(hosts) != 3 {
		t.Fatalf("host list: %+v %v", hosts, err)
	}
	restic, err := engine.ResticVersionOf(t.Context(), testenv.Restic(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if !h.Alive || h.ResticVersion != restic.String() {
			t.Fatalf("host %s after its daemon started: alive %v, restic %q; want alive, restic %s", h.Name, h.Alive, h.ResticVersion, restic)
		}
	}

	// The CLI runs on h1; pinned-2's run is h2's, and its unit's marker is on h2's manager.
	for _, job := range []string{"pinned-2", "roam"} {
		var run runJSON
		if err := json.Unmarshal([]byte(w.mustRun("run", "start", "--wait", "--json", job)), &run); err != nil || run.Status != "succeeded" {
			t.Fatalf("run start --wait %s: %+v %v; want succeeded", job, run, err)
		}
		attempts, on := c.attemptHosts(run.ID), c.ranOn(run.ID, 1)
		if len(attempts) != 1 || len(on) != 1 || on[0] != attempts[0].Host || job == "pinned-2" && on[0] != "h2" {
			t.Fatalf("run %s of %s: attempts %+v, its unit's marker on hosts %v; want one attempt, run on its host's manager", run.ID, job, attempts, on)
		}
	}
	for _, d := range c.hosts {
		d.d.kill()
	}
	w.checkInvariants()

	// Once their leases expired (by time: no daemon renews them), the hosts show down.
	deadline := time.Now().Add(time.Minute)
	for strings.Contains(w.mustRun("host", "list", "--json"), `"alive": true`) {
		if time.Now().After(deadline) {
			t.Fatalf("hosts still alive a minute after their leases expired:\n%s", w.mustRun("host", "list"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := w.mustRun("host", "list"); strings.Count(out, "down since") != 3 {
		t.Fatalf("host list after the daemons were killed:\n%s", out)
	}

	// Pinning is edited, and bad host names are refused with what to do, changing nothing.
	var job struct {
		Host    string `json:"host"`
		AnyHost bool   `json:"any_host"`
	}
	for _, c := range []struct {
		args    []string
		host    string
		anyHost bool
	}{{[]string{"--any-host"}, "", true}, {[]string{"--host", "h2"}, "h2", false}} {
		if err := json.Unmarshal([]byte(w.mustRun(append([]string{"job", "edit", "pinned-1", "--json"}, c.args...)...)), &job); err != nil ||
			job.Host != c.host || job.AnyHost != c.anyHost {
			t.Fatalf("job edit %v: %+v %v", c.args, job, err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "edit", "pinned-1", "--host", "bad host"}, `invalid host name "bad host"`},
		{[]string{"job", "edit", "pinned-1", "--host", "h1", "--any-host"}, "contradict"},
		{[]string{"host", "drain", "nowhere"}, `host "nowhere": not found`},
		// Refused for the job pinned to it.
		{[]string{"host", "forget", "h2"}, "host h2"},
	} {
		if r := w.run(c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("holdfast %s: exit %d, %q; want exit 2 and one line saying %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
	if out := w.mustRun("job", "show", "pinned-1"); !strings.Contains(out, "host:          h2 (pinned)") {
		t.Fatalf("job show after the refused edits:\n%s", out)
	}
}

// Scenarios 2 to 4: two live hosts never touch each other's runs; a host killed hard has its
// any-host run taken over and its pinned run restarted when it returns; a daemon frozen by a
// partition records nothing for the attempt taken over from it, and stops its unit.
func TestHostsFailover(t *testing.T) {
	parallel(t)
	c := newCluster(t, "h1", "h2", "h3")
	w := c.w
	repo, pw := w.resticRepo("repo")
	// Each job backs up data of its own: data already in the repository would take no time.
	for _, job := range []struct{ name, host string }{{"on-h1", "h1"}, {"on-h2", "h2"}, {"on-h3", "h3"}, {"roam", ""}} {
		data := w.sampleData("data-"+job.name, 8, slowData)
		args := []string{"job", "add", job.name, "--repo", repo, "--password-file", pw, "--path", data}
		if job.host == "" {
			args = append(args, "--any-host")
		} else {
			args = append(args, "--host", job.host)
		}
		w.mustRun(args...)
	}
	w.slowBackups()
	for _, host := range []string{"h1", "h2", "h3"} {
		c.start(host)
	}

	// 2. h1 and h2 each run a backup, for three spawn graces and the passes after them: neither
	// touches the other's. A stop asked from h1's CLI is carried out by h2's daemon, which holds
	// the run. The backups crawl until they are stopped.
	w.backupRate(stuckKiBps)
	one, two := w.startRun("on-h1"), w.startRun("on-h2")
	for _, id := range []string{one, two} {
		w.waitRun(id, "the backup to run", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	}
	c.sweptPast(3*3*time.Second, []string{one, two}, "h1", "h2", "h3") // w.spawnGrace, thrice
	for id, host := range map[string]string{one: "h1", two: "h2"} {
		r := w.show(id)
		a := c.attemptHosts(id)
		if r.Status != "running" || len(a) != 1 || a[0].Host != host || r.Attempts[0].QuarantineReason != "" {
			t.Fatalf("run %s on %s after 3 spawn graces: %+v %+v", id, host, r, a)
		}
	}
	w.mustRun("run", "stop", two)
	if r := w.waitEnd(two); r.Status != "stopped" || len(r.Attempts) != 1 {
		t.Fatalf("run stopped from another host: %+v", r)
	}
	w.mustRun("run", "stop", one)
	if r := w.waitEnd(one); r.Status != "stopped" || len(r.Attempts) != 1 {
		t.Fatalf("run on h1: %+v", r)
	}
	w.checkInvariants()

	// 3. h3 runs the any-host job and its pinned job; it loses power (manager and daemon).
	w.mustRun("host", "drain", "h1")
	w.mustRun("host", "drain", "h2")
	roam, pinned := w.startRun("roam"), w.startRun("on-h3")
	for _, id := range []string{roam, pinned} {
		w.waitBackup(id)
	}
	w.mustRun("host", "undrain", "h1")
	w.mustRun("host", "undrain", "h2")
	w.backupRate(0)
	h3 := c.hosts["h3"]
	h3.d.kill()
	h3.mgr.Kill(t) // its lease runs out by time
	r := w.waitRun(roam, "the any-host run to go on elsewhere", func(r runJSON) bool { return len(r.Attempts) > 1 || ended(r) })
	a := c.attemptHosts(roam)
	if len(a) != 2 || a[0].Host != "h3" {
		t.Fatalf("any-host run after h3 died: %+v %+v", r, a)
	}
	w.waitRun(roam, "its second attempt to start", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	a = c.attemptHosts(roam)
	if a[1].Host == "h3" || a[1].Spawned == "" {
		t.Fatalf("second attempt of the any-host run: %+v", a[1])
	}
	// Taken over because h3's lease had expired, once the taking host's --takeover-grace had
	// passed since, and spawned after that: the database's own times.
	tookOver(t, w.store(), roam, "h3", clusterGrace)
	if r := w.show(pinned); r.Status != "running" || !strings.Contains(r.WaitingReason, "host h3 is down since") {
		t.Fatalf("pinned run of the dead host: %+v, want it waiting for h3 with that reason", r)
	}
	if r := w.waitEnd(roam); r.Status != "succeeded" {
		t.Fatalf("the any-host run taken over: %+v", r)
	}
	if r := w.show(pinned); len(r.Attempts) != 1 {
		t.Fatalf("pinned run of the dead host moved: %+v", r)
	}
	w.checkInvariants()
	h3.mgr.Start(t)
	c.start("h3")
	if r := w.waitEnd(pinned); r.Status != "succeeded" || len(r.Attempts) != 2 {
		t.Fatalf("pinned run after its host came back: %+v, want succeeded in a second attempt", r)
	}
	if a := c.attemptHosts(pinned); a[1].Host != "h3" {
		t.Fatalf("pinned run restarted on %s", a[1].Host)
	}
	w.checkInvariants()

	// 4. A partition: h2's daemon freezes while its unit of the any-host job runs on. The run is
	// taken over; the daemon, back, records nothing for its attempt and stops its unit.
	w.backupRate(stuckKiBps)
	w.sampleData("data-roam", 8, slowData) // new contents, for a backup that takes its time
	w.mustRun("host", "drain", "h1")
	w.mustRun("host", "drain", "h3")
	part := w.startRun("roam")
	w.waitBackup(part)
	w.mustRun("host", "undrain", "h1")
	w.mustRun("host", "undrain", "h3")
	first := c.attemptHosts(part)[0]
	if first.Host != "h2" {
		t.Fatalf("partition run started on %s, want h2", first.Host)
	}
	h2 := c.hosts["h2"]
	if err := h2.d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Its lease runs out while it is frozen.
	w.backupRate(0)
	w.waitRun(part, "the run to be taken over", func(r runJSON) bool { return len(r.Attempts) > 1 || ended(r) })
	w.waitRun(part, "its second attempt to start", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	units, err := h2.mgr.Conn(t).ListUnitsByNamesContext(context.Background(), []string{first.Unit})
	if err != nil || len(units) != 1 || units[0].ActiveState != "active" || len(c.ranOn(part, 1)) != 0 {
		t.Fatalf("the superseded unit %s while its daemon is frozen: %+v %v, marker on %v; want it still running",
			first.Unit, units, err, c.ranOn(part, 1))
	}
	if err := h2.d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if r := w.waitEnd(part); r.Status != "succeeded" || len(r.Attempts) != 2 {
		t.Fatalf("run taken over in a partition: %+v", r)
	}
	// The frozen daemon stops its superseded unit, whose marker then appears on h2.
	deadline := time.Now().Add(time.Minute)
	for len(c.ranOn(part, 1)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the superseded unit %s was not stopped within a minute of its daemon's return", first.Unit)
		}
		time.Sleep(200 * time.Millisecond)
	}
	a = c.attemptHosts(part)
	// Any live host may take the run over, and any may spawn its next attempt.
	if a[0].Result != "" || a[1].Host == "h2" || a[0].SupersededBy == "" || a[0].SupersededBy == "h2" {
		t.Fatalf("attempts of the run taken over: %+v; the superseded one must have nothing recorded", a)
	}
	if out := w.mustRun("run", "show", part); !strings.Contains(out, "taken over by host "+a[0].SupersededBy) {
		t.Fatalf("run show of the run taken over:\n%s", out)
	}
	if snaps := w.restic(repo, pw, "snapshots", "--json", "--tag", "holdfast-run="+part); strings.Count(snaps, `"id"`) != 1 {
		t.Fatalf("run taken over has snapshots %s, want exactly one", snaps)
	}
	w.noLocks(repo)
	// Each host that went down made one host_down event, and one host_back when it returned:
	// h2's daemon returns when it finds its lease lost, at its next renewal, and takes it again.
	seen := map[string]int{}
	for deadline := time.Now().Add(time.Minute); seen["host_back h2"] == 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("h2's daemon did not take its lease again within a minute of its return: host events %v", seen)
		}
		events, err := w.store().EventList(context.Background(), store.EventListParams{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		seen = map[string]int{}
		for _, e := range events {
			if strings.HasPrefix(e.Event, "host_") {
				seen[e.Event+" "+e.Host]++
			}
		}
	}
	if want := map[string]int{"host_down h3": 1, "host_back h3": 1, "host_down h2": 1, "host_back h2": 1}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("host events: %v, want %v", seen, want)
	}
	// h1's CLI says where the journal of the attempt that ran elsewhere is.
	if r := w.run("run", "logs", part); !strings.Contains(r.stderr, "attempt 1 ran on host h2") {
		t.Fatalf("run logs on h1 of a run whose first attempt ran on h2: exit %d, %q", r.code, r.stderr)
	}
	w.checkInvariants()
}

// A host whose policy refuses a run of an any-host job leaves it to the others instead of
// failing it; a run of a job pinned to it still fails, with the refusal.
func TestHostsPolicyRefusalLeavesAnyHostRuns(t *testing.T) {
	parallel(t)
	c := newCluster(t, "h1", "h2")
	w := c.w
	w.mustRun("job", "add", "anywhere", "--engine", "command", "--command", "/bin/true", "--any-host")
	w.mustRun("job", "add", "here", "--engine", "command", "--command", "/bin/true", "--host", "h1")
	c.start("h1", "--allow-command-jobs=false")
	c.start("h2")
	w.mustRun("host", "drain", "h2")
	id := w.startRun("anywhere")
	r := w.waitRun(id, "h1 to leave it to another host", func(r runJSON) bool {
		return strings.Contains(r.WaitingReason, "waiting for another host") || ended(r)
	})
	if ended(r) || !strings.Contains(r.WaitingReason, "command jobs") {
		t.Fatalf("run of an any-host job h1 refuses: %+v", r)
	}
	w.mustRun("host", "undrain", "h2")
	if r := w.waitEnd(id); r.Status != "succeeded" {
		t.Fatalf("run of the any-host job after h2's drain ended: %+v", r)
	}
	if a := c.attemptHosts(id); len(a) != 1 || a[0].Host != "h2" {
		t.Fatalf("attempts: %+v, want one, on h2", a)
	}
	if r := w.waitEnd(w.startRun("here")); r.Status != "failed" || !strings.Contains(r.Reason, "command jobs") {
		t.Fatalf("run of a job pinned to the refusing host: %+v", r)
	}
	// A draining host starts nothing, but ends a run of its own that the operator stops.
	w.mustRun("host", "drain", "h1")
	queued := w.startRun("here")
	w.mustRun("run", "stop", queued)
	if r := w.waitEnd(queued); r.Status != "stopped" || len(r.Attempts) != 1 || r.Attempts[0].Unit != "" {
		t.Fatalf("run stopped while its host drains: %+v", r)
	}
	w.checkInvariants()
}

// A host dies hard while its unit of an any-host job runs: its manager, every process of its
// units and its daemon get SIGKILL, and nothing else changes: its lease ends by time alone.
// A live host takes the run over and spawns its second attempt once the lease and the grace
// have passed, the run succeeds once, and the run of a job pinned to the dead host waits for it.
func TestHostsTakeoverAfterKill(t *testing.T) {
	parallel(t)
	takeoverAfterKill(t, "h3")
}

// The same with two hosts killed at once, the CLI's host (h1, which holds the run) among them.
func TestHostsTakeoverAfterTwoKilled(t *testing.T) {
	parallel(t)
	takeoverAfterKill(t, "h1", "h3")
}

// takeoverAfterKill kills the victims at once, the first of them running the any-host job,
// with the daemons' --lease 3s, --takeover-grace 5s and --sweep-interval 1s; it asserts the
// takeover within lease + grace + 30s of the kill (the machine is shared) and logs the time
// from the kill to the second attempt's spawn, to be read against lease + grace + 2s.
func takeoverAfterKill(t *testing.T, victims ...string) {
	c := newClusterOwnManagers(t, "h1", "h2", "h3")
	c.lease, c.grace, c.sweep = 3*time.Second, 5*time.Second, time.Second
	w := c.w
	holder, dead := victims[0], map[string]bool{}
	for _, v := range victims {
		dead[v] = true
	}
	repo, pw := w.resticRepo("repo")
	w.mustRun("job", "add", "roam", "--repo", repo, "--password-file", pw, "--path", w.sampleData("data-roam", 8, slowData), "--any-host")
	for _, v := range victims {
		w.mustRun("job", "add", "on-"+v, "--repo", repo, "--password-file", pw, "--path", w.sampleData("data-"+v, 8, slowData), "--host", v)
	}
	w.slowBackups()
	for _, h := range []string{"h1", "h2", "h3"} {
		c.start(h)
	}

	// The run of the any-host job on the holder, a pinned run on each victim, all crawling.
	w.backupRate(stuckKiBps)
	for _, h := range []string{"h1", "h2", "h3"} {
		if h != holder {
			w.mustRun("host", "drain", h)
		}
	}
	roam := w.startRun("roam")
	w.waitBackup(roam)
	for _, h := range []string{"h1", "h2", "h3"} {
		if h != holder {
			w.mustRun("host", "undrain", h)
		}
	}
	pinned := map[string]string{}
	for _, v := range victims {
		pinned[v] = w.startRun("on-" + v)
	}
	for _, id := range pinned {
		w.waitBackup(id)
	}
	if a := c.attemptHosts(roam); len(a) != 1 || a[0].Host != holder {
		t.Fatalf("the any-host run before the kill: %+v, want one attempt on %s", a, holder)
	}
	w.backupRate(0) // the next attempts back up at full speed

	// The victims die hard, at once: daemons first, then their managers with every process of
	// their units. No lease, attempt or host is written by the test.
	killed := time.Now()
	for _, v := range victims {
		c.hosts[v].d.kill()
	}
	for _, v := range victims {
		c.hosts[v].mgr.Kill(t)
	}

	st := w.store()
	id := uuid.MustParse(roam)
	bound := c.lease + c.grace + 30*time.Second
	var attempts []model.Attempt
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		as, err := st.AttemptList(ctx, id)
		cancel()
		if err == nil && len(as) > 1 && as[1].SpawnClaimedAt != nil {
			attempts = as
			break
		}
		if time.Since(killed) > bound {
			t.Fatalf("any-host run %s: no second attempt spawned %s after %v were killed (lease %s, grace %s): attempts %+v %v",
				roam, time.Since(killed).Round(time.Millisecond), victims, c.lease, c.grace, as, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	first, second := attempts[0], attempts[1]
	if first.Host != holder || dead[first.SupersededBy] || dead[second.Host] {
		t.Fatalf("any-host run %s: attempt 1 on %s superseded by %q, attempt 2 on %s; want it taken over from %s by a live host, spawned on one",
			roam, first.Host, first.SupersededBy, second.Host, holder)
	}
	// Taken over because the holder's lease had expired, a grace before, by the database's times.
	tookOver(t, st, roam, holder, c.grace)

	// What the survivors' logs say, and when: the host down, the takeover, the spawn.
	downAt, takenAt, spawnedAt := c.loggedAt("host down: its lease expired", "down_host="+holder),
		c.loggedAt("run taken over from a host that lost its lease", "run="+roam),
		c.loggedAt("run spawned", "run="+roam, "attempt=2")
	if downAt.IsZero() || takenAt.IsZero() || takenAt.Before(downAt) {
		t.Fatalf("survivors' logs: host down at %s, run taken over at %s; want both, in that order", downAt, takenAt)
	}
	since := func(at time.Time) string {
		if at.IsZero() {
			return "not logged yet"
		}
		return at.Sub(killed).Round(time.Millisecond).String()
	}
	t.Logf("killed %v: host down logged after %s, taken over (superseded_at) after %s, attempt 2 claimed after %s on %s, spawned (logged) after %s; lease + grace + 2s = %s",
		victims, since(downAt), since(*first.SupersededAt), since(*second.SpawnClaimedAt), second.Host, since(spawnedAt), c.lease+c.grace+2*time.Second)

	for v, p := range pinned {
		if r := w.show(p); r.Status != "running" || len(r.Attempts) != 1 || !strings.Contains(r.WaitingReason, "host "+v+" is down since") {
			t.Fatalf("pinned run of the dead host %s: %+v, want it waiting for %s, in its first attempt", v, r, v)
		}
	}
	if r := w.waitEnd(roam); r.Status != "succeeded" || len(r.Attempts) != 2 {
		t.Fatalf("the any-host run taken over: %+v, want succeeded in its second attempt", r)
	}
	if snaps := w.restic(repo, pw, "snapshots", "--json", "--tag", "holdfast-run="+roam); strings.Count(snaps, `"id"`) != 1 {
		t.Fatalf("the run taken over has snapshots %s, want exactly one", snaps)
	}
	for v, p := range pinned {
		if r := w.show(p); len(r.Attempts) != 1 || ended(r) {
			t.Fatalf("pinned run of the dead host %s moved: %+v", v, r)
		}
	}
	w.checkInvariants()

	// The victims boot again: each pinned run goes on, on its host, in its second attempt.
	for _, v := range victims {
		c.hosts[v].mgr.Start(t)
		c.start(v)
	}
	for v, p := range pinned {
		if r := w.waitEnd(p); r.Status != "succeeded" || len(r.Attempts) != 2 {
			t.Fatalf("pinned run after its host %s came back: %+v, want succeeded in a second attempt", v, r)
		}
		if a := c.attemptHosts(p); a[1].Host != v {
			t.Fatalf("pinned run of %s restarted on %s", v, a[1].Host)
		}
	}
	w.checkInvariants()
}

// loggedAt is the time of the first line of any of the cluster's daemons' logs (those killed
// too) with msg and each of attrs (key=value); zero if none has one.
func (c *cluster) loggedAt(msg string, attrs ...string) time.Time {
	c.w.t.Helper()
	var first time.Time
	for _, h := range c.hosts {
		if h.d == nil {
			continue
		}
		for _, line := range strings.Split(h.d.log.String(), "\n") {
			if !strings.Contains(line, `msg="`+msg+`"`) && !strings.Contains(line, "msg="+msg+" ") {
				continue
			}
			fields := " " + line + " "
			ok := true
			for _, a := range attrs {
				ok = ok && strings.Contains(fields, " "+a+" ")
			}
			ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			at, err := time.Parse(time.RFC3339Nano, ts)
			if ok && err == nil && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
	}
	return first
}
