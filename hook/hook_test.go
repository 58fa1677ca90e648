package hook_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/hook"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		line string
		argv []string
		err  string
	}{
		{`/usr/bin/docker stop "my app"`, []string{"/usr/bin/docker", "stop", "my app"}, ""},
		{`/bin/echo 'a b' c\ d $HOME`, []string{"/bin/echo", "a b", "c d", "$HOME"}, ""},
		{"/bin/echo `id`", []string{"/bin/echo", "`id`"}, ""},
		{"/bin/echo a | /bin/cat", nil, "one command only"},
		{"/bin/true; /bin/rm -rf /", nil, "one command only"},
		{"/bin/true && /bin/false", nil, "one command only"},
		{"/bin/echo > /etc/passwd", nil, "one command only"},
		{"sh -c true", nil, "absolute path"},
		{`/bin/echo "open`, nil, "close its quotes"},
		{"   ", nil, "empty hook"},
	} {
		argv, err := hook.Split(tc.line)
		switch {
		case tc.err == "" && (err != nil || !slices.Equal(argv, tc.argv)):
			t.Errorf("Split(%q) = %q, %v; want %q", tc.line, argv, err, tc.argv)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Split(%q) = %q, %v; want an error with %q", tc.line, argv, err, tc.err)
		}
	}
}

// FuzzSplit: a hook line never panics, and what is accepted is one command of an absolute
// program.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{`/bin/echo "a b"`, "/bin/a | b", `/x 'y`, "/bin/true\x00", `\`, `/a "b\"c"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		argv, err := hook.Split(line)
		if err != nil {
			return
		}
		if len(argv) == 0 || !strings.HasPrefix(argv[0], "/") {
			t.Fatalf("Split(%q) = %q", line, argv)
		}
	})
}
