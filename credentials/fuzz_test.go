package credentials

import (
	"strings"
	"testing"
)

// ParseEnv never panics, and what it returns is KEY=VALUE with a valid name and no NUL; an error
// never repeats the file's content.
func FuzzParseEnv(f *testing.F) {
	for _, seed := range []string{"", "A=1\n", "# c\n\nexport B='x'\n", "A\n", "1=2", "A=\"\x00\"", "A=b=c\r\n", strings.Repeat("K=v\n", 100)} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		vars, err := ParseEnv(data)
		if err != nil {
			if len(data) > 16 && strings.Contains(err.Error(), string(data)) {
				t.Fatalf("error quotes the input: %v", err)
			}
			return
		}
		for _, v := range vars {
			key, value, ok := strings.Cut(v, "=")
			if !ok || !envKey().MatchString(key) || strings.ContainsRune(value, 0) {
				t.Fatalf("ParseEnv returned %q", v)
			}
		}
	})
}
