-- +goose Up
-- When the host's current lease generation began (each AcquireLease). A daemon takes over a
-- down host's runs only once it has itself held its lease for the takeover grace past that
-- host's lease: after the database was away longer than a lease, every daemon takes its lease
-- anew, and none takes over a host that is only slower to come back.
ALTER TABLE hosts ADD COLUMN lease_since timestamptz NOT NULL DEFAULT now();

-- +goose Down
ALTER TABLE hosts DROP COLUMN lease_since;
