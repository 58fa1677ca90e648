package systemd

import "testing"

// ProtectHome=read-only is left out where a writable path is /home, /root or /run/user or
// holds one: with it, systemd keeps that very directory read-only (a restore's stage in /home,
// seen on a booted host); ProtectSystem=strict keeps the rest read-only all the same.
func TestProtectHomeBesideWritableHome(t *testing.T) {
	for _, tc := range []struct {
		writable []string
		want     bool
	}{
		{nil, true},
		{[]string{"/srv/restore"}, true},
		{[]string{"/home/alice/restore"}, true},
		{[]string{"/homes"}, true},
		{[]string{"/home"}, false},
		{[]string{"/srv/x", "/root"}, false},
		{[]string{"/run"}, false},
	} {
		props, err := Sandbox{ReadOnlySystem: true, ReadWritePaths: tc.writable}.properties(false)
		if err != nil {
			t.Fatal(err)
		}
		var strict, home bool
		for _, p := range props {
			strict = strict || p.Name == "ProtectSystem" && p.Value.Value() == "strict"
			home = home || p.Name == "ProtectHome"
		}
		if !strict || home != tc.want {
			t.Errorf("writable %q: ProtectSystem=strict %v, ProtectHome %v; want strict and ProtectHome %v", tc.writable, strict, home, tc.want)
		}
	}
}
