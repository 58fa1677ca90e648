-- +goose Up
ALTER TABLE jobs
    -- The retention policy as the retention package encodes it; NULL: none set.
    ADD COLUMN retention            jsonb,
    ADD COLUMN retention_max_delete double precision NOT NULL DEFAULT 0.5
        CHECK (retention_max_delete > 0 AND retention_max_delete <= 1),
    ADD COLUMN retention_min_keep   integer NOT NULL DEFAULT 1 CHECK (retention_min_keep >= 0),
    -- Forgetting is cheap; pruning rewrites the repository, so it has a schedule of its own.
    ADD COLUMN prune_schedule       text NOT NULL DEFAULT '',
    ADD COLUMN next_prune_at        timestamptz;
CREATE INDEX jobs_prune_due ON jobs (next_prune_at) WHERE next_prune_at IS NOT NULL;

-- The repository's snapshots as restic last listed them. A row outlives the snapshot
-- (forgotten_at) so that a plan's audit record can still be read against it.
CREATE TABLE snapshots (
    repository      text NOT NULL,
    id              text NOT NULL CHECK (id ~ '^[0-9a-f]{64}$'),
    time            timestamptz NOT NULL,
    host            text NOT NULL,
    tags            text[] NOT NULL DEFAULT '{}',
    paths           text[] NOT NULL DEFAULT '{}',
    job_name        text,       -- from its holdfast-job tag
    run_id          uuid,       -- from its holdfast-run tag
    first_seen_at   timestamptz NOT NULL DEFAULT now(),
    seen_at         timestamptz NOT NULL DEFAULT now(),
    forgotten_at    timestamptz,
    legal_hold_at   timestamptz,
    legal_hold_by   text,
    legal_hold_why  text,
    immutable_until timestamptz,
    immutable_by    text,
    PRIMARY KEY (repository, id)
);
CREATE INDEX snapshots_job ON snapshots (job_name, time DESC) WHERE forgotten_at IS NULL;
CREATE INDEX snapshots_id ON snapshots (id text_pattern_ops);

-- Every plan that was applied or refused, with its decisions: who, when, and why each snapshot
-- went or stayed.
CREATE TABLE retention_plans (
    id          uuid PRIMARY KEY,
    job_name    text NOT NULL,
    repository  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    plan_at     timestamptz NOT NULL,
    policy      jsonb NOT NULL,
    forced      boolean NOT NULL DEFAULT false,
    outcome     text NOT NULL CHECK (outcome IN ('applied', 'refused', 'nothing to delete')),
    refusal     text,
    summary     text NOT NULL,
    delete_ids  text[] NOT NULL DEFAULT '{}',
    decisions   jsonb NOT NULL,
    run_id      uuid REFERENCES runs (id)
);
CREATE INDEX retention_plans_job ON retention_plans (job_name, created_at DESC);

ALTER TABLE runs DROP CONSTRAINT runs_kind_check;
ALTER TABLE runs ADD CONSTRAINT runs_kind_check CHECK (kind IN ('backup', 'prune', 'forget'));
ALTER TABLE runs
    -- A forget run deletes exactly these snapshots, the deletable ones of its plan.
    ADD COLUMN forget_ids text[] NOT NULL DEFAULT '{}',
    ADD COLUMN plan_id    uuid,
    ADD CONSTRAINT runs_forget_has_ids CHECK ((kind = 'forget') = (cardinality(forget_ids) > 0));

-- +goose Down
DROP TABLE retention_plans;
DROP TABLE snapshots;
DELETE FROM attempts WHERE run_id IN (SELECT id FROM runs WHERE kind = 'forget');
UPDATE jobs SET last_run_id = NULL WHERE last_run_id IN (SELECT id FROM runs WHERE kind = 'forget');
DELETE FROM runs WHERE kind = 'forget';
ALTER TABLE runs DROP CONSTRAINT runs_forget_has_ids, DROP COLUMN forget_ids, DROP COLUMN plan_id;
ALTER TABLE runs DROP CONSTRAINT runs_kind_check;
ALTER TABLE runs ADD CONSTRAINT runs_kind_check CHECK (kind IN ('backup', 'prune'));
DROP INDEX jobs_prune_due;
ALTER TABLE jobs DROP COLUMN retention, DROP COLUMN retention_max_delete, DROP COLUMN retention_min_keep,
    DROP COLUMN prune_schedule, DROP COLUMN next_prune_at;
