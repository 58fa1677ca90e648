// Package setup installs holdfast on a host whose package put its files in place: a role and a
// database on the local PostgreSQL, the address in the daemon's environment file, the schema,
// and the service enabled and started. Each step first looks at what is there, so running it
// again changes nothing.
package setup

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	sdbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/setting"
	"github.com/holdfast-backup/holdfast/store"
)

// Defaults, each stated once.
const (
	DefaultEnvFile     = "/etc/holdfast/holdfast.env"
	DefaultWebAuthFile = "/etc/holdfast/web.auth" // the daemon's WebAuthFile default
	DefaultRole        = "holdfast"
	DefaultDatabase    = "holdfast"
	DefaultService     = "holdfast.service"
	DefaultSocketDir   = "/var/run/postgresql"
	DefaultSuperuser   = "postgres"
	DefaultUnitDir     = "/etc/systemd/system"
	ProvisionCommand   = "setup-database" // the hidden command the superuser's process runs
	passwordBytes      = 24
	webTokenBytes      = 32 // 43 URL-safe characters
	dsnKey             = "HOLDFAST_DSN"
	serviceStartState  = "active"
)

// Config configures Run.
type Config struct {
	// EnvFile is the daemon's environment file (EnvironmentFile= of its unit). Default
	// DefaultEnvFile.
	EnvFile string
	// DSN, if set, is the database to use instead of a role and database on the local server
	// (DSNFrom reads it from where it was given).
	DSN string
	// RotatePassword gives the local role a new password even though it exists (other hosts
	// that log in as it then need the new address). Without it an existing role is left alone.
	RotatePassword bool
	// WebAuthFile is the daemon's listener's credentials, made with a new bearer token if there
	// is none. Default DefaultWebAuthFile.
	WebAuthFile string
	// Role and Database are made on the local server. Defaults DefaultRole, DefaultDatabase.
	Role, Database string
	// SocketDir is where the local server's socket is; Superuser the system user (and role) that
	// may create roles through it by peer authentication. Defaults DefaultSocketDir,
	// DefaultSuperuser.
	SocketDir, Superuser string
	// Executable is the holdfast binary the superuser's process runs (ProvisionCommand).
	Executable string
	// Service is the daemon's unit. Default DefaultService. NoService leaves it alone.
	Service   string
	NoService bool
	// Encrypt keeps the database's address encrypted (systemd-creds: the host's key, and a TPM2
	// where there is one) in DSNCredentialFile instead of in the environment file, and has the
	// service load it with LoadCredentialEncrypted= (a drop-in under UnitDir). An address kept
	// so already stays so without it. Defaults DefaultDSNCredentialFile, DefaultUnitDir.
	Encrypt           bool
	DSNCredentialFile string
	UnitDir           string
	Out               io.Writer
}

// Validate fills in defaults and checks the configuration; Run calls it too.
func (c *Config) Validate() error {
	for _, d := range []struct {
		field *string
		def   string
	}{{&c.EnvFile, DefaultEnvFile}, {&c.Role, DefaultRole}, {&c.Database, DefaultDatabase},
		{&c.SocketDir, DefaultSocketDir}, {&c.Superuser, DefaultSuperuser}, {&c.Service, DefaultService},
		{&c.WebAuthFile, DefaultWebAuthFile}, {&c.DSNCredentialFile, DefaultDSNCredentialFile}, {&c.UnitDir, DefaultUnitDir}} {
		if *d.field == "" {
			*d.field = d.def
		}
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if !filepath.IsAbs(c.EnvFile) {
		return fmt.Errorf("environment file %q is a relative path: give an absolute path", c.EnvFile)
	}
	if !filepath.IsAbs(c.WebAuthFile) {
		return fmt.Errorf("web auth file %q is a relative path: give an absolute path", c.WebAuthFile)
	}
	if err := checkCredentialFile(c.DSNCredentialFile); err != nil {
		return err
	}
	if err := store.CheckRoleName(c.Role, c.Superuser); err != nil {
		return err
	}
	if c.RotatePassword && c.DSN != "" {
		return setting.Errorf("{Setup.RotatePassword} gives the local role a new password; with a database given ({Setup.DSN}) there is none to rotate")
	}
	return nil
}

// Run sets holdfast up and says on Out what it did, a line per step.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	env, err := ReadEnv(cfg.EnvFile)
	if err != nil {
		return fmt.Errorf("%w (fix it, or reinstall the package)", err)
	}
	configured := env[dsnKey]
	if kept := env[DSNCredentialKey]; kept != "" {
		// Kept encrypted already: it stays so, where it is.
		if err := checkCredentialFile(kept); err != nil {
			return fmt.Errorf("%s in %s: %w", DSNCredentialKey, cfg.EnvFile, err)
		}
		cfg.Encrypt, cfg.DSNCredentialFile = true, kept
		if configured == "" {
			if configured, err = decryptDSN(ctx, kept); err != nil {
				return fmt.Errorf("%s %s in %s: %w", DSNCredentialKey, kept, cfg.EnvFile, err)
			}
		}
	}
	if cfg.Encrypt {
		if err := checkEncrypt(ctx); err != nil {
			return err
		}
	}
	// Where the address is found: the environment file, unless it is kept encrypted.
	found := dsnKey + " in " + cfg.EnvFile
	if env[dsnKey] == "" && env[DSNCredentialKey] != "" {
		found = "the address in " + cfg.dsnPlace()
	}
	dsn, changed, err := database(ctx, cfg, configured, found)
	if err != nil {
		return err
	}
	if cfg.Encrypt && env[dsnKey] != "" && !changed {
		// In the environment file still: it moves into the credential. The password in it still
		// opens the database, wherever a copy of the old file is left.
		if err := keepDSN(ctx, cfg, dsn); err != nil {
			return err
		}
		if cfg.localRole(dsn) {
			fmt.Fprintf(cfg.Out, "database: the role's password was in %s, and copies of that file may be left (backups of /etc): give it a new one with --rotate-password --encrypt\n", cfg.EnvFile)
		}
		changed = true
	}
	res, err := migrations.Apply(ctx, dsn)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(res.Applied) > 0 {
		fmt.Fprintf(cfg.Out, "schema: %d migration(s) applied, now at version %d\n", len(res.Applied), res.Current)
	} else {
		fmt.Fprintf(cfg.Out, "schema: current (version %d)\n", res.Current)
	}
	if err := webAuth(cfg); err != nil {
		return err
	}
	if cfg.NoService {
		if cfg.Encrypt {
			fmt.Fprintf(cfg.Out, "service: left alone; for the encrypted address its unit needs LoadCredentialEncrypted=%s:%s (a drop-in)\n",
				DSNCredential, cfg.DSNCredentialFile)
		}
		return nil
	}
	return service(ctx, cfg, changed)
}

// database makes sure the environment file names a database that answers, and returns its
// address and whether the file changed.
func database(ctx context.Context, cfg Config, configured, found string) (string, bool, error) {
	if cfg.DSN != "" && cfg.DSN != configured {
		if err := ping(ctx, cfg.DSN); err != nil {
			return "", false, fmt.Errorf("the database given: %w", err)
		}
		if err := keepDSN(ctx, cfg, cfg.DSN); err != nil {
			return "", false, err
		}
		fmt.Fprintf(cfg.Out, "database: the address given, written to %s\n", cfg.dsnPlace())
		return cfg.DSN, true, nil
	}
	if configured != "" && cfg.RotatePassword && !cfg.localRole(configured) {
		return "", false, setting.Errorf("{Setup.RotatePassword} gives the local role %s a new password, but %s in %s names another database: change the password on its server, then give the new address ({Setup.DSNFile})", cfg.Role, dsnKey, cfg.EnvFile)
	}
	if configured != "" && !cfg.RotatePassword {
		if err := ping(ctx, configured); err != nil {
			return "", false, fmt.Errorf("%s: %w (fix it, or remove the line to set up the local server)", found, err)
		}
		fmt.Fprintf(cfg.Out, "database: %s answers\n", found)
		return configured, false, nil
	}
	port, err := localPort(cfg.SocketDir)
	if err != nil {
		return "", false, err
	}
	password, err := newPassword()
	if err != nil {
		return "", false, err
	}
	// The server is given the password's verifier, made here: the password itself goes only
	// into the environment file.
	verifier, err := ScramVerifier(password)
	if err != nil {
		return "", false, err
	}
	p, err := provision(ctx, cfg, port, verifier)
	if err != nil {
		return "", false, err
	}
	if p.RoleFound && !p.RotatedPassword {
		return "", false, setting.Errorf("role %s exists on the local PostgreSQL and its password is not in %s: it was left alone, as another host may log in with it; "+
			"give {Setup.RotatePassword} to give it a new one (whoever logs in as it then needs the new address), or its address with {Setup.DSNFile}", cfg.Role, cfg.EnvFile)
	}
	// Over TCP with the password: the daemon runs as root, whom peer authentication would
	// map to no role of its own.
	dsn := (&url.URL{Scheme: "postgres", User: url.UserPassword(cfg.Role, password),
		Host: "localhost:" + strconv.Itoa(port), Path: "/" + cfg.Database}).String()
	if err := ping(ctx, dsn); err != nil {
		return "", false, fmt.Errorf("the new role cannot connect over TCP to localhost:%d: %w (pg_hba.conf must allow it a password login)", port, err)
	}
	if err := keepDSN(ctx, cfg, dsn); err != nil {
		return "", false, err
	}
	made := map[bool]string{true: "created", false: "found"}
	role := made[p.CreatedRole]
	if p.RotatedPassword {
		role = setting.Render("found and given a new password ({Setup.RotatePassword}; whoever else logs in as it needs the new address)")
	}
	fmt.Fprintf(cfg.Out, "database: role %s %s, database %s %s on the local PostgreSQL (port %d); the address is in %s\n",
		cfg.Role, role, cfg.Database, made[p.CreatedDatabase], port, cfg.dsnPlace())
	return dsn, true, nil
}

// keepDSN writes the database's address where the configuration keeps it: the environment
// file, or encrypted in the credential file, which the environment file then names instead.
func keepDSN(ctx context.Context, cfg Config, dsn string) error {
	if !cfg.Encrypt {
		if err := SetEnv(cfg.EnvFile, dsnKey, dsn); err != nil {
			return fmt.Errorf("write %s: %w", cfg.EnvFile, err)
		}
		return nil
	}
	if err := encryptDSN(ctx, dsn, cfg.DSNCredentialFile); err != nil {
		return fmt.Errorf("encrypt the database's address into %s: %w", cfg.DSNCredentialFile, err)
	}
	if err := SetEnv(cfg.EnvFile, DSNCredentialKey, cfg.DSNCredentialFile); err != nil {
		return fmt.Errorf("write %s: %w", cfg.EnvFile, err)
	}
	removed, err := unsetEnv(cfg.EnvFile, dsnKey)
	if err != nil {
		return fmt.Errorf("write %s: %w", cfg.EnvFile, err)
	}
	if removed {
		fmt.Fprintf(cfg.Out, "database: the address moved out of %s, encrypted into %s\n", cfg.EnvFile, cfg.DSNCredentialFile)
	}
	return nil
}

// dsnPlace says where the database's address is kept.
func (c Config) dsnPlace() string {
	if c.Encrypt {
		return c.DSNCredentialFile + " (encrypted by systemd-creds)"
	}
	return c.EnvFile
}

func ping(ctx context.Context, dsn string) error {
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	st.Close()
	return nil
}

// localPort finds the local server's socket and so its port (Debian's clusters each have one).
func localPort(dir string) (int, error) {
	socks, _ := filepath.Glob(filepath.Join(dir, ".s.PGSQL.*"))
	sort.Strings(socks)
	for _, s := range socks {
		if port, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(s), ".")); err == nil {
			return port, nil
		}
	}
	return 0, setting.Errorf("no PostgreSQL server has its socket in %s: install and start one (apt install postgresql), or give {Setup.DSN}", dir)
}

func newPassword() (string, error) {
	b := make([]byte, passwordBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Provision is what the superuser's process is asked (ProvisionCommand), on its standard input:
// the password's SCRAM verifier, never the password.
type Provision struct {
	AdminDSN, Role, Database, Verifier string
	Rotate                             bool
}

// provision has a process of the server's superuser make the role and the database: peer
// authentication lets that system user in through the socket, and the verifier travels on a
// pipe, never in an argument.
func provision(ctx context.Context, cfg Config, port int, verifier string) (store.Provisioned, error) {
	var p store.Provisioned
	su, err := user.Lookup(cfg.Superuser)
	if err != nil {
		return p, fmt.Errorf("system user %s: %w (is PostgreSQL installed?)", cfg.Superuser, err)
	}
	uid, _ := strconv.ParseUint(su.Uid, 10, 32)
	gid, _ := strconv.ParseUint(su.Gid, 10, 32)
	admin := fmt.Sprintf("host=%s port=%d user=%s dbname=postgres", cfg.SocketDir, port, cfg.Superuser)
	in, err := json.Marshal(Provision{AdminDSN: admin, Role: cfg.Role, Database: cfg.Database, Verifier: verifier, Rotate: cfg.RotatePassword})
	if err != nil {
		return p, err
	}
	cmd := exec.CommandContext(ctx, cfg.Executable, ProvisionCommand)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return p, fmt.Errorf("make role %s and database %s as %s: %v: %s", cfg.Role, cfg.Database, cfg.Superuser, err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), &p); err != nil {
		return p, fmt.Errorf("answer of %s: %w", ProvisionCommand, err)
	}
	return p, nil
}

// RunProvision is ProvisionCommand: it reads a Provision on in and writes store.Provisioned.
func RunProvision(ctx context.Context, in io.Reader, out io.Writer) error {
	var req Provision
	if err := json.NewDecoder(io.LimitReader(in, 1<<16)).Decode(&req); err != nil {
		return fmt.Errorf("read the request: %w", err)
	}
	p, err := store.ProvisionDatabase(ctx, req.AdminDSN, req.Role, req.Database, req.Verifier, req.Rotate)
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(p)
}

// localRole reports whether dsn is the address setup writes for the local role: the role and
// database of cfg on localhost.
func (c Config) localRole(dsn string) bool {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.User == nil {
		return false
	}
	return u.User.Username() == c.Role && u.Hostname() == "localhost" && u.Path == "/"+c.Database
}

// webAuth makes sure the daemon's listener has credentials: a new file of one line, "bearer" and
// a random token, root's, mode 0600, unless there is one, which is left as it is (the daemon
// reads it as credentials.ReadSecret does: an unfit one is refused here already).
func webAuth(cfg Config) error {
	path := cfg.WebAuthFile
	if _, err := os.Lstat(path); err == nil {
		if err := credentials.CheckSecret(path); err != nil {
			return fmt.Errorf("web: %w: the daemon's listener would refuse it (fix it, or remove it and run holdfast setup again for a new one)", err)
		}
		fmt.Fprintf(cfg.Out, "web: %s present, left as it is\n", path)
		return nil
	} else if !os.IsNotExist(err) {
		return fmt.Errorf("web: %w", err)
	}
	token := make([]byte, webTokenBytes)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("web: %w", err)
	}
	// Written aside and linked into place: the name appears complete or not at all, and a file
	// that came meanwhile is never overwritten.
	if err := writeNew(path, []byte("bearer "+base64.RawURLEncoding.EncodeToString(token)+"\n")); err != nil {
		return fmt.Errorf("web: write %s: %w", path, err)
	}
	fmt.Fprintf(cfg.Out, "web: %s created (a bearer token for the dashboard and /metrics, root's, mode 0600)\n", path)
	return nil
}

// service enables the daemon's unit and starts it, or restarts it when its database changed.
func service(ctx context.Context, cfg Config, restart bool) error {
	conn, err := sdbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return fmt.Errorf("connect to systemd: %w", err)
	}
	defer conn.Close()
	props, err := conn.GetUnitPropertiesContext(ctx, cfg.Service)
	if err != nil {
		return fmt.Errorf("unit %s: %w", cfg.Service, err)
	}
	if props["LoadState"] != "loaded" {
		return fmt.Errorf("unit %s is %v: reinstall the package", cfg.Service, props["LoadState"])
	}
	var did []string
	restartWhy := "restarted for the new database"
	if cfg.Encrypt {
		wrote, err := writeCredentialDropIn(cfg)
		if err != nil {
			return err
		}
		if wrote || props["NeedDaemonReload"] == true {
			if err := conn.ReloadContext(ctx); err != nil {
				return fmt.Errorf("reload systemd: %w", err)
			}
		}
		if wrote {
			did = append(did, "given the encrypted address ("+credentialDropInPath(cfg)+")")
		}
		// A daemon started before the drop-in was written (this run's, or one that failed
		// after writing it) reads the address from where it was: it starts again.
		if started, ok := props["ActiveEnterTimestamp"].(uint64); ok && droppedInAfter(cfg, started) {
			restart, restartWhy = true, "restarted to load the encrypted address"
		}
	}
	if props["UnitFileState"] != "enabled" {
		if _, _, err := conn.EnableUnitFilesContext(ctx, []string{cfg.Service}, false, false); err != nil {
			return fmt.Errorf("enable %s: %w", cfg.Service, err)
		}
		if err := conn.ReloadContext(ctx); err != nil {
			return fmt.Errorf("reload systemd: %w", err)
		}
		did = append(did, "enabled")
	}
	start := conn.StartUnitContext
	verb := "started"
	switch {
	case props["ActiveState"] != serviceStartState:
	case restart:
		start, verb = conn.RestartUnitContext, restartWhy
	default:
		start = nil
	}
	if start != nil {
		done := make(chan string, 1)
		if _, err := start(ctx, cfg.Service, "replace", done); err != nil {
			return fmt.Errorf("start %s: %w", cfg.Service, err)
		}
		select {
		case result := <-done:
			if result != "done" {
				return fmt.Errorf("start %s: %s (journalctl -u %s says why)", cfg.Service, result, cfg.Service)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		did = append(did, verb)
	}
	if len(did) == 0 {
		fmt.Fprintf(cfg.Out, "service: %s enabled and active\n", cfg.Service)
	} else {
		fmt.Fprintf(cfg.Out, "service: %s %s\n", cfg.Service, strings.Join(did, " and "))
	}
	return nil
}
