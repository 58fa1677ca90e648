// Package docs holds the tests that keep docs/ARCHITECTURE.md true to the code.
package docs

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/holdfast-backup/holdfast"

// layoutRow is one row of the Layout table: a directory and the holdfast packages it imports.
type layoutRow struct {
	dir     string
	imports []string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// readLayout reads the table of ARCHITECTURE.md's Layout section: rows of
// | `dir` | provides | imports |, the imports as backticked package directories or "—".
func readLayout(t *testing.T) map[string]layoutRow {
	t.Helper()
	f, err := os.Open("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]layoutRow{}
	inLayout := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inLayout = strings.HasPrefix(line, "## 1. Layout")
			continue
		}
		if !inLayout || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("Layout row %q: want 3 cells (package | provides | imports), got %d", line, len(cells))
		}
		dir := strings.Trim(strings.TrimSpace(cells[0]), "`")
		var imports []string
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			imports = append(imports, m[1])
		}
		if _, dup := rows[dir]; dup {
			t.Fatalf("Layout names %s twice", dir)
		}
		rows[dir] = layoutRow{dir: dir, imports: imports}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("ARCHITECTURE.md has no Layout table")
	}
	return rows
}

// goList runs go list with args at the module root and returns its output.
func goList(t *testing.T, args ...string) []byte {
	t.Helper()
	// go test puts its own toolchain's bin first on PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	cmd := exec.Command(goBin, append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// goPackages lists the module's packages with the holdfast packages each imports (not its
// tests'), as directories relative to the module root.
func goPackages(t *testing.T) map[string][]string {
	t.Helper()
	out := goList(t, "-json", "./...")
	pkgs := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
			GoFiles    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		dir := strings.TrimPrefix(p.ImportPath, module+"/")
		if dir == "docs" {
			continue // this test's own directory
		}
		var own []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				own = append(own, strings.TrimPrefix(imp, module+"/"))
			}
		}
		slices.Sort(own)
		pkgs[dir] = own
	}
	return pkgs
}

// TestLayout holds ARCHITECTURE.md's Layout to the code: a row for every package, none for a
// package that is gone, and each row's imports exactly what `go list` says.
func TestLayout(t *testing.T) {
	rows := readLayout(t)
	pkgs := goPackages(t)
	for dir, imports := range pkgs {
		row, ok := rows[dir]
		if !ok {
			t.Errorf("package %s has no row in ARCHITECTURE.md's Layout", dir)
			continue
		}
		documented := slices.Clone(row.imports)
		slices.Sort(documented)
		if !slices.Equal(documented, imports) {
			t.Errorf("Layout says %s imports %v; go list says %v", dir, documented, imports)
		}
	}
	for dir, row := range rows {
		if _, ok := pkgs[dir]; ok {
			continue
		}
		// A row for a directory without Go code (packaging) names no imports.
		if st, err := os.Stat(filepath.Join("..", dir)); err != nil || !st.IsDir() || len(row.imports) > 0 {
			t.Errorf("Layout has a row for %s, which is not a package of the module", dir)
		}
	}
}

// TestUnitBinaryLinksNoDatabase holds Layout's word on cmd/holdfast-unit: what units run links
// neither the store nor PostgreSQL's driver, migrations or metrics, which only cost each of a
// run's units their start (a package that pulls one in, however indirectly, fails this).
func TestUnitBinaryLinksNoDatabase(t *testing.T) {
	deps := strings.Fields(string(goList(t, "-deps", "./cmd/holdfast-unit")))
	if !slices.Contains(deps, module+"/unitcmd") {
		t.Fatalf("go list -deps ./cmd/holdfast-unit lists no unitcmd: %q", deps)
	}
	for _, banned := range []string{module + "/store", module + "/migrations", "github.com/jackc/pgx/v5",
		"github.com/pressly/goose/v3", "github.com/prometheus/client_golang/prometheus"} {
		if slices.Contains(deps, banned) {
			t.Errorf("cmd/holdfast-unit links %s", banned)
		}
	}
}
