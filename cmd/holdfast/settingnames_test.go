package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/setting"
)

// Every setting the messages of holdfast's other packages name (a placeholder of package
// setting in their source) has a flag here, and each flag here is one of the command that takes
// it: a field or a flag renamed on one side cannot leave a message naming nothing.
func TestSettingNamesHaveFlags(t *testing.T) {
	t.Parallel()
	root := newRoot(environment{getenv: func(string) string { return "" }, stdout: io.Discard, stderr: io.Discard})
	flags := map[string]string{}
	for _, s := range namedSettings() {
		if other, ok := flags[s.path]; ok && other != s.flag {
			t.Errorf("%s is both --%s and --%s", s.path, other, s.flag)
		}
		flags[s.path] = s.flag
		c, _, err := root.Find(strings.Fields(s.command))
		if err != nil || c.CommandPath() != "holdfast "+s.command {
			t.Errorf("%s: no command %q", s.path, s.command)
			continue
		}
		if c.Flag(s.flag) == nil {
			t.Errorf("%s: %s has no --%s", s.path, s.command, s.flag)
		}
	}
	used := placeholders(t, filepath.Join("..", ".."))
	for path, where := range used {
		if _, ok := flags[path]; !ok {
			t.Errorf("%s names {%s}, which has no flag in cmd/holdfast", where, path)
		}
	}
	if len(used) < 50 {
		t.Fatalf("only %d settings named outside cmd: does the walk reach the module's packages?", len(used))
	}
	if got := settingFlag("Job.Copy.PasswordFile"); got != "--copy-password-file" {
		t.Errorf("settingFlag(Job.Copy.PasswordFile) = %q", got)
	}
	if got, want := setting.Render("give {Job.PasswordFile} FILE"), "give --password-file FILE"; got != want {
		t.Errorf("a message of this binary reads %q, want %q", got, want)
	}
}

// placeholders are the paths of the placeholders in the string literals of the non-test Go files
// under dir outside cmd (whose packages own the flags), each with where it is first.
func placeholders(t *testing.T, dir string) map[string]string {
	used := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != dir && (name == "cmd" || name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Errorf("%s: %v", fset.Position(lit.Pos()), err)
				return true
			}
			for _, p := range setting.Placeholders(s) {
				if _, ok := used[p]; !ok {
					used[p] = fset.Position(lit.Pos()).String()
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return used
}
