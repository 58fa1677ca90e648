package importer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
)

// read imports a file of testdata.
func read(t *testing.T, name string) Result {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resticprofile(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func job(t *testing.T, res Result, name string) model.Job {
	t.Helper()
	i := slices.IndexFunc(res.Jobs, func(j model.Job) bool { return j.Name == name })
	if i < 0 {
		t.Fatalf("no job %s in %+v", name, res.Jobs)
	}
	return res.Jobs[i]
}

func policyOf(t *testing.T, j model.Job) retention.Policy {
	t.Helper()
	var p retention.Policy
	if err := json.Unmarshal(j.Retention.Policy, &p); err != nil {
		t.Fatalf("job %s's policy %s: %v", j.Name, j.Retention.Policy, err)
	}
	return p
}

// hasNote fails the test unless a note is at where and says want.
func hasNote(t *testing.T, res Result, where, want string) {
	t.Helper()
	for _, n := range res.Notes {
		if n.Where == where && strings.Contains(n.Why, want) {
			return
		}
	}
	t.Errorf("no note at %q saying %q among:\n%s", where, want, notesText(res))
}

func notesText(res Result) string {
	var b strings.Builder
	for _, n := range res.Notes {
		b.WriteString(n.String() + "\n")
	}
	return b.String()
}

// Version 1 in TOML: every key the documentation gives that maps is a setting of the job, what
// each profile inherits included; every other key is a note; the secrets are named, never copied.
func TestResticprofileTOML(t *testing.T) {
	res := read(t, "profiles.toml")
	if len(res.Jobs) != 2 {
		t.Fatalf("jobs %+v, want etc and home (base has no source)", res.Jobs)
	}
	home := job(t, res, "home")
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"repo", home.Repository, "/srv/backup/main"},
		{"password-file", home.PasswordFile, "/etc/resticprofile/key"},
		{"paths", home.Paths, []string{"/home"}},
		{"excludes", home.Excludes, []string{"*.cache", "/home/*/Downloads"}},
		{"schedule", home.Schedule, "30 2 * * 1,2,3,4,5"},
		{"nice", *home.Nice, 10},
		{"io-class", home.IOSchedulingClass, "idle"},
		{"limit-upload", home.LimitUploadKiB, 2048},
		{"before", home.Backup.BeforeHooks, []string{"/bin/sh -c '/usr/local/bin/pre-backup'", "/bin/sh -c 'mount /mnt/backup | logger'"}},
		{"after", home.Backup.AfterHooks, []string{"/bin/sh -c 'echo done'"}},
		{"verify-schedule", home.Verify.Schedule, "0 0 * * 1"},
		{"verify-read-data", home.Verify.ReadData, "10%"},
		{"prune-schedule", home.Prune.Schedule, "0 4 * * 0"},
		{"policy", policyOf(t, home), retention.Policy{KeepDaily: 7, KeepWeekly: 4, KeepWithin: retention.Duration{Months: 3}}},
	} {
		if !jsonEqual(c.got, c.want) {
			t.Errorf("home's %s = %v, want %v", c.what, c.got, c.want)
		}
	}
	etc := job(t, res, "etc")
	if !slices.Equal(etc.Paths, []string{"/etc"}) || etc.Schedule != "@daily" || policyOf(t, etc).KeepLast != 3 || policyOf(t, etc).KeepDaily != 7 ||
		etc.Nice == nil || *etc.Nice != 10 {
		t.Errorf("etc = %+v (policy %s)", etc, etc.Retention.Policy)
	}
	for _, c := range []struct{ where, want string }{
		{"global.priority", "daemon's flags"},
		{"global.restic-binary", "daemon's flags"},
		{"groups", "depends-on"},
		{"profile base", "no backup source"},
		{"profile home: env", "AWS_ACCESS_KEY_ID"},
		{"profile home: initialize", "restic init"},
		{"profile home: description", "no description"},
		{"profile home: backup.exclude-caches", "no holdfast equivalent"},
		{"profile home: backup.schedule-permission", "daemon schedules"},
		{"profile home: backup.tag", "no holdfast equivalent"},
		{"profile home: backup.run-after", "whatever the outcome"},
		{"profile home: backup.schedule", "tz"},
		{"profile home: retention.after-backup", "retention plan"},
		{"profile home: retention.keep-tag", "no holdfast equivalent"},
		{"profile etc: password", "never copied"},
		{"profile etc: backup.schedule", `"12:00" is left out`},
	} {
		hasNote(t, res, c.where, c.want)
	}
	text := notesText(res)
	for _, secret := range []string{"hunter2", "AKIA"} {
		if strings.Contains(text, secret) || strings.Contains(strings.Join(home.Backup.BeforeHooks, " ")+etc.PasswordFile, secret) {
			t.Errorf("a secret (%s) was copied:\n%s", secret, text)
		}
	}
}

// Version 2 in YAML: its profiles section, a stream's command, a schedule with no cron form, a
// profile's name made a job's.
func TestResticprofileYAMLv2(t *testing.T) {
	res := read(t, "profiles-v2.yaml")
	docs := job(t, res, "documents")
	if docs.Schedule != "*/15 * * * *" || docs.Repository != "/srv/backup/docs" || policyOf(t, docs).KeepHourly != 24 {
		t.Errorf("documents = %+v", docs)
	}
	db := job(t, res, "db")
	if db.Backup.StdinFrom != "/bin/sh -c 'pg_dump -Fc shop'" || db.Backup.StdinFilename != "shop.dump" || db.Paths != nil || db.Schedule != "" {
		t.Errorf("db = %+v", db)
	}
	hasNote(t, res, "profile Documents", "called documents")
	hasNote(t, res, "profile Documents: backup.one-file-system", "no holdfast equivalent")
	hasNote(t, res, "profile db: backup.schedule", "no cron form")
	hasNote(t, res, "profile default", "no backup source")
	hasNote(t, res, "global.scheduler", "daemon's flags")
}

// Bad input is refused with the file's name, and nothing else.
func TestResticprofileRefused(t *testing.T) {
	for _, c := range []struct{ name, data, want string }{
		{"x.toml", "[a\n", "not a resticprofile configuration"},
		{"x.yaml", "version: 2\n", "without its profiles"},
		{"x.yaml", "a:\n  inherit: b\nb:\n  inherit: a\n", "inherits from itself"},
		{"x.yaml", "A:\n  backup: {source: /a}\na:\n  backup: {source: /b}\n", "both job a"},
		{"x.yaml", "a:\n  repository: [1]\n  backup: {source: /a}\n", "repository: want a string"},
	} {
		if _, err := Resticprofile(c.name, []byte(c.data)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.data, err, c.want)
		}
	}
}

func TestCronOf(t *testing.T) {
	for in, want := range map[string]string{
		"daily": "@daily", "Hourly": "@hourly", "weekly": "0 0 * * 1", "monthly": "@monthly", "yearly": "@yearly",
		"02:30": "30 2 * * *", "*-*-* 03:15:00": "15 3 * * *", "*:0/15": "*/15 * * * *", "*:5/20": "5-59/20 * * * *",
		"Mon..Fri 02:00": "0 2 * * 1,2,3,4,5", "Sat,Sun *-*-* 04:00": "0 4 * * 6,0", "Mon-Fri 02:00": "0 2 * * 1,2,3,4,5",
		"Sat..Sun 1:00": "0 1 * * 6,0",
		"monday 06:00":  "0 6 * * 1", "*:00": "0 * * * *", "1,13:30": "30 1,13 * * *",
	} {
		if got, ok := cronOf(in); !ok || got != want {
			t.Errorf("cronOf(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"2026-12-24 03:00", "*-*-* 03:00:30", "Mon", "02:30:15", "8..17:00", "xyz 02:00", "", "Fri..Mon 1:00", "Monxyz 02:00"} {
		if got, ok := cronOf(in); ok {
			t.Errorf("cronOf(%q) = %q, want no cron form", in, got)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// A password in a repository's location, or in a file that does not parse, is never printed:
// the location keeps its user and loses the password (a note says where it goes), and a parse
// error says where, not what.
func TestSecretsNeverPrinted(t *testing.T) {
	res, err := Resticprofile("p.yaml", []byte("a:\n  repository: rest:https://alice:s3cr3t-pw@backup.example.com/alice\n  backup: {source: /a}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Jobs[0].Repository; r != "rest:https://alice@backup.example.com/alice" {
		t.Errorf("repository %q, want the location without its password", r)
	}
	hasNote(t, res, "profile a: repository", "password")
	auto, err := Autorestic("a.yml", []byte("locations:\n  a: {from: data, to: r}\nbackends:\n  r: {type: rest, path: 'https://bob:pw-of-bob@host/bob'}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if r, p := auto.Jobs[0].Repository, auto.Jobs[0].Paths; strings.Contains(r, "pw-of-bob") || !filepath.IsAbs(p[0]) || filepath.Base(p[0]) != "data" {
		t.Errorf("autorestic: repository %q, paths %q", r, p)
	}
	hasNote(t, auto, "location a", "has no key here")
	for _, c := range []struct{ name, data string }{
		{"p.yaml", "hunter2-secret"},
		{"p.toml", "password = trustno1-secret\n"},
		{"p.json", `{"password": hunter2-secret}`},
	} {
		_, err := Resticprofile(c.name, []byte(c.data))
		if err == nil || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "hunter") || strings.Contains(err.Error(), "trustno") {
			t.Errorf("%s: %v, want an error that quotes nothing of the file", c.name, err)
		}
	}
}
