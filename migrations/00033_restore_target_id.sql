-- +goose Up
-- A restore's target as root found it when the restore was admitted ("device:inode"): every
-- spawn of the restore refuses a target that is no longer that directory.
ALTER TABLE runs ADD COLUMN restore_target_id text;

-- +goose Down
ALTER TABLE runs DROP COLUMN restore_target_id;
