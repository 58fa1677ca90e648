-- +goose Up
-- Stalls (docs/ARCHITECTURE.md, Watching): a live attempt whose progress figures have not moved
-- for its job's stall_after is stalled, once (stalled_at); with stall_action 'stop' its run is
-- asked to stop, and stop_reason says why (NULL: the operator asked).
ALTER TABLE jobs
    ADD COLUMN stall_after  interval NOT NULL DEFAULT '15 minutes' CHECK (stall_after > '0'),
    ADD COLUMN stall_action text NOT NULL DEFAULT 'alert' CHECK (stall_action IN ('alert', 'stop'));
ALTER TABLE attempts
    ADD COLUMN progress_changed_at timestamptz,
    ADD COLUMN stalled_at          timestamptz;
ALTER TABLE runs ADD COLUMN stop_reason text;

-- +goose Down
ALTER TABLE runs DROP COLUMN stop_reason;
ALTER TABLE attempts DROP COLUMN progress_changed_at, DROP COLUMN stalled_at;
ALTER TABLE jobs DROP COLUMN stall_after, DROP COLUMN stall_action;
