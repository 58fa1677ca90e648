package importer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/hook"
	"github.com/holdfast-backup/holdfast/schedule"
)

// Whatever a configuration holds, the import returns jobs or an error, never panics; each job's
// hooks are lines holdfast runs, its schedule one holdfast reads.
func FuzzResticprofile(f *testing.F) {
	for _, name := range []string{"profiles.toml", "profiles-v2.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(name, data)
	}
	f.Add("x.json", []byte(`{"a": {"inherit": "a"}}`))
	f.Add("x.yaml", []byte("a:\n  backup: {source: /a, schedule: [\"Mon..Sun 1,2:0/5\"], run-before: 'a|b'}\n"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		if !strings.HasSuffix(name, ".toml") && !strings.HasSuffix(name, ".json") {
			name = "x.yaml"
		}
		res, err := Resticprofile(name, data)
		if err != nil {
			return
		}
		checkJobs(t, res)
	})
}

// Whatever an autorestic configuration holds, the import returns jobs or an error.
func FuzzAutorestic(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "autorestic.yml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("locations:\n  a: {from: /a, to: [x, x]}\nbackends:\n  x: {type: local, path: /r}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := Autorestic("x.yml", data, "")
		if err != nil {
			return
		}
		checkJobs(t, res)
	})
}

// checkJobs holds an import's jobs to what holdfast takes: hooks it runs, schedules it reads.
func checkJobs(t *testing.T, res Result) {
	t.Helper()
	for _, j := range res.Jobs {
		for _, line := range append(append([]string{}, j.Backup.BeforeHooks...), j.Backup.AfterHooks...) {
			if _, err := hook.Split(line); err != nil {
				t.Fatalf("job %s: hook %q: %v", j.Name, line, err)
			}
		}
		for _, s := range []string{j.Schedule, j.Verify.Schedule, j.Prune.Schedule} {
			if _, err := schedule.Parse(s, ""); err != nil {
				t.Fatalf("job %s: schedule %q: %v", j.Name, s, err)
			}
		}
	}
}

// A calendar expression converts to a cron holdfast reads, or to none.
func FuzzCronOf(f *testing.F) {
	for _, s := range []string{"daily", "Mon..Fri 02:30", "*:0/15", "Sat,Sun *-*-* 04:00:00", "1,13:30", "2026-12-24 03:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, calendar string) {
		if cron, ok := cronOf(calendar); ok {
			if _, err := schedule.Parse(cron, ""); err != nil {
				t.Fatalf("cronOf(%q) = %q, which holdfast refuses: %v", calendar, cron, err)
			}
		}
	})
}

// Whatever a Backrest configuration holds, the import returns jobs or an error.
func FuzzBackrest(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "backrest.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{"repos": [{"id": "x", "uri": "/r"}], "plans": [{"id": "a", "repo": "x", "schedule": {"maxFrequencyDays": 1}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := Backrest("x.json", data, "")
		if err != nil {
			return
		}
		checkJobs(t, res)
	})
}
