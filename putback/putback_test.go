package putback_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/putback"
)

// bundle is a base with a stage in it and a directory outside both that nothing may touch.
type bundle struct {
	t                    *testing.T
	base, stage, live    string // live is base/home: where the entries go back
	outside, outsideFile string
	mtime                time.Time
}

func setup(t *testing.T) *bundle {
	t.Helper()
	root := t.TempDir()
	b := &bundle{t: t, base: filepath.Join(root, "base"), outside: filepath.Join(root, "outside"), mtime: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	b.stage = filepath.Join(b.base, ".holdfast-restore-x")
	b.live = filepath.Join(b.base, "home")
	b.outsideFile = filepath.Join(b.outside, "secret")
	for _, d := range []string{b.stage, b.live, b.outside} {
		b.must(os.MkdirAll(d, 0o755))
	}
	b.must(os.Chmod(b.stage, 0o700))
	b.must(os.WriteFile(b.outsideFile, []byte("root's own\n"), 0o600))
	return b
}

func (b *bundle) must(err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
}

// staged is p's copy in the stage, as restic restores it: under its full path.
func (b *bundle) staged(p string) string { return filepath.Join(b.stage, p) }

// file writes a file at p with the bundle's modification time.
func (b *bundle) file(p, content string) {
	b.t.Helper()
	b.must(os.MkdirAll(filepath.Dir(p), 0o755))
	b.must(os.WriteFile(p, []byte(content), 0o644))
	b.must(os.Chtimes(p, b.mtime, b.mtime))
}

func (b *bundle) read(p string) string {
	b.t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(got)
}

// run puts paths back and returns each entry as "action path".
func (b *bundle) run(overwrite bool, paths ...string) []string {
	b.t.Helper()
	var got []string
	err := putback.Run(b.config(overwrite, paths...), func(e putback.Entry) {
		got = append(got, string(e.Action)+" "+strings.TrimPrefix(e.Path, b.live+"/"))
	})
	b.must(err)
	slices.Sort(got)
	return got
}

// config is the putting back of paths from the bundle's stage, as it was made.
func (b *bundle) config(overwrite bool, paths ...string) putback.Config {
	b.t.Helper()
	var st unix.Stat_t
	b.must(unix.Stat(b.stage, &st))
	return putback.Config{Base: b.base, Stage: b.stage, Paths: paths, Overwrite: overwrite, StageDev: st.Dev, StageIno: st.Ino}
}

// asRoot skips a case that gives files to other users, unless under CI.
func asRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the case gives files to another user: run the tests as root")
		}
		t.Skip("the case gives files to another user: run as root")
	}
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		overwrite bool
		build     func(b *bundle) []string // the paths to put back
		want      []string
		check     func(b *bundle)
	}{
		{"a deleted file goes back", false, func(b *bundle) []string {
			p := filepath.Join(b.live, "notes.txt")
			b.file(b.staged(p), "v1\n")
			return []string{p}
		}, []string{"placed notes.txt"}, func(b *bundle) {
			p := filepath.Join(b.live, "notes.txt")
			if got := b.read(p); got != "v1\n" {
				t.Errorf("notes.txt = %q", got)
			}
			if info, err := os.Stat(p); err != nil || !info.ModTime().Equal(b.mtime) {
				t.Errorf("notes.txt lost its time: %v %v", info, err)
			}
		}},
		{"a file as the snapshot has it is left", false, func(b *bundle) []string {
			p := filepath.Join(b.live, "notes.txt")
			b.file(b.staged(p), "v1\n")
			b.file(p, "v1\n")
			return []string{p}
		}, []string{"same notes.txt"}, nil},
		{"a changed file is kept", false, func(b *bundle) []string {
			p := filepath.Join(b.live, "notes.txt")
			b.file(b.staged(p), "v1\n")
			b.file(p, "v2, longer\n")
			return []string{p}
		}, []string{"kept notes.txt"}, func(b *bundle) {
			if got := b.read(filepath.Join(b.live, "notes.txt")); got != "v2, longer\n" {
				t.Errorf("the kept file = %q", got)
			}
		}},
		{"a changed file is replaced with overwrite", true, func(b *bundle) []string {
			p := filepath.Join(b.live, "notes.txt")
			b.file(b.staged(p), "v1\n")
			b.file(p, "v2, longer\n")
			return []string{p}
		}, []string{"replaced notes.txt"}, func(b *bundle) {
			if got := b.read(filepath.Join(b.live, "notes.txt")); got != "v1\n" {
				t.Errorf("the replaced file = %q", got)
			}
		}},
		{"a directory is merged entry by entry", false, func(b *bundle) []string {
			d := filepath.Join(b.live, "docs")
			b.file(b.staged(filepath.Join(d, "same.txt")), "same\n")
			b.file(b.staged(filepath.Join(d, "gone.txt")), "gone\n")
			b.file(b.staged(filepath.Join(d, "sub", "deep.txt")), "deep\n")
			b.file(b.staged(filepath.Join(d, "changed.txt")), "old\n")
			b.file(filepath.Join(d, "same.txt"), "same\n")
			b.file(filepath.Join(d, "changed.txt"), "new!\n")
			b.file(filepath.Join(d, "mine.txt"), "not in the snapshot\n")
			return []string{d}
		}, []string{"kept docs/changed.txt", "placed docs/gone.txt", "placed docs/sub", "same docs/same.txt"}, func(b *bundle) {
			d := filepath.Join(b.live, "docs")
			if b.read(filepath.Join(d, "sub", "deep.txt")) != "deep\n" || b.read(filepath.Join(d, "mine.txt")) != "not in the snapshot\n" ||
				b.read(filepath.Join(d, "changed.txt")) != "new!\n" {
				t.Error("the merged directory is not the snapshot's entries over what is there")
			}
		}},
		{"a link planted at the path is never followed", false, func(b *bundle) []string {
			p := filepath.Join(b.live, "notes.txt")
			b.file(b.staged(p), "v1\n")
			b.must(os.Symlink(b.outsideFile, p))
			return []string{p}
		}, []string{"kept notes.txt"}, nil},
		{"a link planted at the path is replaced, not followed, with overwrite", true, func(b *bundle) []string {
			p := filepath.Join(b.live, "notes.txt")
			b.file(b.staged(p), "v1\n")
			b.must(os.Symlink(b.outsideFile, p))
			return []string{p}
		}, []string{"replaced notes.txt"}, func(b *bundle) {
			if info, err := os.Lstat(filepath.Join(b.live, "notes.txt")); err != nil || !info.Mode().IsRegular() {
				t.Errorf("the link was not replaced by the file: %v %v", info, err)
			}
		}},
		{"a link on the way fails, writing nothing through it", true, func(b *bundle) []string {
			d := filepath.Join(b.live, "docs")
			b.file(b.staged(filepath.Join(d, "notes.txt")), "v1\n")
			b.must(os.Symlink(b.outside, d))
			return []string{filepath.Join(d, "notes.txt")}
		}, []string{"failed docs/notes.txt"}, func(b *bundle) {
			if _, err := os.Lstat(filepath.Join(b.outside, "notes.txt")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a file went through the link: %v", err)
			}
		}},
		{"a link to a directory where the snapshot has one is kept, its target untouched", true, func(b *bundle) []string {
			d := filepath.Join(b.live, "docs")
			b.file(b.staged(filepath.Join(d, "secret")), "overwritten!\n")
			b.must(os.Symlink(b.outside, d))
			return []string{d}
		}, []string{"replaced docs"}, func(b *bundle) {
			if info, err := os.Lstat(filepath.Join(b.live, "docs")); err != nil || !info.IsDir() {
				t.Errorf("the link was not replaced by the directory: %v %v", info, err)
			}
		}},
		{"a directory there is not replaced by a file", true, func(b *bundle) []string {
			p := filepath.Join(b.live, "notes.txt")
			b.file(b.staged(p), "v1\n")
			b.must(os.Mkdir(p, 0o755))
			return []string{p}
		}, []string{"kept notes.txt"}, nil},
		{"a missing directory goes back whole", false, func(b *bundle) []string {
			d := filepath.Join(b.live, "docs")
			b.file(b.staged(filepath.Join(d, "a", "b.txt")), "b\n")
			return []string{d}
		}, []string{"placed docs"}, func(b *bundle) {
			if got := b.read(filepath.Join(b.live, "docs", "a", "b.txt")); got != "b\n" {
				t.Errorf("docs/a/b.txt = %q", got)
			}
		}},
		{"a directory another user owns now gets nothing", true, func(b *bundle) []string {
			asRoot(t)
			d := filepath.Join(b.live, "build")
			b.file(b.staged(filepath.Join(d, "secret.txt")), "root's build output\n")
			b.must(os.Mkdir(d, 0o755))
			b.must(os.Chown(d, 65534, 65534))
			return []string{filepath.Join(d, "secret.txt")}
		}, []string{"kept build/secret.txt"}, func(b *bundle) {
			if _, err := os.Lstat(filepath.Join(b.live, "build", "secret.txt")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("root's file went into nobody's directory: %v", err)
			}
		}},
		{"a directory whose mode changed is not merged into", true, func(b *bundle) []string {
			d := filepath.Join(b.live, "private")
			b.file(b.staged(filepath.Join(d, "key")), "k\n")
			b.must(os.Chmod(b.staged(d), 0o700))
			b.must(os.Mkdir(d, 0o777))
			b.must(os.Chmod(d, 0o777))
			return []string{d}
		}, []string{"kept private"}, func(b *bundle) {
			if _, err := os.Lstat(filepath.Join(b.live, "private", "key")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the private directory's file went into the open one: %v", err)
			}
		}},
		{"the directory it goes in is gone", false, func(b *bundle) []string {
			p := filepath.Join(b.live, "gone", "notes.txt")
			b.file(b.staged(p), "v1\n")
			return []string{p}
		}, []string{"failed gone/notes.txt"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			paths := tc.build(b)
			if got := b.run(tc.overwrite, paths...); !slices.Equal(got, tc.want) {
				t.Fatalf("put back: %q, want %q", got, tc.want)
			}
			if got := b.read(b.outsideFile); got != "root's own\n" {
				t.Fatalf("the file outside = %q", got)
			}
			if tc.check != nil {
				tc.check(b)
			}
		})
	}
}

func TestRunRefusesPathsOutsideBase(t *testing.T) {
	b := setup(t)
	swapped := b.config(false, filepath.Join(b.live, "x"))
	swapped.StageIno++
	open := b.config(false, filepath.Join(b.live, "x"))
	open.Stage = b.live // 0755: not the stage restic was given
	for _, cfg := range []putback.Config{
		{Base: b.base, Stage: b.stage, Paths: []string{b.outsideFile}},
		{Base: b.base, Stage: b.stage, Paths: []string{b.live + "/../../outside/secret"}},
		{Base: b.base, Stage: b.outside, Paths: []string{filepath.Join(b.live, "x")}},
		swapped, open,
	} {
		b.file(b.staged(filepath.Join(b.live, "x")), "x\n")
		if err := putback.Run(cfg, func(putback.Entry) { t.Error("an entry was put back") }); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func TestLook(t *testing.T) {
	b := setup(t)
	b.file(filepath.Join(b.live, "notes.txt"), "v1\n")
	b.must(os.Symlink(b.outside, filepath.Join(b.live, "link")))
	if st, err := putback.Look(b.base, filepath.Join(b.live, "notes.txt")); err != nil || st.Size != 3 {
		t.Errorf("Look(notes.txt) = %d, %v", st.Size, err)
	}
	if st, err := putback.Look(b.base, filepath.Join(b.live, "link")); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("Look(link) = %o, %v: want the link itself", st.Mode, err)
	}
	if _, err := putback.Look(b.base, filepath.Join(b.live, "link", "secret")); !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP) {
		t.Errorf("Look through a link = %v, want ENOTDIR or ELOOP", err)
	}
	if _, err := putback.Look(b.base, filepath.Join(b.live, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Look(none) = %v, want not there", err)
	}
}

// An attempt after one that put entries back (a restart: restic restored them again) finds them
// as the snapshot has them: nothing is put back twice or reported kept.
func TestRunAgain(t *testing.T) {
	b := setup(t)
	d := filepath.Join(b.live, "docs")
	stage := func() {
		b.file(b.staged(filepath.Join(d, "a.txt")), "a\n")
		b.file(b.staged(filepath.Join(d, "b.txt")), "b\n")
	}
	stage()
	b.must(os.Mkdir(d, 0o755))
	if got := b.run(false, d); !slices.Equal(got, []string{"placed docs/a.txt", "placed docs/b.txt"}) {
		t.Fatalf("first: %q", got)
	}
	stage()
	if got := b.run(false, d); !slices.Equal(got, []string{"same docs/a.txt", "same docs/b.txt"}) {
		t.Fatalf("again: %q, want both as the snapshot has them", got)
	}
}
