package engine

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// stream carries a producer's output to an engine's input (see Exec): it closes the engine's
// input only after the producer exited 0, and otherwise interrupts the engine with it still open.
type stream struct {
	p         *Producer
	cmd       *exec.Cmd
	out       *os.File // the producer's stdout, read here
	outW      *os.File // its write end, the producer's
	engineEnd *os.File // the engine's stdin, handed to it
	feed      *os.File // the write end of the engine's stdin, written here
	done      chan struct{}

	mu       sync.Mutex
	started  bool
	stopping bool   // a stop was passed on: the engine's input is never closed as an end
	failure  string // why the stream failed while the engine still read it; "" if it did not
}

func newStream(p *Producer, stderr io.Writer) (*stream, error) {
	if len(p.Argv) == 0 {
		return nil, fmt.Errorf("engine: empty command line for the stream's producer")
	}
	engineEnd, feed, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("engine: stdin pipe: %w", err)
	}
	out, outW, err := os.Pipe()
	if err != nil {
		engineEnd.Close()
		feed.Close()
		return nil, fmt.Errorf("engine: producer pipe: %w", err)
	}
	c := exec.Command(p.Argv[0], p.Argv[1:]...)
	c.Env, c.Dir, c.Stdout, c.Stderr = hookEnviron(p.Vars), "/", outW, stderr
	// Its own process group: a stop, or the kill once the engine is gone, reaches the children
	// it runs (a wrapper's) too. One left behind holding its stderr must not hold up the end.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.WaitDelay = drainGrace
	return &stream{p: p, cmd: c, out: out, outW: outW, engineEnd: engineEnd, feed: feed, done: make(chan struct{})}, nil
}

// abandon closes what newStream opened, for an engine that did not start.
func (s *stream) abandon() {
	for _, f := range []*os.File{s.out, s.outW, s.engineEnd, s.feed} {
		f.Close()
	}
}

// start starts the producer and the copy, once the engine runs.
func (s *stream) start(engine *interrupter, exited <-chan struct{}) {
	s.engineEnd.Close() // the engine holds its own copy
	s.mu.Lock()
	err := s.cmd.Start()
	s.started = err == nil
	s.mu.Unlock()
	s.outW.Close()
	if err != nil {
		s.out.Close()
		s.fail(engine, exited, "could not start: "+err.Error())
		close(s.done)
		return
	}
	go func() {
		defer close(s.done)
		_, copyErr := io.Copy(s.feed, s.out)
		s.out.Close() // a producer still writing gets EPIPE: the engine stopped reading
		werr := s.cmd.Wait()
		switch {
		case copyErr != nil:
			// The engine stopped reading: its own exit says why.
			s.feed.Close()
		case werr != nil:
			s.fail(engine, exited, DescribeExit(s.cmd.ProcessState, werr))
		case s.isStopping():
			// A producer that ends on the stop with 0 may have been cut short: the engine,
			// stopped too, must not read its input's end as the stream's.
		default:
			s.feed.Close()
		}
	}()
}

// fail records why the stream failed and interrupts the engine, its input still open.
func (s *stream) fail(engine *interrupter, exited <-chan struct{}, what string) {
	select {
	case <-exited:
		s.feed.Close()
		return // the engine ended first: its own exit stands
	default:
	}
	s.mu.Lock()
	s.failure = StreamFailed + s.p.Line + " " + what + "; the engine was stopped before the stream ended, so no snapshot was made of it"
	s.mu.Unlock()
	engine.interrupt()
}

// interrupt passes a stop on to the producer's process group.
func (s *stream) interrupt() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	s.signal(syscall.SIGINT)
}

func (s *stream) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// signal sends sig to the producer's process group; the caller holds mu.
func (s *stream) signal(sig syscall.Signal) {
	if s.started {
		syscall.Kill(-s.cmd.Process.Pid, sig)
	}
}

// end waits for the producer once the engine exited (killing it if it outlives the engine by
// drainGrace), and returns why the stream failed, "" if it did not or stopped is set.
func (s *stream) end(stopped bool) string {
	select {
	case <-s.done:
	case <-time.After(drainGrace):
		s.mu.Lock()
		s.signal(syscall.SIGKILL)
		s.mu.Unlock()
		s.out.Close() // a process outside the group may still hold its end: the copy stops here
		<-s.done
	}
	s.feed.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if stopped {
		return ""
	}
	return s.failure
}

// DescribeExit says how a program that did not succeed ended, from its state and Wait's error:
// "exited 3", "was killed by SIGKILL (exit status 137)", or "failed: ..." if it never ran.
func DescribeExit(ps *os.ProcessState, err error) string {
	if ps == nil {
		return "failed: " + err.Error()
	}
	if status, sig := exitStatus(ps); sig != "" {
		return fmt.Sprintf("was killed by %s (exit status %d)", sig, status)
	}
	return fmt.Sprintf("exited %d", ps.ExitCode())
}

// lockedWriter serializes the writes of the engine's and the producer's stderr into one Writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
