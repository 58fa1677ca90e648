package setup

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestReadEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "holdfast.env")
	if err := os.WriteFile(path, []byte("# settings\nHOLDFAST_SYSTEMD=system\nHOLDFAST_DSN=\"postgres://h:p@localhost/holdfast\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadEnv(path)
	want := map[string]string{"HOLDFAST_SYSTEMD": "system", "HOLDFAST_DSN": "postgres://h:p@localhost/holdfast"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadEnv = %v, %v; want %v", got, err, want)
	}
	if err := os.WriteFile(path, []byte("HOLDFAST_SYSTEMD=system\nsecret words\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadEnv(path); err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("a bad line: %v; want its number, never its content", err)
	}
}

func TestSetEnv(t *testing.T) {
	shipped := "# settings\n# HOLDFAST_DSN=postgres:///holdfast?host=/run/postgresql\nHOLDFAST_SYSTEMD=system\n"
	for _, tc := range []struct {
		name, before, want string
	}{
		{"after its commented example", shipped,
			"# settings\n# HOLDFAST_DSN=postgres:///holdfast?host=/run/postgresql\nHOLDFAST_DSN=postgres://new\nHOLDFAST_SYSTEMD=system\n"},
		{"replacing its assignment", "A=1\nHOLDFAST_DSN=postgres://old\nB=2\n", "A=1\nHOLDFAST_DSN=postgres://new\nB=2\n"},
		{"at the end", "A=1", "A=1\nHOLDFAST_DSN=postgres://new\n"},
		{"into an empty file", "", "HOLDFAST_DSN=postgres://new\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "holdfast.env")
			if err := os.WriteFile(path, []byte(tc.before), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := SetEnv(path, "HOLDFAST_DSN", "postgres://new"); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("file:\n%s\nwant:\n%s", got, tc.want)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("mode %v (%v), want 0600", fi.Mode(), err)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "holdfast.env")
	if err := os.WriteFile(path, []byte(shipped), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SetEnv(path, "HOLDFAST_DSN", "two words"); err == nil || !strings.Contains(err.Error(), "quoted") {
		t.Fatalf("a value that needs quoting: %v, want refused", err)
	}
	if got, _ := os.ReadFile(path); string(got) != shipped {
		t.Fatalf("a refused value changed the file:\n%s", got)
	}
}

// Without a server's socket, setup says what to install.
func TestLocalPort(t *testing.T) {
	dir := t.TempDir()
	if _, err := localPort(dir); err == nil || !strings.Contains(err.Error(), "apt install postgresql") {
		t.Fatalf("no socket: %v", err)
	}
	for _, name := range []string{".s.PGSQL.5433", ".s.PGSQL.5433.lock"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if port, err := localPort(dir); err != nil || port != 5433 {
		t.Fatalf("localPort = %d, %v; want 5433", port, err)
	}
}
