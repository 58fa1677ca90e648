-- +goose Up
-- holdfast recover (docs/ARCHITECTURE.md, Recovering the database). A run it records from a
-- repository's newest snapshot of a job has the trigger 'recovered'; each account it re-bases
-- on its repositories' measured size gets one 'recovered' entry, charged as a settlement is but
-- of no run: what the account's repositories held that no entry of this database had charged.
ALTER TABLE runs DROP CONSTRAINT runs_trigger_check;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check
    CHECK (trigger IN ('schedule', 'manual', 'retry', 'dependency', 'catch-up', 'after-backup', 'recovered'));

ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_kind_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_kind_check
    CHECK (kind IN ('grant', 'hold', 'settle', 'release', 'recovered'));
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_check CHECK ((kind IN ('grant', 'recovered')) = (run_id IS NULL));
-- A recovered entry keeps what it measured, repository by repository: a recovery on another
-- host, which measures only its own local repositories, adds those to these.
ALTER TABLE ledger_entries ADD COLUMN measured jsonb CHECK (measured IS NULL OR kind = 'recovered');

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_balance_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE accounts SET
        granted_bytes = granted_bytes + CASE WHEN NEW.kind = 'grant' THEN NEW.bytes ELSE 0 END,
        settled_bytes = settled_bytes + CASE WHEN NEW.kind IN ('settle', 'recovered') THEN NEW.bytes ELSE 0 END,
        held_bytes = held_bytes + CASE WHEN NEW.kind = 'hold' THEN NEW.bytes ELSE 0 END
            - coalesce((SELECT h.bytes FROM ledger_entries h WHERE h.id = NEW.hold_id), 0)
    WHERE name = NEW.account;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION account_sums_recount() RETURNS void LANGUAGE sql AS $$
    UPDATE accounts a SET
        granted_bytes = coalesce((SELECT sum(bytes) FROM ledger_entries WHERE account = a.name AND kind = 'grant'), 0)
            + coalesce((SELECT k.granted_bytes FROM ledger_checkpoints k WHERE k.account = a.name), 0),
        settled_bytes = coalesce((SELECT sum(bytes) FROM ledger_entries WHERE account = a.name AND kind IN ('settle', 'recovered')), 0)
            + coalesce((SELECT k.settled_bytes FROM ledger_checkpoints k WHERE k.account = a.name), 0),
        held_bytes = coalesce((SELECT sum(bytes) FROM open_holds WHERE account = a.name), 0);
$$;
-- +goose StatementEnd

DROP INDEX ledger_settled;
CREATE INDEX ledger_settled ON ledger_entries (account) INCLUDE (bytes) WHERE kind IN ('settle', 'recovered');

-- +goose Down
DROP INDEX ledger_settled;
CREATE INDEX ledger_settled ON ledger_entries (account) INCLUDE (bytes) WHERE kind = 'settle';
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION account_sums_recount() RETURNS void LANGUAGE sql AS $$
    UPDATE accounts a SET
        granted_bytes = coalesce((SELECT sum(bytes) FROM ledger_entries WHERE account = a.name AND kind = 'grant'), 0)
            + coalesce((SELECT k.granted_bytes FROM ledger_checkpoints k WHERE k.account = a.name), 0),
        settled_bytes = coalesce((SELECT sum(bytes) FROM ledger_entries WHERE account = a.name AND kind = 'settle'), 0)
            + coalesce((SELECT k.settled_bytes FROM ledger_checkpoints k WHERE k.account = a.name), 0),
        held_bytes = coalesce((SELECT sum(bytes) FROM open_holds WHERE account = a.name), 0);
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_balance_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE accounts SET
        granted_bytes = granted_bytes + CASE WHEN NEW.kind = 'grant' THEN NEW.bytes ELSE 0 END,
        settled_bytes = settled_bytes + CASE WHEN NEW.kind = 'settle' THEN NEW.bytes ELSE 0 END,
        held_bytes = held_bytes + CASE WHEN NEW.kind = 'hold' THEN NEW.bytes ELSE 0 END
            - coalesce((SELECT h.bytes FROM ledger_entries h WHERE h.id = NEW.hold_id), 0)
    WHERE name = NEW.account;
    RETURN NULL;
END $$;
-- +goose StatementEnd
-- A recovered entry has no place in the older schema, and the ledger keeps its entries: the
-- constraints below refuse to go back over one.
ALTER TABLE ledger_entries DROP COLUMN measured;
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_check CHECK ((kind = 'grant') = (run_id IS NULL));
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_kind_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_kind_check CHECK (kind IN ('grant', 'hold', 'settle', 'release'));
ALTER TABLE runs DROP CONSTRAINT runs_trigger_check;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check
    CHECK (trigger IN ('schedule', 'manual', 'retry', 'dependency', 'catch-up', 'after-backup'));
