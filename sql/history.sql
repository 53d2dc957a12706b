-- Execution history, as one view over jq.execution_log and the completed job rows (both in
-- sql/schema.sql). A view is re-creatable, so it lives outside the schema file: an upgrade drops
-- it with the functions and creates it again from this file (docs/upgrades.md).

-- The log has no completed row of a job that is still there, except one restored from a dump of
-- 0.1.0 (whose history table held every outcome; see the trigger below): the view shows such a
-- row once, from the job.
CREATE OR REPLACE VIEW jq.executions AS
SELECT l.job_id, l.seq, l.attempt, l.outcome, l.started_at, l.lease_expires_at, l.finished_at,
       l.queue, l.worker, l.error
FROM jq.execution_log l
WHERE l.outcome <> 'completed'
   OR NOT EXISTS (SELECT FROM jq.jobs d WHERE d.id = l.job_id AND d.claims = l.seq AND d.state = 'completed')
UNION ALL
SELECT j.id, j.claims, j.attempt, 'completed'::jq.execution_outcome, j.started_at,
       j.lease_expires_at, j.finished_at, j.queue, j.worker, NULL::text
FROM jq.jobs j
WHERE j.state = 'completed';
COMMENT ON VIEW jq.executions IS
'Execution history: one row per execution once it has ended (job_id, seq = the job''s claims '
'count when it started, attempt = the attempt number it ran as, outcome, started_at, '
'lease_expires_at, finished_at, queue, worker, error). Completed executions come from the job '
'rows of completed jobs, so they are kept as long as the job (the queue''s retention); the '
'other outcomes from jq.execution_log, kept for history_retention. For outcomes lease_expired, '
'released and snoozed the attempt was refunded. A running execution is visible in its jq.jobs '
'row (started_at, worker, lease_expires_at).';

-- A dump taken under 0.1.0, when jq.executions was the history table, restores its rows with
-- COPY jq.executions: they go to the log (docs/upgrades.md, "Dump and restore").
CREATE OR REPLACE FUNCTION jq._executions_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jq.execution_log (job_id, seq, attempt, outcome, started_at, lease_expires_at,
                                  finished_at, queue, worker, error)
    VALUES (NEW.job_id, NEW.seq, NEW.attempt, NEW.outcome, NEW.started_at, NEW.lease_expires_at,
            NEW.finished_at, NEW.queue, NEW.worker, NEW.error);
    RETURN NEW;
END $$;
COMMENT ON FUNCTION jq._executions_insert() IS
'Internal: INSTEAD OF INSERT trigger of the view jq.executions; writes the row to '
'jq.execution_log. For restoring dumps taken under jq 0.1.0 (COPY jq.executions); jq itself '
'never inserts into the view.';
CREATE OR REPLACE TRIGGER executions_insert INSTEAD OF INSERT ON jq.executions
    FOR EACH ROW EXECUTE FUNCTION jq._executions_insert();
