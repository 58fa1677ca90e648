package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// EndedChannel is the LISTEN/NOTIFY channel on which every run that ends is announced, its id
// the payload, so whoever waits for a run learns its end at once. It is not NotifyChannel: the
// daemons, which end the runs, need not wake for it.
const EndedChannel = "holdfast_run_ended"

// notifyEnded announces inside tx that the run ended: delivered only if tx commits.
func notifyEnded(ctx context.Context, tx pgx.Tx, run uuid.UUID) error {
	return notify(ctx, tx, EndedChannel, run.String())
}

// RunListenEnds blocks, calling ended with the id of each run that ends, until ctx ends or the
// connection fails. It also calls ended(uuid.Nil) once as soon as it listens: a run that ended
// before may have been announced to nobody, so read it again then.
func (s *Store) RunListenEnds(ctx context.Context, ended func(run uuid.UUID)) error {
	return s.listen(ctx, map[string]func(string){EndedChannel: func(payload string) {
		if payload == "" {
			ended(uuid.Nil)
			return
		}
		if id, err := uuid.Parse(payload); err == nil {
			ended(id)
		}
	}})
}

// Wakes are what a daemon's notifications wake.
type Wakes struct {
	// Host is the daemon's: Runs is called only for notifications about its work or any host's.
	Host string
	// Runs is called when a run this host may spawn or holds was admitted, queued again or
	// asked to stop, or a job it may run changed (NotifyChannel).
	Runs func()
	// Run, if set, is called immediately before Runs, on the same goroutine, with the run such a
	// notification names, if it names one: a run admitted, queued again or asked to stop.
	Run func(run uuid.UUID)
	// Deliveries is called when an event of this host's, or of none, has notifications to
	// send (DeliveriesChannel).
	Deliveries func()
}

// Listen blocks, waking w as notifications about w.Host come, until ctx ends or the connection
// fails. Both channels share one connection of its own, outside the pool. It calls Runs and
// DeliveryList once as soon as it listens: notifications sent while no session listened (before,
// or while the server was restarting) are lost.
func (s *Store) Listen(ctx context.Context, w Wakes) error {
	return s.listen(ctx, map[string]func(string){
		NotifyChannel: func(payload string) {
			run, payload := namedRun(payload)
			if concerns(payload, w.Host) {
				if run != uuid.Nil && w.Run != nil {
					w.Run(run)
				}
				w.Runs()
			}
		},
		DeliveriesChannel: func(payload string) {
			if concerns(payload, w.Host) {
				w.Deliveries()
			}
		},
	})
}

// hostPayload is the payload of a notification about host's work ("" any host's): every
// notification on NotifyChannel and DeliveriesChannel says whose it is, so that it wakes only
// the daemon it concerns and those that may run any host's work.
func hostPayload(host string) string { return "host:" + host }

// namedRun splits the run a notification about a run names ("run:ID ", before its host's
// part; notifyRun) from the rest of its payload. Before the host's part, not after it: a daemon
// of an older version reads a payload that does not begin with the host's part as one that
// concerns every host.
func namedRun(payload string) (run uuid.UUID, rest string) {
	named, after, ok := strings.Cut(payload, " ")
	id, isRun := strings.CutPrefix(named, "run:")
	if !ok || !isRun {
		return uuid.Nil, payload
	}
	run, err := uuid.Parse(id)
	if err != nil {
		return uuid.Nil, payload
	}
	return run, after
}

// concerns reports whether a notification's payload concerns the daemon of host: it names that
// host or any host (hostPayload), or it names none (the first call, once listening, and the
// payloads of an older version).
func concerns(payload, host string) bool {
	named, ok := strings.CutPrefix(payload, "host:")
	return !ok || named == "" || named == host
}

// listenSetupTimeout bounds connecting the listener and issuing LISTEN.
const listenSetupTimeout = 30 * time.Second

// listen blocks, calling channels[c] with the payload of each notification on c, until ctx ends
// or the connection fails. It listens on a connection of its own, so that a pool's bound never
// counts it and a notification waits for no query. It calls each function with "" once as soon
// as it listens.
func (s *Store) listen(ctx context.Context, channels map[string]func(payload string)) error {
	setup, cancel := context.WithTimeout(ctx, listenSetupTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(setup, s.session.Copy())
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer conn.Close(context.Background())
	names := make([]string, 0, len(channels))
	for name := range channels {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := conn.Exec(setup, "LISTEN "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	for _, name := range names {
		channels[name]("")
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		if fn, ok := channels[n.Channel]; ok {
			fn(n.Payload)
		}
	}
}
