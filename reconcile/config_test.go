package reconcile

import (
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/spawn"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// Each setting's default and check are stated once: a setting a Config built by code leaves zero
// gets its default, a negative or otherwise invalid one is refused in one line naming the
// setting (Reconcile.<field>, its path in the daemon's configuration), and a zero the daemon's
// operator gave (ValidateFlags, on the flags' defaults) is refused where zero means nothing.
func TestConfigSettings(t *testing.T) {
	base := func() Config {
		return Config{Store: &store.Store{}, Runner: &systemd.Client{}, StateDir: t.TempDir(), Binary: "/bin/true", Host: "h"}
	}
	for _, c := range []struct {
		name  string
		edit  func(*Config)
		want  string // "" valid; else a part of Validate's error
		flags string // ValidateFlags' error, from the defaults, when it differs from want ("-" valid)
		check func(Config) bool
	}{
		{"zero is the defaults", func(*Config) {}, "", "-", func(c Config) bool {
			return c.SpawnGrace == DefaultSpawnGrace && c.RunBudget == DefaultRunBudget && c.PassTimeout == DefaultPassTimeout &&
				c.DependsWait == DefaultDependsWait && c.TakeoverGrace == DefaultTakeoverGrace && c.MaxAttempts == DefaultMaxAttempts &&
				c.Workers == DefaultWorkers && c.SpawnWorkers == spawn.DefaultWorkers && c.AllowUsers[0] == DefaultAllowUsers &&
				c.ResticBinary == jobunit.DefaultResticBinary && c.zone == time.UTC && c.windows == nil && c.Logger != nil && c.StartLead == 0
		}},
		{"zero max attempts", func(c *Config) { c.MaxAttempts = 0 }, "", "MaxAttempts 0 is out of range: give at least 1",
			func(c Config) bool { return c.MaxAttempts == DefaultMaxAttempts }},
		{"negative max attempts", func(c *Config) { c.MaxAttempts = -1 }, "MaxAttempts -1 is out of range: give at least 1", "", nil},
		{"negative workers", func(c *Config) { c.Workers = -2 }, "Workers -2 is out of range: give at least 1", "", nil},
		{"negative spawn workers", func(c *Config) { c.SpawnWorkers = -1 }, "SpawnWorkers -1 is out of range: give at least 1", "", nil},
		{"zero spawn workers", func(c *Config) { c.SpawnWorkers = 0 }, "", "-",
			func(c Config) bool { return c.SpawnWorkers == spawn.DefaultWorkers }},
		{"zero pass timeout", func(c *Config) { c.PassTimeout = 0 }, "", "-",
			func(c Config) bool { return c.PassTimeout == DefaultPassTimeout }},
		{"zero run budget", func(c *Config) { c.RunBudget = 0 }, "", "RunBudget 0s must be positive, e.g. 30s",
			func(c Config) bool { return c.RunBudget == DefaultRunBudget }},
		{"negative spawn grace", func(c *Config) { c.SpawnGrace = -time.Second }, "SpawnGrace -1s must be positive, e.g. 30s", "", nil},
		{"negative run budget", func(c *Config) { c.RunBudget = -time.Second }, "RunBudget -1s must be positive, e.g. 30s", "", nil},
		{"negative pass timeout", func(c *Config) { c.PassTimeout = -time.Second }, "PassTimeout -1s must be positive, e.g. 2m", "", nil},
		{"negative depends wait", func(c *Config) { c.DependsWait = -time.Hour }, "DependsWait -1h0m0s must be positive, e.g. 6h", "", nil},
		{"negative takeover grace", func(c *Config) { c.TakeoverGrace = -1 }, "TakeoverGrace -1ns must be positive, e.g. 30s", "", nil},
		{"negative start lead", func(c *Config) { c.StartLead = -time.Second }, "StartLead -1s is negative: give 0 or more, e.g. 10s", "", nil},
		{"negative max running", func(c *Config) { c.Limits.MaxRunning = -1 }, "Limits.MaxRunning -1 is out of range: give at least 0", "", nil},
		{"negative max running host", func(c *Config) { c.Limits.MaxRunningHost = -1 }, "Limits.MaxRunningHost -1 is out of range: give at least 0", "", nil},
		{"bad host", func(c *Config) { c.Host = "a b" }, `Host: invalid host name "a b"`, "", nil},
		{"unknown user", func(c *Config) { c.AllowUsers = []string{"no-such-user-here"} }, "AllowUsers: ", "", nil},
		{"windows in a zone", func(c *Config) {
			c.Windows, c.WindowZone = []string{"Sat 01:00-05:00", "daily 22:00-02:00"}, "Europe/Berlin"
		}, "", "",
			func(c Config) bool { return len(c.windows) == 2 && c.zone.String() == "Europe/Berlin" }},
		{"bad window", func(c *Config) { c.Windows = []string{"Sat 01:00-05:00", "Someday 25:00-26:00"} }, `window "Someday 25:00-26:00": `, "", nil},
		{"unknown window zone", func(c *Config) { c.WindowZone = "Mars/Olympus" }, `WindowZone: time zone "Mars/Olympus" is unknown`, "", nil},
		{"named by its path in the daemon's configuration", func(c *Config) { c.SpawnGrace = -time.Second },
			"Reconcile.SpawnGrace -1s must be positive", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, flags := base(), withDefaults(base())
			c.edit(&cfg)
			c.edit(&flags)
			err := cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Validate: %v, want an error with %q", err, c.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("Validate: %q, want one line", err)
			case c.check != nil && !c.check(cfg):
				t.Fatalf("Validate: %+v, want the default filled in", cfg)
			}
			want := c.want
			switch c.flags {
			case "-":
				want = ""
			case "":
			default:
				want = c.flags
			}
			err = flags.ValidateFlags()
			switch {
			case want == "" && err != nil:
				t.Fatalf("ValidateFlags: %v", err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Fatalf("ValidateFlags: %v, want an error with %q", err, want)
			}
		})
	}
}

// withDefaults is c with every default, as the daemon's flags give them.
func withDefaults(c Config) Config {
	d := Defaults()
	d.Store, d.Runner, d.StateDir, d.Binary, d.Host = c.Store, c.Runner, c.StateDir, c.Binary, c.Host
	return d
}

// The defaults the daemon's flags show are those Validate fills in.
func TestDefaults(t *testing.T) {
	d := Defaults()
	if err := d.ValidateFlags(); err != nil {
		t.Fatalf("Defaults: %v", err)
	}
	if d.StartLead != DefaultStartLead {
		t.Fatalf("Defaults: start lead %s, want %s", d.StartLead, DefaultStartLead)
	}
	var filled Config
	if err := filled.validateSettings(false); err != nil {
		t.Fatal(err)
	}
	if filled.SpawnGrace != d.SpawnGrace || filled.RunBudget != d.RunBudget || filled.PassTimeout != d.PassTimeout ||
		filled.DependsWait != d.DependsWait || filled.TakeoverGrace != d.TakeoverGrace || filled.MaxAttempts != d.MaxAttempts ||
		filled.Workers != d.Workers || filled.SpawnWorkers != d.SpawnWorkers || filled.AllowUsers[0] != d.AllowUsers[0] ||
		filled.AllowCommandJobs != d.AllowCommandJobs {
		t.Fatalf("Defaults %+v, Validate fills in %+v", d, filled)
	}
	for d, want := range map[time.Duration]string{6 * time.Hour: "6h", 2 * time.Minute: "2m", 30 * time.Second: "30s",
		90 * time.Minute: "1h30m", 1500 * time.Millisecond: "1.5s"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
