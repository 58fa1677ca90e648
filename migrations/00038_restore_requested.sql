-- +goose Up
-- A restore asked for from the dashboard is an event of its own at its admission, naming the
-- credential that asked (details.requested_by).
ALTER TABLE events DROP CONSTRAINT events_event_check;
ALTER TABLE events ADD CONSTRAINT events_event_check CHECK (event IN ('started', 'succeeded', 'partial', 'failed',
    'stopped', 'paused', 'overdue', 'recovered', 'stalled', 'host_down', 'host_back', 'verified', 'verify_failed', 'skipped',
    'restore_requested'));

-- +goose Down
DELETE FROM deliveries WHERE event_id IN (SELECT id FROM events WHERE event = 'restore_requested');
DELETE FROM events WHERE event = 'restore_requested';
ALTER TABLE events DROP CONSTRAINT events_event_check;
ALTER TABLE events ADD CONSTRAINT events_event_check CHECK (event IN ('started', 'succeeded', 'partial', 'failed',
    'stopped', 'paused', 'overdue', 'recovered', 'stalled', 'host_down', 'host_back', 'verified', 'verify_failed', 'skipped'));
