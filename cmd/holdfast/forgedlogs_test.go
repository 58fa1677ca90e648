package main_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/journallog"
	"github.com/holdfast-backup/holdfast/testenv"
	"github.com/holdfast-backup/holdfast/web"
)

// forgedBytes is the size of the forged and of root's big messages: the 40 MiB. journald
// took single entries of up to 120 MiB here, and refused 127 MiB (a journal file's maximum size
// is 128 MiB).
const forgedBytes = 40 << 20

// An unprivileged user (uid 65534, outside every unit) writes journal entries naming a live run
// in every field a client may set (HOLDFAST_RUN=, UNIT=, USER_UNIT=, and the fields only journald
// may set, which it drops), one of them of 40 MiB, and root writes two more of 40 MiB about the
// run, which are in the run's selection: the dashboard's run page, the healthchecks body and `run
// logs` (also --follow) show none of the user's and the run's own lines still, each line on a line
// of its own, escaped and clipped; the daemon's peak RSS grows by less than 100 MiB while it
// tails those 120 MiB for a dozen pages and a notification; a page that finds every tail slot
// taken answers 503 busy.
func TestForgedLogTail(t *testing.T) {
	parallel(t)
	w := newWorldOwnManager(t) // its own journald: 120 MiB of entries are no other test's
	addr := testenv.FreeAddr(t)
	token := "forged-log-tail-" + uuid.NewString()
	authFile := filepath.Join(t.TempDir(), "web.auth")
	if err := os.WriteFile(authFile, []byte("bearer "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hc := newReceiver(t)
	w.mustRun("notify", "add", "hc", "--healthchecks", hc.URL+"/ping/forged", "--events", "succeeded")
	gate := filepath.Join(w.dir, "gate")
	w.mustRun("job", "add", "forge", "--engine", "command", "--user", "nobody", "--command", "/bin/sh", "--command", "-c",
		"--command", "echo real line one; while [ ! -e "+gate+" ]; do sleep 0.1; done; echo real line two")
	d := w.startDaemon("--listen", addr, "--web-auth-file", authFile, "--notify-backoff", "200ms")
	id := w.startRun("forge")
	r := w.waitRun(id, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
	if r.Status != "running" || len(r.Attempts) != 1 || r.Attempts[0].Unit == "" {
		t.Fatalf("run %s: %+v, want it running in a unit", id, r)
	}
	unit := r.Attempts[0].Unit
	logs := func() string { return w.mustRun("run", "logs", id) }
	if !testenv.Eventually(time.Minute, func() bool { return strings.Contains(logs(), "real line one") }) {
		t.Fatalf("run logs never showed the unit's first line:\n%s", logs())
	}

	journald := w.mgr.Journald(t)
	mark := uuid.NewString()
	big := strings.Repeat("A", forgedBytes)
	forged := [][]string{
		{"MESSAGE=FORGED by HOLDFAST_RUN", "HOLDFAST_RUN=" + id},
		{"MESSAGE=FORGED by UNIT", "UNIT=" + unit, "SYSLOG_IDENTIFIER=systemd"},
		{"MESSAGE=FORGED by USER_UNIT", "USER_UNIT=" + unit, "SYSLOG_IDENTIFIER=systemd"},
		{"MESSAGE=FORGED by journald's fields", "_SYSTEMD_UNIT=" + unit, "_PID=1", "_UID=0", "_COMM=systemd", "UNIT=" + unit},
		{"MESSAGE=FORGED big " + big, "HOLDFAST_RUN=" + id, "UNIT=" + unit, "USER_UNIT=" + unit},
	}
	for _, fields := range forged {
		testenv.JournalEntryAs(t, journald, w.dir, 65534, append(fields, "FORGE="+mark)...)
	}
	for i := 0; i < 2; i++ { // root's: trusted, so the tails read them
		testenv.JournalEntryAs(t, journald, w.dir, 0, "MESSAGE=root's big "+big, "HOLDFAST_RUN="+id, "FORGE="+mark)
	}
	big = ""
	if !testenv.Eventually(time.Minute, func() bool { return testenv.JournalCount(t, w.mgr.JournalDir, mark) == len(forged)+2 }) {
		t.Fatalf("journald holds %d of the %d entries written", testenv.JournalCount(t, w.mgr.JournalDir, mark), len(forged)+2)
	}

	check := func(what, out string, want ...string) {
		t.Helper()
		for _, s := range append([]string{"real line one", "Started " + unit}, want...) {
			if !strings.Contains(out, s) {
				t.Errorf("%s lacks %q:\n%s", what, s, out)
			}
		}
		if strings.Contains(out, "FORGED") {
			t.Errorf("%s shows a forged entry:\n%.3000s", what, out)
		}
		if n := strings.Count(out, "[holdfast: a message of 4096 bytes or more is not shown]"); n != 2 {
			t.Errorf("%s notes %d messages left out, want root's two:\n%s", what, n, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 5 {
			t.Errorf("%s is %d line(s), want a line per entry:\n%s", what, len(lines), out)
		}
		for i, l := range lines {
			if len(l) > journallog.LineBytes+100 || strings.ContainsAny(l, "\x1b\r") {
				t.Errorf("%s line %d: %.200q (%d bytes)", what, i, l, len(l))
			}
		}
	}

	pid := d.cmd.Process.Pid
	before := vmHWM(t, pid)
	// The dashboard's run page, a dozen times, six at once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	pages, busy := 0, 0
	for round := 0; round < 2; round++ {
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, body := bearerGet(t, "http://"+addr+"/runs/"+id, token)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case code == http.StatusOK:
					pages++
					check("the run page", pageLog(t, body))
				case code == http.StatusServiceUnavailable && strings.Contains(body, "busy"):
					busy++
				default:
					t.Errorf("GET /runs/%s: %d %.500s", id, code, body)
				}
			}()
		}
		wg.Wait()
	}
	if pages == 0 {
		t.Fatalf("no run page was served (%d busy)", busy)
	}
	t.Logf("%d run pages served, %d answered busy", pages, busy)

	// The run ends: the healthchecks body carries its tail.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := w.waitEnd(id); r.Status != "succeeded" {
		t.Fatalf("run %s: %s (%s)", id, r.Status, r.Reason)
	}
	var body string
	if !testenv.Eventually(time.Minute, func() bool {
		for _, req := range hc.requests() {
			if strings.Contains(req.rawQuery, id) {
				body = req.body
				return true
			}
		}
		return false
	}) {
		t.Fatal("the healthchecks check never got the run's end")
	}
	check("the healthchecks body", body, "holdfast: forge succeeded", "real line two")
	after := vmHWM(t, pid)
	t.Logf("the daemon's peak RSS: %d MiB before the tails, %d MiB after", before>>20, after>>20)
	if after-before > 100<<20 {
		t.Errorf("the daemon's peak RSS grew from %d to %d MiB tailing the run", before>>20, after>>20)
	}

	// run logs, whole and --follow.
	check("run logs", logs(), "real line two")
	follow := exec.Command(w.bin, "run", "logs", "--follow", id)
	follow.Env = w.env()
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = follow.Process.Kill(); _ = follow.Wait() })
	followed := &lockedBuffer{}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			followed.WriteString(sc.Text() + "\n")
		}
	}()
	// A forged entry while following, then one of root's: once root's is shown, the forged one,
	// written before it, would have been too.
	testenv.JournalEntryAs(t, journald, w.dir, 65534, "MESSAGE=FORGED while following", "HOLDFAST_RUN="+id, "UNIT="+unit, "FORGE="+mark)
	testenv.JournalEntryAs(t, journald, w.dir, 0, "MESSAGE=root's line after the forged one", "HOLDFAST_RUN="+id, "FORGE="+mark)
	if !testenv.Eventually(time.Minute, func() bool { return strings.Contains(followed.String(), "root's line after the forged one") }) {
		t.Fatalf("run logs --follow never showed root's line:\n%s", followed.String())
	}
	if s := followed.String(); strings.Contains(s, "FORGED") || !strings.Contains(s, "real line two") {
		t.Errorf("run logs --follow shows a forged entry, or not the run's last line:\n%s", s)
	}

	// Every tail slot taken: the run page answers busy, soon.
	var releases []func()
	for i := 0; i < journallog.MaxTails; i++ {
		release, err := journallog.AcquireTail(context.Background(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	h, err := web.Handler(web.Config{Store: w.store(), JournalDir: w.mgr.JournalDir})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/runs/"+id, nil))
	for _, release := range releases {
		release()
	}
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "busy") || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("the run page with every tail slot taken: %d %q (Retry-After %q), want 503 busy", rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/runs/"+id, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("the run page once the slots are free: %d %.300s", rec.Code, rec.Body.String())
	}
}

// vmHWM is the peak resident set size of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM of %d: %q", pid, line)
			}
			return kb << 10
		}
	}
	t.Fatalf("/proc/%d/status has no VmHWM", pid)
	return 0
}

// bearerGet GETs url with the bearer token and returns the status and body.
func bearerGet(t *testing.T, url, token string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b)
}

// pageLog is the log tail of a run page as a browser shows it: the text of its <pre>.
func pageLog(t *testing.T, page string) string {
	_, rest, ok := strings.Cut(page, "<h2>Log tail</h2>")
	start := strings.Index(rest, "<pre>")
	end := strings.Index(rest, "</pre>")
	if !ok || start < 0 || end < start {
		t.Errorf("the run page has no log tail:\n%.2000s", page)
		return ""
	}
	r := strings.NewReplacer("&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'", "&quot;", `"`, "&amp;", "&")
	return r.Replace(rest[start+len("<pre>") : end])
}

// lockedBuffer is a strings.Builder written by one goroutine and read by another.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) WriteString(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
