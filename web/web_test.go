package web

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Auth lets a request through with a token or a user of the file, and no other; the file is
// refused with a line that is not a credential, a secret under 16 characters, or when it is not
// a regular file of root's closed to its group and others.
func TestAuth(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "auth")
	write := func(content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("# who may look\nbearer s3cret-token-0123456789\nbasic ops hunter2-hunter2-hunter2\n", 0o600)
	h, err := Auth(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  func(r *http.Request)
		want int
	}{
		{"nothing", func(*http.Request) {}, http.StatusUnauthorized},
		{"the token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-token-0123456789") }, http.StatusTeapot},
		{"another token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-token-0123456788") }, http.StatusUnauthorized},
		{"a prefix of the token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-token") }, http.StatusUnauthorized},
		{"the user", func(r *http.Request) { r.SetBasicAuth("ops", "hunter2-hunter2-hunter2") }, http.StatusTeapot},
		{"the token as a browser's password", func(r *http.Request) { r.SetBasicAuth("anyone", "s3cret-token-0123456789") }, http.StatusTeapot},
		{"a wrong password", func(r *http.Request) { r.SetBasicAuth("ops", "hunter2-hunter2-hunter3") }, http.StatusUnauthorized},
		{"an unknown user", func(r *http.Request) { r.SetBasicAuth("eve", "hunter2-hunter2-hunter2") }, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/metrics", nil)
			tc.set(r)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d", w.Code, tc.want)
			}
			if w.Code == http.StatusUnauthorized && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Basic ") {
				t.Fatalf("401 without a WWW-Authenticate a browser prompts for: %v", w.Header())
			}
		})
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		path, want    string
	}{
		{"a bad line", "token only\n", 0o600, path, "line 1: want"},
		{"a short token", "# ok\nbearer 0123456789abcde\n", 0o600, path, "line 2: a token or password needs at least 16 characters"},
		{"a short password", "basic ops hunter2\n", 0o600, path, "line 1: a token or password needs at least 16"},
		{"a user with a colon", "basic o:ps hunter2-hunter2-hunter2\n", 0o600, path, "line 1: want"},
		{"no credentials", "# none yet\n", 0o600, path, "holds no credentials"},
		{"readable by others", "bearer s3cret-token-0123456789\n", 0o644, path, "has mode 0644"},
		{"through a link", "bearer s3cret-token-0123456789\n", 0o600, link, "is a symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(tc.content, tc.mode)
			_, err := LoadAuth(tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadAuth: %v, want an error with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "0123456789abcde") {
				t.Fatalf("the error shows a secret: %v", err)
			}
		})
	}
}

// An auth file's roles: a credential is read-only unless "operator" follows its secret; a
// token's label is its own or the start of its digest, a user's is the user.
func TestAuthRoles(t *testing.T) {
	c, err := parseAuth("auth", []byte("bearer reader-token-0123456789\nbearer op-token-0123456789 operator ops\n"+
		"bearer op2-token-0123456789 operator\nbasic bob bob-password-0123456789\nbasic alice alice-password-0123456789 operator\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set      func(r *http.Request)
		label    string
		operator bool
	}{
		{func(r *http.Request) { r.Header.Set("Authorization", "Bearer reader-token-0123456789") }, "token ", false},
		{func(r *http.Request) { r.Header.Set("Authorization", "Bearer op-token-0123456789") }, "ops", true},
		{func(r *http.Request) { r.SetBasicAuth("anyone", "op2-token-0123456789") }, "token ", true},
		{func(r *http.Request) { r.SetBasicAuth("bob", "bob-password-0123456789") }, "bob", false},
		{func(r *http.Request) { r.SetBasicAuth("alice", "alice-password-0123456789") }, "alice", true},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		tc.set(r)
		p, ok := c.Identify(r)
		if !ok || !strings.HasPrefix(p.Label, tc.label) || p.Operator != tc.operator {
			t.Errorf("Identify = %+v, %v; want label %q…, operator %v", p, ok, tc.label, tc.operator)
		}
	}
	for _, bad := range []string{"bearer\n", "basic\n", "basic u\n", "bearer t-0123456789abcdef reader\n", "basic u p-0123456789abcdef admin\n",
		"bearer t-0123456789abcdef operator two words\n", "bearer t-0123456789abcdef operator bad\x01label\n"} {
		if _, err := parseAuth("auth", []byte(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("parseAuth(%q) = %v, want a refusal of line 1", bad, err)
		}
	}
}
