package control

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/safepath"
)

// dialTimeout bounds the connection to the socket: a daemon that does not accept at once is
// not waited for (the command admits through the database).
const dialTimeout = time.Second

// Refused is a request the daemon refused as the same admission through the database would
// have: Input, or Unavailable (runctl.UnavailableError), or neither when the admission failed.
type Refused struct {
	Input, Unavailable bool
	Msg                string
}

func (e *Refused) Error() string { return e.Msg }

// StartRun asks the daemon serving the socket at path to admit a run as runctl.StartRun would,
// into the database dsn names. It returns ErrNotServed (wrapped, with why) when no daemon took
// the request, a *Refused when the daemon refused it, and another error when the request may
// have reached the daemon but its answer did not come back.
func StartRun(ctx context.Context, path, dsn string, p runctl.StartParams) (runctl.Started, error) {
	conn, err := dial(ctx, path)
	if err != nil {
		return runctl.Started{}, fmt.Errorf("%w: %v", ErrNotServed, err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	req := startRequest{Protocol: protocol, Database: database(dsn), Job: p.Job, Kind: p.Kind, Verify: p.Verify, Wait: p.Wait}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		// Part of the request may have gone: the daemon may still take it.
		return runctl.Started{}, fmt.Errorf("ask the daemon for a run of %s: %w", p.Job, err)
	}
	var reply startReply
	if err := json.NewDecoder(io.LimitReader(conn, maxRequest)).Decode(&reply); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return runctl.Started{}, fmt.Errorf("the daemon did not say whether it admitted a run of %s (see holdfast run list --job %s): %w", p.Job, p.Job, err)
	}
	switch {
	case reply.Class == classNotServed:
		return runctl.Started{}, fmt.Errorf("%w: %s", ErrNotServed, reply.Error)
	case reply.Class != "":
		return runctl.Started{}, &Refused{Input: reply.Class == classInput, Unavailable: reply.Class == classUnavailable, Msg: reply.Error}
	case reply.Run == nil:
		return runctl.Started{}, fmt.Errorf("the daemon answered a request for a run of %s without a run (see holdfast run list --job %s)", p.Job, p.Job)
	}
	return runctl.Started{Run: *reply.Run, Unable: reply.Unable}, nil
}

// dial connects to the socket at path if only root (or this process's user) could have made it
// there and a process of theirs serves it.
func dial(ctx context.Context, path string) (*net.UnixConn, error) {
	euid := os.Geteuid()
	n, err := safepath.Resolve(path, euid)
	if err != nil {
		return nil, err
	}
	if n.Mode&unix.S_IFMT != unix.S_IFSOCK || n.UserControlled || n.UID != 0 && int(n.UID) != euid {
		return nil, fmt.Errorf("%s is not a socket of root's", path)
	}
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "unix", n.Path)
	if err != nil {
		return nil, err
	}
	conn := c.(*net.UnixConn)
	uid, err := peerUID(conn)
	if err == nil && uid != 0 && int(uid) != euid {
		err = fmt.Errorf("the process serving %s is not root's", path)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}
