-- +goose Up
-- An account's balance (store.Accounts, at every scrape and admission with a quota) sums its
-- settlements and open holds: read from these indexes alone, each entry costs a few bytes of
-- index instead of a heap page. Entries compacted into a checkpoint leave them.
CREATE INDEX ledger_settled ON ledger_entries (account) INCLUDE (bytes) WHERE kind = 'settle';
CREATE INDEX ledger_holds ON ledger_entries (account) INCLUDE (id, bytes) WHERE kind = 'hold';

-- +goose Down
DROP INDEX ledger_holds;
DROP INDEX ledger_settled;
