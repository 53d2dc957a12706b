-- See functions.sql. jq's claim and complete statements (sql/claim.sql, sql/finish.sql) in minimal functions;
-- p_history: a completion that also writes a history row, as jq's did before completions
-- were recorded in the job row.
CREATE FUNCTION public.bare_claim(p_queue text, p_worker text) RETURNS TABLE (id bigint, lease_token uuid)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    UPDATE jq.jobs j SET state = 'running', attempt = j.attempt + 1, claims = j.claims + 1,
           worker = p_worker, lease_token = gen_random_uuid(), started_at = clock_timestamp(),
           lease = q.lease, lease_expires_at = clock_timestamp() + q.lease
    FROM jq.queues q
    WHERE q.name = p_queue
      AND j.id = ANY (ARRAY(SELECT p.id FROM jq.jobs p WHERE p.queue = p_queue AND p.state = 'ready'
                            ORDER BY p.priority DESC, p.run_at, p.id LIMIT 1 FOR UPDATE OF p SKIP LOCKED))
    RETURNING j.id, j.lease_token;
END $$;
CREATE FUNCTION public.bare_complete(p_id bigint, p_token uuid, p_history boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_history THEN
        WITH done AS (
            UPDATE jq.jobs j SET state = 'completed', finished_at = clock_timestamp()
            WHERE j.id = p_id AND j.lease_token = p_token AND j.state::text = 'running'
            RETURNING j.id, j.claims, j.attempt, j.started_at, j.lease_expires_at, j.finished_at, j.queue, j.worker)
        INSERT INTO jq.execution_log (job_id, seq, attempt, outcome, started_at, lease_expires_at, finished_at, queue, worker)
        SELECT d.id, d.claims, d.attempt, 'completed', d.started_at, d.lease_expires_at, d.finished_at, d.queue, d.worker
        FROM done d;
    ELSE
        UPDATE jq.jobs j SET state = 'completed', finished_at = clock_timestamp()
        WHERE j.id = p_id AND j.lease_token = p_token AND j.state::text = 'running';
    END IF;
    RETURN FOUND;
END $$;
