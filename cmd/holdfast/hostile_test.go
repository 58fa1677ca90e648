package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/testenv"
)

// tamperScript runs as the job's user inside the unit. Its parent is `holdfast exec`, whose
// --journal argument names the journal; the script replaces or extends that journal as $1 says,
// then stays a few seconds so the daemon drains the journal while the unit is live.
const tamperScript = `#!/bin/sh
set -e
j=$(tr '\0' '\n' < /proc/$PPID/cmdline | sed -n '/^--journal$/{n;p;}')
test -n "$j"
case "$1" in
symlink) ln -s "$2" "$j.new" && mv -f "$j.new" "$j" ;;
fifo) mkfifo "$j.new" && mv -f "$j.new" "$j" ;;
nul) printf '{"seq":2,"x":"\000%s"}\n' "$(cat "$2")" >> "$j" ;;
big) head -c 10000000 /dev/zero | tr '\0' 'x' >> "$j"; echo >> "$j" ;;
huge-number)
	run=$(tr '\0' '\n' < /proc/$PPID/cmdline | sed -n '/^--run$/{n;p;}')
	printf '{"seq":1,"run":"%s","attempt":1,"type":"summary","time":"%s","payload":{"data_added":1e1000000},"prev":""}\n' \
		"$run" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$j" ;;
esac
sleep 4
`

// TestHostileJournal: a job running as nobody replaces its journal with what its user can put
// there. The daemon (root) reads nothing outside the journal, quarantines it with a reason that
// names only the kind of thing found, the run ends as its command did, the daemon stays up and
// keeps working, and no secret reaches the output, the database or the daemon's log.
func TestHostileJournal(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	secret := "hf-secret-" + randomWord(t)
	secretFile := filepath.Join(w.dir, "root-only")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What the NUL line carries, read by the script from a file so that it is in no job's argv.
	word := "hf-line-" + randomWord(t)
	wordFile := filepath.Join(w.dir, "word")
	if err := os.WriteFile(wordFile, []byte(word), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(w.dir, "tamper.sh")
	if err := os.WriteFile(script, []byte(tamperScript), 0o755); err != nil {
		t.Fatal(err)
	}
	d := w.startDaemon()

	cases := []struct {
		name   string
		args   []string
		reason string
	}{
		{"symlink-to-root-file", []string{"symlink", secretFile}, "journal is a symbolic link, not a regular file"},
		{"fifo", []string{"fifo"}, "journal is a named pipe, not a regular file"},
		{"symlink-to-dev-zero", []string{"symlink", "/dev/zero"}, "journal is a symbolic link, not a regular file"},
		{"nul", []string{"nul", wordFile}, "NUL byte at byte"},
		{"ten-mb-line", []string{"big"}, "over the 1 MiB limit"},
		// A valid line whose number jsonb cannot hold: the database refuses the batch.
		{"huge-number", []string{"huge-number"}, "lines 1 to 1 from byte 0: the database cannot store the values (SQLSTATE 22003)"},
	}
	// Every case runs at once, under one daemon.
	ids := map[string]string{}
	for _, c := range cases {
		args := []string{"job", "add", c.name, "--engine", "command", "--user", "nobody", "--command", "/bin/sh", "--command", script}
		for _, a := range c.args {
			args = append(args, "--command", a)
		}
		w.mustRun(args...)
		ids[c.name] = w.startRun(c.name)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := w.with(t)
			r := w.waitEnd(ids[c.name])
			if r.Status != "succeeded" {
				t.Errorf("run = %+v, want succeeded: the command exited 0, and a journal says how fresh the numbers are, never how the run ends", r)
			}
			if len(r.Attempts) != 1 {
				t.Fatalf("attempts = %+v, want one", r.Attempts)
			}
			q := r.Attempts[0].QuarantineReason
			if !strings.Contains(q, c.reason) {
				t.Errorf("quarantine reason = %q, want it to contain %q", q, c.reason)
			}
			for _, out := range []string{w.mustRun("run", "show", r.ID), w.mustRun("run", "show", r.ID, "--json")} {
				if strings.Contains(out, secret) || strings.Contains(out, word) {
					t.Errorf("run show prints the secret or the journal's content:\n%s", out)
				}
				if strings.ContainsFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' }) {
					t.Errorf("run show prints a control character:\n%q", out)
				}
			}
		})
	}

	// The daemon is up and keeps working: a plain run after the hostile ones succeeds.
	select {
	case <-d.done:
		t.Fatalf("the daemon exited:\n%s", d.log.String())
	default:
	}
	w.mustRun("job", "add", "after", "--engine", "command", "--user", "nobody", "--command", "/bin/true")
	if r := w.waitEnd(w.startRun("after")); r.Status != "succeeded" || r.Attempts[0].QuarantineReason != "" {
		t.Fatalf("run after the hostile ones = %+v, want succeeded with its journal read", r)
	}
	w.checkInvariants()
	if out := w.mustRun("run", "list"); strings.Contains(out, secret) {
		t.Errorf("run list prints the secret:\n%s", out)
	}
	dump, err := exec.Command(filepath.Join(testenv.PGBinDir, "pg_dump"), "--data-only", "-d", w.dsn).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, dump)
	}
	if !strings.Contains(string(dump), "journal is a named pipe") {
		t.Fatalf("pg_dump does not hold the quarantine reasons; is it the test's database?\n%s", dump)
	}
	if strings.Contains(string(dump), secret) || strings.Contains(string(dump), word) {
		t.Errorf("the database holds the secret or the journal's content")
	}
	d.kill()
	if log := d.log.String(); strings.Contains(log, secret) || strings.Contains(log, word) || strings.Contains(log, "panic") {
		t.Errorf("the daemon's log holds the secret or a panic:\n%s", log)
	}
}

// TestKeepRunFiles: the journals and markers of runs that ended longer ago than --keep-run-files
// are removed, without following a link the job's user left in its attempt directory, and the
// run's facts stay in the database.
func TestKeepRunFiles(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	for _, bad := range []string{"0", "-1d", "soon", "", "3s", "2w"} {
		r := w.run("daemon", "--keep-run-files", bad)
		if r.code != 78 || !strings.Contains(r.stderr, "--keep-run-files") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("daemon --keep-run-files %q: exit %d, %q; want exit 78 and one line naming the flag", bad, r.code, r.stderr)
		}
	}

	// The job's user plants a link to a directory of root's in its attempt directory.
	victim := filepath.Join(w.dir, "victim")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(w.dir, "plant.sh")
	plant := "#!/bin/sh\nj=$(tr '\\0' '\\n' < /proc/$PPID/cmdline | sed -n '/^--journal$/{n;p;}')\nln -s " + victim + " \"$(dirname \"$j\")/link\"\n"
	if err := os.WriteFile(script, []byte(plant), 0o755); err != nil {
		t.Fatal(err)
	}
	w.mustRun("job", "add", "planter", "--engine", "command", "--user", "nobody", "--command", "/bin/sh", "--command", script)
	w.startDaemon("--keep-run-files", "1h", "--run-files-every", "500ms")
	id := w.startRun("planter")
	r := w.waitEnd(id)
	if r.Status != "succeeded" {
		t.Fatalf("run = %+v, want succeeded", r)
	}
	runDir := filepath.Join(w.state, "runs", id)
	if _, err := os.Lstat(filepath.Join(runDir, "a1", "link")); err != nil {
		t.Fatalf("the planted link is not there: %v", err)
	}
	markers, _ := filepath.Glob(filepath.Join(w.state, "markers", id+".a*.json"))
	if len(markers) != 1 {
		t.Fatalf("markers = %v, want the run's one", markers)
	}
	// The run ended two hours ago, as far as the database knows: past --keep-run-files.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, w.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, `UPDATE runs SET finished_at = finished_at - interval '2 hours' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, errDir := os.Lstat(runDir)
		_, errMarker := os.Lstat(markers[0])
		if os.IsNotExist(errDir) && os.IsNotExist(errMarker) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run files still there a minute after the run ended: %v, %v", errDir, errMarker)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Fatalf("the removal followed the planted link: %v", err)
	}
	if again := w.show(id); again.Status != "succeeded" || len(again.Attempts) != 1 {
		t.Fatalf("run show after the files went = %+v, want the recorded facts", again)
	}
	if out := w.mustRun("run", "show", id); !strings.Contains(out, "status:    succeeded") {
		t.Fatalf("run show after the files went:\n%s", out)
	}
	w.checkInvariants()
}

func randomWord(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// with returns the world for a subtest: the same installation, failing t.
func (w *world) with(t *testing.T) *world {
	c := *w
	c.t = t
	return &c
}

// TestTerminalEscapes: a file name with a terminal escape sequence, a carriage return and a
// newline, unreadable to the job's user, ends up in the run's reason. Human output prints it
// escaped, on its own line; JSON keeps it as it is.
func TestTerminalEscapes(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	openToAll(t, repo)
	data := w.sampleData("data", 2, 1<<16)
	name := "evil\x1b]0;owned\x07\x1b[2J\rstatus:    succeeded\n\u202ex"
	if err := os.WriteFile(filepath.Join(data, name), []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.mustRun("job", "add", "home", "--repo", repo, "--password-file", pw, "--path", data, "--user", "nobody")
	w.startDaemon()
	id := w.startRun("home")
	r := w.waitEnd(id)
	if r.Status != "partial" || !strings.Contains(r.Reason, name) {
		t.Fatalf("run = %+v, want partial with the file named in the reason as it is (JSON)", r)
	}
	for _, args := range [][]string{{"run", "show", id}, {"run", "list"}, {"run", "list", "--job", "home"}} {
		out := w.mustRun(args...)
		if strings.ContainsAny(out, "\x1b\x07\r\u202e") {
			t.Errorf("holdfast %s prints a control character:\n%q", strings.Join(args, " "), out)
		}
		if strings.Contains(out, "\nstatus:    succeeded") {
			t.Errorf("holdfast %s lets the file name pose as a line:\n%s", strings.Join(args, " "), out)
		}
	}
	if out := w.mustRun("run", "show", id); !strings.Contains(out, `evil\x1b]0;owned\x07\x1b[2J\rstatus:    succeeded\n\u202ex`) {
		t.Errorf("run show does not name the file escaped:\n%s", out)
	}
}
