-- +goose Up
-- Hosts (docs/ARCHITECTURE.md, Several hosts): one row per daemon's host. A daemon holds its
-- host's lease (lease_until, renewed by its heartbeat); each time a daemon takes the lease anew,
-- generation goes up. holder names the process (machine id, boot, pid) so a daemon restarted on
-- the same machine takes over a dead holder's lease at once.
CREATE TABLE hosts (
    name           text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    version        text NOT NULL DEFAULT '',
    generation     bigint NOT NULL DEFAULT 1,
    holder         text NOT NULL DEFAULT '',
    lease_until    timestamptz NOT NULL,
    heartbeat_at   timestamptz NOT NULL DEFAULT now(),
    started_at     timestamptz NOT NULL DEFAULT now(),
    takeover_grace interval NOT NULL DEFAULT '30 seconds',
    draining_since timestamptz,
    -- Set when the host_down event went out (once per episode); cleared, with a host_back
    -- event, when a daemon takes the host's lease again.
    down_noticed_at timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- A host going down and coming back are events too; they name no job (job_name '').
ALTER TABLE events DROP CONSTRAINT events_event_check;
ALTER TABLE events ADD CONSTRAINT events_event_check CHECK (event IN ('started', 'succeeded', 'partial', 'failed',
    'stopped', 'paused', 'overdue', 'recovered', 'stalled', 'host_down', 'host_back'));

-- NULL: any host may run the job (its paths and repository are reachable from all of them).
ALTER TABLE jobs ADD COLUMN host text;
-- A job that ran before hosts existed stays where it last ran.
UPDATE jobs j SET host = (
    SELECT a.host FROM attempts a JOIN runs r ON r.id = a.run_id
    WHERE r.job_id = j.id AND a.host <> '' ORDER BY a.created_at DESC LIMIT 1);

-- The fence: the lease generation of the host when it claimed the attempt (NULL: claimed with
-- no lease, as before hosts existed). superseded_at/superseded_by: another host took the run
-- over because this attempt's host lost its lease; the attempt ended then.
ALTER TABLE attempts
    ADD COLUMN lease_generation bigint,
    ADD COLUMN superseded_at    timestamptz,
    ADD COLUMN superseded_by    text;
CREATE INDEX attempts_superseded ON attempts (host, superseded_at) WHERE superseded_at IS NOT NULL;
CREATE INDEX attempts_live_host ON attempts (host) WHERE ended_at IS NULL;

-- holdfast_lease_current is the fence every write about an attempt passes: the attempt was
-- claimed under no lease, or under its host's current lease generation and that lease has not
-- expired. A host back from a partition with an expired lease changes nothing until it takes
-- its lease again, and taking it again adopts only the attempts nobody took over.
-- +goose StatementBegin
CREATE FUNCTION holdfast_lease_current(attempt_host text, attempt_generation bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT attempt_generation IS NULL OR EXISTS (
        SELECT 1 FROM hosts h
        WHERE h.name = attempt_host AND h.generation = attempt_generation AND h.lease_until > now())
$$;
-- +goose StatementEnd

-- +goose Down
DELETE FROM events WHERE event IN ('host_down', 'host_back');
ALTER TABLE events DROP CONSTRAINT events_event_check;
ALTER TABLE events ADD CONSTRAINT events_event_check CHECK (event IN ('started', 'succeeded', 'partial', 'failed',
    'stopped', 'paused', 'overdue', 'recovered', 'stalled'));
DROP FUNCTION holdfast_lease_current(text, bigint);
DROP INDEX attempts_live_host;
DROP INDEX attempts_superseded;
ALTER TABLE attempts DROP COLUMN lease_generation, DROP COLUMN superseded_at, DROP COLUMN superseded_by;
ALTER TABLE jobs DROP COLUMN host;
DROP TABLE hosts;
