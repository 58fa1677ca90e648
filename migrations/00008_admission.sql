-- +goose Up
-- A job whose slot could not be admitted (a broken row, a failing statement) is set aside until
-- admission_retry_at, with the error visible, instead of blocking or spinning admission.
ALTER TABLE jobs
    ADD COLUMN admission_error    text,
    ADD COLUMN admission_retry_at timestamptz;

-- +goose Down
ALTER TABLE jobs DROP COLUMN admission_error, DROP COLUMN admission_retry_at;
