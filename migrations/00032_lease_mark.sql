-- +goose Up
-- The down hosts are found through lease_mark, which trails lease_until by at most 15 seconds
-- and never passes it (the trigger keeps it so, whoever writes lease_until). An index on
-- lease_until took a new entry at every renewal of every host, so that the read of the hosts
-- down walked each renewal's dead entry since the last vacuum, and no renewal was a HOT update;
-- the mark moves at about one renewal in five. Where the takeover grace is under 15 seconds,
-- live hosts may be among the candidates, which the test of lease_until then drops.
ALTER TABLE hosts ADD COLUMN lease_mark timestamptz;
UPDATE hosts SET lease_mark = lease_until;
ALTER TABLE hosts ALTER COLUMN lease_mark SET NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION hosts_lease_mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.lease_mark IS NULL OR NEW.lease_mark > NEW.lease_until
        OR NEW.lease_mark < NEW.lease_until - interval '15 seconds' THEN
        NEW.lease_mark := NEW.lease_until;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER hosts_lease_mark BEFORE INSERT OR UPDATE OF lease_until, lease_mark ON hosts
    FOR EACH ROW EXECUTE FUNCTION hosts_lease_mark();
DROP INDEX hosts_lease;
CREATE INDEX hosts_lease_mark ON hosts (lease_mark);
-- Room on each page for a renewal's new row version beside the old (a HOT update).
ALTER TABLE hosts SET (fillfactor = 50);

-- +goose Down
ALTER TABLE hosts RESET (fillfactor);
DROP INDEX hosts_lease_mark;
CREATE INDEX hosts_lease ON hosts (lease_until);
DROP TRIGGER hosts_lease_mark ON hosts;
DROP FUNCTION hosts_lease_mark();
ALTER TABLE hosts DROP COLUMN lease_mark;
