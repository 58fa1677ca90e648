package reconcile

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runaway"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

var (
	testRules = rules{spawnGrace: 30 * time.Second, dependsWait: 6 * time.Hour, maxAttempts: 3, startLead: 10 * time.Second}
	t0        = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
)

// tableCase is one case of the decision table: the facts, and the row and action it must select.
type tableCase struct {
	name string
	f    facts
	row  string
	act  action
	// reason is a part of the recorded reason (a verdict's or a wait's), when the row has one.
	reason string
	status string // the verdict's status, for actEnd
}

// spawned are the facts of a run whose attempt has a unit, past the spawn grace.
func spawned(f facts) facts {
	f.unitRecorded, f.unitName, f.attempt, f.sinceSpawn = true, "u.service", max(f.attempt, 1), time.Minute
	return f
}

// justSpawned are f a second after the spawn claim (or the armed time): within any spawn grace.
func justSpawned(f facts) facts {
	f.sinceSpawn = time.Second
	return f
}

// unspawned are the facts of a queued run whose attempt has no unit yet.
func unspawned(f facts) facts {
	f.queued, f.attempt, f.now, f.queuedAt = true, max(f.attempt, 1), t0, t0.Add(-time.Hour)
	return f
}

func tableCases() []tableCase {
	later := t0.Add(time.Hour)
	depRun := func(status string, finished *time.Time) *model.Run {
		return &model.Run{ID: uuid.MustParse("00000000-0000-0000-0000-0000000000d1"), Status: status, FinishedAt: finished}
	}
	afterQueued, beforeQueued := t0.Add(-time.Minute), t0.Add(-8*time.Hour)
	soon, tooSoon := t0.Add(5*time.Second), t0.Add(ArmMargin/2)
	// armed are the facts of an attempt armed for a slot the database's clock has not reached.
	armed := func(f facts) facts {
		f = spawned(f)
		f.armed, f.queued, f.sinceSpawn = true, true, -5*time.Second
		return f
	}
	killed := systemd.Marker{ServiceResult: "signal", ExitCode: "killed", ExitStatus: "KILL"}
	return []tableCase{
		{name: "a journal that cannot be read is quarantined before anything else",
			f:   spawned(facts{journalProblem: "line 3: bad hash", marker: markerReadable, unit: unitGone}),
			row: "journal unreadable", act: actQuarantine, reason: "line 3: bad hash"},

		// Marker rows.
		{name: "marker, interrupted by a reboot, attempts left",
			f:   spawned(facts{marker: markerReadable, interrupted: true, ended: killed}),
			row: "marker: interrupted", act: actRestart},
		{name: "marker, interrupted, last attempt",
			f:   spawned(facts{marker: markerReadable, interrupted: true, ended: killed, attempt: 3}),
			row: "marker: interrupted, last attempt", act: actEnd, status: model.StatusFailed, reason: "giving up after 3 attempts"},
		{name: "marker, its unit still stopping: the place is not freed yet",
			f:   spawned(facts{marker: markerReadable, stopping: true, ended: systemd.Marker{ServiceResult: "success", ExitCode: "exited", ExitStatus: "0"}}),
			row: "marker, unit still stopping", act: actNothing},
		{name: "marker, finished normally",
			f:   spawned(facts{marker: markerReadable, ended: systemd.Marker{ServiceResult: "success", ExitCode: "exited", ExitStatus: "0"}}),
			row: "marker", act: actFinish},
		{name: "marker, interrupted, stop intent: the outcome says stopped",
			f:   spawned(facts{marker: markerReadable, interrupted: true, stopRequested: true}),
			row: "marker", act: actFinish},
		{name: "marker, interrupted, paused reason",
			f:   spawned(facts{marker: markerReadable, interrupted: true, pausedReason: store.PausedRunCeiling, attempt: 3}),
			row: "marker", act: actFinish},
		{name: "marker, never spawned (a claim released after the unit started)",
			f:   unspawned(facts{marker: markerReadable}),
			row: "marker", act: actFinish},
		{name: "marker unreadable",
			f:   spawned(facts{marker: markerUnreadable, markerProblem: "exit marker unreadable: bad json"}),
			row: "marker unreadable", act: actEnd, status: model.StatusFailed, reason: "exit marker unreadable"},
		{name: "marker unreadable wins over a stop intent",
			f:   spawned(facts{marker: markerUnreadable, markerProblem: "exit marker unreadable: x", stopRequested: true}),
			row: "marker unreadable", act: actEnd, status: model.StatusFailed},

		// Never spawned.
		{name: "stop before spawn, yet the derived unit is alive",
			f:   unspawned(facts{stopRequested: true, unit: unitAlive, unitName: "derived.service"}),
			row: "unspawned, stop, unit alive", act: actStop},
		{name: "stop before spawn",
			f:   unspawned(facts{stopRequested: true, unit: unitGone}),
			row: "unspawned, stop", act: actEnd, status: model.StatusStopped, reason: "before it was started"},
		{name: "stop before spawn wins over a removed job",
			f:   unspawned(facts{stopRequested: true, unit: unitGone, jobMissing: true}),
			row: "unspawned, stop", act: actEnd, status: model.StatusStopped},
		{name: "job removed",
			f:   unspawned(facts{jobMissing: true}),
			row: "unspawned, job removed", act: actEnd, status: model.StatusFailed, reason: "job was removed"},
		{name: "refused by the daemon's policy",
			f:   unspawned(facts{refusal: "refused by this daemon's policy: command jobs"}),
			row: "unspawned, refused by policy", act: actEnd, status: model.StatusFailed, reason: "refused by this daemon's policy"},
		{name: "refused here, but another host may run the any-host job",
			f:   unspawned(facts{refusal: "refused by this daemon's policy: command jobs", elsewhere: true}),
			row: "unspawned, refused here, any host", act: actWait, reason: "waiting for another host"},
		{name: "policy wins over a window",
			f:   unspawned(facts{refusal: "refused", window: &held{name: "nights", job: "j", until: later}}),
			row: "unspawned, refused by policy", act: actEnd},
		{name: "a retry's delay not yet over",
			f:   unspawned(facts{notBefore: &later, window: &held{name: "nights", job: "j", until: later}}),
			row: "unspawned, not before", act: actNothing},
		{name: "not before, too close to its time to arm: started at it",
			f:   unspawned(facts{notBefore: &tooSoon}),
			row: "unspawned, not before", act: actNothing},
		{name: "not before, within the start lead: armed",
			f:   unspawned(facts{notBefore: &soon}),
			row: "unspawned, arm ahead", act: actArm},
		{name: "within the start lead, but a job window: waits like any start",
			f:   unspawned(facts{notBefore: &soon, window: &held{name: "nights", job: "j", until: later}}),
			row: "unspawned, job window", act: actWait, reason: "nights"},
		{name: "job window",
			f:   unspawned(facts{window: &held{name: "office", job: "docs", until: later}, globalWindow: &held{name: "g", until: later}}),
			row: "unspawned, job window", act: actWait, reason: `maintenance window "office" of job docs until 2026-12-01T04:00:00Z`},
		{name: "job windows that do not parse: it waits, and no global window is read first",
			f:   unspawned(facts{windowsProblem: "the maintenance windows of job docs cannot be judged: bad", globalWindow: &held{name: "g", until: later}}),
			row: "unspawned, job windows unreadable", act: actWait, reason: "waiting: the maintenance windows of job docs cannot be judged: bad"},
		{name: "within the start lead, job windows that do not parse: not armed",
			f:   unspawned(facts{notBefore: &soon, windowsProblem: "bad"}),
			row: "unspawned, job windows unreadable", act: actWait},
		{name: "a retry's delay not yet over, job windows that do not parse",
			f:   unspawned(facts{notBefore: &later, windowsProblem: "bad"}),
			row: "unspawned, not before", act: actNothing},
		{name: "policy wins over job windows that do not parse",
			f:   unspawned(facts{refusal: "refused", windowsProblem: "bad"}),
			row: "unspawned, refused by policy", act: actEnd},
		{name: "a delay that is over does not hold",
			f:   unspawned(facts{notBefore: &afterQueued, globalWindow: &held{name: "backup-freeze", until: later}}),
			row: "unspawned, global window", act: actWait, reason: `global maintenance window "backup-freeze"`},
		{name: "forget of snapshots protected since the plan",
			f:   unspawned(facts{protected: []string{"0123456789abcdef"}}),
			row: "unspawned, forget of protected snapshots", act: actEnd, status: model.StatusFailed, reason: "1 snapshot(s) of the plan became protected after it was made (first: 0123456789ab)"},
		{name: "prerequisite missing",
			f:   unspawned(facts{prereq: &prereq{name: "db"}}),
			row: "unspawned, prerequisite missing", act: actEnd, status: model.StatusFailed, reason: "prerequisite job db does not exist"},
		{name: "prerequisite running",
			f:   unspawned(facts{prereq: &prereq{name: "db", exists: true, lastRun: depRun(model.StatusRunning, nil), lastOutcome: model.StatusSucceeded}}),
			row: "unspawned, prerequisite running", act: actWait, reason: "prerequisite job db is running"},
		{name: "prerequisite failed after this run was queued",
			f:   unspawned(facts{prereq: &prereq{name: "db", exists: true, lastRun: depRun(model.StatusPartial, &afterQueued), lastOutcome: model.StatusPartial}}),
			row: "unspawned, prerequisite failed since", act: actEnd, status: model.StatusFailed, reason: "its last run: partial"},
		{name: "prerequisite not succeeded, wait over",
			f: func() facts {
				f := unspawned(facts{prereq: &prereq{name: "db", exists: true, lastRun: depRun(model.StatusFailed, &beforeQueued), lastOutcome: model.StatusFailed}})
				f.queuedAt = t0.Add(-7 * time.Hour)
				return f
			}(),
			row: "unspawned, prerequisite wait over", act: actEnd, status: model.StatusFailed, reason: "no new outcome within 6h0m0s"},
		{name: "prerequisite never ran: wait for it",
			f:   unspawned(facts{prereq: &prereq{name: "db", exists: true}}),
			row: "unspawned, prerequisite not succeeded", act: actWait, reason: "its last run: never run"},
		{name: "prerequisite succeeded: go",
			f:   unspawned(facts{prereq: &prereq{name: "db", exists: true, lastRun: depRun(model.StatusSucceeded, &afterQueued), lastOutcome: model.StatusSucceeded}}),
			row: "unspawned", act: actSpawn},
		{name: "user missing on this host",
			f:   unspawned(facts{identityMissing: "job user backup does not exist on this host"}),
			row: "unspawned, identity missing", act: actEnd, status: model.StatusFailed, reason: "does not exist"},
		{name: "user missing here, but another host may run the any-host job",
			f:   unspawned(facts{identityMissing: "job user backup does not exist on this host", elsewhere: true}),
			row: "unspawned, identity missing here, any host", act: actWait, reason: "does not exist"},
		{name: "never spawned",
			f:   unspawned(facts{}),
			row: "unspawned", act: actSpawn},

		// Spawned, no marker.
		{name: "alive, stop intent: ask again",
			f:   spawned(facts{unit: unitAlive, stopRequested: true}),
			row: "alive, stop or pause", act: actStop},
		{name: "alive, paused by the runaway watch: stop it",
			f:   spawned(facts{unit: unitAlive, pausedReason: store.PausedRunCeiling}),
			row: "alive, stop or pause", act: actStop},
		{name: "alive, still recorded queued",
			f:   spawned(facts{unit: unitAlive, queued: true}),
			row: "alive, not marked running", act: actMarkRunning},
		{name: "alive, past its hold",
			f:   spawned(facts{unit: unitAlive, runaway: &runaway.Excess{Hold: 10, Grown: 11}}),
			row: "alive, past its hold", act: actPauseRunaway},
		{name: "alive",
			f:   spawned(facts{unit: unitAlive, attempt: 9}),
			row: "alive", act: actWatch},
		{name: "armed, its time not come: waiting, not gone",
			f:   armed(facts{unit: unitGone}),
			row: "armed, before its time", act: actNothing},
		{name: "armed, stop before its time: disarmed",
			f:   armed(facts{unit: unitGone, stopRequested: true}),
			row: "armed, stop", act: actDisarm, status: model.StatusStopped, reason: "before it was started"},
		{name: "armed, paused before its time: disarmed",
			f:   armed(facts{unit: unitGone, pausedReason: store.PausedQuotaExhausted}),
			row: "armed, paused", act: actDisarm, status: model.StatusPaused, reason: store.PausedQuotaExhausted},
		{name: "armed, its time passed, within the grace from it",
			f:   justSpawned(armed(facts{unit: unitGone, stopRequested: true})),
			row: "gone, within spawn grace", act: actNothing},
		{name: "armed and started, stop: the timer and the unit are stopped",
			f:   armed(facts{unit: unitAlive, stopRequested: true}),
			row: "alive, stop or pause", act: actStop},
		{name: "armed and started, not yet marked running",
			f:   armed(facts{unit: unitAlive}),
			row: "alive, not marked running", act: actMarkRunning},
		{name: "gone, left failed by its manager",
			f:   spawned(facts{unit: unitGone, unitFailed: true}),
			row: "gone, failed", act: actResetFailed},
		{name: "gone within grace",
			f:   justSpawned(spawned(facts{unit: unitGone})),
			row: "gone, within spawn grace", act: actNothing},
		{name: "gone, claimed in an earlier boot: no grace to wait out",
			f:   justSpawned(spawned(facts{unit: unitGone, earlierBoot: true})),
			row: "gone", act: actRestart},
		{name: "gone, claimed in an earlier boot, stop intent: stopped at once",
			f:   justSpawned(spawned(facts{unit: unitGone, earlierBoot: true, stopRequested: true})),
			row: "gone, stop", act: actEnd, status: model.StatusStopped, reason: "without an exit marker"},
		{name: "armed in an earlier boot, its time not come: the timer is gone with that boot",
			f:   armed(facts{unit: unitGone, earlierBoot: true}),
			row: "gone", act: actRestart},
		{name: "gone within grace, stop intent: still wait",
			f:   justSpawned(spawned(facts{unit: unitGone, stopRequested: true})),
			row: "gone, within spawn grace", act: actNothing},
		{name: "gone, stop intent",
			f:   spawned(facts{unit: unitGone, stopRequested: true, attempt: 3}),
			row: "gone, stop", act: actEnd, status: model.StatusStopped, reason: "without an exit marker"},
		{name: "gone, stop asked by holdfast for a stall",
			f:   spawned(facts{unit: unitGone, stopRequested: true, stopReason: "stalled: no progress for 15m0s"}),
			row: "gone, stop", act: actEnd, status: model.StatusStopped, reason: "stopped by holdfast (stalled: no progress for 15m0s); the unit ended"},
		{name: "gone, paused reason",
			f:   spawned(facts{unit: unitGone, pausedReason: store.PausedQuotaExhausted}),
			row: "gone, paused", act: actEnd, status: model.StatusPaused, reason: "paused: " + store.PausedQuotaExhausted},
		{name: "gone, last attempt",
			f:   spawned(facts{unit: unitGone, attempt: 3}),
			row: "gone, last attempt", act: actEnd, status: model.StatusFailed, reason: "the unit vanished without an exit marker"},
		{name: "gone: a crash or a power loss",
			f:   spawned(facts{unit: unitGone, attempt: 2}),
			row: "gone", act: actRestart},
	}
}

// The table row by row: each case selects the row and action it names.
func TestDecide(t *testing.T) {
	for _, tc := range tableCases() {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.f, testRules)
			if d.row != tc.row || d.act != tc.act {
				t.Fatalf("decide = row %q, %s; want row %q, %s", d.row, d.act, tc.row, tc.act)
			}
			if tc.status != "" && d.end.status != tc.status {
				t.Fatalf("verdict %+v, want status %s", d.end, tc.status)
			}
			got := d.why
			if d.act == actEnd || d.act == actDisarm {
				got = d.end.reason
			}
			if !strings.Contains(got, tc.reason) {
				t.Fatalf("reason %q, want it to contain %q", got, tc.reason)
			}
			if (d.act == actWait || d.act == actQuarantine || d.act == actEnd || d.act == actDisarm) && got == "" {
				t.Fatalf("%s without a reason", d.act)
			}
		})
	}
}

// Every row of decide has a case above, and every action is chosen by some row.
func TestDecideTableCovered(t *testing.T) {
	selected := map[string]bool{}
	acts := map[action]bool{}
	for _, tc := range tableCases() {
		selected[tc.row] = true
		acts[tc.act] = true
	}
	rows := tableRows(t)
	if len(rows) < 30 {
		t.Fatalf("found only %d rows in decide.go: %v", len(rows), rows)
	}
	for _, row := range rows {
		if !selected[row] {
			t.Errorf("row %q has no case", row)
		}
	}
	for row := range selected {
		if !slices.Contains(rows, row) {
			t.Errorf("case names row %q, which decide does not have", row)
		}
	}
	for a := range numActions {
		if !acts[a] {
			t.Errorf("action %s is chosen by no row", a)
		}
	}
	if len(actionNames) != int(numActions) {
		t.Errorf("%d action names for %d actions", len(actionNames), numActions)
	}
}

// tableRows reads the names of decide's rows from its source: the first argument of each call
// that makes a decision.
func tableRows(t *testing.T) []string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "decide.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, d := range file.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "decide" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			name, ok := call.Fun.(*ast.Ident)
			if !ok || len(call.Args) == 0 {
				return true
			}
			switch name.Name {
			case "do", "end", "wait", "quarantine":
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok {
					t.Fatalf("a row of decide is not named by a literal: %s(...)", name.Name)
				}
				row, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Contains(rows, row) {
					t.Fatalf("two rows are named %q", row)
				}
				rows = append(rows, row)
			}
			return true
		})
	}
	return rows
}
