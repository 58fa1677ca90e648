-- +goose Up
-- A job's environment file (e.g. AWS_*, B2_* for a remote repository) is named here, never
-- read into the database: systemd hands it to the job's units as a credential.
ALTER TABLE jobs ADD COLUMN env_file text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE jobs DROP COLUMN env_file;
