-- +goose Up
-- An attempt armed ahead of its slot: its unit is started by a transient timer at armed_for,
-- and until then the service is loaded but not started (docs/ARCHITECTURE.md, The life of a run).
ALTER TABLE attempts ADD COLUMN armed_for timestamptz;

-- +goose Down
ALTER TABLE attempts DROP COLUMN armed_for;
