-- +goose Up
-- A daemon's periodic reads find its own host's rows through these indexes (docs/ARCHITECTURE.md,
-- Several hosts, "What each daemon reads"), so that their cost does not grow with the fleet or
-- with history: a job's live runs without reading its history, the live runs pinned to a host
-- (a restore), those of removed jobs, the jobs pinned to a host, and the hosts that are down.
CREATE INDEX runs_live_job ON runs (job_id) WHERE status IN ('queued', 'running');
CREATE INDEX runs_live_host ON runs (host) WHERE status IN ('queued', 'running') AND host IS NOT NULL;
CREATE INDEX runs_live_unowned ON runs (created_at) WHERE status IN ('queued', 'running') AND job_id IS NULL;
CREATE INDEX jobs_host ON jobs (host);
CREATE INDEX hosts_lease ON hosts (lease_until);

-- Duties of the fleet that one daemon does per interval, whichever claims it first (ClaimDuty):
-- next_at is when the duty is due again, holder the host that did it last.
CREATE TABLE duties (
    name    text PRIMARY KEY,
    next_at timestamptz NOT NULL,
    holder  text NOT NULL
);

-- A new delivery wakes the daemon of its event's host (of the daemon that noticed a host down,
-- for host_down), or every daemon for an event of none, not every daemon of the fleet: the
-- payload says whose it is, as on holdfast_runs.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION holdfast_event_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deliveries (event_id, target)
    SELECT NEW.id, t.name FROM notify_targets t
    WHERE NEW.event = ANY (t.events) AND (t.job_name IS NULL OR t.job_name = NEW.job_name);
    IF FOUND THEN
        PERFORM pg_notify('holdfast_deliveries', 'host:' || coalesce(NEW.details->>'noticed_by', NEW.host));
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION holdfast_event_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deliveries (event_id, target)
    SELECT NEW.id, t.name FROM notify_targets t
    WHERE NEW.event = ANY (t.events) AND (t.job_name IS NULL OR t.job_name = NEW.job_name);
    IF FOUND THEN
        PERFORM pg_notify('holdfast_deliveries', '');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
DROP TABLE duties;
DROP INDEX hosts_lease;
DROP INDEX jobs_host;
DROP INDEX runs_live_unowned;
DROP INDEX runs_live_host;
DROP INDEX runs_live_job;
