-- Cells of bench/experiments/decompose/run: the floor's two statements inside minimal plpgsql functions
-- (database floor), and jq's own claim and complete statements, copied from sql/claim.sql and sql/finish.sql
-- without the parts that make them a product (authorisation, argument checks, the pause and
-- cap gate, the full claimed_job row, wakeups, per-key slots), inside minimal plpgsql
-- functions (database jq). Only these cells call them; nothing of jq uses them.
CREATE FUNCTION public.floor_claim(p_queue text, p_worker text) RETURNS TABLE (id bigint, lease_token uuid)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    WITH c AS (SELECT f.id FROM floor_jobs f WHERE f.queue = p_queue AND f.state = 'ready'
               ORDER BY f.priority DESC, f.run_at, f.id LIMIT 1 FOR UPDATE SKIP LOCKED)
    UPDATE floor_jobs j SET state = 'running', attempt = j.attempt + 1, worker = p_worker,
           lease_token = gen_random_uuid(), lease_expires_at = now() + interval '5 minutes'
    FROM c WHERE j.id = c.id RETURNING j.id, j.lease_token;
END $$;
CREATE FUNCTION public.floor_complete(p_id bigint, p_token uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE floor_jobs f SET state = 'completed'
    WHERE f.id = p_id AND f.lease_token = p_token AND f.state = 'running';
    RETURN FOUND;
END $$;
