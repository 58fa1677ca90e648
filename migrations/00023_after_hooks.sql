-- +goose Up
-- A job's after hooks run in the backup's unit after the engine (or after a before hook ended the
-- attempt), whatever the outcome; the first failure of one is kept with the attempt (hook_error)
-- and named in the run's reason, never changing its status.
ALTER TABLE jobs ADD COLUMN after_hooks text[] NOT NULL DEFAULT '{}';
ALTER TABLE attempts ADD COLUMN hook_error text;

-- +goose Down
ALTER TABLE attempts DROP COLUMN hook_error;
ALTER TABLE jobs DROP COLUMN after_hooks;
