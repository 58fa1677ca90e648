-- +goose Up
-- The boot of the host whose manager was asked for the attempt's unit (its kernel boot id): a
-- unit of an earlier boot is gone for good, so its run need not wait out the spawn grace.
ALTER TABLE attempts ADD COLUMN boot_id text;

-- +goose Down
ALTER TABLE attempts DROP COLUMN boot_id;
