-- +goose Up
-- A job whose snapshots the host lists once, after each backup, into a catalog on its disk, so
-- that browsing them needs no restic (job add --catalog).
ALTER TABLE jobs ADD COLUMN catalog boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE jobs DROP COLUMN catalog;
