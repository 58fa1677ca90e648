package reconcile

import (
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/model"
)

func TestPolicy(t *testing.T) {
	for _, c := range []struct {
		name   string
		users  []string
		cmds   bool
		job    model.Job
		refuse string // "" allowed; else a part of the reason
	}{
		{"default: root allowed", nil, false, model.Job{Name: "j", Engine: "restic"}, ""},
		{"default: any user", nil, false, model.Job{Name: "j", Engine: "restic", User: "nobody"}, ""},
		{"default: no command jobs", nil, false, model.Job{Name: "j", Engine: "command", User: "nobody"}, "start the daemon with Reconcile.AllowCommandJobs to allow them"},
		{"command jobs allowed", nil, true, model.Job{Name: "j", Engine: "command"}, ""},
		{"command job outside the users", []string{"nobody"}, true, model.Job{Name: "j", Engine: "command"}, "runs as root (it names no Job.User) (uid 0), which Reconcile.AllowUsers (nobody) does not include; add it to the daemon's Reconcile.AllowUsers"},
		{"listed by name", []string{"root", "nobody"}, false, model.Job{Name: "j", Engine: "restic", User: "nobody"}, ""},
		{"listed by uid", []string{"65534"}, false, model.Job{Name: "j", Engine: "restic", User: "nobody"}, ""},
		{"a uid job user", []string{"nobody"}, false, model.Job{Name: "j", Engine: "restic", User: "65534"}, ""},
		{"root not listed", []string{"65534"}, false, model.Job{Name: "j", Engine: "restic"}, "Reconcile.AllowUsers (65534) does not include"},
		{"a deleted user", []string{"nobody"}, false, model.Job{Name: "j", Engine: "restic", User: "no-such-user"}, `user "no-such-user" does not exist on this host`},
		{"every user, spelled out", []string{"nobody", AnyUser}, false, model.Job{Name: "j", Engine: "restic", User: "root"}, ""},
	} {
		// The refusals name the settings by their paths in the daemon's configuration (name).
		cfg := Config{AllowUsers: c.users, AllowCommandJobs: c.cmds}
		if err := cfg.ValidatePolicy(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := (&Reconciler{cfg: cfg}).policyRefusal(c.job)
		if (got == "") != (c.refuse == "") || !strings.Contains(got, c.refuse) {
			t.Errorf("%s: refusal %q, want one with %q", c.name, got, c.refuse)
		}
	}
	for _, bad := range [][]string{{"no-such-user"}, {""}, {"nobody", " "}, {"4294967295"}, {"-1"}} {
		cfg := Config{AllowUsers: bad}
		if err := cfg.ValidatePolicy(); err == nil || !strings.HasPrefix(err.Error(), "Reconcile.AllowUsers: ") {
			t.Errorf("AllowUsers %q: %v, want a refusal naming AllowUsers", bad, err)
		}
	}
	if cfg := (Config{}); cfg.ValidatePolicy() != nil || cfg.AllowUsers[0] != DefaultAllowUsers || cfg.AllowCommandJobs != DefaultAllowCommandJobs {
		t.Errorf("zero Config: %+v, want the defaults", cfg)
	}
}
