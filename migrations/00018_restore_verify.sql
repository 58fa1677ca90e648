-- +goose Up
-- Restores and verifications are runs too (docs/ARCHITECTURE.md, Data model). A restore gives
-- back one snapshot, resolved to its full id when it was asked for (a restart restores the same
-- tree even if a newer snapshot came meanwhile), into a target directory on the host that
-- asked. A verify run checks the repository (`restic check`, a subset of its data when given),
-- and a drill restores a sample of the latest snapshot's files and verifies them.
ALTER TABLE runs DROP CONSTRAINT runs_kind_check;
ALTER TABLE runs ADD CONSTRAINT runs_kind_check CHECK (kind IN ('backup', 'prune', 'forget', 'restore', 'verify'));
ALTER TABLE runs
    -- The host a run must run on whatever its job says: a restore runs where its target is.
    ADD COLUMN host                text,
    ADD COLUMN restore_target      text,
    ADD COLUMN restore_snapshot    text,
    ADD COLUMN restore_includes    text[] NOT NULL DEFAULT '{}',
    -- The snapshot's size and file count as restic gave them when the restore was asked for:
    -- the totals of its progress. NULL: unknown (a restore of some paths only).
    ADD COLUMN restore_total_bytes bigint,
    ADD COLUMN restore_total_files bigint,
    -- restic check's --read-data-subset ('' reads no data: the structure only).
    ADD COLUMN verify_subset       text NOT NULL DEFAULT '',
    -- A drill restores this many files of the latest snapshot; 0 is no drill.
    ADD COLUMN drill_files         integer NOT NULL DEFAULT 0 CHECK (drill_files >= 0),
    ADD CONSTRAINT runs_restore_has_target CHECK ((kind = 'restore') = (restore_target IS NOT NULL)),
    ADD CONSTRAINT runs_restore_has_snapshot CHECK ((kind = 'restore') = (restore_snapshot IS NOT NULL)),
    ADD CONSTRAINT runs_restore_target_absolute CHECK (restore_target IS NULL OR restore_target LIKE '/_%'),
    ADD CONSTRAINT runs_verify_fields CHECK (kind = 'verify' OR (verify_subset = '' AND drill_files = 0));

-- A job's verifications: when they run (a schedule like its backups', in the same zone; '' never)
-- and how much of the data each reads, and how old its last successful one may be before the job
-- is overdue for it (NULL: two periods of the verify schedule).
ALTER TABLE jobs
    ADD COLUMN verify_schedule    text NOT NULL DEFAULT '',
    ADD COLUMN next_verify_at     timestamptz,
    ADD COLUMN verify_read_data   text NOT NULL DEFAULT '',
    ADD COLUMN verify_alert_after interval CHECK (verify_alert_after > '0'),
    -- When the verify schedule was set: a job is expected to have been verified since.
    ADD COLUMN verify_since       timestamptz;
CREATE INDEX jobs_verify_due ON jobs (next_verify_at) WHERE next_verify_at IS NOT NULL;
-- A job's restore drills: when they run, and how many files each restores and verifies.
ALTER TABLE jobs
    ADD COLUMN drill_schedule text NOT NULL DEFAULT '',
    ADD COLUMN next_drill_at  timestamptz,
    ADD COLUMN drill_files    integer NOT NULL DEFAULT 0 CHECK (drill_files BETWEEN 0 AND 1000);
CREATE INDEX jobs_drill_due ON jobs (next_drill_at) WHERE next_drill_at IS NOT NULL;

-- The last verification, drill and restore of a job are read by kind (the watch, status, the
-- metrics): one index lookup each, not a walk through the job's history.
CREATE INDEX runs_job_kind ON runs (job_id, kind, finished_at DESC);

-- A verification's ending is its own event, so that a target hears of a repository that could
-- not be verified apart from a backup that failed: 'verified' or 'verify_failed' instead of
-- 'succeeded' or 'failed'.
ALTER TABLE events DROP CONSTRAINT events_event_check;
ALTER TABLE events ADD CONSTRAINT events_event_check CHECK (event IN ('started', 'succeeded', 'partial', 'failed',
    'stopped', 'paused', 'overdue', 'recovered', 'stalled', 'host_down', 'host_back', 'verified', 'verify_failed'));
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION holdfast_run_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    a attempts%ROWTYPE;
    ev text;
BEGIN
    IF NEW.status NOT IN ('running', 'succeeded', 'partial', 'failed', 'stopped', 'paused') THEN
        RETURN NULL;
    END IF;
    ev := CASE NEW.status WHEN 'running' THEN 'started' ELSE NEW.status END;
    IF NEW.kind = 'verify' AND NEW.status = 'succeeded' THEN
        ev := 'verified';
    ELSIF NEW.kind = 'verify' AND NEW.status IN ('failed', 'partial') THEN
        ev := 'verify_failed';
    END IF;
    SELECT * INTO a FROM attempts WHERE run_id = NEW.id ORDER BY attempt_no DESC LIMIT 1;
    INSERT INTO events (event, job_name, run_id, attempt, status, reason, host, details)
    VALUES (ev, NEW.job_name, NEW.id,
            a.attempt_no, NEW.status, coalesce(NEW.reason, ''), coalesce(a.host, ''),
            jsonb_strip_nulls(jsonb_build_object('kind', NEW.kind, 'trigger', NEW.trigger,
                'snapshot_id', coalesce(NEW.snapshot_id, NEW.restore_snapshot), 'bytes_added', NEW.bytes_added,
                'failure_class', nullif(NEW.failure_class, ''), 'paused_reason', NEW.paused_reason,
                'restore_target', NEW.restore_target, 'read_data_subset', nullif(NEW.verify_subset, ''),
                'drill_files', nullif(NEW.drill_files, 0))));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION holdfast_run_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    a attempts%ROWTYPE;
BEGIN
    IF NEW.status NOT IN ('running', 'succeeded', 'partial', 'failed', 'stopped', 'paused') THEN
        RETURN NULL;
    END IF;
    SELECT * INTO a FROM attempts WHERE run_id = NEW.id ORDER BY attempt_no DESC LIMIT 1;
    INSERT INTO events (event, job_name, run_id, attempt, status, reason, host, details)
    VALUES (CASE NEW.status WHEN 'running' THEN 'started' ELSE NEW.status END, NEW.job_name, NEW.id,
            a.attempt_no, NEW.status, coalesce(NEW.reason, ''), coalesce(a.host, ''),
            jsonb_strip_nulls(jsonb_build_object('kind', NEW.kind, 'trigger', NEW.trigger,
                'snapshot_id', NEW.snapshot_id, 'bytes_added', NEW.bytes_added,
                'failure_class', nullif(NEW.failure_class, ''), 'paused_reason', NEW.paused_reason)));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
DELETE FROM deliveries WHERE event_id IN (SELECT id FROM events WHERE event IN ('verified', 'verify_failed'));
DELETE FROM events WHERE event IN ('verified', 'verify_failed');
ALTER TABLE events DROP CONSTRAINT events_event_check;
ALTER TABLE events ADD CONSTRAINT events_event_check CHECK (event IN ('started', 'succeeded', 'partial', 'failed',
    'stopped', 'paused', 'overdue', 'recovered', 'stalled', 'host_down', 'host_back'));
DROP INDEX runs_job_kind;
DROP INDEX jobs_drill_due;
ALTER TABLE jobs DROP COLUMN drill_schedule, DROP COLUMN next_drill_at, DROP COLUMN drill_files;
DROP INDEX jobs_verify_due;
ALTER TABLE jobs DROP COLUMN verify_schedule, DROP COLUMN next_verify_at, DROP COLUMN verify_read_data,
    DROP COLUMN verify_alert_after, DROP COLUMN verify_since;
DELETE FROM attempts WHERE run_id IN (SELECT id FROM runs WHERE kind IN ('restore', 'verify'));
DELETE FROM runs WHERE kind IN ('restore', 'verify');
ALTER TABLE runs DROP CONSTRAINT runs_restore_has_target, DROP CONSTRAINT runs_restore_has_snapshot,
    DROP CONSTRAINT runs_restore_target_absolute, DROP CONSTRAINT runs_verify_fields,
    DROP COLUMN host, DROP COLUMN restore_target, DROP COLUMN restore_snapshot, DROP COLUMN restore_includes,
    DROP COLUMN restore_total_bytes, DROP COLUMN restore_total_files, DROP COLUMN verify_subset, DROP COLUMN drill_files;
ALTER TABLE runs DROP CONSTRAINT runs_kind_check;
ALTER TABLE runs ADD CONSTRAINT runs_kind_check CHECK (kind IN ('backup', 'prune', 'forget'));
