package importer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/retention"
)

// autorestic's documented keys: a location to two backends is two jobs, each backend's type and
// path its repository, its inline key and environment files under the secret directory (named,
// never copied), the global forget options under the location's own; a volume is no job; the
// rest are notes.
func TestAutorestic(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "autorestic.yml"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Autorestic("autorestic.yml", data, "/srv/secrets")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range res.Jobs {
		names = append(names, j.Name)
	}
	if !slices.Equal(names, []string{"etc", "home-hdd", "home-remote"}) {
		t.Fatalf("jobs %q, want etc, home-hdd and home-remote", names)
	}
	hdd, remote, etc := job(t, res, "home-hdd"), job(t, res, "home-remote"), job(t, res, "etc")
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"hdd repo", hdd.Repository, "/mnt/hdd/backup"},
		{"hdd password", hdd.PasswordFile, "/srv/secrets/hdd.key"},
		{"hdd env", hdd.EnvFile, ""},
		{"remote repo", remote.Repository, "b2:my-bucket:backup/home"},
		{"remote password", remote.PasswordFile, "/srv/secrets/remote.key"},
		{"remote env", remote.EnvFile, "/srv/secrets/remote.env"},
		{"paths", hdd.Paths, []string{"/home"}},
		{"excludes", remote.Excludes, []string{"*.cache", "node_modules"}},
		{"schedule", hdd.Schedule, "0 3 * * *"},
		{"before", hdd.Backup.BeforeHooks, []string{"/bin/sh -c '/usr/local/bin/mount-hdd'", `/bin/sh -c 'echo "backing up" > /var/log/autorestic-note'`}},
		{"after", hdd.Backup.AfterHooks, []string{"/bin/sh -c '/usr/local/bin/umount-hdd'"}},
		{"policy", policyOf(t, hdd), retention.Policy{KeepLast: 5, KeepDaily: 7, KeepWeekly: 4, KeepWithin: retention.Duration{Months: 3}}},
		{"etc paths", etc.Paths, []string{"/etc", "/usr/local/etc"}},
		{"etc schedule", etc.Schedule, ""},
		{"etc policy", policyOf(t, etc), retention.Policy{KeepDaily: 7, KeepWeekly: 4}},
	} {
		if !jsonEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	for _, c := range []struct{ where, want string }{
		{"global.backup", "no holdfast equivalent"},
		{"extras", "not a section"},
		{"backend hdd: key", "/srv/secrets/hdd.key"},
		{"backend remote: env", "B2_ACCOUNT_ID, B2_ACCOUNT_KEY"},
		{"backend remote: requireKey", "no holdfast equivalent"},
		{"location home: hooks.failure", "HOLDFAST_OUTCOME"},
		{"location home: hooks.success", "HOLDFAST_OUTCOME"},
		{"location home: options.backup.exclude-caches", "no holdfast equivalent"},
		{"location home: forget", "retention plan"},
		{"location home: cron", "tz"},
		{"location etc: cron", "not a cron expression"},
		{"location etc: copy", "copy-to"},
		{"location mysql", "Docker volume"},
	} {
		hasNote(t, res, c.where, c.want)
	}
	if text := notesText(res); strings.Contains(text, "NOT-TO-BE-COPIED") {
		t.Fatalf("a secret was copied into the notes:\n%s", text)
	}
	for _, bad := range []struct{ data, want string }{
		{"locations: [\n", "not an autorestic configuration"},
		{"version: 2\n", "no locations section"},
		{"locations:\n  a: {from: /a}\n", "to no backend"},
		{"locations:\n  a: {from: /a, to: x}\n", "which the configuration lacks"},
		{"locations:\n  a: {from: /a, to: x}\nbackends:\n  x: {type: local}\n", "without a path"},
	} {
		if _, err := Autorestic("x.yml", []byte(bad.data), ""); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error saying %q", bad.data, err, bad.want)
		}
	}
}
