-- +goose Up
-- A job's before hooks: command lines (split by shell word rules, never run by a shell) run in
-- the backup's unit, as the job's user, before the engine; one that fails fails the run.
ALTER TABLE jobs ADD COLUMN before_hooks text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE jobs DROP COLUMN before_hooks;
