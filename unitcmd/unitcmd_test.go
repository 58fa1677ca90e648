package unitcmd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Units run holdfast-unit beside holdfast, else in libexec/holdfast beside holdfast's bin
// directory, else holdfast itself; a file there that is not an executable for everyone, that
// others may write or replace, or that is a link, is passed over.
func TestBinary(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	libexec := filepath.Join(root, "libexec", "holdfast")
	for _, dir := range []string{bin, libexec} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self := filepath.Join(bin, "holdfast")
	put := func(path string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, nil, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	put(self, 0o755)
	if got := Binary(self); got != self {
		t.Fatalf("no holdfast-unit: %s, want holdfast itself", got)
	}
	put(filepath.Join(libexec, BinaryName), 0o700)
	if got := Binary(self); got != self {
		t.Fatalf("holdfast-unit only root may run: %s, want holdfast itself", got)
	}
	put(filepath.Join(libexec, BinaryName), 0o775)
	if got := Binary(self); got != self {
		t.Fatalf("holdfast-unit its group may write: %s, want holdfast itself", got)
	}
	put(filepath.Join(libexec, BinaryName), 0o755)
	if err := os.Chmod(libexec, 0o777); err != nil {
		t.Fatal(err)
	}
	if got := Binary(self); got != self {
		t.Fatalf("holdfast-unit in a directory anyone may write: %s, want holdfast itself", got)
	}
	if err := os.Chmod(libexec, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, want := Binary(self), filepath.Join(libexec, BinaryName); got != want {
		t.Fatalf("installed as the packages do: %s, want %s", got, want)
	}
	put(filepath.Join(bin, BinaryName), 0o755)
	if got, want := Binary(self), filepath.Join(bin, BinaryName); got != want {
		t.Fatalf("beside holdfast: %s, want %s", got, want)
	}
	if err := os.Remove(filepath.Join(bin, BinaryName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(libexec, BinaryName), filepath.Join(bin, BinaryName)); err != nil {
		t.Fatal(err)
	}
	if got, want := Binary(self), filepath.Join(libexec, BinaryName); got != want {
		t.Fatalf("a link beside holdfast: %s, want the installed %s", got, want)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err     error
		code    int
		message string
	}{
		{nil, 0, ""},
		{ExitStatus(130), 130, ""},
		{fmt.Errorf("engine: %w", ExitStatus(3)), 3, ""},
		{badInput("--run %q is not a run id", "x"), 2, `holdfast-unit: --run "x" is not a run id` + "\n"},
		{errors.New("write marker: disk full"), 1, "holdfast-unit: write marker: disk full\n"},
		{errors.New("unknown flag: --bogus"), 2, "holdfast-unit: unknown flag: --bogus\n"},
	} {
		var stderr strings.Builder
		if code := ExitCode(BinaryName, tc.err, &stderr); code != tc.code || stderr.String() != tc.message {
			t.Errorf("ExitCode(%v) = %d, said %q; want %d, %q", tc.err, code, stderr.String(), tc.code, tc.message)
		}
	}
}
