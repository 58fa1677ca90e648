-- +goose Up
-- A spawn's claim finds the live runs that share its repository through the jobs that name it
-- (store.AttemptClaimSpawn), not by reading every live attempt of the fleet.
CREATE INDEX jobs_repository ON jobs (repository);
CREATE INDEX jobs_copy_to ON jobs (copy_to) WHERE copy_to <> '';

-- +goose Down
DROP INDEX jobs_copy_to;
DROP INDEX jobs_repository;
