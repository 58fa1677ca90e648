package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/holdfast-backup/holdfast/supervisor"
	"github.com/holdfast-backup/holdfast/testenv"
)

// daemonFlags is true to the flags: each path it names is a setting of supervisor.Config, and the
// flag it names for it is the daemon's flag that sets it. The settings' owners name settings by
// those paths, so an error that names one shows the operator its flag.
func TestDaemonFlagsNameTheirSettings(t *testing.T) {
	t.Parallel()
	g := &globals{env: environment{getenv: func(string) string { return "" }}}
	seen := map[string]string{}
	for path, flag := range daemonFlags {
		if other, ok := seen[flag]; ok {
			t.Errorf("--%s names both %s and %s", flag, path, other)
		}
		seen[flag] = path
		cfg := supervisor.Defaults()
		var allowUsers, logLevel string
		f := pflag.NewFlagSet("daemon", pflag.ContinueOnError)
		bindDaemonFlags(f, g, &cfg, &allowUsers, &logLevel)
		if f.Lookup(flag) == nil {
			t.Errorf("%s: the daemon has no --%s", path, flag)
			continue
		}
		field := reflect.ValueOf(&cfg).Elem()
		for _, name := range strings.Split(path, ".") {
			if field = field.FieldByName(name); !field.IsValid() {
				t.Fatalf("%s is no setting of supervisor.Config", path)
			}
		}
		if path == "Reconcile.AllowUsers" { // bound to a list the command splits
			if err := f.Set(flag, "nobody,root"); err != nil || allowUsers != "nobody,root" {
				t.Errorf("--%s nobody,root: %q, %v", flag, allowUsers, err)
			}
			continue
		}
		before := reflect.ValueOf(field.Interface()) // a copy
		var value string
		switch field.Interface().(type) {
		case time.Duration:
			value = "4h59m7s"
		case int:
			value = "77"
		case bool:
			value = "true"
			if field.Bool() {
				value = "false"
			}
		case string, []string:
			value = "/x/y"
		default:
			t.Fatalf("%s: a %s, which this test cannot set", path, field.Type())
		}
		if err := f.Set(flag, value); err != nil {
			t.Fatalf("--%s %s: %v", flag, value, err)
		}
		if reflect.DeepEqual(before.Interface(), field.Interface()) {
			t.Errorf("--%s %s left %s at %v: it does not set that setting", flag, value, path, field.Interface())
		}
	}
	if got := settingFlag("Reconcile.SpawnGrace"); got != "--spawn-grace" {
		t.Errorf("settingFlag(Reconcile.SpawnGrace) = %q", got)
	}
}

// The daemon's configuration errors name its flags, for the settings of every part: its own,
// the reconciler's, notification delivery's (those of package notify's own errors too).
func TestDaemonErrorsNameFlags(t *testing.T) {
	t.Parallel()
	restic := testenv.Restic(t)
	for _, c := range []struct {
		edit func(*supervisor.Config)
		want string
	}{
		{func(c *supervisor.Config) { c.SweepInterval = 0 }, "--sweep-interval 0s must be positive, e.g. 2s"},
		{func(c *supervisor.Config) { c.Lease = time.Millisecond }, "--lease 1ms is too short to renew"},
		{func(c *supervisor.Config) { c.Reconcile.SpawnGrace = -time.Second }, "--spawn-grace -1s must be positive, e.g. 30s"},
		{func(c *supervisor.Config) { c.Reconcile.Limits.MaxRunningHost = -1 }, "--max-running-host -1 is out of range: give at least 0"},
		{func(c *supervisor.Config) { c.Reconcile.StartLead = -time.Second }, "--start-lead -1s is negative: give 0 or more, e.g. 10s"},
		{func(c *supervisor.Config) { c.Reconcile.Host = "a b" }, `--host: invalid host name "a b"`},
		{func(c *supervisor.Config) { c.Reconcile.WindowZone = "Mars/Olympus" }, `--window-tz: time zone "Mars/Olympus" is unknown`},
		{func(c *supervisor.Config) { c.Reconcile.AllowUsers = []string{"no-such-user-here"} }, `--allow-users: user "no-such-user-here" does not exist`},
		{func(c *supervisor.Config) { c.KeepHistory, c.KeepRunFiles = "40d", "60d" }, "--keep-history 40d is shorter than --keep-run-files 60d"},
		{func(c *supervisor.Config) { c.Reconcile.Binary = "holdfast" }, `--holdfast-binary "holdfast" is a relative path`},
		{func(c *supervisor.Config) { c.Reconcile.ResticBinary = "restic" }, `--restic "restic" is a relative path`},
		{func(c *supervisor.Config) { c.Notify.Lease, c.Notify.Timeout = time.Second, 2*time.Second }, "--notify-lease 1s must be longer than --notify-timeout 2s"},
		{func(c *supervisor.Config) { c.Notify.AllowCommands, c.Notify.CommandUser = true, "no-such-user-here" }, `--notify-command-user "no-such-user-here": no such user`},
	} {
		cfg := supervisor.Defaults()
		cfg.Database.DSN = "postgres:///unused"
		cfg.Reconcile.ResticBinary = restic // Validate asks it its version
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate = %v, want an error with %q", err, c.want)
		}
	}
}
