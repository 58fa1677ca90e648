-- +goose Up
-- A notification target of kind 'channel' sends through a chat, push or mail service named by a
-- URL (ntfy://, gotify://, slack://, smtp://, ...). The URL may hold the service's secret, so it
-- lives in a file of root's (secret_file), read at each send; url keeps only its scheme and host,
-- for display.
ALTER TABLE notify_targets DROP CONSTRAINT notify_targets_kind_check;
ALTER TABLE notify_targets ADD CONSTRAINT notify_targets_kind_check CHECK (kind IN ('webhook', 'healthchecks', 'command', 'channel'));

-- +goose Down
DELETE FROM notify_targets WHERE kind = 'channel';
ALTER TABLE notify_targets DROP CONSTRAINT notify_targets_kind_check;
ALTER TABLE notify_targets ADD CONSTRAINT notify_targets_kind_check CHECK (kind IN ('webhook', 'healthchecks', 'command'));
