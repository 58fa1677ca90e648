-- +goose Up
-- A restore that puts its paths back where they were (restore --to-original): its target is
-- then the directory its stage is made in, and restore_overwrite lets it replace what has
-- changed there since the snapshot.
ALTER TABLE runs ADD COLUMN restore_to_original boolean NOT NULL DEFAULT false;
ALTER TABLE runs ADD COLUMN restore_overwrite boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE runs DROP COLUMN restore_overwrite;
ALTER TABLE runs DROP COLUMN restore_to_original;
