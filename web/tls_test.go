package web

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// readPEM follows a link (certificates are often links into a renewal tool's tree), refuses
// what is not a regular file without blocking on it, a key open to others and a file over its
// bound, and reads a certificate of any mode.
func TestReadPEM(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, body []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, body, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cert := write("cert.pem", []byte("CERT"), 0o644)
	key := write("key.pem", []byte("KEY"), 0o600)
	openKey := write("open-key.pem", []byte("KEY"), 0o604)
	big := write("big.pem", make([]byte, maxPEM+1), 0o644)
	link := filepath.Join(dir, "live.pem")
	if err := os.Symlink(cert, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		key     bool
		want    string // the content, or "" for an error
		wantErr string
	}{
		{"a certificate", cert, false, "CERT", ""},
		{"a key of mode 0600", key, true, "KEY", ""},
		{"a link to a certificate", link, false, "CERT", ""},
		{"a key others may read", openKey, true, "", "a private key must not be open to others"},
		{"a FIFO", fifo, false, "", "is not a regular file"},
		{"a directory", dir, false, "", "is not a regular file"},
		{"over the bound", big, false, "", "is larger than 1 MiB"},
		{"missing", filepath.Join(dir, "none.pem"), false, "", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readPEM(tt.path, tt.key)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readPEM(%s) = %q, %v; want an error saying %q", tt.path, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("readPEM(%s) = %q, %v; want %q", tt.path, got, err, tt.want)
			}
		})
	}
}
