-- +goose Up
-- When a job is overdue (docs/ARCHITECTURE.md, Watching). alert_after: the grace after a slot
-- (NULL: one period of the schedule); alert_failures: that many runs in a row not succeeded (0:
-- never); expect_every: a manual job's expected success. overdue_since and overdue_reason are the
-- current episode, set and cleared by the daemons with its event.
ALTER TABLE jobs
    ADD COLUMN alert_after    interval CHECK (alert_after > '0'),
    ADD COLUMN alert_failures integer NOT NULL DEFAULT 2 CHECK (alert_failures BETWEEN 0 AND 1000),
    ADD COLUMN expect_every   interval CHECK (expect_every > '0'),
    ADD COLUMN overdue_since  timestamptz,
    ADD COLUMN overdue_reason text;

-- The outbox: each event that must reach people, written in the transaction of the change that
-- causes it. seq orders them; id is the idempotency key receivers see.
CREATE TABLE events (
    id       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq      bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    event    text NOT NULL CHECK (event IN ('started', 'succeeded', 'partial', 'failed', 'stopped', 'paused',
                                            'overdue', 'recovered', 'stalled')),
    job_name text NOT NULL,
    run_id   uuid,
    attempt  integer,
    status   text NOT NULL DEFAULT '',
    reason   text NOT NULL DEFAULT '',
    at       timestamptz NOT NULL DEFAULT now(),
    host     text NOT NULL DEFAULT '',
    details  jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX events_job ON events (job_name, seq);

-- A run's status change that people hear of is an event, whichever statement made it: the run
-- started (queued to running), or it ended or paused.
-- +goose StatementBegin
CREATE FUNCTION holdfast_run_event() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER runs_event AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION holdfast_run_event();

-- +goose Down
DROP TRIGGER runs_event ON runs;
DROP FUNCTION holdfast_run_event();
DROP TABLE events;
ALTER TABLE jobs DROP COLUMN alert_after, DROP COLUMN alert_failures, DROP COLUMN expect_every,
    DROP COLUMN overdue_since, DROP COLUMN overdue_reason;
