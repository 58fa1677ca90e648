package main

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	decls, err := parseConfig("a.yaml", []byte("jobs:\n  alpha:\n    path: [/a, /b]\n    retry-max: 3\n  beta:\nnotify:\n  ops:\n    events: failed\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(decls) != 3 || decls[0].path() != "jobs.alpha" || decls[0].lineOf("retry-max") != 4 ||
		strings.Join(decls[0].keys[0].values, ",") != "/a,/b" || decls[1].path() != "jobs.beta" || len(decls[1].keys) != 0 ||
		decls[2].path() != "notify.ops" || decls[2].line != 7 {
		t.Fatalf("declarations = %+v", decls)
	}
	for text, want := range map[string]string{
		"jobs:\n  a:\n    x: {y: 1}\n":      "a.yaml:3: jobs.a.x: give a value or a list of values",
		"jobs:\n  a:\n    x: 1\n    x: 2\n": "a.yaml:4: jobs.a.x is given twice (first at line 3)",
		"- a\n":                             "a.yaml:1: a configuration file is a mapping",
		"jobs: 3\n":                         "a.yaml:1: jobs: give a mapping",
		"jobs:\n  a:\n    x: [[1]]\n":       "a.yaml:3: jobs.a.x: give a list of plain values",
	} {
		if _, err := parseConfig("a.yaml", []byte(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseConfig(%q) = %v, want %q", text, err, want)
		}
	}
}

// FuzzParseConfig: whatever a file holds, parsing it never panics, and what it accepts has a
// name and a line for each declaration and key.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"jobs:\n  alpha:\n    repo: /r\n    path: [/a]\n",
		"notify:\n  ops:\n    events: [failed, overdue]\n",
		"jobs: [\n", "jobs:\n  a: &x {b: *x}\n", "", "---\n...\n", "jobs:\n  ? [a]\n  : b\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		decls, err := parseConfig("f.yaml", []byte(text))
		if err != nil {
			return
		}
		for _, d := range decls {
			if d.line < 1 || (d.section != "jobs" && d.section != "notify" && d.section != "accounts") {
				t.Fatalf("declaration %+v", d)
			}
			for _, k := range d.keys {
				if k.line < 1 || k.values == nil {
					t.Fatalf("key %+v of %s", k, d.path())
				}
			}
		}
	})
}
