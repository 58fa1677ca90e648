package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	maxLine       = 1 << 20     // longer lines are cut
	progressEvery = time.Second // at most one progress event per interval
	maxWarnings   = 100         // warnings journaled per run; all reach stderr
	maxFatalLines = 16          // continuation lines joined into a fatal event
	// After the engine exited, its pipes may stay open in a process it left
	// behind; reading stops once they have been idle this long.
	drainGrace = 2 * time.Second
)

// StopGrace is how long restic has to exit after Exec interrupted it (a stop passed on, or its
// stream's failure) before Exec kills it (Restic.StopGrace). restic does not act on SIGINT while
// its rate limiter holds a transfer back (0.14 as 0.19), nor, from 0.18, while it waits on its
// standard input: without a kill, systemd's stop timeout would end it minutes later. A restic
// killed leaves its lock, which the unit's restic unlock after an interruption removes.
// CheckStopGrace is the longer grace of a check or a prune, whose cleanup on SIGINT (a check's
// temporary cache, the lock on a remote backend) is worth waiting for. Both stay well inside the
// unit's stop timeout with the unlock after them.
const (
	StopGrace      = time.Second
	CheckStopGrace = 10 * time.Second
)

// A StopGracer is a Parser whose engine Exec kills when it outlives a stop by StopGrace. An engine
// that is not one (a job's own command, which may clean up as long as it needs) is left to
// systemd's stop timeout.
type StopGracer interface {
	StopGrace() time.Duration
}

// ExecConfig describes one run of an engine.
type ExecConfig struct {
	Argv   []string
	Env    []string // nil: this process's environment
	Dir    string
	Parser Parser                              // nil: Command{}
	Emit   func(typ string, payload any) error // nil: events are dropped
	Stderr io.Writer                           // gets every stderr line; nil: discarded
	Stdout io.Writer                           // gets stdout lines that are not JSON; nil: discarded
	// Progress, if set, measures the progress of an engine that reports none itself (a restore:
	// what is under its target so far). It is asked every ProgressEvery (at least ten times as
	// long as it took the last time) and once more after a clean exit; its answers are journaled
	// as the engine's own would be.
	Progress      func() (Progress, bool)
	ProgressEvery time.Duration
	// Producer, if set, is the program whose standard output is the engine's standard input
	// (restic backup --stdin): see Exec.
	Producer *Producer
	// StopGrace, if set, replaces the Parser's (StopGracer), and kills any engine (tests).
	StopGrace time.Duration
}

// Producer is a program whose output an engine backs up as one file. Its stderr goes to
// ExecConfig.Stderr; Line is how the fatal error names it (the job's command line). Its
// environment is HookEnv of this process's with Vars: never the engine's (ExecConfig.Env).
type Producer struct {
	Argv []string
	Vars []string // KEY=value, the run's
	Line string
}

// StreamFailed starts the fatal error of an attempt whose stream's producer failed: the engine
// was stopped before the stream ended, so it made no snapshot of it.
const StreamFailed = "stdin producer "

// Exec runs cfg.Argv without a shell, stdin from /dev/null, and emits the
// events its parser finds in the output, line by line. A SIGINT or SIGTERM
// received by this process, and the end of ctx, are passed on to the engine
// as SIGINT, each time. Exec returns the engine's exit status, 128+n if
// signal n killed it, after emitting an "exit" event.
//
// A stop passed on ends the attempt as interrupted, 130, on every engine and version. An engine
// whose Parser is a StopGracer is killed if it is still running its StopGrace after the first
// SIGINT. Whatever ended it then, an engine that exited otherwise than 0 and made no summary
// (restic 0.17 and 0.18 exit 1, "context canceled"; a killed one 137) counts as ended by the stop:
// Exec returns 130, and the exit event keeps how the engine itself ended (Exit.EngineStatus,
// EngineSignal). An engine that exited 0, or made its summary, keeps its own status.
//
// Progress events are throttled to one a second; the latest one held back is
// emitted before the summary and at the end. A "fatal" event absorbs the
// plain stderr lines that follow it.
//
// A ctx that ended before the start is a stop that came first: the engine is
// not started, and Exec returns 130 as if SIGINT had ended it at once.
//
// With a Producer, Exec copies the producer's output to the engine and closes the engine's
// input only once the producer has exited 0. A producer that exits otherwise, is killed, or
// cannot start gets the engine a SIGINT while its input is still open: the engine never sees
// the stream end, so it never takes a cut stream for a whole one. Exec then emits a fatal
// event (StreamFailed ...) and returns 1, unless a stop came first (its 130 stands) or the
// engine had already exited (its own failure stands).
//
// A Parser that is a Finisher has the last word on the events and the status of an engine that
// exited (see Finisher).
//
// If the command cannot be started, Exec returns -1 and an error. If Emit
// fails, Exec reports it on Stderr, emits nothing more, lets the engine run
// to its end, and returns its exit status together with the error.
func Exec(ctx context.Context, cfg ExecConfig) (int, error) {
	if len(cfg.Argv) == 0 {
		return -1, errors.New("engine: empty command line")
	}
	if cfg.Parser == nil {
		cfg.Parser = Command{}
	}
	if ctx.Err() != nil {
		r := &run{cfg: cfg}
		r.finish(128+int(syscall.SIGINT), signalName(int(syscall.SIGINT)))
		return 128 + int(syscall.SIGINT), r.emitErr
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return -1, fmt.Errorf("engine: stdout pipe: %w", err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return -1, fmt.Errorf("engine: stderr pipe: %w", err)
	}
	defer errR.Close()

	cmd := exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
	cmd.Env, cmd.Dir = cfg.Env, cfg.Dir
	cmd.Stdout, cmd.Stderr = outW, errW
	var in *stream
	if cfg.Producer != nil {
		if _, isFile := cfg.Stderr.(*os.File); cfg.Stderr != nil && !isFile {
			// The producer's stderr is copied in by a goroutine of its own.
			cfg.Stderr = &lockedWriter{w: cfg.Stderr}
		}
		if in, err = newStream(cfg.Producer, cfg.Stderr); err != nil {
			outW.Close()
			errW.Close()
			return -1, err
		}
		cmd.Stdin = in.engineEnd
		// Should this process die alone, its end of the pipe closes: the engine must die with
		// it rather than read that as the stream's end.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}

	// Catch signals before the start: from here on, a stop must reach the
	// engine instead of killing this process and leaving the engine behind.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		if in != nil {
			in.abandon()
		}
		return -1, fmt.Errorf("engine: start %s: %w", cfg.Argv[0], err)
	}

	exited := make(chan struct{})
	stopped := make(chan struct{})
	intr := &interrupter{p: cmd.Process, grace: cfg.StopGrace, exited: exited}
	if g, ok := cfg.Parser.(StopGracer); ok && intr.grace == 0 {
		intr.grace = g.StopGrace()
	}
	if in != nil {
		in.start(intr, exited)
	}
	forwarded := make(chan struct{})
	go func() {
		forward(ctx, intr, in, sigs, exited, stopped)
		close(forwarded)
	}()

	lines := make(chan line)
	readers := make(chan struct{}, 3)
	sources := 2
	if cfg.Progress != nil {
		sources++
		go func() {
			poll(cfg.Progress, cfg.ProgressEvery, lines, exited)
			readers <- struct{}{}
		}()
	}
	for _, p := range []struct {
		f      *os.File
		stderr bool
	}{{outR, false}, {errR, true}} {
		go func() {
			readLines(p.f, p.stderr, lines, exited)
			readers <- struct{}{}
		}()
	}
	go func() {
		for range sources {
			<-readers
		}
		close(lines)
	}()

	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		close(exited)
		deadline := time.Now().Add(drainGrace)
		outR.SetReadDeadline(deadline)
		errR.SetReadDeadline(deadline)
		waited <- err
	}()

	r := &run{cfg: cfg}
	for l := range lines {
		if l.progress != nil {
			r.handle(Event{TypeProgress, *l.progress})
			continue
		}
		if l.stderr {
			r.stderr(l.text)
		} else {
			r.stdout(l.text)
		}
	}
	err = <-waited
	if cmd.ProcessState == nil {
		return -1, fmt.Errorf("engine: wait for %s: %w", cfg.Argv[0], err)
	}
	status, sig := exitStatus(cmd.ProcessState)
	if intr.killed.Load() && sig == signalName(int(syscall.SIGKILL)) {
		msg := fmt.Sprintf("%s did not exit within %s of its SIGINT: holdfast killed it", filepath.Base(cfg.Argv[0]), intr.grace)
		if cfg.Stderr != nil {
			fmt.Fprintf(cfg.Stderr, "holdfast exec: %s\n", msg)
		}
		r.handle(Event{TypeWarning, Warning{Message: msg}})
	}
	// forward returns once it saw the exit: a signal it took before has closed stopped by then.
	<-forwarded
	stop := ctx.Err() != nil
	select {
	case <-stopped:
		stop = true
	case <-sigs: // a stop the engine's exit overtook
		stop = true
	default:
	}
	if in != nil {
		if why := in.end(stop); why != "" {
			// The stream's failure is the cause; what the engine said as it stopped is not.
			r.fatal, r.sawFatal = &Fatal{Message: why}, true
			status, sig = 1, ""
		}
	}
	if stop && status != 0 && status != 128+int(syscall.SIGINT) && !r.sawSummary {
		r.engineStatus, r.engineSignal = status, sig
		status, sig = 128+int(syscall.SIGINT), ""
	}
	if cfg.Progress != nil && status == 0 {
		if p, ok := cfg.Progress(); ok {
			r.progress, r.lastProgress = &Event{TypeProgress, p}, time.Time{}
		}
	}
	if f, ok := cfg.Parser.(Finisher); ok && sig == "" {
		status = r.settle(ctx, f, status)
	}
	r.finish(status, sig)
	return status, r.emitErr
}

// settle gives a Finisher its last word on the engine's run, and returns the attempt's status.
func (r *run) settle(ctx context.Context, f Finisher, status int) int {
	evs, status, fatal := f.Finish(ctx, status, r.fatal, r.cfg.Stderr)
	r.fatal = fatal
	for _, ev := range evs {
		r.handle(ev)
	}
	return status
}

// interrupter sends the engine SIGINT, and SIGKILL once grace (if any) has passed after the first
// SIGINT without its exit.
type interrupter struct {
	p      *os.Process
	grace  time.Duration
	exited <-chan struct{}
	once   sync.Once
	killed atomic.Bool
}

func (i *interrupter) interrupt() {
	i.p.Signal(os.Interrupt) // fails only if the engine has just exited
	if i.grace <= 0 {
		return
	}
	i.once.Do(func() {
		go func() {
			select {
			case <-i.exited:
			case <-time.After(i.grace):
				// Recorded before the kill: once killed, the engine may be reaped and read at once.
				i.killed.Store(true)
				if i.p.Kill() != nil {
					i.killed.Store(false) // it had exited already
				}
			}
		}()
	})
}

// forward sends the engine (and a stream's producer) a SIGINT for every signal and for the end
// of ctx; the first closes stopped.
func forward(ctx context.Context, intr *interrupter, in *stream, sigs <-chan os.Signal, exited <-chan struct{}, stopped chan<- struct{}) {
	done := ctx.Done()
	for {
		select {
		case <-sigs:
		case <-done:
			done = nil
		case <-exited:
			return
		}
		if stopped != nil {
			close(stopped)
			stopped = nil
		}
		intr.interrupt()
		if in != nil {
			in.interrupt()
		}
	}
}

type line struct {
	stderr   bool
	text     []byte
	progress *Progress // a measured progress, not a line
}

// poll sends what measure says every interval (or ten times as long as it took) until exited.
func poll(measure func() (Progress, bool), every time.Duration, out chan<- line, exited <-chan struct{}) {
	if every <= 0 {
		every = 5 * time.Second
	}
	wait := every
	for {
		select {
		case <-exited:
			return
		case <-time.After(wait):
		}
		began := time.Now()
		p, ok := measure()
		wait = max(every, 10*time.Since(began))
		if !ok {
			continue
		}
		select {
		case out <- line{progress: &p}:
		case <-exited:
			return
		}
	}
}

func readLines(f *os.File, stderr bool, out chan<- line, exited <-chan struct{}) {
	br := bufio.NewReaderSize(f, maxLine)
	for {
		b, more, err := br.ReadLine()
		if err != nil {
			return
		}
		text := bytes.Clone(b)
		for more && err == nil {
			_, more, err = br.ReadLine()
		}
		out <- line{stderr: stderr, text: text}
		if err != nil {
			return
		}
		// The deadline set at exit counts idle time, not time spent waiting
		// for the consumer: lines still in the pipe are never lost.
		select {
		case <-exited:
			f.SetReadDeadline(time.Now().Add(drainGrace))
		default:
		}
	}
}

// run holds what Exec remembers between lines.
type run struct {
	cfg          ExecConfig
	lastProgress time.Time
	progress     *Event // held back by the throttle
	fatal        *Fatal // being joined with its continuation lines
	fatalLines   int
	sawFatal     bool
	sawSummary   bool
	engineStatus int // how the engine itself ended, when a stop made the status 130
	engineSignal string
	lastWarning  string
	warnings     int
	emitErr      error
}

func (r *run) stdout(b []byte) {
	ev, ok := r.cfg.Parser.ParseStdout(b)
	if !ok {
		if r.cfg.Stdout != nil && !isJSON(b) {
			writeLine(r.cfg.Stdout, b)
		}
		return
	}
	r.handle(ev)
}

func (r *run) stderr(b []byte) {
	if r.cfg.Stderr != nil {
		writeLine(r.cfg.Stderr, b)
	}
	ev, ok := r.cfg.Parser.ParseStderr(b)
	if r.fatal != nil && !isJSON(b) && (!ok || ev.Type == TypeWarning) {
		if text := strings.TrimSpace(escapes().ReplaceAllString(string(b), "")); text != "" && r.fatalLines < maxFatalLines {
			r.fatal.Message += "\n" + text
			r.fatalLines++
		}
		return
	}
	if ok {
		r.flushFatal()
		r.handle(ev)
	}
}

func (r *run) handle(ev Event) {
	switch ev.Type {
	case TypeProgress:
		if time.Since(r.lastProgress) < progressEvery {
			r.progress = &ev
			return
		}
		r.progress = nil
		r.lastProgress = time.Now()
	case TypeSummary:
		r.sawSummary = true
		r.flushProgress()
	case TypeFatal:
		r.sawFatal = true
		if f, ok := ev.Payload.(Fatal); ok {
			r.fatal, r.fatalLines = &f, 0
			return
		}
	case TypeWarning:
		if w, ok := ev.Payload.(Warning); ok {
			r.lastWarning = w.Message
		}
		r.warnings++
		switch {
		case r.warnings == maxWarnings+1:
			ev = Event{TypeWarning, Warning{Message: fmt.Sprintf("more than %d warnings: the rest are only in the unit's log", maxWarnings)}}
		case r.warnings > maxWarnings:
			return
		}
	}
	r.emit(ev)
}

func (r *run) flushProgress() {
	if r.progress != nil {
		r.emit(*r.progress)
		r.progress = nil
	}
}

func (r *run) flushFatal() {
	if r.fatal != nil {
		r.emit(Event{TypeFatal, *r.fatal})
		r.fatal = nil
	}
}

func (r *run) finish(status int, sig string) {
	r.flushProgress()
	r.flushFatal()
	if c, ok := r.cfg.Parser.(Concluder); ok && !r.sawFatal {
		if ev, ok := c.Conclude(status, r.lastWarning); ok {
			r.emit(ev)
		}
	}
	r.emit(Event{TypeExit, Exit{ExitStatus: status, Signal: sig, EngineStatus: r.engineStatus, EngineSignal: r.engineSignal}})
}

func (r *run) emit(ev Event) {
	if r.emitErr != nil || r.cfg.Emit == nil {
		return
	}
	if err := r.cfg.Emit(ev.Type, ev.Payload); err != nil {
		r.emitErr = fmt.Errorf("engine: journal %s event: %w", ev.Type, err)
		if r.cfg.Stderr != nil {
			fmt.Fprintf(r.cfg.Stderr, "holdfast: %v; no further events are journaled\n", r.emitErr)
		}
	}
}

func exitStatus(ps *os.ProcessState) (int, string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), signalName(int(ws.Signal()))
	}
	return ps.ExitCode(), ""
}

// signalName returns a signal's name, such as "SIGTERM".
func signalName(n int) string {
	if name := unix.SignalName(syscall.Signal(n)); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", n)
}

func isJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

func writeLine(w io.Writer, b []byte) {
	w.Write(append(b[:len(b):len(b)], '\n'))
}

// RunAfterInterrupt runs the command that follows an engine a signal interrupted (restic
// unlock), with its output on stderr, for at most timeout. Signals meanwhile are swallowed: the
// unit is already stopping, and the command is what leaves the repository clean.
func RunAfterInterrupt(argv, env []string, timeout time.Duration) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "holdfast exec: %s after the interruption: %v\n", argv[0], err)
	}
}

// RunBefore runs the command that goes before the engine, with its output on stderr. Its failure
// is not the engine's: the engine's own run says what went wrong. A stop that arrives meanwhile
// (a signal, or the end of ctx) is passed on to it as SIGINT, and then the engine is not started:
// stopped is true, with the status to exit with. A stop that came first starts nothing.
func RunBefore(ctx context.Context, argv, env []string) (status int, stopped bool) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if ctx.Err() != nil {
		return 128 + int(syscall.SIGINT), true
	}
	done := ctx.Done()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "holdfast exec: %s: %v\n", argv[0], err)
		return 0, false
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case <-sigs:
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGINT)
		case <-done:
			done, stopped = nil, true
			_ = cmd.Process.Signal(syscall.SIGINT)
		case err := <-waited:
			if err != nil && !stopped {
				fmt.Fprintf(os.Stderr, "holdfast exec: %s: %v\n", argv[0], err)
			}
			return 128 + int(syscall.SIGINT), stopped
		}
	}
}
