package store

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// libpqKeywords are the connection keywords libpq (PostgreSQL 15 to 17) knows. A DSN's other
// keys are pgx's own (pool_max_conns, default_query_exec_mode) or run-time parameters, which
// libpq would refuse as invalid options.
var libpqKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "passfile": true,
	"require_auth": true, "channel_binding": true, "connect_timeout": true, "client_encoding": true, "options": true,
	"application_name": true, "fallback_application_name": true, "keepalives": true, "keepalives_idle": true,
	"keepalives_interval": true, "keepalives_count": true, "tcp_user_timeout": true, "gssencmode": true, "sslmode": true,
	"requiressl": true, "sslcompression": true, "sslcert": true, "sslkey": true, "sslpassword": true, "sslcertmode": true,
	"sslrootcert": true, "sslcrl": true, "sslcrldir": true, "sslsni": true, "requirepeer": true,
	"ssl_min_protocol_version": true, "ssl_max_protocol_version": true, "krbsrvname": true, "gsslib": true,
	"gssdelegation": true, "service": true, "target_session_attrs": true, "load_balance_hosts": true, "sslnegotiation": true,
}

// Libpq is the session address (Session) as PostgreSQL's own tools take it (pg_restore
// --dbname, psql), split so that no secret is in their arguments, which every user of the host
// can read: a connection string of libpq's keywords only, and the password, to be given in
// their environment (PGPASSWORD). The DSN's other keys are left out.
func (a Address) Libpq() (conninfo, password string, err error) {
	dsn := a.Session()
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", "", fmt.Errorf("parse the database address: %w", err)
		}
		if u.User != nil {
			password, _ = u.User.Password()
			u.User = url.User(u.User.Username())
		}
		q := u.Query()
		if p := q.Get("password"); p != "" {
			password = p
		}
		for key := range q {
			if !libpqKeywords[key] {
				q.Del(key)
			}
		}
		u.RawQuery = q.Encode()
		return u.String(), password, nil
	}
	pairs, err := parseKeywordValues(dsn)
	if err != nil {
		return "", "", fmt.Errorf("parse the database address: %w", err)
	}
	var b strings.Builder
	for _, p := range pairs {
		switch {
		case p[0] == "password":
			password = p[1]
		case libpqKeywords[p[0]]:
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(p[0] + "='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(p[1]) + "'")
		}
	}
	return b.String(), password, nil
}

// parseKeywordValues reads a connection string in libpq's keyword = value form: values bare
// (up to white space) or single-quoted, a backslash taking the next character as it is.
func parseKeywordValues(s string) ([][2]string, error) {
	var out [][2]string
	for {
		s = strings.TrimLeft(s, " \t\n\r\f\v")
		if s == "" {
			return out, nil
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, errors.New("a keyword without '=' and a value")
		}
		key := strings.TrimSpace(s[:eq])
		if key == "" || strings.ContainsAny(key, " \t\n\r\f\v'\\") {
			return nil, fmt.Errorf("%q is not a keyword", key)
		}
		s = strings.TrimLeft(s[eq+1:], " \t\n\r\f\v")
		var val strings.Builder
		quoted := strings.HasPrefix(s, "'")
		if quoted {
			s = s[1:]
		}
		i, closed := 0, !quoted
		for ; i < len(s); i++ {
			c := s[i]
			switch {
			case c == '\\' && i+1 < len(s):
				i++
				val.WriteByte(s[i])
				continue
			case quoted && c == '\'':
				closed = true
			case !quoted && strings.IndexByte(" \t\n\r\f\v", c) >= 0:
			default:
				val.WriteByte(c)
				continue
			}
			break
		}
		if !closed {
			return nil, fmt.Errorf("the value of %s has no closing quote", key)
		}
		if quoted {
			i++ // past the closing quote
		}
		out = append(out, [2]string{key, val.String()})
		s = s[min(i, len(s)):]
	}
}
