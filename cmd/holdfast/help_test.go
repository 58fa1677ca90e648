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
