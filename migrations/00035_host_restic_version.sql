-- +goose Up
-- The release of the restic the host's daemon runs ("0.18.1"), as it asked it at start and
-- recorded with its lease; NULL before it was recorded.
ALTER TABLE hosts ADD COLUMN restic_version text;

-- +goose Down
ALTER TABLE hosts DROP COLUMN restic_version;
