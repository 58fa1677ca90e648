-- +goose Up
-- A job's figures for metrics (store.Figures), kept as its runs end instead of looked up in its
-- history at every scrape: each scrape read five index probes of every job of the fleet. They
-- are what its runs say (docs/ARCHITECTURE.md, Watching, "Figures"); a compaction of history
-- removes runs but never a figure, which stays as the run that made it left it.
ALTER TABLE jobs
    ADD COLUMN last_success_at  timestamptz, -- its newest backup that succeeded ended then
    ADD COLUMN last_end_at      timestamptz, -- its newest backup that ended, however,
    ADD COLUMN last_bytes_added bigint,      -- and what that one added, if known
    ADD COLUMN last_verified_at timestamptz, -- its newest verification that succeeded
    ADD COLUMN last_verify_at   timestamptz, -- its newest verification that succeeded, failed or was partial,
    ADD COLUMN last_verify_ok   boolean,     -- and whether it succeeded
    ADD COLUMN last_restored_at timestamptz; -- its newest restore that succeeded

-- Applies runs that ended (finished_at set) to their jobs' figures; each figure moves only
-- forward, so runs applied in any order, or applied twice, leave the newest.
-- +goose StatementBegin
CREATE FUNCTION job_figures_ended(ended runs[]) RETURNS void LANGUAGE sql AS $$
    WITH e AS (
        SELECT * FROM unnest(ended)
        WHERE job_id IS NOT NULL AND finished_at IS NOT NULL AND kind IN ('backup', 'verify', 'restore')),
    newest AS (
        SELECT job_id,
            max(finished_at) FILTER (WHERE kind = 'backup' AND status = 'succeeded') AS success,
            max(finished_at) FILTER (WHERE kind = 'verify' AND status = 'succeeded') AS verified,
            max(finished_at) FILTER (WHERE kind = 'restore' AND status = 'succeeded') AS restored
        FROM e GROUP BY job_id),
    backup AS (
        SELECT DISTINCT ON (job_id) job_id, finished_at, bytes_added FROM e
        WHERE kind = 'backup' ORDER BY job_id, finished_at DESC),
    verify AS (
        SELECT DISTINCT ON (job_id) job_id, finished_at, status = 'succeeded' AS ok FROM e
        WHERE kind = 'verify' AND status IN ('succeeded', 'failed', 'partial') ORDER BY job_id, finished_at DESC)
    UPDATE jobs j SET
        last_success_at = greatest(j.last_success_at, n.success),
        last_verified_at = greatest(j.last_verified_at, n.verified),
        last_restored_at = greatest(j.last_restored_at, n.restored),
        last_end_at = CASE WHEN b.finished_at >= coalesce(j.last_end_at, '-infinity') THEN b.finished_at ELSE j.last_end_at END,
        last_bytes_added = CASE WHEN b.finished_at >= coalesce(j.last_end_at, '-infinity') THEN b.bytes_added ELSE j.last_bytes_added END,
        last_verify_at = CASE WHEN v.finished_at >= coalesce(j.last_verify_at, '-infinity') THEN v.finished_at ELSE j.last_verify_at END,
        last_verify_ok = CASE WHEN v.finished_at >= coalesce(j.last_verify_at, '-infinity') THEN v.ok ELSE j.last_verify_ok END
    FROM newest n LEFT JOIN backup b USING (job_id) LEFT JOIN verify v USING (job_id)
    WHERE j.id = n.job_id
$$;
-- +goose StatementEnd

-- Every statement that ends runs, or inserts ended ones, keeps their jobs' figures in the same
-- transaction; a resumed run (finished_at cleared) is no longer its job's last ended backup,
-- the newest that is still ended is.
-- +goose StatementBegin
CREATE FUNCTION job_figures_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM job_figures_ended(ARRAY(SELECT n::runs FROM new_rows n WHERE n.finished_at IS NOT NULL));
        RETURN NULL;
    END IF;
    UPDATE jobs j SET (last_end_at, last_bytes_added) = (
            SELECT r.finished_at, r.bytes_added FROM runs r
            WHERE r.job_id = j.id AND r.finished_at IS NOT NULL AND r.kind = 'backup'
            ORDER BY r.finished_at DESC LIMIT 1)
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        WHERE j.id = n.job_id AND n.kind = 'backup' AND o.finished_at IS NOT NULL AND n.finished_at IS NULL
          AND o.finished_at >= j.last_end_at;
    PERFORM job_figures_ended(ARRAY(
        SELECT n::runs FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE n.finished_at IS NOT NULL
          AND (o.finished_at IS DISTINCT FROM n.finished_at OR o.status IS DISTINCT FROM n.status)));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER job_figures_inserted AFTER INSERT ON runs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_figures_runs();
CREATE TRIGGER job_figures_updated AFTER UPDATE ON runs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_figures_runs();

-- The snapshots in holdfast's inventory of a repository that are not forgotten, by job. Only a
-- writer of the repository's inventory, which holds its advisory lock (store.lockInventory),
-- changes its rows, so two writers never wait on each other's here.
CREATE TABLE snapshot_counts (
    repository text NOT NULL,
    job_name   text NOT NULL,
    live       bigint NOT NULL CHECK (live >= 0),
    PRIMARY KEY (repository, job_name)
);
-- +goose StatementBegin
CREATE FUNCTION snapshot_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO snapshot_counts AS c (repository, job_name, live)
        SELECT repository, job_name, count(*) FROM new_rows WHERE forgotten_at IS NULL AND job_name IS NOT NULL
        GROUP BY repository, job_name ORDER BY repository, job_name
        ON CONFLICT (repository, job_name) DO UPDATE SET live = c.live + excluded.live;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE snapshot_counts c SET live = c.live - d.n
        FROM (SELECT repository, job_name, count(*) AS n FROM old_rows WHERE forgotten_at IS NULL AND job_name IS NOT NULL
              GROUP BY repository, job_name) d
        WHERE c.repository = d.repository AND c.job_name = d.job_name;
    ELSE
        -- An update changes a count by what it made live less what it forgot.
        WITH d AS (
            SELECT repository, job_name, sum(n) AS n FROM (
                SELECT repository, job_name, 1 AS n FROM new_rows WHERE forgotten_at IS NULL AND job_name IS NOT NULL
                UNION ALL
                SELECT repository, job_name, -1 FROM old_rows WHERE forgotten_at IS NULL AND job_name IS NOT NULL) x
            GROUP BY repository, job_name HAVING sum(n) <> 0),
        u AS (
            UPDATE snapshot_counts c SET live = c.live + d.n FROM d
            WHERE c.repository = d.repository AND c.job_name = d.job_name RETURNING c.repository, c.job_name)
        INSERT INTO snapshot_counts (repository, job_name, live)
        SELECT d.repository, d.job_name, d.n FROM d
        WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.repository = d.repository AND u.job_name = d.job_name);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER snapshot_counts_inserted AFTER INSERT ON snapshots REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION snapshot_counts_change();
CREATE TRIGGER snapshot_counts_updated AFTER UPDATE ON snapshots REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION snapshot_counts_change();
CREATE TRIGGER snapshot_counts_deleted AFTER DELETE ON snapshots REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION snapshot_counts_change();

-- The other fleet-wide reads of a scrape: the deliveries not made (store.DeliveryCounts), and
-- an account's grants (accountGranted), without a read of every delivery or ledger entry.
CREATE INDEX deliveries_undelivered ON deliveries (state) WHERE state <> 'delivered';
CREATE INDEX ledger_grants ON ledger_entries (account) INCLUDE (bytes) WHERE kind = 'grant';

-- What the history says so far.
UPDATE jobs j SET
    last_success_at = (SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.status = 'succeeded' AND r.kind = 'backup'),
    (last_end_at, last_bytes_added) = (SELECT r.finished_at, r.bytes_added FROM runs r
        WHERE r.job_id = j.id AND r.finished_at IS NOT NULL AND r.kind = 'backup' ORDER BY r.finished_at DESC LIMIT 1),
    last_verified_at = (SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.status = 'succeeded' AND r.kind = 'verify'),
    (last_verify_at, last_verify_ok) = (SELECT r.finished_at, r.status = 'succeeded' FROM runs r
        WHERE r.job_id = j.id AND r.kind = 'verify' AND r.status IN ('succeeded', 'failed', 'partial') ORDER BY r.finished_at DESC LIMIT 1),
    last_restored_at = (SELECT max(r.finished_at) FROM runs r WHERE r.job_id = j.id AND r.status = 'succeeded' AND r.kind = 'restore');
INSERT INTO snapshot_counts (repository, job_name, live)
SELECT repository, job_name, count(*) FROM snapshots WHERE forgotten_at IS NULL AND job_name IS NOT NULL
GROUP BY repository, job_name;

-- +goose Down
DROP INDEX ledger_grants;
DROP INDEX deliveries_undelivered;
DROP TRIGGER snapshot_counts_deleted ON snapshots;
DROP TRIGGER snapshot_counts_updated ON snapshots;
DROP TRIGGER snapshot_counts_inserted ON snapshots;
DROP FUNCTION snapshot_counts_change();
DROP TABLE snapshot_counts;
DROP TRIGGER job_figures_updated ON runs;
DROP TRIGGER job_figures_inserted ON runs;
DROP FUNCTION job_figures_runs();
DROP FUNCTION job_figures_ended(runs[]);
ALTER TABLE jobs
    DROP COLUMN last_success_at, DROP COLUMN last_end_at, DROP COLUMN last_bytes_added,
    DROP COLUMN last_verified_at, DROP COLUMN last_verify_at, DROP COLUMN last_verify_ok,
    DROP COLUMN last_restored_at;
