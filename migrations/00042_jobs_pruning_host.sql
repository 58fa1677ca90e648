-- +goose Up
-- Where a job's forgets and prunes run (job add --append-only, --prune-host, --prune-repository,
-- --prune-env-file): append_only says its own host reaches the repository append-only, so that
-- no run that deletes goes through it; prune_host is the host whose daemon runs them, over
-- prune_repository and prune_env_file ('' the job's), which only a pruning host has.
ALTER TABLE jobs
	ADD COLUMN append_only boolean NOT NULL DEFAULT false,
	ADD COLUMN prune_host text NOT NULL DEFAULT '',
	ADD COLUMN prune_repository text NOT NULL DEFAULT '',
	ADD COLUMN prune_env_file text NOT NULL DEFAULT '',
	ADD CONSTRAINT jobs_prune_host_check CHECK (prune_host <> '' OR (prune_repository = '' AND prune_env_file = ''));

-- +goose Down
ALTER TABLE jobs DROP CONSTRAINT jobs_prune_host_check, DROP COLUMN prune_env_file, DROP COLUMN prune_repository,
	DROP COLUMN prune_host, DROP COLUMN append_only;
