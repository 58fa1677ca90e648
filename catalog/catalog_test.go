package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/catalog"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/testenv"
)

// bundle is a real restic repository with one snapshot of a tree whose names are hostile (a
// newline, an escape sequence, a tab, a quote, a name that is another's prefix), shared by the
// tests, the snapshot's catalog, the test's own, and restic run as this process to compare with.
type bundle struct {
	t        *testing.T
	dir      string // the catalogs
	src      string
	restic   engine.Restic
	repo     engine.Job
	snapshot string
}

// shared is the repository every test lists, made once: its backup is most of a setup's cost.
var shared struct {
	once      sync.Once
	root, src string
	repo      engine.Job
	snapshot  string
	err       error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.root != "" {
		os.RemoveAll(shared.root)
	}
	os.Exit(code)
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{t: t, dir: filepath.Join(t.TempDir(), "catalogs"), restic: engine.Restic{Binary: testenv.Restic(t)}}
	shared.once.Do(func() { shared.err = makeShared(t, b.restic) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	b.src, b.repo, b.snapshot = shared.src, shared.repo, shared.snapshot
	err := catalog.Write(b.dir, "docs", b.snapshot, func(each func(engine.Node) error) error {
		return b.restic.Ls(context.Background(), b.repo, b.snapshot, "/", true, each)
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// makeShared backs up the shared tree into the shared repository.
func makeShared(t *testing.T, restic engine.Restic) error {
	root, err := os.MkdirTemp("", "catalog-test-*")
	if err != nil {
		return err
	}
	shared.root, shared.src = root, filepath.Join(root, "src")
	for _, f := range []string{"a/one.txt", "a/b/two.txt", "a/b/c/three.txt", "a-b/four.txt", "ab/five.txt",
		"odd\nname/x", "esc\x1b[31m/y", "tab\there/z", `quote"s/q`, "top.txt", "a/b/c/d/e/f/deep.txt"} {
		p := filepath.Join(shared.src, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(f+"\n"), 0o644); err != nil {
			return err
		}
	}
	if err := os.Symlink("a/one.txt", filepath.Join(shared.src, "link")); err != nil {
		return err
	}
	repo, pw := filepath.Join(root, "repo"), filepath.Join(root, "pw")
	if err := os.WriteFile(pw, []byte(testenv.ResticPassword+"\n"), 0o600); err != nil {
		return err
	}
	testenv.ResticRepo(t, repo)
	if out, err := exec.Command(restic.Binary, "--repo", repo, "--password-file", pw, "--no-cache", "backup", shared.src).CombinedOutput(); err != nil {
		return fmt.Errorf("restic backup: %v\n%s", err, out)
	}
	shared.repo = engine.Job{Repository: repo, PasswordFile: pw}
	snaps, err := restic.ListSnapshots(context.Background(), shared.repo)
	if err != nil || len(snaps) != 1 {
		return fmt.Errorf("snapshots: %v %v", snaps, err)
	}
	shared.snapshot = snaps[0].ID
	return nil
}

// both lists at with restic and from the catalog.
func (b *bundle) both(at string, recursive bool) (fromRestic, fromCatalog []string) {
	b.t.Helper()
	collect := func(into *[]string) func(engine.Node) error {
		return func(n engine.Node) error {
			*into = append(*into, fmt.Sprintf("%s %s %v %v %s", n.Path, n.Type, n.Mode, n.ModTime.UTC().Format(time.RFC3339Nano), size(n.Size)))
			return nil
		}
	}
	if err := b.restic.Ls(context.Background(), b.repo, b.snapshot, at, recursive, collect(&fromRestic)); err != nil {
		b.t.Fatal(err)
	}
	ok, err := catalog.Ls(b.dir, "docs", b.snapshot, at, recursive, collect(&fromCatalog))
	if !ok || err != nil {
		b.t.Fatalf("catalog.Ls(%q) = %v, %v", at, ok, err)
	}
	return fromRestic, fromCatalog
}

func size(s *uint64) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprint(*s)
}

// A catalog lists what restic lists, in its order, for every kind of path: the top, a
// directory, one whose name is another's prefix, a deep one, a file, hostile names, a path the
// snapshot lacks.
func TestLsEqualsRestic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, at := range []string{"/", b.src, filepath.Join(b.src, "a"), filepath.Join(b.src, "a", "b"), filepath.Join(b.src, "a", "b", "c", "d"),
		filepath.Join(b.src, "top.txt"), filepath.Join(b.src, "odd\nname"), filepath.Join(b.src, "esc\x1b[31m"), filepath.Join(b.src, "tab\there"),
		filepath.Join(b.src, `quote"s`), filepath.Join(b.src, "link"), filepath.Join(b.src, "nowhere"), filepath.Join(b.src, "a", "b", "c", "three.txt")} {
		for _, recursive := range []bool{false, true} {
			fromRestic, fromCatalog := b.both(at, recursive)
			if !slices.Equal(fromRestic, fromCatalog) {
				t.Errorf("ls %q (recursive %v):\nrestic  %q\ncatalog %q", at, recursive, fromRestic, fromCatalog)
			}
			if at == b.src && len(fromCatalog) < 10 {
				t.Errorf("ls %q lists %d entries: %q", at, len(fromCatalog), fromCatalog)
			}
		}
	}
}

// A snapshot without a catalog is not listed from one; an error of the caller's stops a listing.
func TestLsWithoutCatalog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if ok, err := catalog.Ls(b.dir, "docs", strings.Repeat("e", 64), "/", false, nil); ok || err != nil {
		t.Errorf("a snapshot without a catalog: %v, %v", ok, err)
	}
	if ok, _ := catalog.Ls(b.dir, "../docs", b.snapshot, "/", false, nil); ok {
		t.Error("a job name with a path in it was read")
	}
	stop := errors.New("enough")
	n := 0
	ok, err := catalog.Ls(b.dir, "docs", b.snapshot, "/", true, func(engine.Node) error {
		n++
		return stop
	})
	if !ok || !errors.Is(err, stop) || n != 1 {
		t.Errorf("stopped listing: %v, %v after %d", ok, err, n)
	}
}

// fakeStore is the builder's store: the snapshots to catalog, and the jobs.
type fakeStore struct{ snaps []model.Snapshot }

func (f *fakeStore) SnapshotCatalogList(context.Context, store.SnapshotCatalogListParams) ([]model.Snapshot, error) {
	return f.snaps, nil
}

func (f *fakeStore) JobGet(_ context.Context, name string) (model.Job, error) {
	return model.Job{Name: name}, nil
}

// countingLister is restic for the builder, counting its listings.
type countingLister struct {
	b     *bundle
	lists int
}

func (c *countingLister) Ls(ctx context.Context, _ model.Job, snapshot, dir string, recursive bool, each func(engine.Node) error) error {
	c.lists++
	if snapshot != c.b.snapshot {
		// As restic fails on a snapshot it lacks, after the entries it had printed.
		if err := each(engine.Node{Path: "/half", Type: "dir"}); err != nil {
			return err
		}
		return fmt.Errorf("restic ls %.8s: no such snapshot", snapshot)
	}
	return c.b.restic.Ls(ctx, c.b.repo, snapshot, dir, recursive, each)
}

func (c *countingLister) Find(context.Context, model.Job, string, []string, func(engine.Found) error) error {
	return errors.New("no search here")
}

// A pass catalogs each wanted snapshot once, removes a job's catalogs no longer wanted and the
// catalogs of a job no longer catalogued, and leaves no partial file behind a failed listing.
func TestBuilderPass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st := &fakeStore{snaps: []model.Snapshot{{JobName: "site", ID: b.snapshot}, {JobName: "site", ID: strings.Repeat("f", 64)}}}
	lister := &countingLister{b: b}
	builder, err := catalog.NewBuilder(catalog.BuilderConfig{Dir: b.dir, Store: st, Restic: lister, Host: "here", SnapshotHost: "here"})
	if err != nil {
		t.Fatal(err)
	}
	// The second snapshot is not in the repository: its listing fails, the first is made.
	made, err := builder.Pass(context.Background())
	if made != 1 || err == nil || !catalog.Has(b.dir, "site", b.snapshot) || catalog.Has(b.dir, "site", strings.Repeat("f", 64)) {
		t.Fatalf("first pass: made %d, %v", made, err)
	}
	if catalog.Has(b.dir, "docs", b.snapshot) {
		t.Fatal("the catalog of job docs, which is not catalogued, was kept")
	}
	if left, _ := filepath.Glob(filepath.Join(b.dir, "site", ".new-*")); len(left) != 0 {
		t.Fatalf("a failed listing left %v", left)
	}
	// The failed one waits for RetryAfter; the made one is not listed again.
	lists := lister.lists
	if made, err := builder.Pass(context.Background()); made != 0 || err != nil || lister.lists != lists {
		t.Fatalf("second pass: made %d, %v, listed %d more", made, err, lister.lists-lists)
	}
	st.snaps = st.snaps[:1]
	st.snaps = nil
	if _, err := builder.Pass(context.Background()); err != nil || catalog.Has(b.dir, "site", b.snapshot) {
		t.Fatalf("a job no longer catalogued keeps its catalog: %v", err)
	}
}

// A catalog that cannot be read is removed, and restic asked instead.
func TestBrowserCorruptCatalog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	file := catalog.Path(b.dir, "docs", b.snapshot)
	if err := os.WriteFile(file, []byte("not gzip"), 0o600); err != nil {
		t.Fatal(err)
	}
	lister := &countingLister{b: b}
	var n int
	err := catalog.Browser{Dir: b.dir, Restic: lister}.Ls(context.Background(), model.Job{Name: "docs"}, b.snapshot, b.src, false,
		func(engine.Node) error { n++; return nil })
	if err != nil || lister.lists != 1 || n < 5 || catalog.Has(b.dir, "docs", b.snapshot) {
		t.Fatalf("a corrupt catalog: %v, restic listed %d times, %d entries, catalog kept %v", err, lister.lists, n, catalog.Has(b.dir, "docs", b.snapshot))
	}
}
