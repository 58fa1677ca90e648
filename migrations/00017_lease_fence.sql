-- +goose Up
-- The fence names its writer (docs/ARCHITECTURE.md, Several hosts). holdfast_lease_current
-- (00015) asked only whether the attempt's generation was its host's current one: taking a
-- lease adopts the host's live attempts under the new generation, so a daemon that had lost the
-- lease to another holder of the same host name still passed it. Every write about an attempt,
-- and every spawn claim, now passes the writer's own host, holder and generation:
--   - the attempt is unclaimed ('') or the writer's host's;
--   - if a daemon ever held the writer's host's lease (the host has a row), the writer holds it
--     now: the same holder, in the same generation, unexpired on the database's clock; and an
--     attempt of that host was claimed or adopted under that generation;
--   - a host no daemon ever held a lease for (a reconciler used alone, as in its tests) writes
--     only about attempts claimed under no lease.
-- holdfast_lease_current stays for daemons of the previous version during an upgrade.
-- +goose StatementBegin
CREATE FUNCTION holdfast_fence(attempt_host text, attempt_generation bigint,
    writer_host text, writer_holder text, writer_generation bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT (attempt_host = '' OR attempt_host = writer_host) AND CASE
        WHEN EXISTS (SELECT 1 FROM hosts WHERE name = writer_host) THEN
            (attempt_host = '' OR attempt_generation IS NOT DISTINCT FROM writer_generation)
            AND EXISTS (SELECT 1 FROM hosts h WHERE h.name = writer_host AND h.holder = writer_holder
                AND writer_holder <> '' AND h.generation = writer_generation AND h.lease_until > now())
        ELSE attempt_generation IS NULL
    END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION holdfast_fence(text, bigint, text, text, bigint);
