package runctl

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/systemd"
)

// StopAskTimeout bounds how long StopRun waits for systemd: the intent is already safe in the
// database, and a manager that does not answer must not hang the operator's terminal.
const StopAskTimeout = 10 * time.Second

// StopRun records the operator's stop intent on a queued or running run, then asks systemd to
// stop its unit, if it has one on this host (host; another host's daemon stops its own). The
// intent is recorded first, so that if systemd does not take the request the daemon's next
// pass asks again: unreached says why systemd was not reached, and the stop still stands. err
// is set only if the intent could not be recorded. run is the run as the stop left it.
func StopRun(ctx context.Context, st Store, openUnits func(context.Context) (Units, error), id uuid.UUID, host string) (run model.Run, unreached, err error) {
	run, err = st.RunRequestStop(ctx, id)
	if err != nil {
		return run, nil, err
	}
	unreached, err = stopUnit(ctx, st, openUnits, id, host)
	return run, unreached, err
}

func stopUnit(ctx context.Context, st Store, openUnits func(context.Context) (Units, error), id uuid.UUID, host string) (unreached, err error) {
	crashpoint.At("stop-recorded")
	attempts, err := st.AttemptList(ctx, id)
	if err != nil || len(attempts) == 0 {
		return nil, err
	}
	live := attempts[len(attempts)-1]
	if live.Unit == "" || live.Host != host {
		return nil, nil
	}
	askCtx, cancel := context.WithTimeout(ctx, StopAskTimeout)
	defer cancel()
	r, err := openUnits(askCtx)
	if err != nil {
		return err, nil
	}
	defer r.Close()
	if live.ArmedFor != nil {
		// Its timer first, so that it cannot start the service once that is stopped.
		if err := r.Stop(askCtx, systemd.TimerName(live.Unit)); err != nil {
			return err, nil
		}
	}
	return r.Stop(askCtx, live.Unit), nil
}
