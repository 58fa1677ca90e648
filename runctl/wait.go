package runctl

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/wake"
)

// WaitPoll is how often WaitRun reads a run that did not end: for its progress, and as the
// backstop should the announcement of its end be lost.
const WaitPoll = time.Second

// WaitRun follows the run until its record is final and returns it with its attempts. It reads
// the run as soon as its end is announced (store.RunListenEnds) and otherwise every WaitPoll,
// calling report with each reading, the final one included. When ctx ends first the run goes
// on; the error says where to find it.
func WaitRun(ctx context.Context, st Store, id uuid.UUID, report func(model.Run, *model.Progress)) (model.Run, []model.Attempt, error) {
	return waitRun(ctx, st, id, report, WaitPoll)
}

// relistenAfter is how long WaitRun waits before it listens again after a failure; its poll is
// the backstop meanwhile.
const relistenAfter = 2 * time.Second

func waitRun(ctx context.Context, st Store, id uuid.UUID, report func(model.Run, *model.Progress), poll time.Duration) (model.Run, []model.Attempt, error) {
	ended := wake.New()
	listenCtx, cancel := context.WithCancel(ctx)
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		for listenCtx.Err() == nil {
			// Nil is "listening now": anything may have ended meanwhile.
			_ = st.RunListenEnds(listenCtx, func(run uuid.UUID) {
				if run == id || run == uuid.Nil {
					ended.Wake()
				}
			})
			ended.Wake() // not listening: the first read does not wait for it
			wake.Sleep(listenCtx, relistenAfter, nil)
		}
	}()
	defer func() {
		cancel()
		<-listening
	}()
	// A context that ends during a read ends the wait all the same, not the run.
	cutShort := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped waiting for run %s (it goes on; see holdfast run show %s): %w", id, id, ctx.Err())
		}
		return err
	}
	// The first read waits until the end is listened for (or that failed): read before, the run
	// would be read twice as it starts, while its unit is being started beside this.
	if !wake.Sleep(ctx, poll, ended) {
		return model.Run{}, nil, cutShort(ctx.Err())
	}
	for {
		run, err := st.RunGet(ctx, id)
		if err != nil {
			return model.Run{}, nil, cutShort(err)
		}
		attempts, err := st.AttemptList(ctx, id)
		if err != nil {
			return model.Run{}, nil, cutShort(err)
		}
		var p *model.Progress
		if n := len(attempts); n > 0 {
			p = attempts[n-1].Progress
		}
		report(run, p)
		if !model.Live(run.Status) {
			return run, attempts, nil
		}
		if !wake.Sleep(ctx, poll, ended) {
			return model.Run{}, nil, cutShort(ctx.Err())
		}
	}
}
