package crashpoint_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/crashpoint"
)

// The package comment lists the points of Points, in order, each once.
func TestDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "crashpoint.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		if rest, ok := strings.CutPrefix(line, "\t"); ok {
			listed = append(listed, strings.Fields(rest)[0])
		}
	}
	if !slices.Equal(listed, crashpoint.Points) {
		t.Fatalf("package comment lists\n%q\nPoints is\n%q", listed, crashpoint.Points)
	}
	seen := map[string]bool{}
	for _, p := range crashpoint.Points {
		if seen[p] || !regexp.MustCompile(`^[a-z]+(-[a-z]+)*$`).MatchString(p) {
			t.Errorf("point %q is repeated or not a lower-case-dashed name", p)
		}
		seen[p] = true
	}
}

// Every crashpoint.At in the module names a listed point with a constant, and every listed
// point is marked exactly once.
func TestEveryPointMarked(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	marked := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "At" {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "crashpoint" {
				return true
			}
			where := fset.Position(call.Pos()).String()
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: crashpoint.At needs a constant name", where)
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			marked[name] = append(marked[name], where)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, where := range marked {
		if !slices.Contains(crashpoint.Points, name) {
			t.Errorf("%s: crash point %q is not listed in package crashpoint", where[0], name)
		}
	}
	for _, p := range crashpoint.Points {
		if len(marked[p]) != 1 {
			t.Errorf("crash point %q is marked %d times, want once: %v", p, len(marked[p]), marked[p])
		}
	}
}
