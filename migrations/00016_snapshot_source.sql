-- +goose Up
-- Where an inventory row came from (docs/ARCHITECTURE.md, Data model). 'listing': restic listed
-- the snapshot (`restic snapshots`, a full listing or the repair channel's). 'summary': a
-- backup's own summary in its run journal, recorded with the run's ending; restic 0.14 gives only
-- the 8-hex short id there, so such a row may carry a short id until a listing completes it in
-- place (store.SyncSnapshots). Only a summary row may have a short id.
ALTER TABLE snapshots ADD COLUMN source text NOT NULL DEFAULT 'listing' CHECK (source IN ('summary', 'listing'));
ALTER TABLE snapshots DROP CONSTRAINT snapshots_id_check;
ALTER TABLE snapshots ADD CONSTRAINT snapshots_id_check
    CHECK (id ~ '^[0-9a-f]{64}$' OR (source = 'summary' AND id ~ '^[0-9a-f]{8,63}$'));

-- +goose Down
-- Rows known only by a short id cannot be kept under the old key; the next listing adds their
-- snapshots again (without the protections set on the short rows).
DELETE FROM snapshots WHERE id !~ '^[0-9a-f]{64}$';
ALTER TABLE snapshots DROP CONSTRAINT snapshots_id_check;
ALTER TABLE snapshots DROP COLUMN source;
ALTER TABLE snapshots ADD CONSTRAINT snapshots_id_check CHECK (id ~ '^[0-9a-f]{64}$');
