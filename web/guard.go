package web

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/setting"
)

// DefaultAuthFile is the auth file `holdfast setup` writes (root, 0600, a random bearer token),
// and the one the daemon reads when it listens and is given no --web-auth-file.
const DefaultAuthFile = "/etc/holdfast/web.auth"

// MinSecret is the shortest token or password an auth file may hold: at 16 characters a guess
// per request over the network cannot find one.
const MinSecret = 16

// Headers every response carries: no page may be framed (clickjacking), nothing is loaded from
// elsewhere, no type is sniffed, no address leaks in a Referer.
const contentSecurityPolicy = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"

// Defaults of a Guard.
const (
	// DefaultMaxRequests bounds the requests served at once. Each reads PostgreSQL through the
	// daemon's pool (store.DefaultMaxConns, 4): two leave the sweep and admission theirs however
	// many pages are asked for.
	DefaultMaxRequests = 2
	// DefaultQueueWait is how long a request waits for one of those before it is answered 503.
	DefaultQueueWait = 5 * time.Second
)

// Credentials are the tokens and users of an auth file.
type Credentials struct {
	tokens []credential
	users  map[string]credential
}

// credential is a token's or a user's secret and whom it makes the request's.
type credential struct {
	secret []byte
	Principal
}

// Principal is whom a request's credential names: its Label (a user's name, or a token's
// label) and whether it is an operator's, which may restore from the dashboard. Every other
// credential reads only.
type Principal struct {
	Label    string
	Operator bool
	// binding is what the credential's forms are bound to (csrfToken): a digest of its secret.
	binding [sha256.Size]byte
}

// RoleOperator is the role an auth file's line gives a credential that may restore.
const RoleOperator = "operator"

// LoadAuth reads an auth file: lines "bearer TOKEN", "basic USER PASSWORD" (read-only), or with
// the role operator after them, "bearer TOKEN operator [LABEL]", "basic USER PASSWORD operator";
// # comments. A token's label names it in the events of what it did (default: "token" and the
// start of its SHA-256). It is read as a secret (credentials.ReadSecret: not through a link, a
// regular file of root's that its group and others cannot access, at most 4 KiB), and each token
// or password must have at least MinSecret characters. An error names the line, never a secret.
func LoadAuth(path string) (*Credentials, error) {
	data, err := credentials.ReadSecret(path)
	if err != nil {
		return nil, fmt.Errorf("web auth file: %w", err)
	}
	return parseAuth(path, data)
}

func parseAuth(path string, data []byte) (*Credentials, error) {
	c := &Credentials{users: map[string]credential{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		var cr credential
		switch {
		case fields[0] == "bearer" && (len(fields) == 2 || (len(fields) == 3 || len(fields) == 4) && fields[2] == RoleOperator):
			cr.secret = []byte(fields[1])
			sum := sha256.Sum256(cr.secret)
			cr.Label = "token " + hex.EncodeToString(sum[:4])
			if len(fields) == 4 {
				if !validLabel(fields[3]) {
					return nil, fmt.Errorf("web auth file %s line %d: a label is 1 to 64 letters, digits or ._@-", path, n)
				}
				cr.Label = fields[3]
			}
			cr.Operator = len(fields) > 2
		case fields[0] == "basic" && (len(fields) == 3 || len(fields) == 4 && fields[3] == RoleOperator) && !strings.Contains(fields[1], ":"):
			cr.secret, cr.Label, cr.Operator = []byte(fields[2]), fields[1], len(fields) == 4
		default:
			return nil, fmt.Errorf("web auth file %s line %d: want \"bearer TOKEN\" or \"basic USER PASSWORD\", each with \"operator\" after it for a credential that may restore", path, n)
		}
		if len(cr.secret) < MinSecret {
			return nil, fmt.Errorf("web auth file %s line %d: a token or password needs at least %d characters, e.g. $(head -c 24 /dev/urandom | base64)",
				path, n, MinSecret)
		}
		cr.binding = sha256.Sum256(append([]byte(cr.Label+"\x00"), cr.secret...))
		if fields[0] == "bearer" {
			c.tokens = append(c.tokens, cr)
		} else {
			c.users[cr.Label] = cr
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("web auth file %s: %w", path, err)
	}
	if len(c.tokens) == 0 && len(c.users) == 0 {
		return nil, fmt.Errorf("web auth file %s holds no credentials", path)
	}
	return c, nil
}

func validLabel(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._@-", r)) {
			return false
		}
	}
	return true
}

// Allows reports whether r carries one of the credentials (see Identify).
func (c *Credentials) Allows(r *http.Request) bool {
	_, ok := c.Identify(r)
	return ok
}

// Identify returns whom r's credential names: "Authorization: Bearer TOKEN", or basic auth with
// a user's password, or with a token as the password (any user name: so a browser's login
// prompt takes the token `holdfast setup` made). Compared in constant time.
func (c *Credentials) Identify(r *http.Request) (Principal, bool) {
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return c.token([]byte(token))
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return Principal{}, false
	}
	if want, known := c.users[user]; known && subtle.ConstantTimeCompare([]byte(pass), want.secret) == 1 {
		return want.Principal, true
	}
	return c.token([]byte(pass))
}

func (c *Credentials) token(got []byte) (Principal, bool) {
	var found Principal
	ok := false
	for _, t := range c.tokens {
		if subtle.ConstantTimeCompare(got, t.secret) == 1 {
			found, ok = t.Principal, true
		}
	}
	return found, ok
}

type principalKey struct{}

// principalOf is whom the Guard found r's credential to name; a request that came by no Guard
// (a test's) is nobody's, and reads only.
func principalOf(r *http.Request) Principal {
	p, _ := r.Context().Value(principalKey{}).(Principal)
	return p
}

// Auth guards next with the credentials of the auth file at path (see LoadAuth).
func Auth(path string, next http.Handler) (http.Handler, error) {
	c, err := LoadAuth(path)
	if err != nil {
		return nil, err
	}
	return Guard{Auth: c, Hosts: AnyHost}.Handler(next), nil
}

// Hosts are the names a request's Host header may give: a browser on this machine sends the
// name it resolved, and a page of another site that rebinds its own name to this address
// (DNS rebinding) sends that site's name, which is refused.
type Hosts struct {
	names map[string]bool
	anyIP bool // an IP literal (no name to rebind): for a listener on every address
	any   bool
}

// AnyHost accepts any Host (for tests of the other checks).
var AnyHost = &Hosts{any: true}

// HostsFor are the names accepted by a listener on listen (HOST:PORT): its own host; for a
// loopback listener also localhost, 127.0.0.1 and ::1; for one on every address (0.0.0.0, ::,
// or no host) any IP literal and this machine's host name; and each of extra (--web-host), for
// the names a reverse proxy or the operators use.
func HostsFor(listen string, extra []string) (*Hosts, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("%q: want HOST:PORT", listen)
	}
	h := &Hosts{names: map[string]bool{}}
	ip := net.ParseIP(host)
	switch {
	case host == "" || ip != nil && ip.IsUnspecified():
		h.anyIP = true
		if name, err := os.Hostname(); err == nil {
			h.names[canonicalHost(name)] = true
		}
	case IsLoopback(host):
		for _, n := range []string{host, "localhost", "127.0.0.1", "::1"} {
			h.names[canonicalHost(n)] = true
		}
	default:
		h.names[canonicalHost(host)] = true
	}
	for _, n := range extra {
		c := strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(n, "["), "]"), "."))
		if c == "" || strings.ContainsAny(c, "/ \t@") || net.ParseIP(c) == nil && strings.Contains(c, ":") {
			return nil, fmt.Errorf("%q is not a host name: give a name or an address without a port", n)
		}
		h.names[c] = true
	}
	return h, nil
}

// IsLoopback reports whether a listener's host is on the loopback only.
func IsLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// canonicalHost is a Host header's or a name's host, without port, brackets or a final dot, in
// lower case.
func canonicalHost(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// Allows reports whether a request's Host header (with or without a port) is one of h's.
func (h *Hosts) Allows(hostHeader string) bool {
	if h.any {
		return true
	}
	host := canonicalHost(hostHeader)
	return h.names[host] || h.anyIP && net.ParseIP(host) != nil
}

// Guard stands before every page, /metrics and /api: the Host check, the credentials, the
// security headers, and a bound on the requests served at once.
type Guard struct {
	Auth  *Credentials // required: every request needs one of them
	Hosts *Hosts       // required: see HostsFor
	// MaxRequests bounds the requests served at once (DefaultMaxRequests); one that finds no
	// slot within QueueWait (DefaultQueueWait) is answered 503.
	MaxRequests int
	QueueWait   time.Duration
}

// Handler is next behind g. It panics without Auth or Hosts: no listener goes unguarded.
func (g Guard) Handler(next http.Handler) http.Handler {
	if g.Auth == nil || g.Hosts == nil {
		panic(errors.New("web: a guard needs credentials and hosts"))
	}
	if g.MaxRequests <= 0 {
		g.MaxRequests = DefaultMaxRequests
	}
	if g.QueueWait <= 0 {
		g.QueueWait = DefaultQueueWait
	}
	slots := make(chan struct{}, g.MaxRequests)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("Content-Security-Policy", contentSecurityPolicy)
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("X-Frame-Options", "DENY")
		hdr.Set("Referrer-Policy", "no-referrer")
		if !g.Hosts.Allows(r.Host) {
			http.Error(w, setting.Render("misdirected request: this host name is not the dashboard's (see holdfast daemon {WebHosts})"), http.StatusMisdirectedRequest)
			return
		}
		who, ok := g.Auth.Identify(r)
		if !ok {
			hdr.Set("WWW-Authenticate", `Basic realm="holdfast", charset="UTF-8"`)
			http.Error(w, setting.Render("authentication required: a bearer token or a user of the daemon's {WebAuthFile}"), http.StatusUnauthorized)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, who))
		select {
		case slots <- struct{}{}:
		default:
			timer := time.NewTimer(g.QueueWait)
			defer timer.Stop()
			select {
			case slots <- struct{}{}:
			case <-timer.C:
				hdr.Set("Retry-After", "5")
				http.Error(w, "busy: too many requests at once; try again", http.StatusServiceUnavailable)
				return
			case <-r.Context().Done():
				return
			}
		}
		defer func() { <-slots }()
		next.ServeHTTP(w, r)
	})
}
