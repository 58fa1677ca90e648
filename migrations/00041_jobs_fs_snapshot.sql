-- +goose Up
-- A job whose backups read a read-only file system snapshot of its paths, taken as each attempt
-- starts and mounted over them in its unit ('' none, 'btrfs'; job add --fs-snapshot).
ALTER TABLE jobs ADD COLUMN fs_snapshot text NOT NULL DEFAULT '' CHECK (fs_snapshot IN ('', 'btrfs'));

-- +goose Down
ALTER TABLE jobs DROP COLUMN fs_snapshot;
