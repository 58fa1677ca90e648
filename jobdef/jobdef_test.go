package jobdef

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
)

// Names and ids as systemd's valid_user_group_name (relaxed, numeric allowed) reads them.
func TestValidUserGroupName(t *testing.T) {
	for _, ok := range []string{"backup", "nobody", "0", "65534", "4294967294", "Backup.Team", "svc-1", "_x", "domain\\user", "ünï"} {
		if err := ValidUserGroupName(ok); err != nil {
			t.Errorf("ValidUserGroupName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", " x", "x ", "a:b", "a/b", "a\nb", "a\x7fb", "\xff", "65535", "4294967295", "4294967296", "0123", "-1", "-12", ".", ".."} {
		err := ValidUserGroupName(bad)
		if err == nil || !strings.Contains(err.Error(), "systemd accepts") || strings.Contains(err.Error(), "\n") {
			t.Errorf("ValidUserGroupName(%q) = %v, want a one-line refusal", bad, err)
		}
	}
}

// Names, host names and stdin file names at and past their length limits.
func TestNameLengths(t *testing.T) {
	for _, tc := range []struct {
		check func(string) error
		first string // a first character the pattern takes
		max   int
	}{
		{ValidateName, "a", 63},
		{ValidateHost, "A", 63},
		{func(s string) error {
			return Validate(&model.Job{Name: "j", Engine: "restic", Repository: "/r", PasswordFile: "/pw", RetryBackoff: time.Minute,
				Backup: model.BackupSettings{StdinFrom: "/bin/true", StdinFilename: s}})
		}, "_", 255},
	} {
		if err := tc.check(tc.first + strings.Repeat("-", tc.max-1)); err != nil {
			t.Errorf("%d characters: %v, want nil", tc.max, err)
		}
		for _, bad := range []string{tc.first + strings.Repeat("-", tc.max), "", "." + tc.first, tc.first + "/"} {
			if err := tc.check(bad); err == nil {
				t.Errorf("%q (%d characters): nil, want a refusal", bad, len(bad))
			}
		}
	}
}

func TestLookupNumeric(t *testing.T) {
	u, err := LookupUser("0")
	if err != nil || u.Username != "root" {
		t.Fatalf("LookupUser(0) = %v, %v; want root", u, err)
	}
	if _, err := LookupUser("4000000000"); !errors.Is(err, ErrUnknownUser) {
		t.Fatalf("LookupUser(4000000000) = %v, want ErrUnknownUser", err)
	}
	if _, err := LookupGroup("no-such-group-here"); !errors.Is(err, ErrUnknownUser) {
		t.Fatalf("LookupGroup(no-such-group-here) = %v, want ErrUnknownUser", err)
	}
	id, err := ResolveIdentity("", "0")
	if err != nil || id.UID != 0 || id.GID != 0 || id.String() != "root" {
		t.Fatalf("ResolveIdentity(\"\", 0) = %+v, %v", id, err)
	}
}

func TestValidateRefuses(t *testing.T) {
	base := func() model.Job {
		return model.Job{Name: "j", Engine: "command", Command: []string{"/bin/true"}, RetryBackoff: time.Minute}
	}
	cases := []struct {
		name string
		edit func(*model.Job)
		want string
	}{
		{"runtime under 1s", func(j *model.Job) { j.RuntimeMax = 999 * time.Millisecond }, "Job.RuntimeMax 999ms is too short"},
		{"negative runtime", func(j *model.Job) { j.RuntimeMax = -time.Second }, "is too short"},
		{"zero backoff", func(j *model.Job) { j.RetryBackoff = 0 }, "Job.RetryBackoff 0s must be positive"},
		{"negative backoff", func(j *model.Job) { j.RetryBackoff = -time.Minute }, "must be positive"},
		{"backoff past the cap", func(j *model.Job) { j.RetryBackoff = time.Hour + time.Second }, "past the cap of 1h0m0s"},
		{"priority past 32 bits", func(j *model.Job) { j.Priority = 1 << 31 }, "Job.Priority 2147483648 is out of range"},
		{"schedule never fires", func(j *model.Job) { j.Schedule = "0 2 30 2 *" }, "never fires"},
		{"relative local: repository", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "local:repo", "/pw", []string{"/data"}
		}, "is a relative path"},
		{"user name systemd refuses", func(j *model.Job) { j.User = "a:b" }, "Job.User \"a:b\" is not a user or group name"},
		{"unknown numeric group", func(j *model.Job) { j.Group = "4000000000" }, `group "4000000000" does not exist on this host`},
		{"fs snapshot of a command job", func(j *model.Job) { j.Backup.FSSnapshot = "btrfs" }, "Job.Backup.FSSnapshot is for restic jobs"},
		{"fs snapshot not btrfs", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "/r", "/pw", []string{"/data"}
			j.Backup.FSSnapshot = "lvm"
		}, `Job.Backup.FSSnapshot "lvm": give btrfs`},
		{"fs snapshot and a before hook", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "/r", "/pw", []string{"/data"}
			j.Backup.FSSnapshot, j.Backup.BeforeHooks = "btrfs", []string{"/bin/true"}
		}, "what a before hook (Job.Backup.BeforeHooks) writes would not be in the backup"},
		{"fs snapshot of a command's output", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile = "restic", nil, "/r", "/pw"
			j.Backup.FSSnapshot, j.Backup.StdinFrom, j.Backup.StdinFilename = "btrfs", "/bin/true", "out"
		}, "give one of them"},
		{"append-only command job", func(j *model.Job) { j.Prune.AppendOnly = true }, "Job.Prune.AppendOnly and Job.Prune.Host are for restic jobs"},
		{"pruning repository without a host", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "/r", "/pw", []string{"/data"}
			j.Prune.Repository = "/srv/r"
		}, "give Job.Prune.Host HOST too"},
		{"prune schedule through an append-only repository", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "rest:http://h/", "/pw", []string{"/data"}
			j.Prune.AppendOnly, j.Prune.Schedule = true, "@daily"
		}, "Job.Prune.Schedule would prune through a repository written append-only"},
		{"pruning host by a bad name", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "/r", "/pw", []string{"/data"}
			j.Prune.Host = "a b"
		}, `Job.Prune.Host: invalid host name "a b"`},
		{"pruning host is the append-only host, reaching it the same way", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "rest:http://h/", "/pw", []string{"/data"}
			j.Host, j.Prune.AppendOnly, j.Prune.Host = "web1", true, "web1"
		}, "is the job's own host"},
		{"pruning host of an any-host job, reaching it the same way", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "rest:http://h/", "/pw", []string{"/data"}
			j.Prune.AppendOnly, j.Prune.Host, j.Prune.Repository = true, "vault", "rest:http://h/"
		}, "backs up this any-host job too"},
		{"relative pruning repository", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "rest:http://h/", "/pw", []string{"/data"}
			j.Prune.Host, j.Prune.Repository = "vault", "local:r"
		}, "is a relative path"},
		{"relative pruning environment file", func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "rest:http://h/", "/pw", []string{"/data"}
			j.Prune.Host, j.Prune.EnvFile = "vault", "vault.env"
		}, `Job.Prune.EnvFile "vault.env" is a relative path`},
	}
	for _, tc := range cases {
		j := base()
		tc.edit(&j)
		err := Validate(&j)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, edit := range []func(*model.Job){
		func(j *model.Job) { j.RuntimeMax = time.Second },
		func(j *model.Job) { j.RetryBackoff = time.Hour },
		func(j *model.Job) { j.Priority = -1 << 31 },
		func(j *model.Job) { j.User, j.Group = "0", "0" },
		func(j *model.Job) { j.Schedule = "0 0 29 2 *" },
		func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "local:/srv/repo", "/pw", []string{"/data"}
		},
		func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "/r", "/pw", []string{"/data"}
			j.Backup.FSSnapshot, j.Backup.AfterHooks = "btrfs", []string{"/bin/true"}
		},
		func(j *model.Job) {
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "rest:http://h/", "/pw", []string{"/data"}
			j.Host, j.Prune.AppendOnly, j.Prune.Host, j.Prune.Repository = "web1", true, "vault", "local:/srv/r/"
			j.Prune.Schedule = "@daily"
		},
		func(j *model.Job) { // another way from the same host: its own credentials
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "rest:http://h/", "/pw", []string{"/data"}
			j.Host, j.Prune.AppendOnly, j.Prune.Host, j.Prune.EnvFile = "web1", true, "web1", "/etc/holdfast/delete.env"
		},
		func(j *model.Job) { // append-only with no pruning host: forgets and prunes are refused when asked for
			j.Engine, j.Command, j.Repository, j.PasswordFile, j.Paths = "restic", nil, "rest:http://h/", "/pw", []string{"/data"}
			j.Prune.AppendOnly = true
		},
	} {
		j := base()
		edit(&j)
		if err := Validate(&j); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", j, err)
		}
	}
	for in, want := range map[string]string{"local:/srv/repo/": "/srv/repo", "/srv//repo": "/srv/repo", "sftp:host:/srv/repo/": "sftp:host:/srv/repo/"} {
		j := model.Job{Name: "j", Repository: in, PasswordFile: "/pw", Paths: []string{"/data"}, RetryBackoff: time.Minute}
		if err := Validate(&j); err != nil || j.Repository != want {
			t.Errorf("Validate with --repo %s: repository %q, %v; want %q", in, j.Repository, err, want)
		}
	}
}

// CheckAccess asks the probe about the password file (a regular file) and every path, and names
// the first one the job's user cannot read.
func TestCheckAccess(t *testing.T) {
	j := model.Job{Name: "j", Engine: "restic", Repository: "/r", PasswordFile: "/pw", Paths: []string{"/a", "/b"}, User: "0"}
	var asked []Access
	probe := func(id Identity, want []Access) ([]string, error) {
		if id.UID != 0 || id.Name != "0" {
			t.Fatalf("probe as %+v, want uid 0", id)
		}
		asked = want
		return []string{"", "", "permission denied"}, nil
	}
	err := CheckAccess(j, probe, false)
	if err == nil || err.Error() != "path /b cannot be read by user 0: permission denied; make it readable by that user (or give another Job.User)" {
		t.Fatalf("CheckAccess = %v", err)
	}
	if len(asked) != 3 || asked[0] != (Access{Path: "/pw", Regular: true, What: "password file"}) || asked[1].Regular || asked[2].Path != "/b" {
		t.Fatalf("asked %+v", asked)
	}
	probe = func(Identity, []Access) ([]string, error) { return []string{"it is not a regular file", "", ""}, nil }
	if err := CheckAccess(j, probe, false); err == nil || !strings.HasPrefix(err.Error(), "password file /pw cannot be read by user 0: it is not a regular file") {
		t.Fatalf("CheckAccess = %v", err)
	}
	j.Engine = "command"
	if err := CheckAccess(j, func(Identity, []Access) ([]string, error) { t.Fatal("probed a command job"); return nil, nil }, false); err != nil {
		t.Fatal(err)
	}
}

func TestAccessChanged(t *testing.T) {
	base := model.Job{Engine: "restic", User: "u", Group: "g", PasswordFile: "/pw", Paths: []string{"/a", "/b"}, Schedule: "@daily"}
	for _, tc := range []struct {
		name string
		edit func(j *model.Job)
		want bool
	}{
		{"schedule only", func(j *model.Job) { j.Schedule = "@hourly" }, false},
		{"same paths again", func(j *model.Job) { j.Paths = []string{"/a", "/b"} }, false},
		{"user", func(j *model.Job) { j.User = "v" }, true},
		{"group", func(j *model.Job) { j.Group = "" }, true},
		{"engine", func(j *model.Job) { j.Engine = "command" }, true},
		{"password file", func(j *model.Job) { j.PasswordFile = "/pw2" }, true},
		{"a path more", func(j *model.Job) { j.Paths = append(j.Paths, "/c") }, true},
		{"paths reordered", func(j *model.Job) { j.Paths = []string{"/b", "/a"} }, true},
	} {
		after := base
		after.Paths = slices.Clone(base.Paths)
		tc.edit(&after)
		if got := AccessChanged(base, after); got != tc.want {
			t.Errorf("%s: AccessChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A job's maintenance windows and time zone are read once, by Windows: Validate refuses, in one
// line, a job whose windows or zone do not parse, before it is stored; StoredProblems names a
// stored one for holdfast check.
func TestWindowsAndZone(t *testing.T) {
	for _, c := range []struct {
		name    string
		zone    string
		windows []string
		want    string // "" valid; else a part of the error
	}{
		{"none", "", nil, ""},
		{"windows in UTC", "", []string{"Sat 01:00-05:00", "Mon-Fri 22:00-06:00", "daily 03:00-04:00"}, ""},
		{"windows in a zone", "Europe/Berlin", []string{"sat,sun 00:00-23:59"}, ""},
		{"unknown zone", "Mars/Olympus", nil, `time zone "Mars/Olympus" is unknown: use an IANA name`},
		{"the host's local zone", "Local", nil, `time zone "Local" is unknown`},
		{"unknown zone, good windows", "Europe/Atlantis", []string{"Sat 01:00-05:00"}, `time zone "Europe/Atlantis" is unknown`},
		{"unknown day", "", []string{"Someday 01:00-02:00"}, `window "Someday 01:00-02:00": `},
		{"hour past 23", "UTC", []string{"daily 25:00-26:00"}, `window "daily 25:00-26:00": `},
		{"no range", "", []string{"daily 03:00"}, `window "daily 03:00": the time range needs a '-'`},
		{"empty window", "", []string{"Sat 01:00-01:00"}, `window "Sat 01:00-01:00": the window is empty`},
		{"one bad among good", "Europe/Berlin", []string{"Sat 01:00-05:00", "Sun 1-2"}, `window "Sun 1-2": `},
		{"no days", "", []string{"01:00-02:00"}, `window "01:00-02:00": want days and a time range`},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := model.Job{Name: "j", Engine: "command", Command: []string{"/bin/true"}, RetryBackoff: time.Minute,
				TimeZone: c.zone, Windows: c.windows}
			windows, zone, err := Windows(j)
			validateErr := Validate(&j)
			problems := StoredProblems([]model.Job{{Name: "ok"}, j})
			if c.want == "" {
				if err != nil || validateErr != nil || len(windows) != len(c.windows) || zone == nil || len(problems) != 0 {
					t.Fatalf("Windows = %d windows, %v, %v; Validate = %v; StoredProblems = %q; want them parsed, valid, no problem",
						len(windows), zone, err, validateErr, problems)
				}
				return
			}
			for what, err := range map[string]error{"Windows": err, "Validate": validateErr} {
				if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
					t.Errorf("%s = %v, want one line with %q", what, err, c.want)
				}
			}
			if len(problems) != 1 || !strings.HasPrefix(problems[0], "a job's maintenance windows and time zone parse: job j: ") ||
				!strings.Contains(problems[0], c.want) {
				t.Errorf("StoredProblems = %q, want job j's with %q", problems, c.want)
			}
		})
	}
}
