package reconcile

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/holdfast-backup/holdfast/runner"
	"github.com/holdfast-backup/holdfast/store"
)

// DefaultTakeoverGrace is how long after a host's lease expired its any-host runs are taken over
// by default: long enough for a daemon restart or a short network cut not to move runs.
const DefaultTakeoverGrace = 30 * time.Second

// supersededWithin is how far back a daemon looks for its attempts that another host took over:
// their units may still run here after a partition, and are stopped.
const supersededWithin = 24 * time.Hour

// takeOver takes over the any-host runs of hosts whose lease expired more than the takeover
// grace ago: each goes on in a new attempt that any live host may spawn (decideTakeOver).
// The superseded attempt is settled as a restart would be, from what this host can measure.
func (r *Reconciler) takeOver(ctx context.Context) error {
	orphans, err := r.cfg.Store.Orphans(ctx, r.cfg.Host, r.cfg.TakeoverGrace)
	if err != nil {
		return err
	}
	for _, l := range orphans {
		a := l.Attempt
		t := store.TakeOver{RunID: l.Run.ID, Attempt: a.No, From: a.Host, By: r.cfg.Host, Grace: r.cfg.TakeoverGrace,
			GiveUp: decideTakeOver(a.No, r.rules())}
		t.Settlement = r.settlement(ctx, l, a, ran(a, runner.Marker{}), true)
		done, err := r.cfg.Store.TakeOverRun(ctx, t)
		if err != nil {
			return err
		}
		if done {
			r.cfg.Logger.Warn("run taken over from a host that lost its lease", "run", l.Run.ID, "job", l.Run.JobName,
				"attempt", a.No, "from_host", a.Host, "unit", a.Unit, "gave_up", t.GiveUp != "")
		}
	}
	return nil
}

// stopSuperseded stops this host's units of attempts another host took over: back from a
// partition, the daemon records nothing for them (the fence refuses it) and ends their units,
// with SIGINT for restic so that it removes its lock.
func (r *Reconciler) stopSuperseded(ctx context.Context) error {
	list, err := r.cfg.Store.Superseded(ctx, r.cfg.Host, supersededWithin)
	if err != nil || len(list) == 0 {
		return err
	}
	names := make([]string, 0, 2*len(list))
	for _, a := range list {
		names = append(names, a.Unit, runner.TimerName(a.Unit))
	}
	states, err := r.cfg.Runner.States(ctx, names)
	if err != nil {
		return err
	}
	for _, name := range names {
		if !states[name].Alive() {
			continue
		}
		r.cfg.Logger.Warn("stopping the unit of an attempt another host took over", "unit", name)
		if err := r.cfg.Runner.Stop(ctx, name); err != nil {
			return fmt.Errorf("stop superseded unit %s: %w", name, err)
		}
	}
	return nil
}

// LeaseHolder names this process as the holder of a host's lease: the machine, the boot, and
// the process with its start time, so that a daemon restarted on the same machine can tell
// that the holder it finds is gone (HolderGone).
func LeaseHolder() string {
	machine, _ := os.ReadFile("/etc/machine-id")
	boot, _ := CurrentBoot()
	pid := os.Getpid()
	return fmt.Sprintf("%s/%s/%d/%s", strings.TrimSpace(string(machine)), boot, pid, processStart(pid))
}

// HolderGone reports whether the lease holder named by holder (LeaseHolder's form) is certainly
// gone: it ran on this machine in this boot, and its process is no longer there. A holder of an
// earlier boot of this machine is gone too. A holder elsewhere is never known to be gone: its
// lease is waited out.
func HolderGone(holder string) bool {
	parts := strings.Split(holder, "/")
	me := strings.Split(LeaseHolder(), "/")
	if len(parts) != 4 || parts[0] == "" || parts[0] != me[0] {
		return false
	}
	if parts[1] != me[1] {
		return me[1] != "" && parts[1] != ""
	}
	pid, err := strconv.Atoi(parts[2])
	if err != nil || pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return true
	}
	return processStart(pid) != parts[3]
}

// processStart is the start time of process pid in clock ticks since boot, "" if unknown.
func processStart(pid int) string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return ""
	}
	return fields[19]
}
