package importer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/retention"
)

// Backrest's documented keys: plans are jobs on their repo, its policies their prune and verify
// schedules, its inline password and environment files in the secret directory (named, never
// copied), command hooks at a snapshot's start and end before and after hooks; the rest notes.
func TestBackrest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "backrest.json"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Backrest("config.json", data, "/srv/secrets")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 2 {
		t.Fatalf("jobs %+v, want home and db", res.Jobs)
	}
	home, db := job(t, res, "home"), job(t, res, "db")
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"repo", home.Repository, "/srv/backrest/repo"},
		{"password", home.PasswordFile, "/srv/secrets/local.key"},
		{"env", home.EnvFile, "/srv/secrets/local.env"},
		{"paths", home.Paths, []string{"/home"}},
		{"excludes", home.Excludes, []string{"*.tmp"}},
		{"schedule", home.Schedule, "0 2 * * *"},
		{"prune", home.Prune.Schedule, "@every 720h"},
		{"verify", home.Verify.Schedule, "0 0 1 * *"},
		{"read data", home.Verify.ReadData, "5%"},
		{"before", home.Backup.BeforeHooks, []string{"/bin/sh -c '/usr/local/bin/pre'"}},
		{"after", home.Backup.AfterHooks, []string{"/bin/sh -c 'echo done | logger'"}},
		{"policy", policyOf(t, home), retention.Policy{KeepLast: 5, KeepHourly: 24, KeepDaily: 7, KeepWeekly: 4, KeepMonthly: 12}},
		{"db schedule", db.Schedule, "@every 6h"},
		{"db policy", policyOf(t, db), retention.Policy{KeepLast: 10}},
	} {
		if !jsonEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	for _, c := range []struct{ where, want string }{
		{"repo local: password", "/srv/secrets/local.key"},
		{"repo local: env", "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY"},
		{"repo local: flags", "no holdfast equivalent"},
		{"repo local: autoUnlock", "no holdfast equivalent"},
		{"repo local: commandPrefix", "no holdfast equivalent"},
		{"repo local: prunePolicy.maxUnusedPercent", "prune-schedule"},
		{"repo local: prunePolicy.schedule.clock", "tz"},
		{"instance", "--host"},
		{"auth", "web.auth"},
		{"plan Home", "called home"},
		{"plan Home: iexcludes", "no holdfast equivalent"},
		{"plan Home: backup_flags", "no holdfast equivalent"},
		{"plan Home: schedule.clock", "tz"},
		{"plan Home: hooks[0].onError", "before hook fails the run"},
		{"plan Home: hooks[2]", "HOLDFAST_OUTCOME"},
		{"plan Home: hooks[3]", "notify add"},
		{"plan Home: retention", "forgets after each backup"},
		{"repo local", "each of its 2 jobs'"},
	} {
		hasNote(t, res, c.where, c.want)
	}
	if text := notesText(res); strings.Contains(text, "NOT-TO-BE-COPIED") {
		t.Fatalf("a secret was copied into the notes:\n%s", text)
	}
	for _, bad := range []struct{ data, want string }{
		{"{", "not a Backrest configuration"},
		{`{"repos": [{"uri": "/r"}]}`, "has no id"},
		{`{"plans": [{"id": "a", "repo": "x"}]}`, "not among the repos"},
		{`{"repos": [{"id": "x"}], "plans": [{"id": "a", "repo": "x"}]}`, "has no uri"},
	} {
		if _, err := Backrest("x.json", []byte(bad.data), ""); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error saying %q", bad.data, err, bad.want)
		}
	}
}
