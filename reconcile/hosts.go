package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// DefaultTakeoverGrace is how long after a host's lease expired its any-host runs are taken over
// by default: long enough for a daemon restart or a short network cut not to move runs.
const DefaultTakeoverGrace = 30 * time.Second

// supersededWithin is how far back a daemon looks for its attempts that another host took over:
// their units may still run here after a partition, and are stopped.
const supersededWithin = 24 * time.Hour

// unlockKey offsets the repair channel's key of a superseded attempt's unlock.
const unlockKey = -1 << 20

// takeOver takes over the any-host runs of hosts whose lease expired more than the takeover
// grace ago: each goes on in a new attempt that any live host may spawn (decideTakeOver).
// The superseded attempt is settled as a restart would be, from what this host can measure.
// It reports how many runs it took over.
func (r *Reconciler) takeOver(ctx context.Context) (int, error) {
	// A read of the few hosts' rows each pass; the live runs are read again only when one is down.
	down, unnoticed, err := r.cfg.Store.HostListDown(ctx, r.cfg.Host, r.cfg.TakeoverGrace)
	if err != nil {
		return 0, err
	}
	if len(down) == 0 {
		r.orphans.read(nil, 0, time.Now()) // a host down again is a change
		return 0, nil
	}
	if unnoticed {
		noticed, err := r.cfg.Store.HostNoticeDown(ctx, r.cfg.Host, r.cfg.TakeoverGrace)
		if err != nil {
			return 0, err
		}
		for _, h := range noticed {
			r.cfg.Logger.Warn("host down: its lease expired", "down_host", h)
		}
	}
	if !r.orphans.due(down, time.Now()) {
		return 0, nil
	}
	orphans, err := r.cfg.Store.RunListOrphaned(ctx, r.cfg.Host, r.cfg.TakeoverGrace)
	if err != nil {
		return 0, err
	}
	if changed := r.orphans.read(down, len(orphans), time.Now()); changed && len(orphans) == 0 {
		// Said once per set of down hosts: a takeover that never comes is then visible in the log.
		r.cfg.Logger.Info("hosts down, no any-host run of theirs to take over", "down_hosts", strings.Join(down, ","))
	}
	taken := 0
	for _, l := range orphans {
		a := l.Attempt
		t := model.TakeOver{RunID: l.Run.ID, Attempt: a.No, From: a.Host, Grace: r.cfg.TakeoverGrace,
			GiveUp: decideTakeOver(a.No, r.rules())}
		t.Settlement = r.settlement(ctx, l, a, ran(a, systemd.Marker{}), true)
		done, err := r.cfg.Store.RunTakeOver(ctx, r.fence(), t)
		if err != nil {
			return taken, err
		}
		if !done {
			r.cfg.Logger.Info("run not taken over: another host took it over or it changed first, or this host's lease is not current", "run", l.Run.ID,
				"job", l.Run.JobName, "attempt", a.No, "from_host", a.Host)
			continue
		}
		taken++
		r.cfg.Logger.Warn("run taken over from a host that lost its lease", "run", l.Run.ID, "job", l.Run.JobName,
			"attempt", a.No, "from_host", a.Host, "unit", a.Unit, "gave_up", t.GiveUp != "")
	}
	return taken, nil
}

// orphansAgainAfter is how long a daemon goes without reading the orphans of hosts that stayed
// down after a read found none: a run only becomes one without a host going down when an
// operator unpins the job of a run that waits for its down host.
const orphansAgainAfter = 30 * time.Second

// orphanReads decides when the sweep reads the orphans of the down hosts (store.RunListOrphaned): a
// host down for good would otherwise have every daemon of the fleet read them at every pass.
// The runs of a host that stays down do not become orphans, so they are read again when the
// hosts down change, when the last read found some (not all may have been taken over) and at
// least every orphansAgainAfter.
type orphanReads struct {
	mu    sync.Mutex
	down  string    // the down hosts of the last read, joined
	found bool      // whether it found orphans
	at    time.Time // when it was made; zero before one was
}

// due reports whether the orphans of down are to be read at now.
func (o *orphanReads) due(down []string, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.at.IsZero() || o.found || o.down != strings.Join(down, "\x00") || now.Sub(o.at) >= orphansAgainAfter
}

// read records a read of the orphans of down at now that found n, and reports whether the hosts
// down differ from the last read's.
func (o *orphanReads) read(down []string, n int, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	joined := strings.Join(down, "\x00")
	changed := o.at.IsZero() || joined != o.down
	o.down, o.found, o.at = joined, n > 0, now
	return changed
}

// stopSuperseded stops this host's units of attempts another host took over: back from a
// partition, the daemon records nothing for them (the fence refuses it) and ends their units,
// with SIGINT for restic so that it removes its lock. Once such a unit is gone, restic unlock
// runs once (as the job's user, in a query unit) on its repository: a unit that died with its
// host (a power loss) left a lock that only this host can tell is stale. It reports whether it
// found such a unit alive (and asked systemd to stop it).
func (r *Reconciler) stopSuperseded(ctx context.Context) (stopping bool, err error) {
	list, err := r.cfg.Store.AttemptListSuperseded(ctx, r.cfg.Host, supersededWithin)
	if err != nil || len(list) == 0 {
		return false, err
	}
	names := make([]string, 0, 2*len(list))
	for i, a := range list {
		if a.Unit == "" { // a claim given back after a start that may have reached systemd
			list[i].Unit = systemd.UnitName(a.JobName, a.RunID, a.No)
		}
		names = append(names, list[i].Unit, systemd.TimerName(list[i].Unit))
	}
	states, err := r.cfg.Runner.States(ctx, names)
	if err != nil {
		return false, err
	}
	for _, a := range list {
		alive := false
		for _, name := range []string{a.Unit, systemd.TimerName(a.Unit)} {
			if !states[name].Alive() {
				continue
			}
			alive, stopping = true, true
			r.cfg.Logger.Warn("stopping the unit of an attempt another host took over", "unit", name, "run", a.RunID, "attempt", a.No)
			if err := r.cfg.Runner.Stop(ctx, name); err != nil {
				return true, fmt.Errorf("stop superseded unit %s: %w", name, err)
			}
		}
		if !alive {
			r.unlockSuperseded(ctx, a)
		}
	}
	return stopping, nil
}

// unlockSuperseded has the repair channel run restic unlock, once per daemon, for a superseded
// attempt of a restic job whose unit is gone: as the job's user, in a unit that may write the
// repository. Once: a failure is logged, and the next attempt on the repository from this host
// unlocks first anyway (its ending was unclean).
func (r *Reconciler) unlockSuperseded(ctx context.Context, a model.SupersededAttempt) {
	// A key of its own, apart from the attempt's repair (+n) and inventory refresh (-n).
	key := model.AttemptRef{Run: a.RunID, No: unlockKey - a.No}
	r.repairMu.Lock()
	done := r.unlocked[key]
	r.unlocked[key] = true
	r.repairMu.Unlock()
	if done {
		return
	}
	unlock := func(ctx context.Context, _ func()) error {
		if !r.acting() {
			// Not without the lease: a daemon of the same host name elsewhere holds it, and
			// restic here would take that daemon's live locks for stale ones.
			r.repairMu.Lock()
			delete(r.unlocked, key) // the next pass under the lease hands it over again
			r.repairMu.Unlock()
			return nil
		}
		job, err := r.cfg.Store.JobGet(ctx, a.JobName)
		if errors.Is(err, store.ErrNotFound) || err == nil && job.Engine != engine.NameRestic { // restic's own lock
			return nil
		}
		if err == nil {
			restic, ej := jobunit.Restic(r.cfg.units(), job, true)
			_, err = restic.Run(ctx, restic.UnlockArgv(ej))
		}
		if err != nil {
			r.cfg.Logger.Warn("restic unlock after a superseded attempt failed", "run", a.RunID, "attempt", a.No, "err", err)
			return nil
		}
		r.cfg.Logger.Info("stale restic locks removed after a superseded attempt", "run", a.RunID, "attempt", a.No, "job", a.JobName)
		return nil
	}
	if err := r.repairs.Submit(ctx, key, unlock); err != nil {
		r.cfg.Logger.Warn("restic unlock after a superseded attempt not handed over", "run", a.RunID, "err", err)
		r.repairMu.Lock()
		delete(r.unlocked, key) // the next pass hands it over again
		r.repairMu.Unlock()
	}
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
