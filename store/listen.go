package store

import (
	"context"
	"fmt"
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
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, EndedChannel, run.String())
	return err
}

// ListenRunEnds blocks, calling ended with the id of each run that ends, until ctx ends or the
// connection fails. It also calls ended(uuid.Nil) once as soon as it listens: a run that ended
// before may have been announced to nobody, so read it again then.
func (s *Store) ListenRunEnds(ctx context.Context, ended func(run uuid.UUID)) error {
	return s.listen(ctx, EndedChannel, func(payload string) {
		if payload == "" {
			ended(uuid.Nil)
			return
		}
		if id, err := uuid.Parse(payload); err == nil {
			ended(id)
		}
	})
}

// listenSetupTimeout bounds acquiring the LISTEN connection and issuing LISTEN.
const listenSetupTimeout = 30 * time.Second

// listen blocks, calling fn with the payload of each notification on channel, until ctx ends or
// the connection fails. It calls fn("") once as soon as it listens.
func (s *Store) listen(ctx context.Context, channel string, fn func(payload string)) error {
	setup, cancel := context.WithTimeout(ctx, listenSetupTimeout)
	defer cancel()
	conn, err := s.pool.Acquire(setup)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(setup, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Conn().Close(context.Background())
		return fmt.Errorf("listen: %w", err)
	}
	fn("")
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			// The connection may be mid-wait; never hand it back to the pool in that state.
			conn.Conn().Close(context.Background())
			return fmt.Errorf("wait for notification: %w", err)
		}
		fn(n.Payload)
	}
}
