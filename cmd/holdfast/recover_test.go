package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

// recoverStatus is what `status --json` says of a job.
type recoverStatus struct {
	Name          string  `json:"name"`
	State         string  `json:"state"`
	LastOutcome   string  `json:"last_outcome"`
	LastSuccess   *string `json:"last_success_at"`
	NextRun       *string `json:"next_run_at"`
	OverdueSince  *string `json:"overdue_since"`
	OverdueReason string  `json:"overdue_reason"`
}

// recoverView is what an operator sees of the two jobs: status, the snapshots holdfast lists,
// and each job's retention plan.
type recoverView struct {
	jobs      map[string]recoverStatus
	snapshots []string // id and job
	plans     map[string][]string
}

func (w *world) recoverView() recoverView {
	w.t.Helper()
	v := recoverView{jobs: map[string]recoverStatus{}, plans: map[string][]string{}}
	var st struct {
		Jobs []recoverStatus `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(w.run("status", "--json").stdout), &st); err != nil {
		w.t.Fatal(err)
	}
	for _, j := range st.Jobs {
		v.jobs[j.Name] = j
	}
	var snaps []struct {
		ID  string `json:"id"`
		Job string `json:"job"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("snapshot", "list", "--json")), &snaps); err != nil {
		w.t.Fatal(err)
	}
	for _, s := range snaps {
		v.snapshots = append(v.snapshots, s.ID+" "+s.Job)
	}
	slices.Sort(v.snapshots)
	for _, job := range []string{"web", "db"} {
		p := w.plan("retention", "plan", job, "--json")
		for _, d := range p.Decisions {
			v.plans[job] = append(v.plans[job], fmt.Sprintf("%s keep=%v %s", d.SnapshotID, d.Keep, d.Reason))
		}
	}
	return v
}

// lose drops the world's database and creates it again empty, as a lost server's replacement.
func (w *world) lose() {
	w.t.Helper()
	w.pool.mu.Lock()
	if w.pool.st != nil {
		w.pool.st.Close()
		w.pool.st = nil
	}
	w.pool.mu.Unlock()
	testenv.RecreateDatabase(w.t, w.dsn)
}

// Two jobs with a week of snapshots, one overdue; the database is lost, and `holdfast recover`
// rebuilds it from the configuration and the repositories, then from a dump taken while a
// backup ran and the configuration: each time status, the snapshots, the retention plans and
// the overdue judgement are what they were, `check` is clean, the ledger says it was re-based,
// the run live in the dump ends by its snapshot and is never run again, and nothing missed
// while the database was lost runs as a catch-up.
func TestRecoverDatabase(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	webRepo, pw := w.resticRepo("web")
	dbRepo, _ := w.resticRepo("db")
	webData := w.sampleData("webdata", 20, 64<<10)
	dbData := w.sampleData("dbdata", 3, 16<<10)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// The configuration as code an operator keeps beside the hosts (0600 root's: apply's rule).
	config := filepath.Join(t.TempDir(), "holdfast.yaml")
	yaml := fmt.Sprintf("jobs:\n"+
		"  web:\n    repo: %s\n    password-file: %s\n    path: [%s]\n    schedule: \"0 3 * * *\"\n    tz: UTC\n    alert-after: 30h\n    keep-last: 2\n    keep-daily: 5\n"+
		"  db:\n    repo: %s\n    password-file: %s\n    path: [%s]\n    schedule: \"0 3 * * *\"\n    tz: UTC\n    alert-after: 1h\n    keep-daily: 5\n"+
		"  tick:\n    engine: command\n    command: [/bin/true]\n    schedule: \"@every 6s\"\n",
		webRepo, pw, webData, dbRepo, pw, dbData)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	w.mustRun("apply", config)

	// A week of history, as holdfast's backups tag it: time-shifted snapshots, and db's newest
	// run two days ago, which only time could have recorded (a fixture of the run).
	now := time.Now().UTC()
	var webHistory, dbHistory [][]string
	for day := 2; day <= 7; day++ {
		at := now.Add(-time.Duration(day)*24*time.Hour - time.Hour).Format("2006-01-02 15:04:05")
		webHistory = append(webHistory, []string{"backup", "--time", at, "--host", host, "--tag", "holdfast-job=web", webData})
		if day > 2 {
			dbHistory = append(dbHistory, []string{"backup", "--time", at, "--host", host, "--tag", "holdfast-job=db", dbData})
		}
	}
	dbRun := uuid.New()
	dbHistory = append(dbHistory, []string{"backup", "--time", now.Add(-49 * time.Hour).Format("2006-01-02 15:04:05"), "--host", host,
		"--tag", "holdfast-job=db", "--tag", "holdfast-run=" + dbRun.String(), dbData})
	w.resticTZAll(webRepo, pw, webHistory)
	w.resticTZAll(dbRepo, pw, dbHistory)
	var newest resticSnapshot
	for _, s := range w.resticSnapshots(dbRepo, pw) {
		if slices.Contains(s.Tags, "holdfast-run="+dbRun.String()) {
			newest = s
		}
	}
	if newest.ID == "" {
		t.Fatal("db's newest snapshot is not in its repository")
	}
	ctx := context.Background()
	db, err := pgx.Connect(ctx, w.dsn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(ctx, `
		WITH r AS (INSERT INTO runs (id, job_id, job_name, kind, trigger, status, created_at, started_at, finished_at, snapshot_id)
			SELECT $1, id, name, 'backup', 'schedule', 'succeeded', $2, $2, $2, $3 FROM jobs WHERE name = 'db' RETURNING id, job_id)
		UPDATE jobs SET last_run_id = CASE WHEN jobs.id = r.job_id THEN r.id ELSE last_run_id END,
			last_outcome = CASE WHEN jobs.id = r.job_id THEN 'succeeded' ELSE last_outcome END,
			created_at = now() - interval '8 days' FROM r`,
		dbRun, newest.Time, newest.ID)
	db.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The daemons' watch judges db overdue: its last success is two days old.
	overdue := func() {
		t.Helper()
		await(t, "db overdue", func() string { return "" }, func() jobJSON { return w.job("db") },
			func(j jobJSON) bool { return j.OverdueSince != nil })
	}
	// tick's schedule after a recovery: one run per slot, none caught up, none run twice.
	ticksOnce := func(way string, since time.Time) {
		t.Helper()
		var runs []model.Run
		await(t, way+": two of tick's slots run", func() string { return fmt.Sprint(len(runs)) }, func() []model.Run {
			all, err := w.storeRuns("tick")
			if err != nil {
				t.Fatal(err)
			}
			runs = slices.DeleteFunc(all, func(r model.Run) bool { return r.CreatedAt.Before(since) })
			return runs
		}, func(runs []model.Run) bool {
			return len(slices.DeleteFunc(slices.Clone(runs), func(r model.Run) bool { return r.Status != model.StatusSucceeded })) >= 2
		})
		slots := map[time.Time]bool{}
		for _, r := range runs {
			if r.Trigger != model.TriggerSchedule || r.PlannedAt == nil || slots[*r.PlannedAt] {
				t.Errorf("%s: tick's run %s (%s, slot %v): want one scheduled run per slot", way, r.ID, r.Trigger, r.PlannedAt)
				continue
			}
			slots[*r.PlannedAt] = true
		}
	}
	// web backs up twice for real; the database is dumped while the second runs.
	w.daemonFlags = append(w.daemonFlags, "--restic", w.slowRestic())
	d := w.startDaemon("--watch-interval", "500ms")
	overdue()
	first := w.waitEnd(w.startRun("web"))
	if first.Status != "succeeded" {
		t.Fatalf("web's first backup: %s: %s", first.Status, first.Reason)
	}
	release := w.holdBackups()
	second := w.startRun("web")
	w.waitRun(second, "underway", w.underway)
	dump := filepath.Join(filepath.Dir(config), "holdfast.dump")
	if out, err := exec.Command("pg_dump", "-Fc", "-f", dump, w.dsn).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	release()
	done := w.waitEnd(second)
	if done.Status != "succeeded" || done.SnapshotID == "" {
		t.Fatalf("web's second backup: %s: %s", done.Status, done.Reason)
	}
	d.kill()
	// Its run files go as time passes (--keep-run-files): its exit marker among them.
	if err := os.Remove(systemd.MarkerPath(w.state, uuid.MustParse(second), 1)); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"web", "db"} {
		w.mustRun("snapshot", "list", "--refresh", job)
	}
	before := w.recoverView()
	if j := before.jobs["db"]; j.OverdueSince == nil || j.State != "critical" {
		t.Fatalf("before the loss db is %s, overdue since %v: want it overdue", j.State, j.OverdueSince)
	}
	if len(before.snapshots) != 6+6+2 {
		t.Fatalf("before the loss holdfast lists %d snapshots, want 14:\n%s", len(before.snapshots), strings.Join(before.snapshots, "\n"))
	}
	secondStart, _ := time.Parse(time.RFC3339Nano, done.Attempts[0].SpawnedAt)
	secondEnd, _ := time.Parse(time.RFC3339Nano, *done.FinishedAt)

	same := func(way string, after recoverView) {
		t.Helper()
		if !slices.Equal(before.snapshots, after.snapshots) {
			t.Errorf("%s: snapshots\n%s\nwant\n%s", way, strings.Join(after.snapshots, "\n"), strings.Join(before.snapshots, "\n"))
		}
		for _, job := range []string{"web", "db"} {
			if !slices.Equal(before.plans[job], after.plans[job]) {
				t.Errorf("%s: %s's retention plan\n%s\nwant\n%s", way, job, strings.Join(after.plans[job], "\n"), strings.Join(before.plans[job], "\n"))
			}
			b, a := before.jobs[job], after.jobs[job]
			if a.State != b.State || a.LastOutcome != b.LastOutcome || a.OverdueReason != b.OverdueReason || (a.OverdueSince == nil) != (b.OverdueSince == nil) ||
				a.OverdueSince != nil && *a.OverdueSince != *b.OverdueSince {
				t.Errorf("%s: job %s is %+v, was %+v", way, job, a, b)
			}
			if a.NextRun == nil || b.NextRun == nil || *a.NextRun != *b.NextRun && time.Now().Before(mustTime(t, *b.NextRun)) {
				t.Errorf("%s: job %s's next run %v, was %v", way, job, a.NextRun, b.NextRun)
			}
		}
		// db's last success is the run the history recorded; web's, its second backup's, as
		// restic recorded it (from its start, or its end with restic 0.17 and later).
		if a, b := before.jobs["db"].LastSuccess, after.jobs["db"].LastSuccess; a == nil || b == nil || !mustTime(t, *a).Equal(mustTime(t, *b)) {
			t.Errorf("%s: db's last success %v, was %v", way, b, a)
		}
		if a := after.jobs["web"].LastSuccess; a == nil || mustTime(t, *a).Before(secondStart.Add(-time.Second)) || mustTime(t, *a).After(secondEnd) {
			t.Errorf("%s: web's last success %v, want within its second backup (%s to %s)", way, a, secondStart, secondEnd)
		}
		if r := w.run("check"); r.code != 0 {
			t.Errorf("%s: check: exit %d\n%s%s", way, r.code, r.stdout, r.stderr)
		}
		ledger := w.mustRun("ledger", "show", "default")
		if !strings.Contains(ledger, "re-based by holdfast recover") {
			t.Errorf("%s: the ledger does not say it was re-based:\n%s", way, ledger)
		}
	}

	// From the configuration and the repositories.
	w.lose()
	if r := w.run("status"); r.code != 3 {
		t.Fatalf("status of a lost database: exit %d, want 3 (unknown)\n%s%s", r.code, r.stdout, r.stderr)
	}
	recovered := time.Now()
	out := w.mustRun("recover", config)
	t.Logf("recover from the configuration:\n%s", out)
	d = w.startDaemon("--watch-interval", "500ms")
	overdue()
	ticksOnce("from the configuration", recovered)
	d.kill()
	same("from the configuration", w.recoverView())

	// From the dump and the configuration: the backup live in the dump ended by its snapshot.
	w.lose()
	if r := w.run("recover", "--dump", filepath.Join(w.dir, "missing.dump")); r.code != 2 || !strings.Contains(r.stderr, "missing.dump") {
		t.Fatalf("recover from a missing dump: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	recovered = time.Now()
	out = w.mustRun("recover", "--dump", dump, config)
	t.Logf("recover from the dump:\n%s", out)
	if r := w.run("recover", "--dump", dump); r.code != 2 || !strings.Contains(r.stderr, "schema already") {
		t.Fatalf("a second restore of the dump: exit %d, want 2 and a refusal\n%s%s", r.code, r.stdout, r.stderr)
	}
	ended := w.show(second)
	if ended.Status != "succeeded" || !strings.HasPrefix(ended.SnapshotID, done.SnapshotID) || len(ended.Attempts) != 1 ||
		!strings.Contains(ended.Reason, "closed by holdfast recover: its snapshot") {
		t.Fatalf("the backup live in the dump: %s with snapshot %q and %d attempts (%s), want succeeded with %s and one attempt",
			ended.Status, ended.SnapshotID, len(ended.Attempts), ended.Reason, done.SnapshotID)
	}
	d = w.startDaemon("--watch-interval", "500ms")
	// Sweeps pass; no run is admitted (the next slot is 03:00) and none is run again.
	w.awaitLease(d, host)
	time.Sleep(3 * time.Second)
	for _, job := range []string{"web", "db"} {
		runs, err := w.storeRuns(job)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.Trigger == model.TriggerCatchUp || r.Trigger == model.TriggerRetry || model.Live(r.Status) {
				t.Errorf("after the recovery job %s has run %s (%s, %s)", job, r.ID, r.Trigger, r.Status)
			}
		}
	}
	overdue()
	ticksOnce("from the dump", recovered)
	d.kill()
	same("from the dump", w.recoverView())
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// What recover cannot act on is refused with a line that says why and what to do, and changes
// nothing: no source given, a file that is no dump or that others could have written, a dump
// for a database that has holdfast's schema, a configuration with an error, and any recovery
// while a daemon holds its lease.
func TestRecoverRefused(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		t.Helper()
		return writeMode(t, filepath.Join(dir, name), text, mode)
	}
	config := write("holdfast.yaml", "jobs:\n  web:\n    repo: /srv/backup/web\n    password-file: /etc/holdfast/web.pw\n    path: [/srv/web]\n", 0o600)
	before := w.dbDigest()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing given", nil, "nothing to recover from"},
		{"not a dump", []string{"--dump", write("notes.txt", "hello\n", 0o600)}, "not a PostgreSQL dump"},
		{"a dump others could change", []string{"--dump", write("open.dump", "PGDMP", 0o666)}, "chmod go-w"},
		{"a dump over the schema", []string{"--dump", write("holdfast.dump", "PGDMP", 0o600)}, "has holdfast's schema already"},
		{"a configuration with an error", []string{write("bad.yaml", "jobs:\n  web:\n    repoo: x\n", 0o600)}, "bad.yaml:3: jobs.web.repoo: unknown key"},
	} {
		r := w.run(append([]string{"recover"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d\n%s%s\nwant exit 2 and one line with %q", c.name, r.code, r.stdout, r.stderr, c.want)
		}
	}
	if after := w.dbDigest(); after != before {
		t.Errorf("refused recoveries changed the database:\n%s\nwas\n%s", after, before)
	}
	d := w.startDaemon()
	host, _ := os.Hostname()
	w.awaitLease(d, host)
	if r := w.run("recover", config); r.code != 2 || !strings.Contains(r.stderr, "holds its lease") || !strings.Contains(r.stderr, "systemctl stop holdfast") {
		t.Errorf("recover while a daemon runs: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if out := w.mustRun("job", "list"); strings.Contains(out, "web") {
		t.Errorf("a refused recovery created a job:\n%s", out)
	}
}
