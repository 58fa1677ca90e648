-- +goose Up
-- An account bounds what its jobs may add to repositories. quota_bytes NULL: no bound (the
-- default account, until an operator gives it one); holds are still recorded.
CREATE TABLE accounts (
    name             text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    created_at       timestamptz NOT NULL DEFAULT now(),
    unlimited        boolean NOT NULL DEFAULT false,
    -- An optional allowance per calendar period (UTC): what settles and is held in one period.
    allowance_bytes  bigint CHECK (allowance_bytes > 0),
    allowance_period text CHECK (allowance_period IN ('day', 'week', 'month')),
    CHECK ((allowance_bytes IS NULL) = (allowance_period IS NULL))
);
INSERT INTO accounts (name, unlimited) VALUES ('default', true);

-- Append-only: balances are sums. A settle or release names the hold it closes, and a hold is
-- closed once: the unique index refuses a second settlement or release.
CREATE TABLE ledger_entries (
    id          bigserial PRIMARY KEY,
    account     text NOT NULL REFERENCES accounts (name),
    kind        text NOT NULL CHECK (kind IN ('grant', 'hold', 'settle', 'release')),
    bytes       bigint NOT NULL CHECK (bytes >= 0),
    run_id      uuid REFERENCES runs (id),
    attempt_no  integer,
    hold_id     bigint REFERENCES ledger_entries (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL DEFAULT 'holdfast',
    note        text NOT NULL DEFAULT '',
    CHECK ((kind = 'grant') = (run_id IS NULL)),
    CHECK ((kind IN ('settle', 'release')) = (hold_id IS NOT NULL))
);
CREATE UNIQUE INDEX ledger_one_close_per_hold ON ledger_entries (hold_id) WHERE hold_id IS NOT NULL;
CREATE UNIQUE INDEX ledger_one_hold_per_attempt ON ledger_entries (run_id, attempt_no) WHERE kind = 'hold';
CREATE INDEX ledger_account ON ledger_entries (account, created_at);
CREATE INDEX ledger_run ON ledger_entries (run_id) WHERE run_id IS NOT NULL;
-- The holds no settle or release has closed yet.
CREATE VIEW open_holds AS
    SELECT h.* FROM ledger_entries h
    WHERE h.kind = 'hold' AND NOT EXISTS (SELECT 1 FROM ledger_entries c WHERE c.hold_id = h.id);

-- +goose StatementBegin
CREATE FUNCTION ledger_entries_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger_entries is append-only: % refused', TG_OP;
END $$;
-- +goose StatementEnd
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_append_only();

ALTER TABLE jobs
    ADD COLUMN account   text NOT NULL DEFAULT 'default' REFERENCES accounts (name),
    ADD COLUMN max_added bigint CHECK (max_added > 0);

ALTER TABLE runs
    -- What the run may add over all its attempts, fixed at admission.
    ADD COLUMN budget_bytes bigint;
-- A job's live run, its history for budget estimates, the other writers of a repository.
CREATE INDEX runs_job ON runs (job_id, finished_at DESC);

ALTER TABLE attempts
    -- Size of a local repository when the attempt was spawned: its growth is what the attempt added.
    ADD COLUMN repo_bytes_before bigint,
    -- Why the attempt's hold is still open after it ended.
    ADD COLUMN settle_deferred   text;
CREATE INDEX attempts_settle_deferred ON attempts (run_id) WHERE settle_deferred IS NOT NULL;

-- +goose Down
ALTER TABLE attempts DROP COLUMN repo_bytes_before, DROP COLUMN settle_deferred;
DROP INDEX runs_job;
ALTER TABLE runs DROP COLUMN budget_bytes;
ALTER TABLE jobs DROP COLUMN account, DROP COLUMN max_added;
DROP VIEW open_holds;
DROP TABLE ledger_entries;
DROP FUNCTION ledger_entries_append_only;
DROP TABLE accounts;
