-- +goose Up
-- A backup a before hook skipped (exit 75): final, neither a success nor a failure, no snapshot.
-- Its job counts it (hook_skips) and keeps why, beside the slots it skipped (last_skip_*).
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'succeeded', 'partial', 'failed', 'stopped', 'paused', 'skipped'));
ALTER TABLE events DROP CONSTRAINT events_event_check;
ALTER TABLE events ADD CONSTRAINT events_event_check CHECK (event IN ('started', 'succeeded', 'partial', 'failed',
    'stopped', 'paused', 'overdue', 'recovered', 'stalled', 'host_down', 'host_back', 'verified', 'verify_failed', 'skipped'));
ALTER TABLE jobs ADD COLUMN hook_skips integer NOT NULL DEFAULT 0;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION holdfast_run_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    a attempts%ROWTYPE;
    ev text;
BEGIN
    IF NEW.status NOT IN ('running', 'succeeded', 'partial', 'failed', 'stopped', 'paused', 'skipped') THEN
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
DELETE FROM deliveries WHERE event_id IN (SELECT id FROM events WHERE event = 'skipped');
DELETE FROM events WHERE event = 'skipped';
UPDATE runs SET status = 'failed', reason = reason || ' (skipped)' WHERE status = 'skipped';
UPDATE jobs SET last_outcome = 'failed' WHERE last_outcome = 'skipped';
ALTER TABLE jobs DROP COLUMN hook_skips;
ALTER TABLE events DROP CONSTRAINT events_event_check;
ALTER TABLE events ADD CONSTRAINT events_event_check CHECK (event IN ('started', 'succeeded', 'partial', 'failed',
    'stopped', 'paused', 'overdue', 'recovered', 'stalled', 'host_down', 'host_back', 'verified', 'verify_failed'));
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'succeeded', 'partial', 'failed', 'stopped', 'paused'));
