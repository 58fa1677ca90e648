-- +goose Up
-- restic's --limit-upload for a job's runs, in KiB/s; 0 none.
ALTER TABLE jobs ADD COLUMN limit_upload_kib integer NOT NULL DEFAULT 0 CHECK (limit_upload_kib >= 0);

-- +goose Down
ALTER TABLE jobs DROP COLUMN limit_upload_kib;
