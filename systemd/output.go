package systemd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// Result is how a command run by Output ended.
type Result struct {
	Stdout []byte
	// Stderr is the start of what the command wrote to its standard error (at most 4 KiB).
	Stderr []byte
	// ExitStatus is the command's exit status, or the signal that killed it when Killed.
	ExitStatus int
	Killed     bool
}

// maxStderr bounds what Output keeps of a command's standard error: enough for its message.
const maxStderr = 4 << 10

// ErrOutputTooLarge means the command wrote more than Output was allowed to read; it was stopped.
var ErrOutputTooLarge = errors.New("output is larger than allowed")

// Output runs s as a unit that runs its ExecStart once, with the unit's own user, sandbox and
// credentials, reads at most maxOutput bytes of its standard output and waits for it to end. It
// is how root asks a tool about files a job's user controls without running the tool as root.
// The unit is stopped when ctx ends or the output passes maxOutput.
func (r *Client) Output(ctx context.Context, s Spec, maxOutput int64) (Result, error) {
	var out []byte
	res, err := r.Stream(ctx, s, func(stdout io.Reader) error {
		var err error
		out, err = ReadAtMost(stdout, maxOutput)
		return err
	})
	res.Stdout = out
	return res, err
}

// Stream runs s as Output does, but hands its standard output to consume as it comes, for an
// answer too large to hold: consume reads it to its end, or returns an error, which stops the
// unit. The Result's Stdout is empty. The unit is stopped when ctx ends.
func (r *Client) Stream(ctx context.Context, s Spec, consume func(stdout io.Reader) error) (Result, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("unit %s: stdout pipe: %w", s.Name, err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return Result{}, fmt.Errorf("unit %s: stderr pipe: %w", s.Name, err)
	}
	defer errR.Close()
	s.stdout, s.stderr, s.CollectFailed = outW, errW, true
	_, err = r.Start(ctx, s)
	// systemd holds its own copies now; ours must go so that the reads end with the command.
	outW.Close()
	errW.Close()
	if err != nil {
		return Result{}, err
	}
	stop := context.AfterFunc(ctx, func() {
		outR.SetReadDeadline(time.Now())
		errR.SetReadDeadline(time.Now())
	})
	defer stop()

	var res Result
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res.Stderr, _ = ReadAtMost(errR, maxStderr)
	}()
	err = consume(outR)
	if err == nil {
		// What consume left unread would keep the command writing into a full pipe.
		_, err = io.Copy(io.Discard, outR)
	}
	if err != nil {
		errR.SetReadDeadline(time.Now())
		wg.Wait()
		r.abandon(s.Name)
		if ctx.Err() != nil {
			return res, fmt.Errorf("unit %s: %w", s.Name, ctx.Err())
		}
		return res, fmt.Errorf("unit %s: %w", s.Name, err)
	}
	wg.Wait()
	for {
		done, err := r.ended(ctx, s.Name, &res)
		if err != nil || done {
			if err != nil {
				r.abandon(s.Name)
			}
			return res, err
		}
		select {
		case <-ctx.Done():
			r.abandon(s.Name)
			return res, fmt.Errorf("unit %s: %w", s.Name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ended reports whether the unit has ended and, if it failed, how (it stays loaded until reset).
// A unit that ended well is collected at once, so one no longer there has exited 0.
func (r *Client) ended(ctx context.Context, name string, res *Result) (bool, error) {
	_, st, err := r.Alive(ctx, name)
	if err != nil {
		return false, err
	}
	switch st.ActiveState {
	case "inactive", "":
		res.ExitStatus = 0
		return true, nil
	case "failed":
	default:
		return false, nil
	}
	var code, status int32
	err = r.call(ctx, func(ctx context.Context, c *sddbus.Conn) error {
		p, err := c.GetServicePropertyContext(ctx, name, "ExecMainCode")
		if err != nil {
			return err
		}
		code, _ = p.Value.Value().(int32)
		p, err = c.GetServicePropertyContext(ctx, name, "ExecMainStatus")
		if err != nil {
			return err
		}
		status, _ = p.Value.Value().(int32)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("read how unit %s ended: %w", name, err)
	}
	res.ExitStatus = int(status)
	res.Killed = code == 2 || code == 3 // CLD_KILLED, CLD_DUMPED
	if res.ExitStatus == 0 && !res.Killed {
		res.ExitStatus = 1 // failed before or after its command ran: never read as success
	}
	return true, r.ResetFailed(ctx, name)
}

// abandon stops a command unit whose result is no longer wanted, and clears it if it failed.
// Stop only queues the stop: the unit is cleared once it has ended, or a unit that was still
// stopping when asked would stay loaded as failed.
func (r *Client) abandon(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.Stop(ctx, name)
	for ctx.Err() == nil {
		if alive, _, err := r.Alive(ctx, name); err != nil || !alive {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = r.ResetFailed(ctx, name)
}

// ReadAtMost reads f to its end, or fails with ErrOutputTooLarge past limit bytes (a limit of
// maxStderr keeps the start and drains the rest instead).
func ReadAtMost(f io.Reader, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(f, limit+1))
	if err != nil {
		return buf.Bytes(), err
	}
	if n > limit {
		if limit == maxStderr {
			// Only the start of a message is kept; drain the rest so the command is not blocked.
			_, err := io.Copy(io.Discard, f)
			return buf.Bytes()[:limit], err
		}
		return buf.Bytes()[:limit], fmt.Errorf("%w (%d bytes)", ErrOutputTooLarge, limit)
	}
	return buf.Bytes(), nil
}
