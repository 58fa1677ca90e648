package model

import (
	"slices"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
)

func TestParseKind(t *testing.T) {
	for _, k := range Kinds() {
		got, err := ParseKind(string(k))
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %q, %v", k, got, err)
		}
		var scanned Kind
		if err := scanned.Scan(string(k)); err != nil || scanned != k {
			t.Errorf("Scan(%q) = %q, %v", k, scanned, err)
		}
	}
	for _, s := range []string{"", "Backup", "drill", "noop", " backup"} {
		if k, err := ParseKind(s); err == nil {
			t.Errorf("ParseKind(%q) = %q, want an error", s, k)
		}
		// A stored kind this release does not know is read as it is, and is no kind of its.
		var scanned Kind
		err := scanned.Scan(s)
		switch {
		case s == "" && err == nil:
			t.Errorf("Scan(%q) = %q, want an error", s, scanned)
		case s != "" && (err != nil || scanned != Kind(s) || scanned.Valid() || scanned.Spec() != (KindSpec{})):
			t.Errorf("Scan(%q) = %q, %v (valid %v, spec %+v); want it kept as read, not valid, the zero spec", s, scanned, err, scanned.Valid(), scanned.Spec())
		}
	}
	var scanned Kind
	if err := scanned.Scan(42); err == nil {
		t.Errorf("Scan(42) = %q, want an error", scanned)
	}
}

// TestKindSpecs holds each kind's definition to what the layers did when they compared kinds.
func TestKindSpecs(t *testing.T) {
	if !slices.Equal(Kinds(), []Kind{KindBackup, KindPrune, KindForget, KindRestore, KindVerify, KindCopy}) {
		t.Errorf("Kinds() = %v", Kinds())
	}
	where := func(is func(KindSpec) bool) []Kind {
		var ks []Kind
		for _, k := range Kinds() {
			if is(k.Spec()) {
				ks = append(ks, k)
			}
		}
		return ks
	}
	for _, c := range []struct {
		what string
		is   func(KindSpec) bool
		want []Kind
	}{
		{"exclusive", func(s KindSpec) bool { return s.Exclusive }, []Kind{KindPrune, KindForget, KindVerify}},
		{"adds", func(s KindSpec) bool { return s.Adds }, []Kind{KindBackup}},
		{"last run", func(s KindSpec) bool { return s.LastRun }, []Kind{KindBackup}},
		{"prerequisite", func(s KindSpec) bool { return s.Prerequisite }, []Kind{KindBackup}},
		{"retried", func(s KindSpec) bool { return s.Retried }, []Kind{KindBackup, KindCopy}},
		{"verification", func(s KindSpec) bool { return s.Verification }, []Kind{KindVerify}},
		{"forgets", func(s KindSpec) bool { return s.Forgets }, []Kind{KindForget}},
		{"deletes", func(s KindSpec) bool { return s.Deletes }, []Kind{KindPrune, KindForget}},
		{"reads the job's repository", func(s KindSpec) bool { return s.ReadsJobRepository }, []Kind{KindCopy}},
		{"needs a repository", func(s KindSpec) bool { return s.NeedsRepository && s.Verb != "" }, []Kind{KindPrune, KindForget, KindRestore, KindVerify, KindCopy}},
		{"has a verb", func(s KindSpec) bool { return s.Verb != "" }, []Kind{KindPrune, KindForget, KindRestore, KindVerify, KindCopy}},
	} {
		if got := where(c.is); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
	if got := ExclusiveKinds(); !slices.Equal(got, []string{"prune", "forget", "verify"}) {
		t.Errorf("ExclusiveKinds() = %v", got)
	}
	// A kind's operation is the engine's name for it: the same word.
	for _, k := range Kinds() {
		if op := k.Spec().Operation; op != string(k) {
			t.Errorf("%s: operation %q", k, op)
		}
	}
	if (Kind("")).Spec() != KindBackup.Spec() {
		t.Error(`"" is not a backup`)
	}
	if (Kind("noop")).Spec() != (KindSpec{}) {
		t.Error("a kind that is none has a definition")
	}
	if op := (Run{Kind: KindVerify, Verify: Verify{DrillFiles: 3}}).Operation(); op != engine.OpDrill {
		t.Errorf("a drill's operation: %q", op)
	}
	if op := (Run{}).Operation(); op != engine.OpBackup {
		t.Errorf(`kind "": operation %q`, op)
	}
}

// Each repository schedule admits a run of a kind, read from the job's own settings of it.
func TestRepositorySchedules(t *testing.T) {
	at := func(h int) *time.Time { v := time.Date(2026, 1, 1, h, 0, 0, 0, time.UTC); return &v }
	j := Job{Prune: PruneSettings{Schedule: "@daily", NextAt: at(1)},
		Verify: VerifySettings{Schedule: "@weekly", NextAt: at(2), ReadData: "5%"},
		Drill:  DrillSettings{Schedule: "@monthly", NextAt: at(3), Files: 4}}
	for _, c := range []struct {
		s      RepositorySchedule
		kind   Kind
		expr   string
		next   *time.Time
		verify Verify
	}{
		{PruneSchedule, KindPrune, "@daily", at(1), Verify{}},
		{VerifySchedule, KindVerify, "@weekly", at(2), Verify{ReadDataSubset: "5%"}},
		{DrillSchedule, KindVerify, "@monthly", at(3), Verify{DrillFiles: 4}},
	} {
		var verify Verify
		if c.s.Verify != nil {
			verify = c.s.Verify(j)
		}
		if c.s.Kind != c.kind || c.s.Expr(j) != c.expr || !c.s.NextAt(j).Equal(*c.next) || verify != c.verify {
			t.Errorf("%s: kind %s, expr %q, next %v, verify %+v", c.s.Name, c.s.Kind, c.s.Expr(j), c.s.NextAt(j), verify)
		}
	}
	var names []string
	for _, s := range RepositorySchedules {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"prune", "verify", "drill"}) {
		t.Errorf("RepositorySchedules = %v", names)
	}
}

// A run that deletes, pinned to the job's pruning host, works there through the pruning
// host's location and environment; the repository it names stays the job's, and every other run
// (and a deleting one on the copy, or not pinned there) sees the job as it is.
func TestJobForPruningHost(t *testing.T) {
	j := Job{Name: "app", Repository: "rest:http://ao/", EnvFile: "/etc/ao.env", Host: "web1",
		Prune: PruneSettings{AppendOnly: true, Host: "vault", Repository: "/srv/r", EnvFile: "/etc/vault.env"},
		Copy:  CopySettings{To: "/srv/copy", PasswordFile: "/pw2"}}
	for _, c := range []struct {
		name            string
		run             Run
		restic, envFile string
	}{
		{"prune on the pruning host", Run{Kind: KindPrune, Host: "vault"}, "/srv/r", "/etc/vault.env"},
		{"forget on the pruning host", Run{Kind: KindForget, Host: "vault"}, "/srv/r", "/etc/vault.env"},
		{"forget pinned elsewhere", Run{Kind: KindForget, Host: "web1"}, "rest:http://ao/", "/etc/ao.env"},
		{"forget of the copy", Run{Kind: KindForget, Host: "vault", OnCopy: true}, "/srv/copy", "/etc/ao.env"},
		{"backup", Run{Kind: KindBackup}, "rest:http://ao/", "/etc/ao.env"},
		{"verify", Run{Kind: KindVerify, Host: "vault"}, "rest:http://ao/", "/etc/ao.env"},
	} {
		got := j.For(c.run)
		want := "rest:http://ao/"
		if c.run.OnCopy {
			want = "/srv/copy"
		}
		if got.ResticRepository() != c.restic || got.EnvFile != c.envFile || got.Repository != want ||
			!slices.Equal(j.Repositories(c.run)[:1], []string{want}) {
			t.Errorf("%s: restic given %q with %q, repository %q (%v); want %q with %q, repository %q",
				c.name, got.ResticRepository(), got.EnvFile, got.Repository, j.Repositories(c.run), c.restic, c.envFile, want)
		}
	}
	for _, c := range []struct {
		run  Run
		want bool
	}{
		{Run{Kind: KindForget, Host: "vault"}, false},
		{Run{Kind: KindPrune, Host: "vault2"}, true}, // pinned before the pruning host changed
		{Run{Kind: KindPrune, Host: "vault", OnCopy: true}, false},
		{Run{Kind: KindVerify, Host: "web1"}, false},
	} {
		if got := j.DeletesAppendOnly(c.run); got != c.want {
			t.Errorf("DeletesAppendOnly(%+v) = %v, want %v", c.run, got, c.want)
		}
	}
	same := j
	same.Prune.Repository, same.Prune.EnvFile = "", ""
	if p := same.For(Run{Kind: KindPrune, Host: "vault"}); p.Via != "" || p.ResticRepository() != "rest:http://ao/" || p.EnvFile != "/etc/ao.env" {
		t.Errorf("a pruning host reaching the job's own location: %+v", p)
	}
}
