package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// libpqKeywords are the connection keywords libpq (PostgreSQL 15 to 17) knows. A DSN's other
// keys are pgx's own (pool_max_conns, default_query_exec_mode) or run-time parameters, which
// libpq would refuse as invalid options.
var libpqKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "password": true, "passfile": true,
	"require_auth": true, "channel_binding": true, "connect_timeout": true, "client_encoding": true, "options": true,
	"application_name": true, "fallback_application_name": true, "keepalives": true, "keepalives_idle": true,
	"keepalives_interval": true, "keepalives_count": true, "tcp_user_timeout": true, "gssencmode": true, "sslmode": true,
	"requiressl": true, "sslcompression": true, "sslcert": true, "sslkey": true, "sslpassword": true, "sslcertmode": true,
	"sslrootcert": true, "sslcrl": true, "sslcrldir": true, "sslsni": true, "requirepeer": true,
	"ssl_min_protocol_version": true, "ssl_max_protocol_version": true, "krbsrvname": true, "gsslib": true,
	"gssdelegation": true, "service": true, "target_session_attrs": true, "load_balance_hosts": true, "sslnegotiation": true,
}

// LibpqParams is the session address (Session) as PostgreSQL's own tools take it (pg_restore,
// psql): its libpq keywords and their values, in order, a URI read as libpq reads one. pgx's
// "database" is libpq's dbname; the DSN's other keys (pgx's own, run-time parameters) are left
// out. The values include the secrets (password, sslpassword): the caller keeps them out of
// the tools' arguments, which every user of the host can read. An error never quotes the
// address.
func (a Address) LibpqParams() ([][2]string, error) {
	dsn := a.Session()
	var pairs [][2]string
	var err error
	if rest, ok := cutURIScheme(dsn); ok {
		pairs, err = parseURI(rest)
	} else {
		pairs, err = parseKeywordValues(dsn)
	}
	if err != nil {
		return nil, fmt.Errorf("read the database address: %w", err)
	}
	out := pairs[:0]
	for _, p := range pairs {
		if p[0] == "database" {
			p[0] = "dbname"
		}
		if libpqKeywords[p[0]] {
			out = append(out, p)
		}
	}
	return out, nil
}

func cutURIScheme(dsn string) (string, bool) {
	for _, scheme := range []string{"postgresql://", "postgres://"} {
		if rest, ok := strings.CutPrefix(dsn, scheme); ok {
			return rest, true
		}
	}
	return "", false
}

// parseURI reads what follows a postgres:// scheme as libpq does: [user[:password]@][host[:port]
// [,...]][/dbname][?key=value[&...]], each part percent-decoded (a '+' is a '+').
func parseURI(s string) ([][2]string, error) {
	var pairs [][2]string
	// The user part ends at the first '@' before any '/', as libpq reads it (a '?' in a
	// password included).
	if i := strings.IndexAny(s, "@/"); i >= 0 && s[i] == '@' {
		userinfo := s[:i]
		s = s[i+1:]
		user, password, hasPassword := strings.Cut(userinfo, ":")
		u, err := percentDecode(user)
		if err != nil {
			return nil, fmt.Errorf("its user: %w", err)
		}
		if u != "" {
			pairs = append(pairs, [2]string{"user", u})
		}
		if hasPassword {
			p, err := percentDecode(password)
			if err != nil {
				return nil, fmt.Errorf("its password: %w", err)
			}
			pairs = append(pairs, [2]string{"password", p})
		}
	}
	query := ""
	if i := strings.IndexByte(s, '?'); i >= 0 {
		s, query = s[:i], s[i+1:]
	}
	hostport, dbname, hasDB := strings.Cut(s, "/")
	var hosts, ports []string
	anyPort := false
	for _, hp := range strings.Split(hostport, ",") {
		host, port := hp, ""
		if strings.HasPrefix(hp, "[") {
			end := strings.IndexByte(hp, ']')
			if end < 0 {
				return nil, errors.New("an IPv6 host without its closing bracket")
			}
			host, port = hp[1:end], strings.TrimPrefix(hp[end+1:], ":")
		} else if h, p, ok := strings.Cut(hp, ":"); ok {
			host, port = h, p
		}
		h, err := percentDecode(host)
		if err != nil {
			return nil, fmt.Errorf("its host: %w", err)
		}
		if port != "" {
			if _, err := strconv.ParseUint(port, 10, 16); err != nil {
				return nil, errors.New("a port that is not a number")
			}
			anyPort = true
		}
		hosts, ports = append(hosts, h), append(ports, port)
	}
	if strings.Join(hosts, "") != "" {
		pairs = append(pairs, [2]string{"host", strings.Join(hosts, ",")})
	}
	if anyPort {
		pairs = append(pairs, [2]string{"port", strings.Join(ports, ",")})
	}
	if hasDB && dbname != "" {
		d, err := percentDecode(dbname)
		if err != nil {
			return nil, fmt.Errorf("its database: %w", err)
		}
		pairs = append(pairs, [2]string{"dbname", d})
	}
	for _, kv := range strings.Split(query, "&") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, errors.New("a parameter without '='")
		}
		key, err := percentDecode(k)
		if err != nil {
			return nil, fmt.Errorf("a parameter's name: %w", err)
		}
		val, err := percentDecode(v)
		if err != nil {
			return nil, fmt.Errorf("parameter %s: %w", key, err)
		}
		if key == "ssl" && val == "true" { // libpq's and pgx's JDBC-style alias
			key, val = "sslmode", "require"
		}
		pairs = append(pairs, [2]string{key, val})
	}
	return pairs, nil
}

// percentDecode decodes %XX sequences, and nothing else.
func percentDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("a '%' without two hex digits")
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil || v == 0 {
			return "", errors.New("a '%' without two hex digits, or %00")
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
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
			return nil, errors.New("a keyword that is not one")
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
			case c == '\\': // a backslash that ends the string escapes nothing
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
