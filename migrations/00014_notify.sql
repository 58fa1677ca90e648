-- +goose Up
-- Notification targets and the deliveries of the outbox's events to them (docs/ARCHITECTURE.md,
-- Watching). A delivery is made by the trigger on events, in the event's own transaction, for
-- each target whose filter takes it: none is lost when a daemon dies.
CREATE TABLE notify_targets (
    name        text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    kind        text NOT NULL CHECK (kind IN ('webhook', 'healthchecks', 'command')),
    url         text NOT NULL DEFAULT '',
    secret_file text NOT NULL DEFAULT '',
    command     text[] NOT NULL DEFAULT '{}',
    job_name    text,                -- NULL: every job
    events      text[] NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE deliveries (
    event_id      uuid NOT NULL REFERENCES events (id),
    target        text NOT NULL REFERENCES notify_targets (name) ON DELETE CASCADE,
    state         text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    tries         integer NOT NULL DEFAULT 0,
    next_at       timestamptz NOT NULL DEFAULT now(),
    claimed_until timestamptz,       -- a daemon is sending it until then
    last_error    text,
    delivered_at  timestamptz,
    PRIMARY KEY (event_id, target)
);
CREATE INDEX deliveries_due ON deliveries (next_at) WHERE state = 'pending';

-- +goose StatementBegin
CREATE FUNCTION holdfast_event_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER events_deliveries AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION holdfast_event_deliveries();

-- +goose Down
DROP TRIGGER events_deliveries ON events;
DROP FUNCTION holdfast_event_deliveries();
DROP TABLE deliveries;
DROP TABLE notify_targets;
