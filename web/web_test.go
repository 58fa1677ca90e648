package web

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Auth lets a request through with a token or a user of the file, and no other.
func TestAuth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(path, []byte("# who may look\nbearer s3cret-token\nbasic ops hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
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
		{"the token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-token") }, http.StatusTeapot},
		{"another token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer guess") }, http.StatusUnauthorized},
		{"the user", func(r *http.Request) { r.SetBasicAuth("ops", "hunter2") }, http.StatusTeapot},
		{"a wrong password", func(r *http.Request) { r.SetBasicAuth("ops", "hunter3") }, http.StatusUnauthorized},
		{"an unknown user", func(r *http.Request) { r.SetBasicAuth("eve", "hunter2") }, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/metrics", nil)
			tc.set(r)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d", w.Code, tc.want)
			}
		})
	}
	if err := os.WriteFile(path, []byte("token only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Auth(path, h); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a bad line: %v", err)
	}
}
