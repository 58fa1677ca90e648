// Package systemd talks to a systemd manager over D-Bus: it starts each backup attempt as a
// transient service, asks whether that unit is still there, and stops it. It also owns the exit
// marker format. It knows nothing about PostgreSQL.
//
// Two rules shape it. A unit name is derived from the run and attempt, so asking twice to start
// the same attempt can never create two units: "unit exists" means "already started". And
// "I could not ask" is never "it is gone": Alive returns an error whenever systemd did not answer.
package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

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
	// CallTimeout bounds each call to systemd, dial included, within the caller's own
	// deadline. Default DefaultCallTimeout.
	CallTimeout time.Duration
}

// DefaultCallTimeout is Config.CallTimeout's default: systemd answers in milliseconds, but a
// manager busy re-executing or starting many units may take seconds.
const DefaultCallTimeout = 30 * time.Second

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	switch c.Manager {
	case "":
		c.Manager = "system"
	case "system", "user":
	default:
		return fmt.Errorf("systemd manager %q: want system or user", c.Manager)
	}
	switch {
	case c.CallTimeout == 0:
		c.CallTimeout = DefaultCallTimeout
	case c.CallTimeout < 0:
		return fmt.Errorf("systemd call timeout %s: want a positive duration", c.CallTimeout)
	}
	return nil
}

// Client is a connection to one systemd manager that redials when the connection is lost.
//
// godbus closes a connection when the context it was dialed with ends, so connections are
// dialed with the Client's own context, which lasts until Close; the caller's context bounds
// only the dial and each call.
type Client struct {
	cfg    Config
	life   context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	conn   *sddbus.Conn
	end    context.CancelFunc // ends conn's context
}

// New validates cfg and connects; ctx (and CallTimeout) bound the first dial only.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Client{cfg: cfg}
	r.life, r.cancel = context.WithCancel(context.Background())
	ctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
	defer cancel()
	if _, err := r.connection(ctx); err != nil {
		r.cancel()
		return nil, err
	}
	return r, nil
}

// Close closes the connection; later calls fail.
func (r *Client) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancel()
	r.closeLocked()
}

func (r *Client) closeLocked() {
	if r.conn != nil {
		r.conn.Close()
		r.end()
		r.conn, r.end = nil, nil
	}
}

// dial connects with a context that outlives ctx: ending ctx while the dial is under way
// abandons it, ending ctx afterwards does nothing to the connection.
func (r *Client) dial(ctx context.Context) (*sddbus.Conn, context.CancelFunc, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("connect to systemd: %w", err)
	}
	dialCtx, cancel := context.WithCancel(r.life)
	abandon := context.AfterFunc(ctx, cancel)
	conn, err := r.dialWith(dialCtx)
	if !abandon() || err != nil {
		// ctx ended during the dial (which ended dialCtx and with it the connection), or the
		// dial failed.
		if conn != nil {
			conn.Close()
		}
		cancel()
		if err == nil {
			err = fmt.Errorf("connect to systemd: %w", ctx.Err())
		}
		return nil, nil, err
	}
	return conn, cancel, nil
}

func (r *Client) dialWith(ctx context.Context) (*sddbus.Conn, error) {
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

func (r *Client) connection(ctx context.Context) (*sddbus.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil && r.conn.Connected() {
		return r.conn, nil
	}
	r.closeLocked()
	if r.life.Err() != nil {
		return nil, errors.New("connect to systemd: the client is closed")
	}
	conn, end, err := r.dial(ctx)
	if err != nil {
		return nil, err
	}
	r.conn, r.end = conn, end
	return conn, nil
}

func (r *Client) drop(conn *sddbus.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == conn {
		r.closeLocked()
	}
}

// call runs fn on a live connection, within CallTimeout; if the connection turns out closed, it
// redials once and runs fn again. Every fn here is safe to repeat: start is by name, stop and
// queries are idempotent.
func (r *Client) call(ctx context.Context, fn func(context.Context, *sddbus.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	for try := 0; ; try++ {
		conn, err := r.connection(ctx)
		if err != nil {
			return err
		}
		err = fn(ctx, conn)
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

// SystemManager reports whether the client talks to the system manager, the only one that hands
// credentials to a unit with User= (a user manager refuses: permission denied).
// A manager named by its address is not known to be the system manager.
func (r *Client) SystemManager() bool { return r.cfg.Address == "" && r.cfg.Manager == "system" }
