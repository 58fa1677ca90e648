-- +goose Up
-- History is bounded (docs/ARCHITECTURE.md, Several hosts, "History"): ended runs, their
-- attempts, events and delivered deliveries older than --keep-history are removed in batches.
-- Before ledger entries go, what they granted and settled is folded into the account's
-- checkpoint, its figures as of as_of, so that every balance stays exact.
CREATE TABLE ledger_checkpoints (
    account       text PRIMARY KEY REFERENCES accounts (name),
    as_of         timestamptz NOT NULL,
    granted_bytes bigint NOT NULL CHECK (granted_bytes >= 0),
    settled_bytes bigint NOT NULL CHECK (settled_bytes >= 0),
    entries       bigint NOT NULL CHECK (entries >= 0) -- how many entries it holds
);

-- What a compaction looks up for each run it removes, or by age.
CREATE INDEX runs_retry_of ON runs (retry_of) WHERE retry_of IS NOT NULL;
CREATE INDEX retention_plans_run ON retention_plans (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX retention_plans_created ON retention_plans (created_at);
CREATE INDEX runs_ended ON runs (finished_at) WHERE status NOT IN ('queued', 'running');
CREATE INDEX events_at ON events (at);
CREATE INDEX jobs_last_run ON jobs (last_run_id);

-- The ledger stays append-only: an update is always refused, and a delete unless a compaction
-- (holdfast.compaction set in its transaction) removes an entry its account's checkpoint
-- already holds: older than the checkpoint, and of no run or of a run that ended before it.
DROP TRIGGER ledger_entries_append_only ON ledger_entries;
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_append_only();
-- +goose StatementBegin
CREATE FUNCTION ledger_entries_compacted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    as_of timestamptz;
BEGIN
    SELECT c.as_of INTO as_of FROM ledger_checkpoints c WHERE c.account = OLD.account;
    IF current_setting('holdfast.compaction', true) IS DISTINCT FROM 'on' OR as_of IS NULL OR OLD.created_at >= as_of
       OR (OLD.run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = OLD.run_id AND r.finished_at < as_of)) THEN
        RAISE EXCEPTION 'ledger_entries is append-only: DELETE refused (only a compaction removes entries its checkpoint holds)';
    END IF;
    RETURN OLD;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER ledger_entries_compacted BEFORE DELETE ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION ledger_entries_compacted();

-- +goose Down
-- Without its checkpoints an account compacted once would lose what they hold.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM ledger_checkpoints) THEN
        RAISE EXCEPTION 'history was compacted: the ledger''s checkpoints hold balances that this schema cannot; restore a dump taken before instead';
    END IF;
END
$$;
-- +goose StatementEnd
DROP TRIGGER ledger_entries_compacted ON ledger_entries;
DROP FUNCTION ledger_entries_compacted();
DROP TRIGGER ledger_entries_append_only ON ledger_entries;
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_append_only();
DROP INDEX jobs_last_run;
DROP INDEX events_at;
DROP INDEX runs_ended;
DROP INDEX retention_plans_created;
DROP INDEX retention_plans_run;
DROP INDEX runs_retry_of;
DROP TABLE ledger_checkpoints;
