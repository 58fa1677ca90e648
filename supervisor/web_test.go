package supervisor_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/supervisor"
	"github.com/holdfast-backup/holdfast/testenv"
)

// The web server's bounds are set: no timeout is left infinite, headers are bounded.
func TestHTTPServerBounds(t *testing.T) {
	srv := supervisor.NewHTTPServer(http.NotFoundHandler())
	for _, c := range []struct {
		name string
		d    time.Duration
	}{{"ReadHeaderTimeout", srv.ReadHeaderTimeout}, {"ReadTimeout", srv.ReadTimeout}, {"WriteTimeout", srv.WriteTimeout},
		{"IdleTimeout", srv.IdleTimeout}} {
		if c.d <= 0 {
			t.Errorf("%s is %s: unbounded", c.name, c.d)
		}
	}
	if srv.WriteTimeout <= 15*time.Second {
		t.Errorf("WriteTimeout %s cuts a page off before its own 15s", srv.WriteTimeout)
	}
	if srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 64<<10 {
		t.Errorf("MaxHeaderBytes %d", srv.MaxHeaderBytes)
	}
}

// A daemon listening over TLS with its auth file, on a real database: every path without
// credentials is 401, a wrong Host 421, oversized headers 431, plain HTTP is refused, and with
// credentials /metrics, the dashboard and its API answer; a renewed certificate is served
// without a restart.
func TestWebListener(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	token := "s3cret-token-0123456789"
	e.cfg.WebAuthFile = filepath.Join(dir, "web.auth")
	if err := os.WriteFile(e.cfg.WebAuthFile, []byte("bearer "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.cfg.TLSCert, e.cfg.TLSKey = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := writeCert(t, e.cfg.TLSCert, e.cfg.TLSKey, 1)
	e.cfg.Listen = testenv.FreeAddr(t)
	e.job(t, "w", "/bin/true")
	run := e.admit(t, "w")
	e.start(t)

	pool := x509.NewCertPool()
	pool.AddCert(first)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + e.cfg.Listen
	get := func(path, host string, auth bool, header http.Header) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		if host != "" {
			req.Host = host
		}
		if auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, path := range []string{"/", "/metrics", "/api/runs/" + run.ID.String(), "/runs", "/static/app.js"} {
		if r := get(path, "", false, nil); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: %s, want 401", path, r.Status)
		}
		if r := get(path, "attacker.example", true, nil); r.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("GET %s as attacker.example: %s, want 421", path, r.Status)
		}
		if r := get(path, "", true, nil); r.StatusCode != http.StatusOK || r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s with credentials: %s %v, want 200 with nosniff", path, r.Status, r.Header)
		}
	}
	if r := get("/metrics", "", true, http.Header{"X-Big": {strings.Repeat("x", 64<<10)}}); r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB of headers: %s, want 431", r.Status)
	}
	resp, err := http.Get("http://" + e.cfg.Listen + "/metrics")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS listener: %s, want 400", resp.Status)
		}
	}

	// A renewal: the files change, and the next handshakes present the new certificate.
	second := writeCert(t, e.cfg.TLSCert, e.cfg.TLSKey, 2)
	deadline := time.Now().Add(time.Minute)
	for {
		conn, err := tls.Dial("tcp", e.cfg.Listen, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		served := conn.ConnectionState().PeerCertificates[0]
		conn.Close()
		if served.SerialNumber.Cmp(second.SerialNumber) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener still serves certificate %s a minute after the renewal", served.SerialNumber)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 with serial and its key.
func writeCert(t *testing.T, certFile, keyFile string, serial int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "holdfast test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true,
		BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// Each replaced by a rename, as a renewal does, the key first.
	for _, f := range []struct {
		path  string
		block *pem.Block
	}{{keyFile, &pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}}, {certFile, &pem.Block{Type: "CERTIFICATE", Bytes: der}}} {
		if err := os.WriteFile(f.path+".new", pem.EncodeToMemory(f.block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f.path+".new", f.path); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
