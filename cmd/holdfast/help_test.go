package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// pflag reads text in backticks in a flag's usage as the flag's value name, so a usage that
// quotes a command that way prints as "--journal-dir run logs" in the help.
func TestHelpValueNames(t *testing.T) {
	t.Parallel()
	root := newRoot(processEnvironment())
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		check := func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				name, _ := pflag.UnquoteUsage(f)
				t.Errorf("%s --%s: usage has backticks, so the help names its value %q: %q", cmd.CommandPath(), f.Name, name, f.Usage)
			}
		}
		cmd.LocalFlags().VisitAll(check)
		cmd.PersistentFlags().VisitAll(check)
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)

	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatalf("holdfast --help: %v", err)
	}
	for _, want := range []string{"--journal-dir string ", "--state-dir string ", "--dsn string "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("holdfast --help lacks %q:\n%s", want, out.String())
		}
	}
}

// Every command's human output is escaped for a terminal: the root's one pre-run hook wraps it.
// Output asked for as JSON, a format read back (export's YAML) and the hidden helpers' (read by
// holdfast) are left as they are.
func TestHumanOutputEscaped(t *testing.T) {
	t.Parallel()
	const hostile = "evil\x1b]0;owned\x07\u202e"
	for _, c := range []struct {
		args    []string
		hidden  bool
		machine bool
		escaped bool
	}{
		{[]string{"say"}, false, false, true},
		{[]string{"say", "--json=false"}, false, false, true},
		{[]string{"say", "--json"}, false, false, false},
		{[]string{"say"}, true, false, false},
		{[]string{"say"}, false, true, false},
	} {
		var out, errs bytes.Buffer
		root := newRoot(environment{getenv: func(string) string { return "" }, stdout: &out, stderr: &errs})
		say := &cobra.Command{Use: "say", Hidden: c.hidden, RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write([]byte(hostile + "\n"))
			return err
		}}
		say.Flags().Bool("json", false, "JSON output")
		if c.machine {
			say.Annotations = map[string]string{outputAnnotation: machineOutput}
		}
		root.AddCommand(say)
		root.SetArgs(c.args)
		if err := root.Execute(); err != nil {
			t.Fatalf("holdfast %v: %v\n%s", c.args, err, errs.String())
		}
		if escaped := !strings.ContainsAny(out.String(), "\x1b\x07\u202e"); escaped != c.escaped {
			t.Errorf("holdfast %v (hidden %t, machine %t) printed %q: escaped %t, want %t", c.args, c.hidden, c.machine, out.String(), escaped, c.escaped)
		}
	}
}
