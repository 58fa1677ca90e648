package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/testenv"
)

type ledgerJSON struct {
	Account      string      `json:"account"`
	QuotaBytes   *int64      `json:"quota_bytes"`
	BalanceBytes *int64      `json:"balance_bytes"`
	SettledBytes int64       `json:"settled_bytes"`
	HeldBytes    int64       `json:"held_bytes"`
	OpenHolds    []holdJSON  `json:"open_holds"`
	Deferred     []holdJSON  `json:"deferred"`
	Entries      []entryJSON `json:"entries"`
}

type holdJSON struct {
	RunID    string `json:"run_id"`
	Attempt  int    `json:"attempt"`
	Bytes    int64  `json:"bytes"`
	Deferred string `json:"deferred"`
}

type entryJSON struct {
	ID      int64   `json:"id"`
	Kind    string  `json:"kind"`
	Bytes   int64   `json:"bytes"`
	RunID   *string `json:"run_id"`
	Attempt *int    `json:"attempt"`
	HoldID  *int64  `json:"hold_id"`
	Actor   string  `json:"actor"`
	Note    string  `json:"note"`
}

func (w *world) ledger(account string) ledgerJSON {
	w.t.Helper()
	var l ledgerJSON
	if err := json.Unmarshal([]byte(w.mustRun("ledger", "show", account, "--json", "--limit", "1000")), &l); err != nil {
		w.t.Fatal(err)
	}
	return l
}

// entries returns the run's ledger entries of one kind, by attempt.
func (l ledgerJSON) entries(run, kind string) map[int]entryJSON {
	out := map[int]entryJSON{}
	for _, e := range l.Entries {
		if e.Kind == kind && e.RunID != nil && *e.RunID == run {
			out[*e.Attempt] = e
		}
	}
	return out
}

// restartCharges checks a run restarted once: attempt 1 was settled at what it added (the
// measured growth of its repository: restic printed no summary), attempt 2 held only what was
// left of the run's budget and was settled at no less than restic's own figure (the growth of
// its repository, if that is higher), and the run's charge is the sum of the two.
func (w *world) restartCharges(r runJSON) {
	w.t.Helper()
	l := w.ledger("default")
	holds, settles := l.entries(r.ID, "hold"), l.entries(r.ID, "settle")
	if len(holds) != 2 || len(settles) != 2 || r.HoldBytes != 0 || r.BudgetBytes == nil {
		w.t.Fatalf("run %s: holds %+v, settles %+v, still held %d; want two of each and nothing held", r.ID, holds, settles, r.HoldBytes)
	}
	// What restic wrote before it was interrupted; nothing, if it had not written a pack yet.
	if !strings.Contains(settles[1].Note, "measured growth") {
		w.t.Fatalf("run %s attempt 1 settled %+v, want its measured growth", r.ID, settles[1])
	}
	if want := *r.BudgetBytes - settles[1].Bytes; holds[2].Bytes != want {
		w.t.Fatalf("run %s attempt 2 held %d, want what was left of the budget: %d - %d = %d", r.ID, holds[2].Bytes,
			*r.BudgetBytes, settles[1].Bytes, want)
	}
	if r.BytesAdded == nil || settles[2].Bytes < *r.BytesAdded || !strings.Contains(settles[2].Note, "data_added") {
		w.t.Fatalf("run %s attempt 2 settled %+v, want restic's data_added %v", r.ID, settles[2], r.BytesAdded)
	}
	if r.SettledBytes != settles[1].Bytes+settles[2].Bytes {
		w.t.Fatalf("run %s charged %d, want the sum of its attempts %d + %d", r.ID, r.SettledBytes, settles[1].Bytes, settles[2].Bytes)
	}
}

// A job with a 10 MiB ceiling backing up 50 MiB of fresh random data is stopped by the runaway
// guard and ends paused (run_ceiling) with its repository unlocked, charged at most its hold, with
// the source of the figure said. Raising the ceiling lets it resume; it is then charged the sum of
// what each attempt added.
func TestRunawayGuard(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 5, 50<<20)
	w.mustRun("account", "add", "team", "--quota", "1GiB")
	w.mustRun("job", "add", "big", "--repo", repo, "--password-file", pw, "--path", data, "--account", "team", "--max-added", "10MiB")
	w.startDaemon()
	res := w.run("run", "start", "big", "--wait", "--json")
	var r runJSON
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatalf("run start --wait: exit %d, %v\n%s%s", res.code, err, res.stdout, res.stderr)
	}
	if res.code != 6 || r.Status != "paused" || r.PausedReason != "run_ceiling" {
		t.Fatalf("run start --wait: exit %d, run %+v; want exit 6, paused (run_ceiling)", res.code, r)
	}
	// The pause is an event of the outbox, with its reason.
	if got := strings.Join(w.eventNames("big"), ","); got != "started,paused" {
		t.Fatalf("events of big: %s, want started,paused", got)
	}
	w.noLocks(repo)
	l := w.ledger("team")
	settle, ok := l.entries(r.ID, "settle")[1]
	if !ok || r.HoldBytes != 0 || r.SettledBytes != settle.Bytes || settle.Bytes > 10<<20 || settle.Bytes <= 0 {
		t.Fatalf("run %+v charged %+v, want a settlement of at most the 10 MiB hold", r, settle)
	}
	if !strings.Contains(settle.Note, "measured growth of the local repository") {
		t.Fatalf("settlement note %q does not say where its figure comes from", settle.Note)
	}
	if *l.BalanceBytes != 1<<30-settle.Bytes || *l.QuotaBytes != 1<<30 {
		t.Fatalf("account team: quota %d balance %d, want 1 GiB less the charge %d", *l.QuotaBytes, *l.BalanceBytes, settle.Bytes)
	}

	// Its budget is spent: it resumes only with a higher ceiling, and then holds only the rest.
	if res := w.run("run", "resume", r.ID); res.code != 2 || !strings.Contains(res.stderr, "--max-added") {
		t.Fatalf("resume with the budget spent: exit %d, %q; want exit 2 naming --max-added", res.code, res.stderr)
	}
	w.mustRun("job", "edit", "big", "--max-added", "200MiB")
	w.mustRun("run", "resume", r.ID)
	r = w.waitEnd(r.ID)
	if r.Status != "succeeded" {
		t.Fatalf("resumed run = %+v, want succeeded", r)
	}
	l = w.ledger("team")
	holds, settles := l.entries(r.ID, "hold"), l.entries(r.ID, "settle")
	if holds[2].Bytes != 200<<20-settles[1].Bytes || r.BytesAdded == nil || settles[2].Bytes < *r.BytesAdded ||
		r.SettledBytes != settles[1].Bytes+settles[2].Bytes {
		t.Fatalf("after resume: holds %+v settles %+v run %+v; want attempt 2 to hold the rest of 200 MiB and be charged at least restic's figure", holds, settles, r)
	}
	w.checkInvariants()
}

// A job's first backup, with no ceiling and no history, holds what its paths hold, measured by
// the daemon as the attempt starts: run show and the ledger say so, and the settlement closes
// the hold. A first backup its account's quota cannot hold is paused before its unit starts,
// with a reason that names the quota, and nothing is charged.
func TestFirstBackupSizedFromItsPaths(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 4, 40<<20)
	w.mustRun("job", "add", "first", "--repo", repo, "--password-file", pw, "--path", data)
	// 3 GiB that take no space: the pause comes before restic reads a byte of them.
	big := filepath.Join(w.dir, "big")
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(big, "small"), []byte("a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(big, "small"), 3<<30); err != nil {
		t.Fatal(err)
	}
	w.mustRun("account", "add", "team", "--quota", "2GiB")
	w.mustRun("job", "add", "over", "--repo", repo, "--password-file", pw, "--path", big, "--account", "team")
	w.startDaemon()

	res := w.run("run", "start", "first", "--wait", "--json")
	var r runJSON
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil || res.code != 0 || r.Status != "succeeded" || len(r.Attempts) != 1 {
		t.Fatalf("first backup: exit %d, %v, run %+v; want succeeded in one attempt\n%s", res.code, err, r, res.stderr)
	}
	const source = "twice what the job's paths hold, 40 MiB in 5 entries (measured by holdfast as the attempt started)"
	if a := r.Attempts[0]; !strings.Contains(a.HoldNote, source) || a.Settlement == "" {
		t.Fatalf("first backup's attempt: held %q, settled from %q; want the hold to say %q", a.HoldNote, a.Settlement, source)
	}
	if out := w.mustRun("run", "show", r.ID); !strings.Contains(out, "held:") || !strings.Contains(out, source) ||
		!strings.Contains(out, "restic:  "+r.Attempts[0].ResticVersion) {
		t.Fatalf("run show does not say where the hold came from, or which restic ran:\n%s", out)
	}
	// The restic the attempt ran, as restic itself names it.
	if v, err := exec.Command(testenv.Restic(t), "version").Output(); err != nil || r.Attempts[0].ResticVersion == "" ||
		!strings.HasPrefix(string(v), "restic "+r.Attempts[0].ResticVersion+" ") {
		t.Fatalf("first backup's attempt ran restic %q; restic version says %q (%v)", r.Attempts[0].ResticVersion, v, err)
	}
	l := w.ledger("default")
	hold, settle := l.entries(r.ID, "hold")[1], l.entries(r.ID, "settle")[1]
	if want := int64(2*40<<20 + 5<<10); hold.Bytes != want || *r.BudgetBytes != want || !strings.Contains(hold.Note, source) ||
		settle.Bytes != r.SettledBytes || settle.Bytes < 40<<20*9/10 {
		t.Fatalf("first backup: budget %d, hold %+v, settlement %+v; want a hold of %d saying %q, settled at what it added", *r.BudgetBytes, hold, settle, want, source)
	}

	res = w.run("run", "start", "over", "--wait", "--json")
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil || res.code != 6 || r.Status != "paused" || r.PausedReason != "quota_exhausted" {
		t.Fatalf("first backup past the quota: exit %d, %v, run %+v; want exit 6, paused (quota_exhausted)\n%s", res.code, err, r, res.stderr)
	}
	for _, want := range []string{"account team has 2.0 GiB left of its quota of 2.0 GiB", "twice what the job's paths hold, 3.0 GiB in 2 entries", "holdfast account grant team"} {
		if !strings.Contains(r.Reason, want) {
			t.Fatalf("paused run's reason %q does not say %q", r.Reason, want)
		}
	}
	if l := w.ledger("team"); *l.BalanceBytes != 2<<30 || l.HeldBytes != 0 || len(l.entries(r.ID, "hold")) != 0 || r.Attempts[0].ServiceResult != "" {
		t.Fatalf("account team after the pause: %+v, attempt %+v; want nothing held or charged and no unit run", l, r.Attempts[0])
	}
	w.checkInvariants()
}

// corruptJournal appends a line that is not JSON to the run's journal: the daemon quarantines
// it and reads no more of it, so the run's summary is lost.
func (w *world) corruptJournal(run string) {
	w.t.Helper()
	f, err := os.OpenFile(filepath.Join(w.state, "runs", run, "a1", "journal.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("{this is not json\n"); err != nil {
		w.t.Fatal(err)
	}
}

// A run whose journal lost its summary while another run wrote to the same repository can be
// charged neither from restic's figure nor from the repository's growth. If it made a snapshot,
// the repair channel (restic stats) settles it on a later pass; if it made none, its hold stays
// open, visible as a deferral with the reason, until an operator settles it by hand, once.
func TestLedgerDeferral(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	w.mustRun("job", "add", "big", "--repo", repo, "--password-file", pw, "--path", w.sampleData("data-big", 8, slowData))
	// bigger outlives a whole run of small, and is stopped before it ends. It stays under restic's
	// 16 MiB packs: a slow restic with two packs in upload keeps its unlock, after the stop,
	// waiting for the backend until one of them is written.
	w.mustRun("job", "add", "bigger", "--repo", repo, "--password-file", pw, "--path", w.sampleData("data-bigger", 8, 3*slowData/2))
	w.mustRun("job", "add", "small", "--repo", repo, "--password-file", pw, "--path", w.sampleData("data-small", 1, 1<<20))
	w.slowBackups()
	w.startDaemon()
	// run is in flight, by cause (its summary held back, or crawling), while small runs: once
	// small is running, then is what the run needs to end.
	alongside := func(run string, beforeSmall, smallRunning func()) {
		w.waitRun(run, "progress", w.underway)
		w.corruptJournal(run)
		beforeSmall()
		small := w.startRun("small")
		w.waitRun(small, "running", func(r runJSON) bool { return r.Status == "running" || ended(r) })
		if r := w.show(run); ended(r) {
			t.Fatalf("run %s ended before the small one started, though it was held or crawling: %+v", run, r)
		}
		smallRunning()
		if r := w.waitEnd(small); r.Status != "succeeded" || r.BytesAdded == nil || r.SettledBytes != *r.BytesAdded {
			t.Fatalf("small run = %+v, want succeeded and charged restic's figure", r)
		}
	}

	// It made a snapshot: restic stats says what that snapshot added. Its summary, held back
	// until small runs, comes after the line that cannot be read.
	release := w.holdBackups()
	big := w.startRun("big")
	alongside(big, func() {}, release)
	r := w.waitRun(big, "the end and its settlement", func(r runJSON) bool { return ended(r) && r.HoldBytes == 0 })
	settle := w.ledger("default").entries(big, "settle")[1]
	if r.Status != "succeeded" || r.SnapshotID == "" || !strings.Contains(settle.Note, "restic stats") ||
		settle.Bytes < slowData*95/100 || r.SettledBytes != settle.Bytes {
		t.Fatalf("big run %+v settled %+v; want its snapshot's ~%d MiB from restic stats", r, settle, slowData>>20)
	}

	// It made none (stopped): the hold stays open with the reason. It crawls until the stop.
	w.backupRate(stuckKiBps)
	bigger := w.startRun("bigger")
	alongside(bigger, func() { w.backupRate(slowKiBps) }, func() {})
	if r := w.show(bigger); ended(r) {
		t.Fatalf("run %s ended before it could be stopped, though it crawls: %+v", bigger, r)
	}
	w.mustRun("run", "stop", bigger)
	r = w.waitEnd(bigger)
	l := w.ledger("default")
	if r.Status != "stopped" || len(l.Deferred) != 1 || l.Deferred[0].RunID != bigger || r.SettledBytes != 0 ||
		!strings.Contains(l.Deferred[0].Deferred, "wrote to the same repository") ||
		r.HoldBytes != l.Deferred[0].Bytes || r.Attempts[0].SettleDeferred == "" {
		t.Fatalf("deferred %+v, run %+v; want the stopped run's hold open with the reason", l.Deferred, r)
	}
	w.checkInvariants() // a deferral with a reason is no violation

	w.mustRun("ledger", "settle", bigger, "--bytes", "10MiB", "--why", "restic stats before and after")
	if res := w.run("ledger", "settle", bigger, "--bytes", "1MiB", "--why", "again"); res.code != 2 {
		t.Fatalf("a second settlement: exit %d, %q; want exit 2", res.code, res.stderr)
	}
	r = w.show(bigger)
	l = w.ledger("default")
	settle = l.entries(bigger, "settle")[1]
	if len(l.Deferred) != 0 || r.SettledBytes != 10<<20 || r.HoldBytes != 0 || !strings.Contains(settle.Note, "by hand") || settle.Actor == "" {
		t.Fatalf("after settling by hand: deferred %+v, run %+v, entry %+v", l.Deferred, r, settle)
	}
	w.checkInvariants()
}

// Bad ledger input gets exit 2 and one line that says what to do, and changes nothing.
func TestLedgerBadInput(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 1, 1<<10)
	w.mustRun("account", "add", "team", "--quota", "1GiB")
	w.mustRun("job", "add", "web", "--repo", repo, "--password-file", pw, "--path", data, "--account", "team")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"account", "add", "Team!", "--quota", "1GiB"}, "account name"},
		{[]string{"account", "add", "other"}, "--quota is required"},
		{[]string{"account", "add", "other", "--quota", "ten"}, `"ten"`},
		{[]string{"account", "add", "other", "--quota", "1GiB", "--allowance", "1GiB", "--period", "fortnight"}, "--period"},
		{[]string{"account", "add", "team", "--quota", "1GiB"}, "already exists"},
		{[]string{"account", "grant", "nobody", "1GiB"}, "not found"},
		{[]string{"account", "grant", "team", "0"}, "positive size"},
		{[]string{"job", "add", "x", "--repo", repo, "--password-file", pw, "--path", data, "--account", "nobody"}, "holdfast account add nobody"},
		{[]string{"job", "edit", "web", "--account", "nobody"}, "holdfast account add nobody"},
		{[]string{"job", "edit", "web", "--max-added", "0"}, "positive size"},
		{[]string{"ledger", "show", "nobody"}, "not found"},
		{[]string{"ledger", "settle", "abcdef12"}, "--bytes and --why"},
		{[]string{"ledger", "settle", "abcdef12", "--bytes", "lots", "--why", "x"}, "--bytes"},
	} {
		r := w.run(c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("holdfast %s: exit %d, stderr %q; want exit 2 and one line with %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
	l := w.ledger("team")
	if *l.QuotaBytes != 1<<30 || len(l.Entries) != 1 {
		t.Fatalf("bad input changed the ledger: %+v", l)
	}
	var j struct {
		Account       string `json:"account"`
		MaxAddedBytes *int64 `json:"max_added_bytes"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("job", "show", "web", "--json")), &j); err != nil || j.Account != "team" || j.MaxAddedBytes != nil {
		t.Fatalf("bad input changed the job: %+v, %v", j, err)
	}
	if r := w.run("job", "show", "x"); r.code != 2 {
		t.Fatal("a refused job add left a job behind")
	}
}

// An account's allowance per period bounds what it holds and is charged in one period, on top
// of its quota: a run that would pass it is paused (quota_exhausted) with the numbers.
func TestAllowance(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 1, 1<<10)
	w.mustRun("account", "add", "team", "--quota", "1GiB", "--allowance", "15MiB", "--period", "month")
	for _, name := range []string{"a", "b"} {
		w.mustRun("job", "add", name, "--repo", repo, "--password-file", pw, "--path", data, "--account", "team", "--max-added", "10MiB")
	}
	w.startRun("a")
	r := w.run("run", "start", "b", "--json")
	var run runJSON
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil || r.code != 6 || run.PausedReason != "quota_exhausted" ||
		!strings.Contains(run.Reason, "allowance of 15 MiB this month") {
		t.Fatalf("second run: exit %d, %+v, %v; want paused (quota_exhausted) naming the allowance", r.code, run, err)
	}
	var a struct {
		BalanceBytes   *int64 `json:"balance_bytes"`
		AllowanceBytes *int64 `json:"allowance_bytes"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("account", "show", "team", "--json")), &a); err != nil ||
		*a.BalanceBytes != 1<<30-10<<20 || *a.AllowanceBytes != 15<<20 {
		t.Fatalf("account team: %+v, %v", a, err)
	}
	w.checkInvariants()
}

// Granting to the default account, which had no quota, starts its balance at the grant: what it
// used before is not taken from it.
func TestGrantToUnlimitedAccount(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	w.mustRun("job", "add", "web", "--repo", repo, "--password-file", pw, "--path", w.sampleData("data", 2, 4<<20))
	w.startDaemon()
	r := w.waitEnd(w.startRun("web"))
	if r.Status != "succeeded" || r.SettledBytes <= 0 {
		t.Fatalf("run = %+v, want succeeded and charged", r)
	}
	w.mustRun("account", "grant", "default", "10MiB")
	l := w.ledger("default")
	if *l.BalanceBytes != 10<<20 || *l.QuotaBytes != 10<<20+r.SettledBytes {
		t.Fatalf("default after a grant of 10 MiB: quota %d, balance %d; want a balance of 10 MiB", *l.QuotaBytes, *l.BalanceBytes)
	}
	w.checkInvariants()
}
