package credentials

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Encrypted knows systemd-creds encrypt's output (Base64, in lines, as it writes it; binary) by
// its key id, and nothing else: a password, Base64 of other bytes, a key id alone.
func TestEncrypted(t *testing.T) {
	// Made by systemd-creds 252 (encrypt --with-key=host --name=password) of a throwaway host key.
	sealed, err := os.ReadFile(filepath.Join("testdata", "host-key.cred"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(sealed)), ""))
	if err != nil {
		t.Fatal(err)
	}
	tpm := append([]byte{0x0c, 0x7c, 0xc0, 0x7b, 0x11, 0x76, 0x45, 0x91, 0x9c, 0x4b, 0x0b, 0xea, 0x08, 0xbc, 0x20, 0xfe}, raw[16:]...)
	for _, c := range []struct {
		name string
		in   []byte
		want bool
	}{
		{"systemd-creds' Base64", sealed, true},
		{"on one line, without its newline", []byte(strings.Join(strings.Fields(string(sealed)), "")), true},
		{"binary", raw, true},
		{"by a TPM2, in Base64", []byte(base64.StdEncoding.EncodeToString(tpm)), true},
		{"a password", []byte("correct horse battery staple\n"), false},
		{"Base64 of other bytes", []byte(base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789"))), false},
		{"15 bytes of a key id", raw[:15], false},
		{"an environment file", []byte("AWS_SECRET_ACCESS_KEY=x\n"), false},
		{"empty", nil, false},
	} {
		if got := Encrypted(c.in); got != c.want {
			t.Errorf("%s: Encrypted = %v, want %v", c.name, got, c.want)
		}
	}
}

// Encrypted reads any bytes without failing, and says true only of what begins, raw or decoded,
// with one of systemd's key ids.
func FuzzEncrypted(f *testing.F) {
	if sealed, err := os.ReadFile(filepath.Join("testdata", "host-key.cred")); err == nil {
		f.Add(sealed)
	}
	f.Add([]byte("correct horse battery staple\n"))
	f.Add([]byte("Whxqht+dQJax1aZeCGLxmg=="))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !Encrypted(b) {
			return
		}
		raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(b)), ""))
		if err != nil {
			raw = b
		}
		if len(raw) < 16 || !slices.ContainsFunc(encryptedKeys, func(id []byte) bool { return bytes.Equal(raw[:16], id) }) {
			t.Fatalf("Encrypted(%q): its first 16 bytes are no key id of systemd's", b)
		}
	})
}
