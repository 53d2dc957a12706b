-- Not measured yet (session 21): bench/ab_variant.sh "$(cat bench/variants/archive_table.sql)"
-- Variant: completed jobs leave jq.jobs (an archive table, as pgmq's archive): the completion
-- deletes the job row and inserts it, completed, into jq.jobs_done (primary key + BRIN on
-- finished_at; no partial btree on finished jobs).
CREATE TABLE jq.jobs_done (LIKE jq.jobs) WITH (autovacuum_vacuum_insert_scale_factor = 0.05);
ALTER TABLE jq.jobs_done ADD PRIMARY KEY (id);
CREATE INDEX jobs_done_finished_brin ON jq.jobs_done USING brin (finished_at) WITH (pages_per_range = 32, autosummarize = on);
CREATE OR REPLACE FUNCTION jq.complete(id bigint, lease_token uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_done boolean;
BEGIN
    WITH d AS (
        DELETE FROM jq.jobs j
        WHERE j.id OPERATOR(pg_catalog.=) complete.id
          AND j.lease_token OPERATOR(pg_catalog.=) complete.lease_token
          AND j.state::pg_catalog.text OPERATOR(pg_catalog.=) 'running'
        RETURNING j.*)
    INSERT INTO jq.jobs_done (id, priority, max_attempts, run_at, created_at, lease_expiries, cancel_requested,
                              base_priority, next_age_at, queue, kind, idempotency_key, concurrency_key, payload,
                              attempt, claims, started_at, lease_expires_at, lease, lease_token, worker, state,
                              finished_at, last_error, result)
    SELECT d.id, d.priority, d.max_attempts, d.run_at, d.created_at, d.lease_expiries, d.cancel_requested,
           d.base_priority, d.next_age_at, d.queue, d.kind, d.idempotency_key, d.concurrency_key, d.payload,
           d.attempt, d.claims, d.started_at, d.lease_expires_at, d.lease, d.lease_token, d.worker, 'completed',
           pg_catalog.clock_timestamp(), d.last_error, complete.result
    FROM d
    RETURNING jq._wake_slot(queue)
              AND CASE WHEN concurrency_key IS NULL THEN true
                       ELSE jq._key_fill(queue, concurrency_key, 1) OPERATOR(pg_catalog.>=) 0 END
    INTO v_done;
    RETURN FOUND;
END $$;
ALTER FUNCTION jq.complete(bigint, uuid, jsonb) SECURITY DEFINER;
