package testenv

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ResticPassword is the password of the repositories ResticRepo lays out.
const ResticPassword = "correct horse battery staple"

// resticRepo is an empty repository `restic init` (restic 0.14) made with ResticPassword, its
// master key wrapped again by testdata/rewrap-restic-key.py with scrypt's N=128, r=1, p=1, the
// parameters restic's own tests use.
//
//go:embed testdata/restic-repo
var resticRepo embed.FS

// ResticRepo lays out at dir, which must not exist, an empty restic repository whose password
// is ResticPassword, as `restic init` lays one out (directories 0700, files 0400). Its key costs
// restic milliseconds to derive, where the key `restic init` makes costs a fifth of a second of
// CPU in every restic command on the repository, and `restic init` itself three seconds. The
// repositories share one master key and repository id.
func ResticRepo(t testing.TB, dir string) {
	t.Helper()
	if err := layResticRepo(dir); err != nil {
		t.Fatalf("testenv: restic repository at %s: %v", dir, err)
	}
}

func layResticRepo(dir string) error {
	for _, sub := range []string{"", "data", "index", "keys", "locks", "snapshots"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}
	for i := range 256 {
		if err := os.Mkdir(filepath.Join(dir, "data", fmt.Sprintf("%02x", i)), 0o700); err != nil {
			return err
		}
	}
	const root = "testdata/restic-repo"
	return fs.WalkDir(resticRepo, root, func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := resticRepo.ReadFile(name)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, strings.TrimPrefix(name, root+"/")), b, 0o400)
	})
}
