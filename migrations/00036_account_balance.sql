-- +goose Up
-- Each account's sums are kept on its row, as a job's figures are (00029), so that reading an
-- account (store.AccountList: every scrape, holdfast status, the dashboard) costs one row, not
-- its history: granted and settled count its entries and its checkpoint (a compaction moves
-- entries into the checkpoint and changes neither), held counts its holds that no entry closed.
ALTER TABLE accounts
    ADD COLUMN granted_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN settled_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN held_bytes    bigint NOT NULL DEFAULT 0;

-- +goose StatementBegin
CREATE FUNCTION ledger_balance_add() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- Deferred to the commit: the account's row is locked last, after every job and run row its
-- transaction locks, so the order never crosses an admission's (a job, then its account), and
-- held for the commit's moment only. Reads inside a writing transaction sum the entries, which
-- see its own inserts (store.accountColumns).
CREATE CONSTRAINT TRIGGER ledger_balance AFTER INSERT ON ledger_entries DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_balance_add();

-- account_sums_recount sets every account's kept sums to what its entries say, reading its
-- whole history: here, once, and after a seed of history written with the trigger off.
-- +goose StatementBegin
CREATE FUNCTION account_sums_recount() RETURNS void LANGUAGE sql AS $$
    UPDATE accounts a SET
        granted_bytes = coalesce((SELECT sum(bytes) FROM ledger_entries WHERE account = a.name AND kind = 'grant'), 0)
            + coalesce((SELECT k.granted_bytes FROM ledger_checkpoints k WHERE k.account = a.name), 0),
        settled_bytes = coalesce((SELECT sum(bytes) FROM ledger_entries WHERE account = a.name AND kind = 'settle'), 0)
            + coalesce((SELECT k.settled_bytes FROM ledger_checkpoints k WHERE k.account = a.name), 0),
        held_bytes = coalesce((SELECT sum(bytes) FROM open_holds WHERE account = a.name), 0);
$$;
-- +goose StatementEnd

-- What the history says so far. The trigger above already holds the lock that keeps writers of
-- entries out until this commits: none is counted twice or missed.
SELECT account_sums_recount();

-- +goose Down
DROP FUNCTION account_sums_recount;
DROP TRIGGER ledger_balance ON ledger_entries;
DROP FUNCTION ledger_balance_add;
ALTER TABLE accounts DROP COLUMN granted_bytes, DROP COLUMN settled_bytes, DROP COLUMN held_bytes;
