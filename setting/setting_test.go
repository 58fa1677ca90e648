package setting

import (
	"errors"
	"io/fs"
	"slices"
	"testing"
)

// flags names the settings as a command's flags would: only Job.PasswordFile and Notify.Timeout.
func flags(path string) string {
	switch path {
	case "Job.PasswordFile":
		return "--password-file"
	case "Notify.Timeout":
		return "--notify-timeout"
	}
	return path
}

// A placeholder is a path of capitalised words in braces; anything else in braces is text.
func TestPlaceholders(t *testing.T) {
	for _, c := range []struct {
		s    string
		want []string
	}{
		{"no password file: give {Job.PasswordFile} FILE", []string{"Job.PasswordFile"}},
		{"{Restic} and {Notify.Timeout}{Job.Copy.To}", []string{"Restic", "Notify.Timeout", "Job.Copy.To"}},
		{"{} {job.User} {Job.} {.Job} {Job..User} {Job User} {Job-User} {{Job.User}", []string{"Job.User"}},
		{`{"json": 1} {Job.User`, nil},
	} {
		if got := Placeholders(c.s); !slices.Equal(got, c.want) {
			t.Errorf("Placeholders(%q) = %q, want %q", c.s, got, c.want)
		}
	}
}

// Without names a placeholder reads as its path; with them, as the name. An error names them
// when its text is asked for, so one made before Use names them too, and it wraps what %w wraps.
func TestNames(t *testing.T) {
	t.Cleanup(func() { Use(nil) })
	early := Errorf("no password file: give {Job.PasswordFile} FILE (%w)", fs.ErrNotExist)
	if got, want := early.Error(), "no password file: give Job.PasswordFile FILE (file does not exist)"; got != want {
		t.Errorf("unnamed: %q, want %q", got, want)
	}
	Use(flags)
	if got, want := early.Error(), "no password file: give --password-file FILE (file does not exist)"; got != want {
		t.Errorf("named: %q, want %q", got, want)
	}
	if !errors.Is(early, fs.ErrNotExist) {
		t.Error("the error does not wrap what %w wraps")
	}
	if got, want := Sprintf("{Notify.Timeout} %s and {Unknown.Path} {x}", "30s"), "--notify-timeout 30s and Unknown.Path {x}"; got != want {
		t.Errorf("Sprintf: %q, want %q", got, want)
	}
	// A value is never read for placeholders: only the format is the message's own text.
	if got, want := Errorf("path %q", "{Job.PasswordFile}").Error(), `path "{Job.PasswordFile}"`; got != want {
		t.Errorf("a value's braces: %q, want %q", got, want)
	}
}
