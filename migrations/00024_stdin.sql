-- +goose Up
-- A job whose backup is a command's standard output as one file (restic --stdin): the command
-- line (split as a hook's, run as the job's user in the unit) and the file's name in the snapshot.
-- Such a restic job has no paths; any other has exactly what it had to have.
ALTER TABLE jobs ADD COLUMN stdin_from text NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN stdin_filename text NOT NULL DEFAULT '';
ALTER TABLE jobs DROP CONSTRAINT jobs_what_to_run;
ALTER TABLE jobs ADD CONSTRAINT jobs_what_to_run CHECK
    (CASE engine WHEN 'restic' THEN (cardinality(paths) > 0) <> (stdin_from <> '' AND stdin_filename <> '')
                 ELSE cardinality(command) > 0 AND stdin_from = '' END);

-- +goose Down
ALTER TABLE jobs DROP CONSTRAINT jobs_what_to_run;
ALTER TABLE jobs ADD CONSTRAINT jobs_what_to_run CHECK
    (CASE engine WHEN 'restic' THEN cardinality(paths) > 0 ELSE cardinality(command) > 0 END);
ALTER TABLE jobs DROP COLUMN stdin_filename;
ALTER TABLE jobs DROP COLUMN stdin_from;
