package main_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A run admitted during a maintenance window waits, saying why, and starts when it ends.
func TestMaintenanceWindow(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	// Windows have whole minutes; the daemon's zone is one whose clock is offset from UTC by the
	// seconds that make a minute of it end 20s from now, so the test waits 20s, not up to 80.
	w.mustRun("job", "add", "quiet", "--engine", "command", "--command", "/bin/true")
	var id, window string
	var to time.Time
	var r listedRun
	for try := 1; ; try++ {
		now := time.Now().UTC()
		to = now.Add(20 * time.Second).Truncate(time.Second)
		offset := int((60 - to.Unix()%60) % 60)
		zone := time.FixedZone("WIN", offset)
		from := to.Add(-time.Minute)
		window = fmt.Sprintf("daily %s-%s", from.In(zone).Format("15:04"), to.In(zone).Format("15:04"))
		w.daemonEnv = []string{"ZONEINFO=" + w.zoneinfo("Test/Window", offset)}
		d := w.startDaemon("--window", window, "--window-tz", "Test/Window")
		id = w.startRun("quiet")
		r = listedRun{}
		w.waitRuns("quiet", "the run to say why it waits", func(runs []listedRun) bool {
			for _, run := range runs {
				if run.ID == id {
					r = run
				}
			}
			return r.WaitingReason != "" || ended(runJSON{Status: r.Status})
		})
		if r.WaitingReason != "" || try == 5 {
			break
		}
		// The daemon looked at the run only after the window had ended (a loaded machine): the
		// run started at once. Again, with a new window and a new daemon.
		t.Logf("try %d: the window %q ended before the daemon looked at run %s; again", try, window, id)
		w.waitEnd(id)
		d.kill()
	}
	if r.Status != "queued" || !strings.Contains(r.WaitingReason, "maintenance window") || r.NotBefore == nil || !parseTime(t, r.NotBefore).Equal(to) {
		t.Fatalf("run during %q = %+v, want queued until %s with the window named", window, r, to)
	}
	done := w.waitEnd(id)
	if done.Status != "succeeded" || len(done.Attempts) != 1 {
		t.Fatalf("run = %+v, want succeeded after the window", done)
	}
	// It started once the window ended: at the time of the timer it was armed with ahead of it
	// (--start-lead), or when it was spawned; without a recorded start, its spawn claim.
	var full struct {
		Attempts []struct {
			StartedAt *string `json:"started_at"`
			SpawnedAt *string `json:"spawned_at"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("run", "show", id, "--json")), &full); err != nil {
		t.Fatal(err)
	}
	began := full.Attempts[0].StartedAt
	if began == nil {
		began = full.Attempts[0].SpawnedAt
	}
	if at := parseTime(t, began); at.Before(to) {
		t.Fatalf("the run started at %s, inside the window that ended at %s", at, to)
	}
	w.checkInvariants()
}

// zoneinfo writes a time zone database for $ZONEINFO holding one zone, name, offset seconds
// east of UTC with no transitions (a TZif version 1 file), and returns its directory.
func (w *world) zoneinfo(name string, offset int) string {
	w.t.Helper()
	var b bytes.Buffer
	b.WriteString("TZif\x00")
	b.Write(make([]byte, 15))
	// isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt: one type, its 4-byte name.
	for _, n := range []uint32{0, 0, 0, 0, 1, 4} {
		_ = binary.Write(&b, binary.BigEndian, n)
	}
	_ = binary.Write(&b, binary.BigEndian, int32(offset))
	b.Write([]byte{0, 0}) // not daylight saving time; name at index 0
	b.WriteString("WIN\x00")
	dir := filepath.Join(w.dir, "zoneinfo")
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return dir
}

// A job's windows and time zone are checked when it is written: a bad one is refused in one
// line and nothing is stored. One stored around that check (by SQL) is reported by holdfast
// check, until the job is corrected.
func TestStoredWindowsChecked(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	w.mustRun("job", "add", "fine", "--engine", "command", "--command", "/bin/true", "--tz", "Europe/Berlin", "--window", "Sat 01:00-05:00")
	for _, args := range [][]string{
		{"job", "add", "new", "--engine", "command", "--command", "/bin/true", "--tz", "Mars/Olympus"},
		{"job", "add", "new", "--engine", "command", "--command", "/bin/true", "--window", "Someday 25:00-26:00"},
		{"job", "edit", "fine", "--window", "daily 03:00"},
		{"job", "edit", "fine", "--tz", "Local"},
	} {
		if r := w.run(args...); r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 ||
			!strings.Contains(r.stderr, "is unknown: use an IANA name") && !strings.Contains(r.stderr, `window "`) {
			t.Fatalf("holdfast %s: exit %d, stderr %q; want exit 2 and one line naming the zone or the window", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	w.checkInvariants() // nothing of that was stored
	ctx := context.Background()
	db, err := pgx.Connect(ctx, w.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	cases := []struct {
		job, zone string
		windows   []string
		want      string
	}{
		{"zone", "Mars/Olympus", []string{"Sat 01:00-05:00"}, `job zone: time zone "Mars/Olympus" is unknown`},
		{"window", "", []string{"Someday 25:00-26:00"}, `job window: window "Someday 25:00-26:00": `},
		{"second-window", "Europe/Berlin", []string{"Sat 01:00-05:00", "daily 03:00"}, `job second-window: window "daily 03:00": the time range needs a '-'`},
	}
	for _, c := range cases {
		w.mustRun("job", "add", c.job, "--engine", "command", "--command", "/bin/true")
		if _, err := db.Exec(ctx, `UPDATE jobs SET time_zone = $2, windows = $3 WHERE name = $1`, c.job, c.zone, c.windows); err != nil {
			t.Fatal(err)
		}
	}
	r := w.run("check")
	if r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("%d invariant violation(s)", len(cases))) || strings.Contains(r.stdout, "job fine") {
		t.Fatalf("holdfast check: exit %d, stdout %q, stderr %q; want exit 1 and the %d jobs", r.code, r.stdout, r.stderr, len(cases))
	}
	for _, c := range cases {
		if !strings.Contains(r.stdout, "a job's maintenance windows and time zone parse: "+c.want) {
			t.Errorf("holdfast check does not report job %s with %q:\n%s", c.job, c.want, r.stdout)
		}
	}
	for _, c := range cases {
		w.mustRun("job", "edit", c.job, "--tz", "UTC", "--window", "Sat 01:00-02:00")
	}
	w.checkInvariants()
}
