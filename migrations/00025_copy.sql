-- +goose Up
-- A second copy of each snapshot: a job may name another repository, its password file and its
-- environment file; after each backup that made a snapshot, a run of kind 'copy' (admitted in
-- the backup's ending, triggered 'after-backup') copies that snapshot there with restic copy.
ALTER TABLE jobs
    ADD COLUMN copy_to            text NOT NULL DEFAULT '',
    ADD COLUMN copy_password_file text NOT NULL DEFAULT '',
    ADD COLUMN copy_env_file      text NOT NULL DEFAULT '',
    ADD CONSTRAINT jobs_copy_has_password CHECK ((copy_to = '') = (copy_password_file = '')),
    ADD CONSTRAINT jobs_copy_elsewhere CHECK (copy_to = '' OR copy_to <> repository);
ALTER TABLE runs DROP CONSTRAINT runs_kind_check;
ALTER TABLE runs ADD CONSTRAINT runs_kind_check CHECK (kind IN ('backup', 'prune', 'forget', 'restore', 'verify', 'copy'));
ALTER TABLE runs DROP CONSTRAINT runs_trigger_check;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check CHECK (trigger IN ('schedule', 'manual', 'retry', 'dependency', 'catch-up', 'after-backup'));
ALTER TABLE runs
    -- The snapshot a copy run copies (its full id, or the short id of its backup's summary).
    ADD COLUMN copy_snapshot text,
    -- The run works on its job's copy repository (a forget of a plan made for it), not its own.
    ADD COLUMN on_copy boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT runs_copy_has_snapshot CHECK ((kind = 'copy') = (copy_snapshot IS NOT NULL)),
    ADD CONSTRAINT runs_on_copy_kinds CHECK (NOT on_copy OR kind IN ('copy', 'forget', 'prune'));

-- +goose Down
DELETE FROM runs WHERE kind = 'copy' OR on_copy OR trigger = 'after-backup';
ALTER TABLE runs DROP CONSTRAINT runs_on_copy_kinds, DROP CONSTRAINT runs_copy_has_snapshot,
    DROP COLUMN on_copy, DROP COLUMN copy_snapshot;
ALTER TABLE runs DROP CONSTRAINT runs_trigger_check;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check CHECK (trigger IN ('schedule', 'manual', 'retry', 'dependency', 'catch-up'));
ALTER TABLE runs DROP CONSTRAINT runs_kind_check;
ALTER TABLE runs ADD CONSTRAINT runs_kind_check CHECK (kind IN ('backup', 'prune', 'forget', 'restore', 'verify'));
ALTER TABLE jobs DROP CONSTRAINT jobs_copy_elsewhere, DROP CONSTRAINT jobs_copy_has_password,
    DROP COLUMN copy_env_file, DROP COLUMN copy_password_file, DROP COLUMN copy_to;
