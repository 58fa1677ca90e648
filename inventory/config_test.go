package inventory_test

import (
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/inventory"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// A Config missing the store or a piece of the units is refused, naming it; restic defaults to
// the one in PATH.
func TestConfigValidate(t *testing.T) {
	full := func() inventory.Config {
		return inventory.Config{Store: &store.Store{}, Runner: &systemd.Client{}, StateDir: "/var/lib/holdfast", Binary: "/usr/bin/holdfast"}
	}
	for _, tc := range []struct {
		want  string
		unset func(*inventory.Config)
	}{
		{"no store", func(c *inventory.Config) { c.Store = nil }},
		{"no runner", func(c *inventory.Config) { c.Runner = nil }},
		{"no state directory", func(c *inventory.Config) { c.StateDir = "" }},
		{"no holdfast binary", func(c *inventory.Config) { c.Binary = "" }},
	} {
		cfg := full()
		tc.unset(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want %q", err, tc.want)
		}
	}
	cfg := full()
	if err := cfg.Validate(); err != nil || cfg.ResticBinary != jobunit.DefaultResticBinary {
		t.Fatalf("Validate = %v, restic %q; want restic %q", err, cfg.ResticBinary, jobunit.DefaultResticBinary)
	}
}
