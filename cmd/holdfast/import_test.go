package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A resticprofile configuration, imported: the YAML on standard output names what did not
// map (and so does standard error), --plan shows the jobs apply would create, apply creates
// them, and the round trip holds: import, apply, export, apply again changes nothing. A secret
// given inline is never printed; a configuration that is not one exits 2 in one line. Then an
// autorestic one, whose inline key the job reads from a file of --secret-dir that the operator
// writes: the same round trip, and a backup that succeeds with it; and a Backrest one, the same.
func TestImportConfigurations(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	repo, pw := w.resticRepo("repo")
	data := w.sampleData("data", 1, 1024)
	conf := w.writeConfig("profiles.toml", fmt.Sprintf(`
[global]
priority = "low"

[base]
repository = %q
password-file = %q
[base.retention]
keep-daily = 7
keep-within = "3m"
after-backup = true

[site]
inherit = "base"
nice = 5
ionice = true
ionice-class = 3
[site.backup]
source = [%q]
exclude = ["*.cache"]
schedule = "Mon..Fri 02:30"
run-before = "mount /mnt/backup"
exclude-caches = true
[site.check]
schedule = "weekly"
read-data-subset = "5%%"

[Secret]
inherit = "base"
password = "hunter2-never-shown"
[Secret.backup]
source = %q
`, repo, pw, data, data))
	res := w.run("import", "resticprofile", conf)
	if res.code != 0 {
		t.Fatalf("import: exit %d\n%s", res.code, res.stderr)
	}
	for _, want := range []string{"site:", "secret:", "schedule: 30 2 * * 1,2,3,4,5", "io-class: idle", "verify-read-data: 5%",
		"before:\n      - /bin/sh -c 'mount /mnt/backup'", "keep-daily: 7", "# not imported: profile site: backup.exclude-caches: no holdfast equivalent"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("the import lacks %q:\n%s", want, res.stdout)
		}
	}
	if !strings.Contains(res.stderr, "holdfast: not imported: profile secret: password") && !strings.Contains(res.stderr, "holdfast: not imported: profile Secret: password") {
		t.Errorf("standard error does not name the inline password:\n%s", res.stderr)
	}
	if strings.Contains(res.stdout+res.stderr, "hunter2") {
		t.Fatalf("the inline password was printed:\n%s\n%s", res.stdout, res.stderr)
	}
	plan := w.run("import", "resticprofile", conf, "--plan")
	if plan.code != 0 || !strings.Contains(plan.stdout, "create job site") || !strings.Contains(plan.stdout, "create job secret") {
		t.Fatalf("import --plan: exit %d\n%s\n%s", plan.code, plan.stdout, plan.stderr)
	}
	if jobs := w.mustRun("job", "list"); strings.Contains(jobs, "site") {
		t.Fatalf("import --plan created a job:\n%s", jobs)
	}

	imported := w.writeConfig("imported.yaml", res.stdout)
	if p := w.applyPlan(imported); len(p.Changes) != 2 {
		t.Fatalf("apply of the import: %+v", p)
	}
	var site struct {
		Schedule string   `json:"schedule"`
		Paths    []string `json:"paths"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("job", "show", "site", "--json")), &site); err != nil || site.Schedule != "30 2 * * 1,2,3,4,5" {
		t.Fatalf("job site: %+v (%v)", site, err)
	}
	exported := w.writeConfig("exported.yaml", w.mustRun("export"))
	if p := w.applyPlan("--dry-run", exported); len(p.Changes) != 0 {
		t.Fatalf("import, apply, export, apply planned %+v", p)
	}
	if p := w.applyPlan("--dry-run", imported); len(p.Changes) != 0 {
		t.Fatalf("the import applied again planned %+v", p)
	}

	// autorestic: a location to a local backend whose key is inline.
	secrets := filepath.Join(w.dir, "secrets")
	if err := os.Mkdir(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	auto := w.writeConfig("autorestic.yml", fmt.Sprintf(`version: 2
locations:
  docs:
    from: %q
    to: local
    cron: '0 4 * * *'
    options:
      forget:
        keep-last: 3
backends:
  local:
    type: local
    path: %q
    key: %q
`, data, repo, "correct horse battery staple"))
	res = w.run("import", "autorestic", auto, "--secret-dir", secrets)
	if res.code != 0 || !strings.Contains(res.stdout, "password-file: "+filepath.Join(secrets, "local.key")) ||
		!strings.Contains(res.stderr, "backend local: key") || strings.Contains(res.stdout+res.stderr, "battery") {
		t.Fatalf("import autorestic: exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	// What the note asks for: the key in its file.
	key, err := os.ReadFile(pw)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "local.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	autoYAML := w.writeConfig("auto.yaml", res.stdout)
	if p := w.applyPlan(autoYAML); len(p.Changes) != 1 {
		t.Fatalf("apply of the autorestic import: %+v", p)
	}
	if p := w.applyPlan("--dry-run", w.writeConfig("exported2.yaml", w.mustRun("export"))); len(p.Changes) != 0 {
		t.Fatalf("the autorestic import exported and applied planned %+v", p)
	}
	w.startDaemon()
	if r := w.waitEnd(w.startRun("docs")); r.Status != "succeeded" {
		t.Fatalf("a backup of the imported job: %s (%s)", r.Status, r.Reason)
	}

	// Backrest: a plan on a repo whose password is inline, its check policy the verify schedule.
	brest := w.writeConfig("config.json", fmt.Sprintf(`{"repos": [{"id": "nas", "uri": %q, "password": "correct horse battery staple",
	  "checkPolicy": {"schedule": {"cron": "0 5 * * 0", "clock": "CLOCK_UTC"}, "readDataSubsetPercent": 5}}],
	  "plans": [{"id": "photos", "repo": "nas", "paths": [%q], "schedule": {"maxFrequencyHours": 12},
	    "retention": {"policyTimeBucketed": {"daily": 7}}}]}`, repo, data))
	res = w.run("import", "backrest", brest, "--secret-dir", secrets)
	if res.code != 0 || !strings.Contains(res.stdout, "password-file: "+filepath.Join(secrets, "nas.key")) ||
		!strings.Contains(res.stdout, "schedule: '@every 12h'") || !strings.Contains(res.stdout, "verify-read-data: 5%") ||
		strings.Contains(res.stdout+res.stderr, "battery") {
		t.Fatalf("import backrest: exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	if err := os.WriteFile(filepath.Join(secrets, "nas.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if p := w.applyPlan(w.writeConfig("brest.yaml", res.stdout)); len(p.Changes) != 1 {
		t.Fatalf("apply of the Backrest import: %+v", p)
	}
	if p := w.applyPlan("--dry-run", w.writeConfig("exported3.yaml", w.mustRun("export"))); len(p.Changes) != 0 {
		t.Fatalf("the Backrest import exported and applied planned %+v", p)
	}

	bad := w.writeConfig("bad.toml", "[a\n")
	if res := w.run("import", "resticprofile", bad); res.code != 2 || !strings.Contains(res.stderr, "not a resticprofile configuration") ||
		strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
		t.Fatalf("a broken file: exit %d, %q", res.code, res.stderr)
	}
	if res := w.run("import", "borgmatic", bad); res.code != 2 || !strings.Contains(res.stderr, "imports resticprofile's, autorestic's and Backrest's") {
		t.Fatalf("an unknown tool: exit %d, %q", res.code, res.stderr)
	}
}
