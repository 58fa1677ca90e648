-- +goose Up
CREATE TABLE jobs (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    engine              text NOT NULL DEFAULT 'restic' CHECK (engine IN ('restic', 'command')),
    repository          text NOT NULL,
    password_file       text NOT NULL,
    paths               text[] NOT NULL CHECK (cardinality(paths) > 0),
    excludes            text[] NOT NULL DEFAULT '{}',
    run_as_user         text NOT NULL DEFAULT '',
    run_as_group        text NOT NULL DEFAULT '',
    nice                integer CHECK (nice BETWEEN -20 AND 19),
    io_scheduling_class text NOT NULL DEFAULT '' CHECK (io_scheduling_class IN ('', 'realtime', 'best-effort', 'idle')),
    runtime_max         interval,
    created_at          timestamptz NOT NULL DEFAULT now(),
    last_outcome        text,
    last_run_id         uuid
);

CREATE TABLE runs (
    id                uuid PRIMARY KEY,
    -- job_name survives the job's removal so the history still reads.
    job_id            bigint REFERENCES jobs (id) ON DELETE SET NULL,
    job_name          text NOT NULL,
    trigger           text NOT NULL CHECK (trigger IN ('schedule', 'manual', 'retry', 'dependency', 'catch-up')),
    status            text NOT NULL DEFAULT 'queued'
                      CHECK (status IN ('queued', 'running', 'succeeded', 'partial', 'failed', 'stopped', 'paused')),
    paused_reason     text,
    stop_requested_at timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz,
    reason            text NOT NULL DEFAULT '',
    failure_class     text NOT NULL DEFAULT '' CHECK (failure_class IN ('', 'permanent', 'transient')),
    snapshot_id       text,
    bytes_added       bigint,
    bytes_processed   bigint,
    files_processed   bigint,
    files_skipped     bigint NOT NULL DEFAULT 0
);
CREATE INDEX runs_job_created ON runs (job_name, created_at DESC);
CREATE INDEX runs_live ON runs (created_at) WHERE status IN ('queued', 'running');

CREATE TABLE attempts (
    run_id            uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    attempt_no        integer NOT NULL CHECK (attempt_no >= 1),
    unit              text UNIQUE,
    host              text NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    spawn_claimed_at  timestamptz,
    started_at        timestamptz,
    ended_at          timestamptz,
    service_result    text,
    exit_code         text,
    exit_status       text, -- a number when exit_code is 'exited', a signal name otherwise
    -- The journal cursor: where the projection stands in the attempt's run journal.
    journal_offset    bigint NOT NULL DEFAULT 0,
    journal_last_seq  bigint NOT NULL DEFAULT 0,
    journal_last_hash text NOT NULL DEFAULT '',
    quarantined_at    timestamptz,
    quarantine_reason text,
    -- The projection: what the journal said, materialized.
    last_event_at     timestamptz,
    percent_done      double precision,
    files_done        bigint,
    total_files       bigint,
    bytes_done        bigint,
    total_bytes       bigint,
    item_errors       bigint NOT NULL DEFAULT 0,
    first_item_error  text,
    fatal             text,
    summary           jsonb,
    PRIMARY KEY (run_id, attempt_no)
);
-- A run never has two live attempts.
CREATE UNIQUE INDEX attempts_one_live ON attempts (run_id) WHERE ended_at IS NULL;

-- +goose Down
DROP TABLE attempts;
DROP TABLE runs;
DROP TABLE jobs;
