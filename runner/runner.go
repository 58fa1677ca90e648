// Package runner talks to a systemd manager over D-Bus: it starts each backup attempt as a
// transient service, asks whether that unit is still there, and stops it. It also owns the exit
// marker format. It knows nothing about PostgreSQL.
//
// Two rules shape it. A unit name is derived from the run and attempt, so asking twice to start
// the same attempt can never create two units: "unit exists" means "already started". And
// "I could not ask" is never "it is gone": Alive returns an error whenever systemd did not answer.
package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Config says which systemd manager to talk to.
type Config struct {
	// Manager is "system" (the default) or "user". Ignored when Address is set.
	Manager string
	// Address is a D-Bus address of a manager's private socket, e.g.
	// "unix:path=/run/user/1000/systemd/private". Optional.
	Address string
}

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	switch c.Manager {
	case "":
		c.Manager = "system"
	case "system", "user":
	default:
		return fmt.Errorf("systemd manager %q: want system or user", c.Manager)
	}
	return nil
}

// Runner is a connection to one systemd manager that redials when the connection is lost.
type Runner struct {
	cfg  Config
	mu   sync.Mutex
	conn *sddbus.Conn
}

// New validates cfg and connects.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg}
	if _, err := r.connection(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Close closes the connection.
func (r *Runner) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
}

func (r *Runner) dial(ctx context.Context) (*sddbus.Conn, error) {
	address := r.cfg.Address
	if address == "" && r.cfg.Manager == "user" {
		// The manager's own socket needs no session bus daemon; root-run and private managers
		// (tests, containers) often have none.
		dir := os.Getenv("XDG_RUNTIME_DIR")
		if dir == "" {
			dir = filepath.Join("/run/user", strconv.Itoa(os.Getuid()))
		}
		address = "unix:path=" + filepath.Join(dir, "systemd", "private")
	}
	if address == "" {
		conn, err := sddbus.NewSystemdConnectionContext(ctx)
		if err != nil {
			conn, err = sddbus.NewSystemConnectionContext(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("connect to the systemd system manager: %w", err)
		}
		return conn, nil
	}
	conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) {
		c, err := dbus.Dial(address, dbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("connect to systemd at %s: %w", address, err)
	}
	return conn, nil
}

func (r *Runner) connection(ctx context.Context) (*sddbus.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil && r.conn.Connected() {
		return r.conn, nil
	}
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
	conn, err := r.dial(ctx)
	if err != nil {
		return nil, err
	}
	r.conn = conn
	return conn, nil
}

func (r *Runner) drop(conn *sddbus.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == conn {
		r.conn.Close()
		r.conn = nil
	}
}

// call runs fn on a live connection; if the connection turns out closed, it redials once and
// runs fn again. Every fn here is safe to repeat: start is by name, stop and queries are idempotent.
func (r *Runner) call(ctx context.Context, fn func(*sddbus.Conn) error) error {
	for try := 0; ; try++ {
		conn, err := r.connection(ctx)
		if err != nil {
			return err
		}
		err = fn(conn)
		if err == nil || try == 1 || !connectionLost(err, conn) {
			return err
		}
		r.drop(conn)
	}
}

func connectionLost(err error, conn *sddbus.Conn) bool {
	return errors.Is(err, dbus.ErrClosed) || !conn.Connected()
}

// dbusErrorName returns the D-Bus error name of a reply error ("" if err is not one).
func dbusErrorName(err error) string {
	var e dbus.Error
	if errors.As(err, &e) {
		return e.Name
	}
	var ep *dbus.Error
	if errors.As(err, &ep) {
		return ep.Name
	}
	return ""
}

// badRequests are systemd's answers that say the request itself is wrong: asking again with the
// same request cannot succeed. Any other refusal (the manager is shutting down, a transaction
// conflicts) may pass.
var badRequests = map[string]bool{
	"org.freedesktop.DBus.Error.InvalidArgs":      true,
	"org.freedesktop.DBus.Error.UnknownProperty":  true,
	"org.freedesktop.DBus.Error.PropertyReadOnly": true,
	"org.freedesktop.DBus.Error.NotSupported":     true,
	"org.freedesktop.DBus.Error.AccessDenied":     true,
}

// BadRequest reports whether err is systemd refusing the request as such (a bad property, a
// forbidden call), as opposed to a refusal for now or a failure to reach systemd at all.
func BadRequest(err error) bool {
	return badRequests[dbusErrorName(err)]
}

// SystemManager reports whether the runner talks to the system manager, the only one that hands
// credentials to a unit with User= (a user manager refuses: permission denied).
func (r *Runner) SystemManager() bool { return r.cfg.Manager == "system" }
