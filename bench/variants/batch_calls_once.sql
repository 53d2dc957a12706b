-- Not measured yet (session 22): BATCH=100 CONNS="1 4" bench/ab_variant.sh "$(cat bench/variants/batch_calls_once.sql)"
-- Variant: the batch claim calls jq._wake_on_abort once per statement (an InitPlan) instead of
-- once per claimed job, and jq.complete_many calls jq._wake_slot once per distinct queue instead
-- of once per completed job. Same effects: both only note the queue for the end of the
-- transaction. jq._hint_advance stays per job (its rollback and turn logic reads every key).
CREATE OR REPLACE FUNCTION jq._claim_batch(queue text, worker text, n integer, lease interval, hinted boolean,
                                below bigint, locked boolean)
RETURNS SETOF jq.claimed_job
LANGUAGE plpgsql AS $$
BEGIN
    IF _claim_batch.hinted THEN
        -- From the claim-start hint's key on, at the hint's priority (see jq.claim).
        RETURN QUERY
        WITH claimed AS (
            UPDATE jq.jobs j SET
                state = 'running',
                attempt = j.attempt OPERATOR(pg_catalog.+) 1,
                claims = j.claims OPERATOR(pg_catalog.+) 1,
                worker = _claim_batch.worker,
                lease_token = jq._lease_token(),
                started_at = pg_catalog.clock_timestamp(),
                lease = coalesce(_claim_batch.lease, q.lease),
                lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) coalesce(_claim_batch.lease, q.lease)
            FROM jq.queues q
            WHERE q.name OPERATOR(pg_catalog.=) _claim_batch.queue
              AND j.id OPERATOR(pg_catalog.=) ANY (ARRAY(
                  SELECT p.id FROM jq.jobs p
                  WHERE p.queue OPERATOR(pg_catalog.=) _claim_batch.queue AND p.state OPERATOR(pg_catalog.=) 'ready'
                    AND p.priority OPERATOR(pg_catalog.=) jq._hint_priority()
                    AND (p.run_at, p.id) OPERATOR(pg_catalog.>=) (jq._hint_run_at(), jq._hint_id())
                    AND EXISTS (SELECT FROM jq.queues g WHERE g.name OPERATOR(pg_catalog.=) _claim_batch.queue
                                AND NOT g.paused AND g.max_concurrency IS NULL AND g.rate_limit IS NULL)
                  ORDER BY p.run_at, p.id
                  LIMIT _claim_batch.n
                  FOR UPDATE OF p SKIP LOCKED))
            RETURNING j.id, j.queue, j.kind, j.payload, j.attempt, j.max_attempts, j.lease_token,
                      j.lease_expires_at, j.priority, j.run_at, j.created_at
        )
        SELECT c.id, c.queue, c.kind, c.payload, c.attempt, c.max_attempts, c.lease_token,
               c.lease_expires_at, c.priority, c.run_at, c.created_at
        FROM claimed c
        WHERE (SELECT jq._wake_on_abort(_claim_batch.queue)) AND jq._hint_advance(c.queue, c.priority, c.run_at, c.id)
        ORDER BY c.run_at, c.id;
    ELSE
        -- The full claim: every priority below below (NULL: all); gated on the queue row as in
        -- jq.claim (locked: the caller holds a capped or rate-limited queue's row lock).
        RETURN QUERY
        WITH claimed AS (
            UPDATE jq.jobs j SET
                state = 'running',
                attempt = j.attempt OPERATOR(pg_catalog.+) 1,
                claims = j.claims OPERATOR(pg_catalog.+) 1,
                worker = _claim_batch.worker,
                lease_token = jq._lease_token(),
                started_at = pg_catalog.clock_timestamp(),
                lease = coalesce(_claim_batch.lease, q.lease),
                lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) coalesce(_claim_batch.lease, q.lease)
            FROM jq.queues q
            WHERE q.name OPERATOR(pg_catalog.=) _claim_batch.queue
              AND j.id OPERATOR(pg_catalog.=) ANY (ARRAY(
                  SELECT p.id FROM jq.jobs p
                  WHERE p.queue OPERATOR(pg_catalog.=) _claim_batch.queue AND p.state OPERATOR(pg_catalog.=) 'ready'
                    AND p.priority OPERATOR(pg_catalog.<) coalesce(_claim_batch.below, 2147483648)
                    AND EXISTS (SELECT FROM jq.queues g WHERE g.name OPERATOR(pg_catalog.=) _claim_batch.queue
                                AND NOT g.paused
                                AND ((g.max_concurrency IS NULL AND g.rate_limit IS NULL) OR _claim_batch.locked IS NOT NULL))
                  ORDER BY p.priority DESC, p.run_at, p.id
                  LIMIT _claim_batch.n
                  FOR UPDATE OF p SKIP LOCKED))
            RETURNING j.id, j.queue, j.kind, j.payload, j.attempt, j.max_attempts, j.lease_token,
                      j.lease_expires_at, j.priority, j.run_at, j.created_at
        )
        SELECT c.id, c.queue, c.kind, c.payload, c.attempt, c.max_attempts, c.lease_token,
               c.lease_expires_at, c.priority, c.run_at, c.created_at
        FROM claimed c
        -- Per claimed row (here, not in the UPDATE's WHERE, where the planner may run them on
        -- rows it then rejects): as in the one-job copy's RETURNING.
        WHERE (SELECT jq._wake_on_abort(_claim_batch.queue)) AND jq._hint_advance(c.queue, c.priority, c.run_at, c.id)
        ORDER BY c.priority DESC, c.run_at, c.id;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION jq.complete_many(ids bigint[], lease_tokens uuid[], results jsonb[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_catalog.cardinality(complete_many.ids) IS DISTINCT FROM pg_catalog.cardinality(complete_many.lease_tokens)
       OR (complete_many.results IS NOT NULL
           AND pg_catalog.cardinality(complete_many.results) <> pg_catalog.cardinality(complete_many.ids)) THEN
        RAISE EXCEPTION 'ids, lease_tokens and results must have the same length' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token, u.result
        FROM ROWS FROM (pg_catalog.unnest(complete_many.ids),
                        pg_catalog.unnest(complete_many.lease_tokens),
                        pg_catalog.unnest(complete_many.results)) AS u(id, token, result)
    ), done AS (
        UPDATE jq.jobs j SET
            state = 'completed',
            finished_at = pg_catalog.clock_timestamp(),
            result = input.result
        FROM input
        WHERE j.id = input.id AND j.lease_token = input.token AND j.state::text = 'running'
          -- an index condition of its own: a join alone may be planned as a full scan of
          -- jobs_pkey under a hash join (src/planner.rs); the jobs it finds
          -- are hash-joined to the input (sql/security.sql, enable_nestloop)
          AND j.id = ANY (complete_many.ids)
        RETURNING j.id, j.queue, j.concurrency_key
    ), keyed AS (
        -- Keys whose slot is freed, all at once in key order (jq._key_fill_many); one row.
        SELECT CASE WHEN count(*) > 0 THEN
                   jq._key_fill_many(pg_catalog.array_agg(d.queue), pg_catalog.array_agg(d.concurrency_key),
                                     pg_catalog.array_agg(1)) END AS moved
        FROM done d WHERE d.concurrency_key IS NOT NULL
    )
    -- As in jq.complete, the job rows record the executions. keyed (one row) as a sub-select,
    -- not joined: with nested loops off (sql/security.sql) a join of it would be a disabled
    -- nested loop, whose cost (10^10) makes PostgreSQL JIT-compile the statement on every call.
    SELECT d.id FROM done d
    WHERE (SELECT pg_catalog.bool_and(jq._wake_slot(w.queue)) FROM (SELECT DISTINCT d2.queue FROM done d2) w) AND (SELECT k.moved IS NULL OR true FROM keyed k)
    ORDER BY d.id;
END $$;
