-- +goose Up
-- The jobs' figures are kept by row triggers whose condition is tested before any function is
-- called: most statements on runs (an admission, a budget, a start, progress) end none, and a
-- statement trigger ran PL/pgSQL over transition tables for each, planned again in every new
-- session (about 12 ms of every `run start`).
DROP TRIGGER job_figures_inserted ON runs;
DROP TRIGGER job_figures_updated ON runs;
DROP FUNCTION job_figures_runs();

-- A run that ended is applied to its job's figures; a resumed run (finished_at cleared) is no
-- longer its job's last ended backup, the newest that is still ended is.
-- +goose StatementBegin
CREATE FUNCTION job_figures_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.kind = 'backup' AND OLD.finished_at IS NOT NULL AND NEW.finished_at IS NULL THEN
        UPDATE jobs j SET (last_end_at, last_bytes_added) = (
                SELECT r.finished_at, r.bytes_added FROM runs r
                WHERE r.job_id = j.id AND r.finished_at IS NOT NULL AND r.kind = 'backup'
                ORDER BY r.finished_at DESC LIMIT 1)
            WHERE j.id = NEW.job_id AND OLD.finished_at >= j.last_end_at;
    END IF;
    IF NEW.finished_at IS NOT NULL THEN
        PERFORM job_figures_ended(ARRAY[NEW]);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER job_figures_inserted AFTER INSERT ON runs FOR EACH ROW
    WHEN (NEW.finished_at IS NOT NULL) EXECUTE FUNCTION job_figures_run();
CREATE TRIGGER job_figures_updated AFTER UPDATE ON runs FOR EACH ROW
    WHEN (OLD.finished_at IS DISTINCT FROM NEW.finished_at OR (NEW.finished_at IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status))
    EXECUTE FUNCTION job_figures_run();

-- +goose Down
DROP TRIGGER job_figures_updated ON runs;
DROP TRIGGER job_figures_inserted ON runs;
DROP FUNCTION job_figures_run();
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
