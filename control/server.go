package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runctl"
)

// requestTimeout bounds one request: reading it, the admission and the reply.
const requestTimeout = 30 * time.Second

// maxConcurrent bounds the requests served at once; more wait to be accepted.
const maxConcurrent = 32

// Config configures a Server.
type Config struct {
	// Path is the socket's path: SocketPath of the daemon's state directory.
	Path string
	// DSN is the database the daemon admits into; a request for another is not served.
	DSN string
	// Store admits the runs.
	Store runctl.StartStore
	// Admitted is handed each run the server admitted, once it is committed, to spawn at once
	// (it must not block).
	Admitted func(run uuid.UUID)
	// Spawner is asked at each request for the daemon's host if Admitted spawns the runs of
	// that host at once, "" if not (its pass takes them in turn): a run that host may run is
	// then admitted without waking any other daemon (runctl.StartParams.By). Nil is "".
	Spawner func() string
	Logger  *slog.Logger
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case !filepath.IsAbs(c.Path):
		return fmt.Errorf("control socket %q: want an absolute path", c.Path)
	case len(c.Path) >= len(unix.RawSockaddrUnix{}.Path):
		return fmt.Errorf("control socket %s: the path is longer than a socket's (%d bytes): use a shorter state directory", c.Path, len(unix.RawSockaddrUnix{}.Path)-1)
	case c.DSN == "":
		return errors.New("control socket: no database")
	case c.Store == nil:
		return errors.New("control socket: no store")
	}
	if c.Admitted == nil {
		c.Admitted = func(uuid.UUID) {}
	}
	if c.Spawner == nil {
		c.Spawner = func() string { return "" }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Server serves the control socket. A socket it cannot serve (the path is taken by something
// else, another daemon serves it) is logged and left: commands then admit through the database.
type Server struct {
	cfg Config

	mu       sync.Mutex
	ln       *net.UnixListener
	cancel   context.CancelFunc
	serving  sync.WaitGroup
	requests sync.WaitGroup
}

// NewServer validates cfg.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg}, nil
}

func (s *Server) Name() string { return "control socket" }

// Start listens on the socket and serves it until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := s.listen()
	if err != nil {
		s.cfg.Logger.Warn("the control socket is not served; commands admit runs through the database", "socket", s.cfg.Path, "err", err)
		return nil
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.ln = ln
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		s.serve(ctx, ln)
	}()
	return nil
}

// Stop stops listening, removes the socket and waits for the requests being served.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return
	}
	s.cancel()
	s.ln.Close() // removes the socket
	s.serving.Wait()
	s.requests.Wait()
	s.ln = nil
}

// listen takes the socket's path: a socket left by a daemon that is gone is replaced, anything
// else there is left alone.
func (s *Server) listen() (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(s.cfg.Path), 0o755); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(s.cfg.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	case fi.Mode().Type() != os.ModeSocket:
		return nil, fmt.Errorf("%s is not a socket: remove it", s.cfg.Path)
	default:
		if c, err := net.DialTimeout("unix", s.cfg.Path, time.Second); err == nil {
			c.Close()
			return nil, errors.New("another daemon serves it (two daemons share the state directory)")
		}
		if err := os.Remove(s.cfg.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.cfg.Path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// The peer check is what admits a connection; the mode keeps others from connecting at all.
	if err := os.Chmod(s.cfg.Path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

func (s *Server) serve(ctx context.Context, ln *net.UnixListener) {
	slots := make(chan struct{}, maxConcurrent)
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		conn, err := ln.AcceptUnix()
		if err != nil {
			<-slots
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.cfg.Logger.Warn("control socket: accept failed", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		s.requests.Add(1)
		go func() {
			defer s.requests.Done()
			defer func() { <-slots }()
			defer conn.Close()
			s.handle(ctx, conn)
		}()
	}
}

// handle serves one connection: one request, one reply.
func (s *Server) handle(ctx context.Context, conn *net.UnixConn) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	_ = conn.SetDeadline(time.Now().Add(requestTimeout))
	uid, err := peerUID(conn)
	if err != nil || uid != 0 && uid != uint32(os.Geteuid()) {
		s.cfg.Logger.Warn("control socket: a connection refused: its peer is not root", "uid", uid, "err", err)
		return
	}
	var req startRequest
	dec := json.NewDecoder(io.LimitReader(conn, maxRequest))
	dec.DisallowUnknownFields()
	reply := s.admit(ctx, dec.Decode(&req), req)
	if err := json.NewEncoder(conn).Encode(reply); err != nil {
		s.cfg.Logger.Warn("control socket: the reply was not sent", "err", err)
	}
}

// admit carries out a decoded request (decodeErr its decoding's error).
func (s *Server) admit(ctx context.Context, decodeErr error, req startRequest) startReply {
	switch {
	case decodeErr != nil:
		return startReply{Class: classNotServed, Error: "the request was not understood: " + decodeErr.Error()}
	case req.Protocol != protocol:
		return startReply{Class: classNotServed, Error: fmt.Sprintf("protocol %d, this daemon speaks %d", req.Protocol, protocol)}
	case req.Database != database(s.cfg.DSN):
		return startReply{Class: classNotServed, Error: "this daemon uses another database"}
	}
	if err := jobdef.ValidateName(req.Job); err != nil {
		return startReply{Class: classInput, Error: err.Error()}
	}
	switch req.Kind {
	case model.KindBackup, model.KindPrune, model.KindVerify: // what `run start` asks for
	default:
		return startReply{Class: classInput, Error: fmt.Sprintf("run kind %q cannot be started over the control socket", req.Kind)}
	}
	started, err := runctl.StartRun(ctx, s.cfg.Store, runctl.StartParams{Job: req.Job, Kind: req.Kind, Verify: req.Verify, Wait: req.Wait,
		By: s.cfg.Spawner()})
	var unavailable *runctl.UnavailableError
	switch {
	case errors.As(err, &unavailable):
		return startReply{Class: classUnavailable, Error: err.Error()}
	case runctl.Input(err):
		return startReply{Class: classInput, Error: err.Error()}
	case err != nil:
		return startReply{Class: classFailed, Error: err.Error()}
	}
	s.cfg.Admitted(started.Run.ID)
	s.cfg.Logger.Info("run admitted over the control socket", "run", started.Run.ID, "job", req.Job, "kind", req.Kind)
	return startReply{Run: &started.Run, Unable: started.Unable}
}

// peerUID is the user of the process at the other end of conn.
func peerUID(conn *net.UnixConn) (uint32, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return cred.Uid, nil
}
