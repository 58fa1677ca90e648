-- +goose Up
ALTER TABLE jobs
    ADD COLUMN command        text[] NOT NULL DEFAULT '{}',
    ADD COLUMN schedule       text NOT NULL DEFAULT '',
    ADD COLUMN time_zone      text NOT NULL DEFAULT '',
    ADD COLUMN catch_up       boolean NOT NULL DEFAULT false,
    ADD COLUMN next_run_at    timestamptz,
    ADD COLUMN missed_slots   bigint NOT NULL DEFAULT 0,
    ADD COLUMN overlap_skips  bigint NOT NULL DEFAULT 0,
    ADD COLUMN last_skip_at   timestamptz,
    ADD COLUMN last_skip_why  text,
    ADD COLUMN retry_max      integer NOT NULL DEFAULT 0 CHECK (retry_max BETWEEN 0 AND 100),
    ADD COLUMN retry_backoff  interval NOT NULL DEFAULT '1 minute',
    ADD COLUMN windows        text[] NOT NULL DEFAULT '{}',
    ADD COLUMN priority       integer NOT NULL DEFAULT 0,
    ADD COLUMN depends_on     text;
CREATE INDEX jobs_due ON jobs (next_run_at) WHERE next_run_at IS NOT NULL;
-- A command job has a command, not paths.
ALTER TABLE jobs DROP CONSTRAINT jobs_paths_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_what_to_run CHECK
    (CASE engine WHEN 'restic' THEN cardinality(paths) > 0 ELSE cardinality(command) > 0 END);

ALTER TABLE runs
    ADD COLUMN planned_at     timestamptz,
    ADD COLUMN not_before     timestamptz,
    ADD COLUMN waiting_reason text,
    ADD COLUMN retry_of       uuid REFERENCES runs (id),
    ADD COLUMN retry_number   integer NOT NULL DEFAULT 0,
    ADD COLUMN retried_by     uuid,
    -- A prune needs its repository to itself; backups may share one.
    ADD COLUMN kind           text NOT NULL DEFAULT 'backup' CHECK (kind IN ('backup', 'prune'));
-- A slot is admitted once, however many daemons claim it.
CREATE UNIQUE INDEX runs_one_per_slot ON runs (job_id, planned_at) WHERE planned_at IS NOT NULL;

-- +goose Down
DROP INDEX runs_one_per_slot;
ALTER TABLE runs DROP COLUMN planned_at, DROP COLUMN not_before, DROP COLUMN waiting_reason,
    DROP COLUMN retry_of, DROP COLUMN retry_number, DROP COLUMN retried_by, DROP COLUMN kind;
DROP INDEX jobs_due;
ALTER TABLE jobs DROP CONSTRAINT jobs_what_to_run;
ALTER TABLE jobs ADD CONSTRAINT jobs_paths_check CHECK (cardinality(paths) > 0);
ALTER TABLE jobs DROP COLUMN command, DROP COLUMN schedule, DROP COLUMN time_zone, DROP COLUMN catch_up,
    DROP COLUMN next_run_at, DROP COLUMN missed_slots, DROP COLUMN overlap_skips, DROP COLUMN last_skip_at,
    DROP COLUMN last_skip_why, DROP COLUMN retry_max, DROP COLUMN retry_backoff, DROP COLUMN windows,
    DROP COLUMN priority, DROP COLUMN depends_on;
