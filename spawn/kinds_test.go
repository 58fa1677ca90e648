package spawn

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
)

// Every kind has its unit (spawn/kind_<kind>.go), and the registry holds no kind that is none.
func TestEveryKindHasAUnit(t *testing.T) {
	for _, k := range model.Kinds() {
		u, ok := kindUnits[k]
		if !ok {
			t.Errorf("kind %s: no unit registered (spawn/kind_%s.go)", k, k)
			continue
		}
		if u.restic == nil {
			t.Errorf("kind %s: its unit has no restic command", k)
		}
	}
	for k := range kindUnits {
		if !k.Valid() {
			t.Errorf("a unit is registered for %q, no kind of model.Kinds()", k)
		}
	}
}

// A kind that model does not define (noop) is refused by both registries until it is added to
// each: ParseKind, and the unit that spawn looks up. Registered here, it builds a unit; that is
// all the code a new kind needs in spawn (see docs/ARCHITECTURE.md, Adding a run kind).
func TestNoopKind(t *testing.T) {
	const noop model.Kind = "noop"
	if _, err := model.ParseKind(string(noop)); err == nil {
		t.Fatal("model accepts a kind it does not define")
	}
	job := model.Job{Name: "j", Engine: engine.NameRestic, Repository: "/srv/repo", PasswordFile: "/etc/pw"}
	run := model.Run{ID: uuid.New(), Kind: noop}
	cfg := jobunit.Config{StateDir: "/var/lib/holdfast", Binary: "/usr/bin/holdfast", ResticBinary: "/usr/bin/restic"}
	if _, err := unitSpec(cfg, job, run, 1, false); err == nil || !strings.Contains(err.Error(), `no unit for a run of kind "noop"`) {
		t.Fatalf("a unit for a kind with none registered: %v", err)
	}
	registerUnit(noop, kindUnit{restic: func(b *unitBuild) []string { return append(b.restic.GlobalArgv(b.ej), "snapshots") }})
	defer delete(kindUnits, noop)
	spec, err := unitSpec(cfg, job, run, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(spec.ExecStart, " ")
	if !strings.HasSuffix(argv, " -- /usr/bin/restic --repo /srv/repo --password-file /etc/pw --cache-dir /var/lib/holdfast/cache/0/j snapshots") {
		t.Errorf("noop's unit: %s", argv)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a kind registered twice")
			}
		}()
		registerUnit(noop, kindUnit{})
	}()
}
