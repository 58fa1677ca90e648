package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/setting"
)

// summaryID is the shape of a snapshot id a summary may give (8 to 64 lower-case hex digits);
// listedID that of a listed one (restic's full id).
var (
	summaryID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{8,64}$`) })
	listedID  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })
)

// inventoryLockClass is the first key of the advisory locks that serialize the writes of one
// repository's inventory ("hfin"): a listing and a run's ending never both miss each other's
// row of the same snapshot.
const inventoryLockClass int32 = 0x6866696e

func lockInventory(ctx context.Context, tx pgx.Tx, repository string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int, hashtext($2))`, inventoryLockClass, repository)
	return err
}

// shortID is how a message names a snapshot: its first 12 digits, or all of a shorter id.
func shortID(id string) string { return id[:min(12, len(id))] }

const snapshotColumns = `s.repository, s.id, s.time, s.host, s.tags, s.paths, coalesce(s.job_name, ''), s.run_id,
	(SELECT r.bytes_added FROM runs r WHERE r.id = s.run_id), s.first_seen_at, s.seen_at, s.forgotten_at,
	s.legal_hold_at, coalesce(s.legal_hold_by, ''), coalesce(s.legal_hold_why, ''), s.immutable_until,
	coalesce(s.immutable_by, ''), s.source`

func scanSnapshot(row pgx.Row) (model.Snapshot, error) {
	var s model.Snapshot
	err := row.Scan(&s.Repository, &s.ID, &s.Time, &s.Host, &s.Tags, &s.Paths, &s.JobName, &s.RunID,
		&s.BytesAdded, &s.FirstSeenAt, &s.SeenAt, &s.ForgottenAt,
		&s.LegalHoldAt, &s.LegalHoldBy, &s.LegalHoldWhy, &s.ImmutableUntil, &s.ImmutableBy, &s.Source)
	return s, err
}

// SnapshotSyncParams is a listing of a repository's snapshots.
type SnapshotSyncParams struct {
	Repository string
	ListedAt   time.Time // when the listing was asked for
	Listed     []model.Snapshot
}

// SnapshotSync records a listing of p.Repository that was asked for at p.ListedAt: listed
// snapshots are added or marked seen, and those missing from it are marked forgotten, unless a
// newer listing saw them (or a run's ending recorded them after p.ListedAt). Protections are
// never changed here.
//
// A row recorded from a backup's summary (model.SourceSummary) is completed by the listing: its
// facts become restic's (time, host, tags, paths, and the job and run of its tags) and its
// source model.SourceListing. One with a short id is completed in place, its id becoming the
// full id, keeping its protections and first_seen_at, if exactly one listed id starts with it
// and that snapshot carries the row's run tag; otherwise it is not merged into anything, and,
// absent from the listing, it is marked forgotten like any other.
func (s *Store) SnapshotSync(ctx context.Context, p SnapshotSyncParams) (added, forgotten int, err error) {
	type row struct {
		ID      string     `json:"id"`
		Time    time.Time  `json:"time"`
		Host    string     `json:"host"`
		Tags    []string   `json:"tags"`
		Paths   []string   `json:"paths"`
		JobName *string    `json:"job_name"`
		RunID   *uuid.UUID `json:"run_id"`
	}
	rows := make([]row, len(p.Listed))
	ids := make([]string, len(p.Listed))
	for i, l := range p.Listed {
		rows[i] = row{ID: l.ID, Time: l.Time, Host: l.Host, Tags: nonNil(l.Tags), Paths: nonNil(l.Paths),
			JobName: nullIfEmpty(l.JobName), RunID: l.RunID}
		ids[i] = l.ID
	}
	doc, err := json.Marshal(rows)
	if err != nil {
		return 0, 0, fmt.Errorf("sync snapshots of %s: %w", p.Repository, err)
	}
	err = inTx(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockInventory(ctx, tx, p.Repository); err != nil {
			return err
		}
		// Short ids from summaries first, so that the listing's rows below find them completed
		// rather than adding a second row of the same snapshot. The ids are hex digits only
		// (the table's check), so LIKE reads them literally.
		if _, err := tx.Exec(ctx, `
			WITH listed AS (SELECT x.id, x.run_id FROM jsonb_to_recordset($2::jsonb) AS x(id text, run_id uuid)),
			m AS (
				SELECT s.id AS short, min(l.id) AS full_id
				FROM snapshots s JOIN listed l ON l.id LIKE s.id || '%'
				WHERE s.repository = $1 AND s.source = 'summary' AND length(s.id) < 64
				GROUP BY s.id, s.run_id
				HAVING count(*) = 1 AND bool_and(l.run_id = s.run_id)),
			one AS (SELECT * FROM m WHERE (SELECT count(*) FROM m o WHERE o.full_id = m.full_id) = 1)
			UPDATE snapshots s SET id = one.full_id
			FROM one WHERE s.repository = $1 AND s.id = one.short
				AND NOT EXISTS (SELECT 1 FROM snapshots o WHERE o.repository = $1 AND o.id = one.full_id)`,
			p.Repository, doc); err != nil {
			return err
		}
		// xmax = 0 tells an inserted row from an updated one.
		r, err := tx.Query(ctx, `
			INSERT INTO snapshots AS s (repository, id, time, host, tags, paths, job_name, run_id, first_seen_at, seen_at, source)
			SELECT $1, x.id, x.time, x.host, coalesce(x.tags, '{}'), coalesce(x.paths, '{}'), x.job_name, x.run_id, $3, $3, 'listing'
			FROM jsonb_to_recordset($2::jsonb) AS x(id text, time timestamptz, host text, tags text[], paths text[],
				job_name text, run_id uuid)
			ON CONFLICT (repository, id) DO UPDATE SET seen_at = greatest(s.seen_at, excluded.seen_at),
				forgotten_at = CASE WHEN excluded.seen_at >= s.seen_at THEN NULL ELSE s.forgotten_at END,
				tags = excluded.tags,
				-- A row from a summary takes restic's own facts; a listed row keeps them.
				time = CASE WHEN s.source = 'summary' THEN excluded.time ELSE s.time END,
				host = CASE WHEN s.source = 'summary' THEN excluded.host ELSE s.host END,
				paths = CASE WHEN s.source = 'summary' THEN excluded.paths ELSE s.paths END,
				job_name = CASE WHEN s.source = 'summary' THEN excluded.job_name ELSE s.job_name END,
				run_id = CASE WHEN s.source = 'summary' THEN excluded.run_id ELSE s.run_id END,
				source = 'listing'
			RETURNING xmax = 0`, p.Repository, doc, p.ListedAt)
		if err != nil {
			return err
		}
		inserted, err := pgx.CollectRows(r, pgx.RowTo[bool])
		if err != nil {
			return err
		}
		for _, ins := range inserted {
			if ins {
				added++
			}
		}
		tag, err := tx.Exec(ctx, `
			UPDATE snapshots SET forgotten_at = $3
			WHERE repository = $1 AND forgotten_at IS NULL AND seen_at < $3 AND NOT (id = ANY($2))`,
			p.Repository, ids, p.ListedAt)
		if err != nil {
			return err
		}
		forgotten = int(tag.RowsAffected())
		crashpoint.At("inventory-before-commit")
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("sync snapshots of %s: %w", p.Repository, err)
	}
	return added, forgotten, nil
}

// recordSnapshot adds the snapshot a run made to the inventory, inside the transaction that
// ends the run (AttemptFinish), seen at at. Its id may come from the run's journal, which the job's
// user can write: an id that is not 8 to 64 hex digits (64 for a listed one) records nothing,
// and the row is only ever added, never merged into or written over an existing one. Nothing is
// added either if a row of the repository already has that id, starts with it or is its start:
// that is the same snapshot already known (a listing came first), or an id that names no
// snapshot of this run, which the next listing sorts out.
func recordSnapshot(ctx context.Context, tx pgx.Tx, snap *model.Snapshot, at time.Time) error {
	if snap == nil || snap.Repository == "" {
		return nil
	}
	valid := summaryID
	if snap.Source != model.SourceSummary {
		valid = listedID
	}
	if !valid().MatchString(snap.ID) {
		return nil
	}
	source := cmp.Or(snap.Source, model.SourceListing)
	if err := lockInventory(ctx, tx, snap.Repository); err != nil {
		return err
	}
	// The shorter ids this one starts with, as far as a summary may shorten one.
	var prefixes []string
	for n := 8; n < len(snap.ID); n++ {
		prefixes = append(prefixes, snap.ID[:n])
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO snapshots (repository, id, time, host, tags, paths, job_name, run_id, first_seen_at, seen_at, source)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10
		WHERE NOT EXISTS (SELECT 1 FROM snapshots s WHERE s.repository = $1 AND (s.id LIKE $2 || '%' OR s.id = ANY($11)))
		ON CONFLICT (repository, id) DO NOTHING`,
		snap.Repository, snap.ID, snap.Time, snap.Host, nonNil(snap.Tags), nonNil(snap.Paths), nullIfEmpty(snap.JobName),
		snap.RunID, at, source, prefixes)
	return err
}

// SnapshotList lists the snapshots of a repository that are still in it, newest first, whoever
// made them. With repository "" it lists those of every repository.
func (s *Store) SnapshotList(ctx context.Context, repository string) ([]model.Snapshot, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+snapshotColumns+` FROM snapshots s
		WHERE ($1 = '' OR s.repository = $1) AND s.forgotten_at IS NULL
		ORDER BY s.time DESC, s.id`, repository)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	snaps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Snapshot, error) { return scanSnapshot(r) })
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return snaps, nil
}

// snapshotByPrefix resolves an id prefix (validated by the caller: hex digits only) among the
// snapshots still in their repository and locks the row.
func snapshotByPrefix(ctx context.Context, tx pgx.Tx, prefix string) (model.Snapshot, error) {
	rows, err := tx.Query(ctx, `SELECT `+snapshotColumns+` FROM snapshots s
		WHERE s.id LIKE $1 || '%' AND s.forgotten_at IS NULL ORDER BY s.id LIMIT 2 FOR UPDATE`, prefix)
	if err != nil {
		return model.Snapshot{}, err
	}
	snaps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Snapshot, error) { return scanSnapshot(r) })
	if err != nil {
		return model.Snapshot{}, err
	}
	switch len(snaps) {
	case 0:
		return model.Snapshot{}, setting.Errorf("snapshot %s: %w (holdfast snapshot list {SnapshotList.Refresh} JOB reads the repository again)", prefix, ErrNotFound)
	case 1:
		return snaps[0], nil
	}
	return model.Snapshot{}, fmt.Errorf("snapshot %s: %w: %s and %s both match; give more digits", prefix, ErrAmbiguous, shortID(snaps[0].ID), shortID(snaps[1].ID))
}

// SnapshotHoldParams is a legal hold to put on a snapshot.
type SnapshotHoldParams struct {
	Prefix string // the snapshot's id or a unique prefix of it
	By     string
	Why    string
}

// SnapshotHold puts a snapshot under legal hold: no plan deletes it until it is released.
func (s *Store) SnapshotHold(ctx context.Context, p SnapshotHoldParams) (model.Snapshot, error) {
	return s.protect(ctx, p.Prefix, func(tx pgx.Tx, snap model.Snapshot) (pgx.Row, error) {
		return tx.QueryRow(ctx, `UPDATE snapshots s SET legal_hold_at = coalesce(legal_hold_at, now()),
			legal_hold_by = $3, legal_hold_why = nullif($4, '')
			WHERE repository = $1 AND id = $2 RETURNING `+snapshotColumns, snap.Repository, snap.ID, p.By, p.Why), nil
	})
}

// SnapshotRelease lifts a snapshot's legal hold. Immutability, if any, stays.
func (s *Store) SnapshotRelease(ctx context.Context, prefix string) (model.Snapshot, error) {
	return s.protect(ctx, prefix, func(tx pgx.Tx, snap model.Snapshot) (pgx.Row, error) {
		if snap.LegalHoldAt == nil {
			return nil, &ConflictError{Msg: fmt.Sprintf("snapshot %s is not under legal hold", shortID(snap.ID))}
		}
		return tx.QueryRow(ctx, `UPDATE snapshots s SET legal_hold_at = NULL, legal_hold_by = NULL, legal_hold_why = NULL
			WHERE repository = $1 AND id = $2 RETURNING `+snapshotColumns, snap.Repository, snap.ID), nil
	})
}

// SnapshotLockParams is an immutability to put on a snapshot.
type SnapshotLockParams struct {
	Prefix string // the snapshot's id or a unique prefix of it
	Until  time.Time
	By     string
}

// SnapshotLock makes a snapshot immutable until p.Until. Immutability can be extended,
// never shortened: that is what makes it immutability.
func (s *Store) SnapshotLock(ctx context.Context, p SnapshotLockParams) (model.Snapshot, error) {
	return s.protect(ctx, p.Prefix, func(tx pgx.Tx, snap model.Snapshot) (pgx.Row, error) {
		if snap.ImmutableUntil != nil && p.Until.Before(*snap.ImmutableUntil) {
			return nil, &ConflictError{Msg: fmt.Sprintf("snapshot %s is immutable until %s: immutability can be extended, not shortened",
				shortID(snap.ID), snap.ImmutableUntil.UTC().Format(time.RFC3339))}
		}
		return tx.QueryRow(ctx, `UPDATE snapshots s SET immutable_until = $3, immutable_by = $4
			WHERE repository = $1 AND id = $2 RETURNING `+snapshotColumns, snap.Repository, snap.ID, p.Until, p.By), nil
	})
}

func (s *Store) protect(ctx context.Context, prefix string, change func(pgx.Tx, model.Snapshot) (pgx.Row, error)) (model.Snapshot, error) {
	var out model.Snapshot
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		snap, err := snapshotByPrefix(ctx, tx, prefix)
		if err != nil {
			return err
		}
		row, err := change(tx, snap)
		if err != nil {
			return err
		}
		if out, err = scanSnapshot(row); err != nil {
			return err
		}
		crashpoint.At("protect-before-commit")
		return nil
	})
	if err != nil {
		return model.Snapshot{}, wrap(err, "protect snapshot %s", prefix)
	}
	crashpoint.At("protect-after")
	return out, nil
}

// protectedAmong returns which of the ids are protected at t, locking all their rows so that no
// protection can be added or lifted until tx ends.
func protectedAmong(ctx context.Context, tx pgx.Tx, repository string, ids []string, t time.Time) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT id, legal_hold_at IS NOT NULL OR coalesce(immutable_until > $3, false) FROM snapshots
		WHERE repository = $1 AND id = ANY($2) ORDER BY id FOR SHARE`, repository, ids, t)
	if err != nil {
		return nil, err
	}
	var protected []string
	var id string
	var isProtected bool
	_, err = pgx.ForEachRow(rows, []any{&id, &isProtected}, func() error {
		if isProtected {
			protected = append(protected, id)
		}
		return nil
	})
	return protected, err
}

// SnapshotProtectedAmongParams are snapshots of a repository whose protections are asked for.
type SnapshotProtectedAmongParams struct {
	Repository string
	IDs        []string
	At         time.Time
}

// SnapshotProtectedAmong returns which of p.IDs of p.Repository are protected at p.At.
func (s *Store) SnapshotProtectedAmong(ctx context.Context, p SnapshotProtectedAmongParams) ([]string, error) {
	var out []string
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = protectedAmong(ctx, tx, p.Repository, p.IDs, p.At)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check protections in %s: %w", p.Repository, err)
	}
	return out, nil
}

// SnapshotCatalogListParams names the snapshots a host keeps catalogs of (package catalog).
type SnapshotCatalogListParams struct {
	Host         string // the daemon's host: jobs pinned to it, or to no host
	SnapshotHost string // restic's host of the snapshots: those this machine made
	Keep         int    // the newest this many of each job
}

// SnapshotCatalogList lists, for each job with a catalog (Job.Backup.Catalog) that may run on
// p.Host, its newest p.Keep snapshots still in the repository that p.SnapshotHost made, each as
// its job's name and id, by job and newest first. It reads each job's newest rows by the
// snapshots_job index: the cost is the host's catalogued jobs', not the inventory's.
func (s *Store) SnapshotCatalogList(ctx context.Context, p SnapshotCatalogListParams) ([]model.Snapshot, error) {
	rows, err := s.pool.Query(ctx, `SELECT j.name, s.id, s.time FROM jobs j
		CROSS JOIN LATERAL (SELECT s.id, s.time FROM snapshots s
			WHERE s.job_name = j.name AND s.forgotten_at IS NULL AND s.host = $2
			ORDER BY s.time DESC, s.id LIMIT $3) s
		WHERE j.catalog AND coalesce(j.host, '') IN ('', $1)
		ORDER BY j.name, s.time DESC, s.id`, p.Host, p.SnapshotHost, p.Keep)
	if err != nil {
		return nil, fmt.Errorf("list snapshots to catalog: %w", err)
	}
	snaps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Snapshot, error) {
		var s model.Snapshot
		err := r.Scan(&s.JobName, &s.ID, &s.Time)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("list snapshots to catalog: %w", err)
	}
	return snaps, nil
}
