-- +goose Up
-- The release of the restic an attempt ran ("0.14.0"), as its daemon asked it when it claimed the
-- spawn; NULL for an attempt of another engine, or one claimed before this was recorded.
ALTER TABLE attempts ADD COLUMN restic_version text;

-- +goose Down
ALTER TABLE attempts DROP COLUMN restic_version;
