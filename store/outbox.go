package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/holdfast-backup/holdfast/model"
)

// DeliveriesChannel is the LISTEN/NOTIFY channel on which a new delivery is announced.
const DeliveriesChannel = "holdfast_deliveries"

// ErrTargetExists is returned when a notification target of that name exists.
var ErrTargetExists = errors.New("a notification target of that name exists")

const targetColumns = `name, kind, url, secret_file, command, coalesce(job_name, ''), events, created_at`

func scanTarget(row pgx.CollectableRow) (model.Target, error) {
	var t model.Target
	err := row.Scan(&t.Name, &t.Kind, &t.URL, &t.SecretFile, &t.Command, &t.Job, &t.Events, &t.CreatedAt)
	return t, err
}

// TargetCreate stores a target; events from now on that match it are delivered to it.
func (s *Store) TargetCreate(ctx context.Context, t model.Target) error {
	return addTarget(ctx, s.pool, t)
}

// execer is what runs one statement without rows: the pool, or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func addTarget(ctx context.Context, q execer, t model.Target) error {
	_, err := q.Exec(ctx, `INSERT INTO notify_targets (name, kind, url, secret_file, command, job_name, events)
		VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7)`, t.Name, t.Kind, t.URL, t.SecretFile, nonNil(t.Command), t.Job, t.Events)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("notification target %s: %w", t.Name, ErrTargetExists)
	}
	if err != nil {
		return fmt.Errorf("add notification target %s: %w", t.Name, err)
	}
	return nil
}

// TargetList lists the targets, or the one named (ErrNotFound if there is none).
func (s *Store) TargetList(ctx context.Context, name string) ([]model.Target, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+targetColumns+` FROM notify_targets WHERE $1 = '' OR name = $1 ORDER BY name`, name)
	if err != nil {
		return nil, fmt.Errorf("list notification targets: %w", err)
	}
	targets, err := pgx.CollectRows(rows, scanTarget)
	if err != nil {
		return nil, fmt.Errorf("list notification targets: %w", err)
	}
	if name != "" && len(targets) == 0 {
		return nil, fmt.Errorf("notification target %s: %w", name, ErrNotFound)
	}
	return targets, nil
}

// TargetDelete removes a target and its deliveries.
func (s *Store) TargetDelete(ctx context.Context, name string) error {
	return removeTarget(ctx, s.pool, name)
}

func removeTarget(ctx context.Context, q execer, name string) error {
	tag, err := q.Exec(ctx, `DELETE FROM notify_targets WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("remove notification target %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("notification target %s: %w", name, ErrNotFound)
	}
	return nil
}

// DeliveryClaim takes up to limit due deliveries for this daemon until lease has passed: no
// other daemon sends them meanwhile. A daemon that dies holding them leaves them to be claimed
// again after the lease: at least once, never lost.
func (s *Store) DeliveryClaim(ctx context.Context, limit int, lease time.Duration) ([]model.Delivery, error) {
	rows, err := s.pool.Query(ctx, `
		WITH claimed AS (
			UPDATE deliveries d SET claimed_until = now() + $2::interval, tries = tries + 1
			WHERE (d.event_id, d.target) IN (
				SELECT event_id, target FROM deliveries
				WHERE state = 'pending' AND next_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
				ORDER BY next_at LIMIT $1 FOR UPDATE SKIP LOCKED)
			RETURNING d.*)
		SELECT e.id, e.seq, e.event, e.job_name, e.run_id, e.attempt, e.status, e.reason, e.at, e.host, e.details,
			t.name, t.kind, t.url, t.secret_file, t.command, coalesce(t.job_name, ''), t.events, t.created_at,
			c.state, c.tries, c.next_at, coalesce(c.last_error, ''), c.delivered_at
		FROM claimed c JOIN events e ON e.id = c.event_id JOIN notify_targets t ON t.name = c.target
		ORDER BY e.seq`, limit, lease)
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return pgx.CollectRows(rows, scanDelivery)
}

func scanDelivery(row pgx.CollectableRow) (model.Delivery, error) {
	var d model.Delivery
	e, t := &d.Event, &d.Target
	err := row.Scan(&e.ID, &e.Seq, &e.Event, &e.Job, &e.Run, &e.Attempt, &e.Status, &e.Reason, &e.At, &e.Host, &e.Details,
		&t.Name, &t.Kind, &t.URL, &t.SecretFile, &t.Command, &t.Job, &t.Events, &t.CreatedAt,
		&d.State, &d.Tries, &d.NextAt, &d.LastError, &d.DeliveredAt)
	return d, err
}

// DeliveryMarkDone records a delivery as delivered.
func (s *Store) DeliveryMarkDone(ctx context.Context, event uuid.UUID, target string) error {
	_, err := s.pool.Exec(ctx, `UPDATE deliveries SET state = 'delivered', delivered_at = now(), claimed_until = NULL, last_error = NULL
		WHERE event_id = $1 AND target = $2 AND state = 'pending'`, event, target)
	if err != nil {
		return fmt.Errorf("record delivery of event %s to %s: %w", event, target, err)
	}
	return nil
}

// DeliveryMarkFailedParams is a failed try of an event's delivery to a target.
type DeliveryMarkFailedParams struct {
	Event   uuid.UUID
	Target  string
	Why     string        // the error, kept as the delivery's last
	Backoff time.Duration // how long until it is tried again
	GiveUp  bool          // keep it as failed instead
}

// DeliveryMarkFailed records a failed try: the delivery is tried again after p.Backoff, on the
// database's clock (due deliveries are claimed on it), or, when p.GiveUp, kept as failed.
func (s *Store) DeliveryMarkFailed(ctx context.Context, p DeliveryMarkFailedParams) error {
	_, err := s.pool.Exec(ctx, `UPDATE deliveries SET last_error = $3, claimed_until = NULL, next_at = now() + $4::interval,
			state = CASE WHEN $5 THEN 'failed' ELSE 'pending' END
		WHERE event_id = $1 AND target = $2 AND state = 'pending'`, p.Event, p.Target, p.Why, p.Backoff, p.GiveUp)
	if err != nil {
		return fmt.Errorf("record failed delivery of event %s to %s: %w", p.Event, p.Target, err)
	}
	return nil
}

// DeliveryList lists deliveries, newest event first: of one target ("" all), at most limit.
func (s *Store) DeliveryList(ctx context.Context, target string, limit int) ([]model.Delivery, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT e.id, e.seq, e.event, e.job_name, e.run_id, e.attempt, e.status, e.reason, e.at, e.host, e.details,
			t.name, t.kind, t.url, t.secret_file, t.command, coalesce(t.job_name, ''), t.events, t.created_at,
			c.state, c.tries, c.next_at, coalesce(c.last_error, ''), c.delivered_at
		FROM deliveries c JOIN events e ON e.id = c.event_id JOIN notify_targets t ON t.name = c.target
		WHERE $1 = '' OR c.target = $1
		ORDER BY e.seq DESC, c.target LIMIT $2`, target, limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return pgx.CollectRows(rows, scanDelivery)
}

// DeliveryCount counts the deliveries pending and failed, for status and metrics: through
// deliveries_undelivered, not a read of every delivery made.
func (s *Store) DeliveryCount(ctx context.Context) (pending, failed int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'failed')
		FROM deliveries WHERE state <> 'delivered'`).Scan(&pending, &failed)
	if err != nil {
		return 0, 0, fmt.Errorf("count deliveries: %w", err)
	}
	return pending, failed, nil
}
