package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/testenv"
)

func TestParseResticVersion(t *testing.T) {
	for _, c := range []struct {
		out  string
		want ResticVersion
		err  string
	}{
		{out: "restic 0.14.0 compiled with go1.19.8 on linux/amd64\n", want: ResticVersion{0, 14, 0}},
		{out: "restic 0.16.4 compiled with go1.22.2 on linux/amd64\n", want: ResticVersion{0, 16, 4}},
		{out: "restic 0.18.1 compiled with go1.24.6 on linux/amd64\n", want: ResticVersion{0, 18, 1}},
		{out: "restic 0.19.0-dev (compiled manually) compiled with go1.25.1 on linux/amd64\n", want: ResticVersion{0, 19, 0}},
		{out: "", err: "not restic's"},
		{out: "usage: true\n", err: `printed "usage: true"`},
		{out: "restic v1\n", err: "not restic's"},
		{out: "restic 0.14\n", err: "not restic's"},
		{out: "restic 99999.1.1\n", err: "not restic's"},
		{out: "restic " + strings.Repeat("x", 200), err: "…"},
	} {
		got, err := ParseResticVersion([]byte(c.out))
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("ParseResticVersion(%q) = %v, %v; want %v", c.out, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseResticVersion(%q) = %v, %v; want an error saying %q", c.out, got, err, c.err)
		}
	}
}

func FuzzParseResticVersion(f *testing.F) {
	for _, seed := range []string{"restic 0.14.0 compiled with go1.19.8 on linux/amd64\n", "restic 0.19.0-dev (compiled manually)",
		"", "restic 1.2.3", "restic 0.0.0\x00", "\nrestic 0.14.0"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		v, err := ParseResticVersion(out)
		if err == nil && !strings.HasPrefix(strings.TrimSpace(string(out)), "restic "+v.String()) {
			t.Fatalf("ParseResticVersion(%q) = %v, which its output does not name", out, v)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("ParseResticVersion(%q): a message of more than one line: %q", out, err)
		}
	})
}

func TestResticVersionOf(t *testing.T) {
	ctx := context.Background()
	script := func(t *testing.T, body string) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "restic")
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Run("the installed restic", func(t *testing.T) {
		v, err := ResticVersionOf(ctx, testenv.Restic(t))
		if err != nil || v.Less(OldestRestic) {
			t.Fatalf("ResticVersionOf(restic) = %v, %v", v, err)
		}
	})
	for _, c := range []struct{ name, body, err string }{
		{"not restic", "exit 0", "install restic 0.14.0 or later"},
		{"fails", "exit 3", "`version` failed"},
		{"too old", "echo 'restic 0.13.1 compiled with go1.18 on linux/amd64'", "is 0.13.1, older than 0.14.0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ResticVersionOf(ctx, script(t, c.body)); err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("ResticVersionOf = %v, want an error saying %q", err, c.err)
			}
		})
	}
	t.Run("asked once per file, again once it is replaced", func(t *testing.T) {
		path := script(t, "echo 'restic 0.16.4 compiled with go1.22.2 on linux/amd64'")
		if v, err := ResticVersionOf(ctx, path); err != nil || v != (ResticVersion{0, 16, 4}) {
			t.Fatalf("first ask: %v, %v", v, err)
		}
		// The same file answers from the cache: it is not run again (it could not be now).
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		if v, err := ResticVersionOf(ctx, path); err != nil || v != (ResticVersion{0, 16, 4}) {
			t.Fatalf("second ask: %v, %v; want the first answer, without running it", v, err)
		}
		// A new file at the path is asked again.
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho 'restic 0.18.1 compiled with go1.24.6 on linux/amd64'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o755); err != nil {
			t.Fatal(err)
		}
		if v, err := ResticVersionOf(ctx, path); err != nil || v != (ResticVersion{0, 18, 1}) {
			t.Fatalf("after the upgrade: %v, %v; want 0.18.1", v, err)
		}
	})
}

// A release not known plans as the newest releases forget: keeping more, never less.
func TestForgetKeepsOldest(t *testing.T) {
	for _, c := range []struct {
		v    ResticVersion
		want bool
	}{{ResticVersion{}, true}, {ResticVersion{0, 14, 0}, false}, {ResticVersion{0, 15, 9}, false}, {ResticVersion{0, 16, 0}, true}, {ResticVersion{0, 19, 1}, true}} {
		if got := c.v.ForgetKeepsOldest(); got != c.want {
			t.Errorf("%v.ForgetKeepsOldest() = %v, want %v", c.v, got, c.want)
		}
	}
}
