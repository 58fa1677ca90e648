package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestScenariosListed holds SCENARIOS.md to cmd/holdfast's tests: each scenario test (the booted
// ones aside, which make test-hosts runs) has its row, and each row names a test that exists.
func TestScenariosListed(t *testing.T) {
	text, err := os.ReadFile("SCENARIOS.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ((?:Test|Fuzz)\w+) \|`).FindAllStringSubmatch(string(text), -1) {
		if listed[m[1]] {
			t.Errorf("SCENARIOS.md lists %s twice", m[1])
		}
		listed[m[1]] = true
	}
	files, err := filepath.Glob("../cmd/holdfast/*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in cmd/holdfast: %v", err)
	}
	var tests []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "booted_") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil {
				continue
			}
			name := fn.Name.Name
			booted := strings.HasPrefix(name, "TestBooted") || name == "TestRPMPackage"
			if (strings.HasPrefix(name, "Test") && name != "TestMain" || strings.HasPrefix(name, "Fuzz")) && !booted {
				tests = append(tests, name)
			}
		}
	}
	for _, name := range tests {
		if !listed[name] {
			t.Errorf("%s is not in SCENARIOS.md: say what it shows end to end, or where it could move", name)
		}
		delete(listed, name)
	}
	for name := range listed {
		t.Errorf("SCENARIOS.md lists %s, which is no test of cmd/holdfast", name)
	}
	if len(tests) < 50 || !slices.Contains(tests, "TestBackupSucceeds") {
		t.Errorf("found %d tests in cmd/holdfast, without TestBackupSucceeds: the scan is broken", len(tests))
	}
}
