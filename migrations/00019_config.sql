-- +goose Up
-- What changed a job, when and from where (docs/ARCHITECTURE.md, Data model): `holdfast apply`
-- records each job it creates or updates with the files it read and their content hash, so that
-- `job show` says which configuration a job came from. Kept after the job is removed, by name.
CREATE TABLE job_changes (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_name text NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    actor    text NOT NULL,
    action   text NOT NULL CHECK (action IN ('create', 'update', 'delete')),
    fields   text[] NOT NULL DEFAULT '{}',
    source   text NOT NULL,
    hash     text NOT NULL DEFAULT ''
);
CREATE INDEX job_changes_job ON job_changes (job_name, id DESC);

-- +goose Down
DROP TABLE job_changes;
