package main_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/testenv"
)

// browsedNode is a line of `snapshot ls|find --json`.
type browsedNode struct {
	Snapshot     string  `json:"snapshot"`
	SnapshotTime *string `json:"snapshot_time"`
	Path         string  `json:"path"`
	Type         string  `json:"type"`
	Size         *uint64 `json:"size"`
	Permissions  string  `json:"permissions"`
	ModTime      string  `json:"mtime"`
}

func jsonLines(t *testing.T, out string) []browsedNode {
	t.Helper()
	var nodes []browsedNode
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var n browsedNode
		if err := json.Unmarshal(sc.Bytes(), &n); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		nodes = append(nodes, n)
	}
	return nodes
}

func paths(nodes []browsedNode) []string {
	var ps []string
	for _, n := range nodes {
		ps = append(ps, n.Path)
	}
	return ps
}

// A snapshot's tree is listed a level at a time and whole, names the job's user chose (control
// characters, a newline, a path of 4 KiB) come out escaped in the human output and exact in the
// JSON, and a search finds the file in the two of three snapshots that hold it, with the size it
// had in each.
func TestSnapshotBrowseAndFind(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	w.binaryCLI = true
	repo, pw := w.resticRepo("repo")
	data := filepath.Join(w.dir, "data")
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(data, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/b/c/deep.txt", "three levels down\n")
	write("report.txt", "the first version\n")
	write("esc\x1b[31mred", "a name with an escape sequence\n")
	write("new\nline", "a name with a newline\n")
	// A path of about 4 KiB: sixteen directories of 250-byte names.
	long := "long"
	for i := range 16 {
		long = filepath.Join(long, strings.Repeat(string(rune('a'+i)), 250))
	}
	write(filepath.Join(long, "end.txt"), "at the end of a long path\n")
	w.mustRun("job", "add", "docs", "--repo", repo, "--password-file", pw, "--path", data)
	w.startDaemon()
	backup := func() runJSON {
		t.Helper()
		res := w.run("run", "start", "docs", "--wait", "--json")
		var r runJSON
		if res.code != 0 || json.Unmarshal([]byte(res.stdout), &r) != nil || r.Status != "succeeded" {
			t.Fatalf("run start --wait: exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
		}
		return r
	}
	first := backup()
	write("report.txt", "the second version, longer than the first\n")
	second := backup()
	if err := os.Remove(filepath.Join(data, "report.txt")); err != nil {
		t.Fatal(err)
	}
	backup()

	// One level: the data directory's entries, the directory itself not among them.
	out := w.mustRun("snapshot", "ls", "docs", "latest", data, "--json")
	top := jsonLines(t, out)
	want := []string{filepath.Join(data, "a"), filepath.Join(data, "esc\x1b[31mred"), filepath.Join(data, "long"), filepath.Join(data, "new\nline")}
	got := paths(top)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("ls --json of %s = %q, want %q", data, got, want)
	}
	// The human listing: a line an entry, no raw control character.
	human := w.mustRun("snapshot", "ls", "docs", "latest", data)
	if lines := strings.Split(strings.TrimRight(human, "\n"), "\n"); len(lines) != 4 {
		t.Fatalf("ls shows %d lines, want 4 (one an entry):\n%s", len(lines), human)
	}
	if strings.ContainsAny(human, "\x1b\r") || !strings.Contains(human, `esc\x1b[31mred`) || !strings.Contains(human, `new\nline`) {
		t.Fatalf("ls shows the names unescaped:\n%q", human)
	}
	// Three levels down, by a prefix of the first snapshot's id.
	deep := jsonLines(t, w.mustRun("snapshot", "ls", "docs", first.SnapshotID[:8], filepath.Join(data, "a", "b", "c"), "--json"))
	if len(deep) != 1 || deep[0].Path != filepath.Join(data, "a/b/c/deep.txt") || deep[0].Type != "file" || deep[0].Size == nil || *deep[0].Size != 18 {
		t.Fatalf("ls of a/b/c = %+v, want deep.txt of 18 bytes", deep)
	}
	// Everything below, the 4 KiB path among it.
	all := paths(jsonLines(t, w.mustRun("snapshot", "ls", "docs", "latest", data, "--recursive", "--json")))
	if end := filepath.Join(data, long, "end.txt"); !slices.Contains(all, end) || !slices.Contains(all, filepath.Join(data, "a/b/c/deep.txt")) {
		t.Fatalf("ls --recursive lists %d entries, without the deep or the long path", len(all))
	}
	if slices.Contains(all, filepath.Join(data, "report.txt")) {
		t.Fatal("ls --recursive of the latest snapshot lists report.txt, which was removed before it")
	}
	// Nothing there: a clear refusal.
	if res := w.run("snapshot", "ls", "docs", "latest", filepath.Join(data, "report.txt")); res.code != 2 || !strings.Contains(res.stderr, "holds nothing at") {
		t.Fatalf("ls of a removed file: exit %d\n%s", res.code, res.stderr)
	}

	// The search: two snapshots hold report.txt, each with its own size.
	found := jsonLines(t, w.mustRun("snapshot", "find", "docs", "report.txt", "--json"))
	if len(found) != 2 {
		t.Fatalf("find report.txt = %+v, want it in two snapshots", found)
	}
	sizes := map[string]uint64{}
	for _, f := range found {
		if f.Path != filepath.Join(data, "report.txt") || f.Size == nil || f.SnapshotTime == nil {
			t.Fatalf("found %+v", f)
		}
		sizes[f.Snapshot[:len(first.SnapshotID)]] = *f.Size
	}
	if sizes[first.SnapshotID] != 18 || sizes[second.SnapshotID] != 42 {
		t.Fatalf("report.txt's sizes by snapshot = %v, want 18 in %s and 42 in %s", sizes, first.SnapshotID, second.SnapshotID)
	}
	res := w.run("snapshot", "find", "docs", "report.txt")
	if res.code != 0 || strings.Count(res.stdout, "snapshot ") != 2 || !strings.Contains(res.stderr, "2 entries in 2 snapshots") {
		t.Fatalf("find report.txt: exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	// Only the newest: it no longer holds the file; the two newest hold one version.
	if res := w.run("snapshot", "find", "docs", "report.txt", "--newest", "1"); res.code != 0 || res.stdout != "" || !strings.Contains(res.stderr, "no entry") {
		t.Fatalf("find --newest 1: exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	if two := jsonLines(t, w.mustRun("snapshot", "find", "docs", "report.txt", "--newest", "2", "--json")); len(two) != 1 || !strings.HasPrefix(two[0].Snapshot, second.SnapshotID) {
		t.Fatalf("find --newest 2 = %+v, want the second snapshot's version", two)
	}
	// A name with an escape sequence is found by a glob, and shown escaped.
	if res := w.run("snapshot", "find", "docs", "esc*"); res.code != 0 || strings.Contains(res.stdout, "\x1b") || !strings.Contains(res.stdout, `esc\x1b[31mred`) {
		t.Fatalf("find esc*: exit %d\n%q", res.code, res.stdout)
	}

	// Bad input: one line, exit 2, no unit started.
	for _, args := range [][]string{
		{"snapshot", "ls", "docs", "zz"},
		{"snapshot", "ls", "docs", "latest", "relative/path"},
		{"snapshot", "ls", "docs", "abcdef0123"},
		{"snapshot", "ls", "nosuchjob", "latest"},
		{"snapshot", "find", "docs", ""},
		{"snapshot", "find", "docs", "[unclosed"},
		{"snapshot", "find", "docs", "x", "--newest", "0"},
	} {
		res := w.run(args...)
		if res.code != 2 || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
			t.Errorf("%q: exit %d, stderr %q: want exit 2 and one line", args, res.code, res.stderr)
		}
	}
}

// A job with --catalog has each new snapshot listed once, after its backup, into a catalog on
// the host: snapshot ls then answers from it without restic (a restic that cannot run changes
// nothing) exactly what restic answers once the catalog is gone; a job whose catalog is turned
// off has its catalogs removed.
func TestSnapshotCatalog(t *testing.T) {
	parallel(t)
	w := newWorld(t)
	w.binaryCLI = true
	repo, pw := w.resticRepo("repo")
	data := filepath.Join(w.dir, "data")
	for _, rel := range []string{"a/b/c/deep.txt", "a/one.txt", "a-b/two.txt", "top.txt", "odd\nname/x", "esc\x1b[31mred"} {
		p := filepath.Join(data, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(rel+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w.mustRun("job", "add", "docs", "--repo", repo, "--password-file", pw, "--path", data, "--catalog")
	var job struct {
		Catalog bool `json:"catalog"`
	}
	if err := json.Unmarshal([]byte(w.mustRun("job", "show", "docs", "--json")), &job); err != nil || !job.Catalog {
		t.Fatalf("job show: catalog %v (%v)", job.Catalog, err)
	}
	d := w.startDaemon()
	if r := w.waitEnd(w.startRun("docs")); r.Status != "succeeded" {
		t.Fatalf("backup: %s (%s)", r.Status, r.Reason)
	}
	catalogs := filepath.Join(w.state, "catalogs", "docs")
	var made []string
	if !testenv.Eventually(2*time.Minute, func() bool {
		made, _ = filepath.Glob(filepath.Join(catalogs, "*.gz"))
		return len(made) == 1
	}) {
		t.Fatalf("no catalog of the backup's snapshot in %s: %v", catalogs, made)
	}
	if info, err := os.Stat(made[0]); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the catalog %s: %v, want root's, mode 0600", made[0], err)
	}
	listings := [][]string{{data}, {"/", "--recursive"}, {filepath.Join(data, "odd\nname")}}
	ls := func(restic string) []string {
		t.Helper()
		var outs []string
		for _, args := range listings {
			res := w.run(append([]string{"snapshot", "ls", "docs", "latest", "--json", "--restic", restic}, args...)...)
			if res.code != 0 {
				t.Fatalf("snapshot ls %q with restic %s: exit %d\n%s", args, restic, res.code, res.stderr)
			}
			outs = append(outs, res.stdout)
		}
		return outs
	}
	fromCatalog := ls("/bin/false") // no restic could answer
	if strings.Count(fromCatalog[1], "\n") < 9 || !strings.Contains(fromCatalog[1], `deep.txt"`) || strings.Count(fromCatalog[0], "\n") != 5 {
		t.Fatalf("the catalog's recursive listing:\n%s", fromCatalog[1])
	}
	// Without the daemon, whose builder would make it again, and without the catalog: restic.
	d.kill()
	if err := os.Remove(made[0]); err != nil {
		t.Fatal(err)
	}
	if res := w.run("snapshot", "ls", "docs", "latest", data, "--restic", "/bin/false"); res.code == 0 {
		t.Fatalf("without its catalog, snapshot ls answered with a restic that cannot run:\n%s", res.stdout)
	}
	fromRestic := ls(testenv.Restic(t))
	for i := range listings {
		if fromCatalog[i] != fromRestic[i] {
			t.Errorf("snapshot ls %q:\nfrom the catalog %q\nfrom restic      %q", listings[i], fromCatalog[i], fromRestic[i])
		}
	}
	// The next daemon makes it again; without --catalog the job has none.
	w.startDaemon()
	if !testenv.Eventually(2*time.Minute, func() bool {
		made, _ = filepath.Glob(filepath.Join(catalogs, "*.gz"))
		return len(made) == 1
	}) {
		t.Fatal("the catalog removed was not made again")
	}
	w.mustRun("job", "edit", "docs", "--catalog=false")
	if !testenv.Eventually(2*time.Minute, func() bool {
		_, err := os.Stat(catalogs)
		return os.IsNotExist(err)
	}) {
		t.Fatal("the catalogs of a job no longer catalogued are still there")
	}
}
