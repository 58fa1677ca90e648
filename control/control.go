// Package control is the daemon's control socket: `holdfast run start` on the daemon's host asks
// the daemon to admit the run, and the daemon spawns it at once. The daemon's connections to the
// database are warm, where a command's own is a cold server process that loads each table's
// catalog entries and plans each statement afresh (about 20 ms of a run's fixed cost on two
// cores); and the spawn needs no notification to start. See docs/ARCHITECTURE.md §3.
//
// The contract: the socket is a shortcut, never the only way. The client (StartRun) uses it only
// when a daemon of root's (or of the caller's own user) serves it, at a path only they could have
// made, for the same database; when any of that does not hold it returns ErrNotServed before
// anything was asked, and the command admits the run through the database as it would without a
// daemon. A request the daemon took is answered with the run it admitted, or with the error the
// same admission through the database would have given; it is never asked for twice.
//
// The socket is SocketPath(state directory), mode 0600; the server takes a connection only from
// a peer of root's or of its own user (SO_PEERCRED), and a request of at most 64 KiB, one JSON
// object per connection.
package control

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"

	"github.com/holdfast-backup/holdfast/model"
)

// SocketName is the socket's name in the state directory.
const SocketName = "daemon.sock"

// SocketPath is where the daemon with state directory stateDir serves its control socket.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, SocketName) }

// ErrNotServed means no daemon took the request: none serves the socket, it is not one only
// root could have made, or its daemon uses another database or speaks another version. Nothing
// was asked: admit through the database.
var ErrNotServed = errors.New("no daemon took the request on its control socket")

// protocol is the version of the requests and replies; a daemon answers a request of another
// version as not served, so a command and a daemon of different releases fall back to the
// database.
const protocol = 1

// maxRequest bounds a request's size.
const maxRequest = 64 << 10

// database names the database a DSN addresses, without carrying the DSN (its password) over the
// socket: the command and the daemon must have been given the very same DSN.
func database(dsn string) string {
	sum := sha256.Sum256([]byte(dsn))
	return hex.EncodeToString(sum[:])
}

// startRequest asks for a run now, as `run start` does (runctl.StartParams).
type startRequest struct {
	Protocol int          `json:"protocol"`
	Database string       `json:"database"`
	Job      string       `json:"job"`
	Kind     model.Kind   `json:"kind"`
	Verify   model.Verify `json:"verify"`
	Wait     bool         `json:"wait"`
}

// Classes of a refused request, so that the command exits as the same refusal through the
// database would make it.
const (
	classNotServed   = "not-served"  // nothing was asked: the command admits through the database
	classInput       = "input"       // what was asked cannot be done (runctl.Input)
	classUnavailable = "unavailable" // runctl.UnavailableError
	classFailed      = "failed"      // the admission failed
)

// startReply is the run admitted, or why not.
type startReply struct {
	Run    *model.Run `json:"run,omitempty"`
	Unable string     `json:"unable,omitempty"`
	Class  string     `json:"class,omitempty"`
	Error  string     `json:"error,omitempty"`
}
