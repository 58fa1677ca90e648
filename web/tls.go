package web

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/setting"
	"golang.org/x/sys/unix"
)

// maxPEM bounds a certificate chain or key file.
const maxPEM = 1 << 20

// TLSConfig serves the certificate and key in certFile and keyFile (PEM), read now, so that a
// bad pair stops the daemon, and again at a handshake after either file changed (a renewal):
// a pair that then fails to load is logged and the last good one kept. The files are the
// operator's: links are followed (certbot's live/ directory is links), but each must be a
// regular file, read without blocking and bounded, and the key must not be readable by others.
func TLSConfig(certFile, keyFile string, logger *slog.Logger) (*tls.Config, error) {
	if logger == nil {
		logger = slog.Default()
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile, logger: logger}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}, nil
}

type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]time.Time
	checked time.Time
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) > time.Second {
		r.checked = time.Now()
		if s, err := r.stamps(); err == nil && s != r.stamp {
			if err := r.loadLocked(); err != nil {
				r.logger.Error("the changed TLS certificate or key does not load; serving the last good one", "err", err)
				r.stamp = s // once per change
			} else {
				r.logger.Info("TLS certificate reloaded", "cert", r.certFile)
			}
		}
	}
	return r.cert, nil
}

func (r *certReloader) stamps() ([2]time.Time, error) {
	var s [2]time.Time
	for i, p := range []string{r.certFile, r.keyFile} {
		info, err := os.Stat(p)
		if err != nil {
			return s, err
		}
		s[i] = info.ModTime()
	}
	return s, nil
}

func (r *certReloader) load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = time.Now()
	return r.loadLocked()
}

func (r *certReloader) loadLocked() error {
	s, err := r.stamps()
	if err != nil {
		return setting.Errorf("{TLSCert}/{TLSKey}: %w", err)
	}
	certPEM, err := readPEM(r.certFile, false)
	if err != nil {
		return setting.Errorf("{TLSCert}: %w", err)
	}
	keyPEM, err := readPEM(r.keyFile, true)
	if err != nil {
		return setting.Errorf("{TLSKey}: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return setting.Errorf("{TLSCert} %s with {TLSKey} %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.stamp = &cert, s
	return nil
}

// readPEM reads a regular file without blocking on a FIFO or a device, at most maxPEM bytes; a
// key must not be readable or writable by others.
func readPEM(path string, key bool) ([]byte, error) {
	b, err := credentials.ReadBounded(path, false, maxPEM, func(path string, st *unix.Stat_t) error {
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%s is not a regular file", path)
		}
		if key && st.Mode&0o007 != 0 {
			return fmt.Errorf("%s has mode %04o: a private key must not be open to others (chmod 0600 %s)", path, st.Mode&0o777, path)
		}
		return nil
	})
	if errors.Is(err, credentials.ErrTooLarge) {
		return nil, fmt.Errorf("%s is larger than %d MiB", path, maxPEM>>20)
	}
	return b, err
}
