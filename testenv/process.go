package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// child is a long-running process started by testenv.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process is reaped
	err  error         // Wait's result; read only after done is closed
}

// startChild starts cmd so that it gets sig when the test binary dies
// without cleaning up (a panic, a -timeout): that is what keeps a crashed
// test binary from leaving servers and managers behind. Pdeathsig fires
// when the forking thread exits, so the fork happens on a thread locked to
// a goroutine that lives until the child has been reaped.
//
// The child gets a process group of its own, so a Ctrl-C at the terminal
// reaches only its owner, which can stop things in order (the demo stops its
// daemon before the manager, the manager before PostgreSQL) rather than
// having every process interrupted at once.
func startChild(cmd *exec.Cmd, sig syscall.Signal) (*child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
	cmd.SysProcAttr.Setpgid = true
	c := &child{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, after the child.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.err = cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// wait reports whether the child exited within d.
func (c *child) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// procStat returns the state and parent pid of pid from /proc/<pid>/stat.
func procStat(pid int) (state byte, ppid int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name is in parentheses and may contain anything.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	ppid, err = strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return f[0][0], ppid, nil
}

// ProcessAlive reports whether pid names a process that has not terminated.
// Zombies count as gone: PID 1 here (not an init) does not reap orphans, so
// a killed orphan stays a zombie indefinitely.
func ProcessAlive(pid int) bool {
	state, _, err := procStat(pid)
	return err == nil && state != 'Z' && state != 'X'
}

// waitGone waits up to d for pid to terminate.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ProcessAlive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// descendants returns the live processes below root in the process tree.
func descendants(root int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := make(map[int][]int)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, ppid, err := procStat(pid)
		if err != nil || state == 'Z' || state == 'X' {
			continue // gone meanwhile, or dead
		}
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out, nil
}

// recording wraps list so that every pid it returns, but not's, is recorded in killed for
// reapOrphans; it lists once at once, before a cgroup's kill makes the processes zombies.
func recording(list func() []int, not int) (func() []int, map[int]bool) {
	killed := map[int]bool{}
	rec := func() []int {
		pids := list()
		for _, p := range pids {
			killed[p] = p != not
		}
		return pids
	}
	rec()
	return rec, killed
}

// reapOrphans reaps the killed processes that became this process's children (RunMain makes it
// a subreaper), waiting up to d in all for them to be handed over and to exit.
func reapOrphans(killed map[int]bool, d time.Duration) {
	deadline := time.Now().Add(d)
	for p, reap := range killed {
		for reap {
			wpid, err := syscall.Wait4(p, nil, syscall.WNOHANG, nil)
			switch {
			case wpid == p:
				reap = false // reaped
			case err == syscall.EINTR:
			case err != nil && err != syscall.ECHILD:
				reap = false
			default: // not exited yet, or not (yet) this process's child
				if _, _, err := procStat(p); err != nil || time.Now().After(deadline) {
					reap = false // gone, or someone else's
				} else {
					time.Sleep(2 * time.Millisecond)
				}
			}
		}
	}
}
