-- The operator's calls on one job: cancel (any unfinished job), retry (a dead or cancelled one)
-- and expire_lease (a running one). Each checks the caller's admin grant on the job's queue
-- (jq._authorize_job, sql/grants.sql) and runs as the owner with a pinned search_path.

CREATE OR REPLACE FUNCTION jq.cancel(id bigint, caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_job record;
BEGIN
    IF NOT jq._authorize_job(cancel.caller_ticket, cancel.id) THEN
        RETURN false;
    END IF;
    -- Two fenced updates; the loop covers a job moving between them (claimed, or reaped back).
    FOR i IN 1..3 LOOP
        SELECT j.state, j.claims, j.queue, j.concurrency_key INTO v_job
        FROM ONLY jq.jobs j WHERE j.id = cancel.id AND j.state IN ('scheduled', 'blocked', 'ready')
        FOR UPDATE;
        IF FOUND THEN
            UPDATE ONLY jq.jobs j SET state = 'cancelled', finished_at = pg_catalog.clock_timestamp()
            WHERE j.id = cancel.id;
            PERFORM jq._wake_awaiters(v_job.queue);  -- its jq.await callers, at commit
            -- A ready job, or one scheduled again after a claim, held a slot of its key.
            IF v_job.concurrency_key IS NOT NULL
               AND (v_job.state = 'ready' OR (v_job.state = 'scheduled' AND v_job.claims > 0)) THEN
                PERFORM jq._key_fill(v_job.queue, v_job.concurrency_key, 1);
            END IF;
            RETURN true;
        END IF;
        UPDATE ONLY jq.jobs j SET cancel_requested = true
        WHERE j.id = cancel.id AND j.state::text = 'running';
        IF FOUND THEN
            RETURN true;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM ONLY jq.jobs j WHERE j.id = cancel.id
                       AND j.state IN ('scheduled', 'blocked', 'ready', 'running')) THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN false;
END $$;
COMMENT ON FUNCTION jq.cancel(bigint, bigint) IS
'Cancels a job: a scheduled, blocked or ready job becomes cancelled at once (freeing its key''s '
'slot if it held one); a running job gets '
'cancel_requested, which its worker sees in the next jq.heartbeat and should answer by stopping '
'(its jq.fail or jq.release then ends it as cancelled; a jq.complete still completes it, and an '
'expired lease cancels it). Returns false for finished or unknown jobs. Errors: 42501 when the job exists and the caller holds no admin grant on its queue.';

-- A retried job without a concurrency key is ready: the queue's waiting claims are woken at
-- commit. One with a key goes through its key (jq._key_fill, which wakes them for the jobs it
-- makes ready). In the UPDATE's WHERE, after the state test, so it runs for the job retried.
-- Exercised by pg_test/tests/retries.rs and flow/keys.rs, key_concurrency_slots_follow_cancel_retry_and_alter.
CREATE OR REPLACE FUNCTION jq._note_retried(queue text, concurrency_key text) RETURNS boolean
LANGUAGE sql AS $$
    SELECT CASE WHEN concurrency_key IS NULL THEN jq._wake(queue) ELSE true END
$$;
COMMENT ON FUNCTION jq._note_retried(text, text) IS
'Internal: a dead or cancelled job of queue (with concurrency_key, or NULL) is retried: wakes '
'claims at commit when it is ready at once (no key). Always true. Inlined.';

CREATE OR REPLACE FUNCTION jq.retry(id bigint, caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_job jq.jobs;
BEGIN
    IF NOT jq._authorize_job(retry.caller_ticket, retry.id) THEN
        RETURN false;
    END IF;
    -- A finished job lives in the history (sql/schema.sql): it is taken out of it and inserted
    -- into the hot table again. The delete is the fence: of two retries of one job, the second
    -- finds it gone and returns false (pg_test/tests/history.rs,
    -- a_retried_dead_job_comes_back_to_the_hot_table_once).
    DELETE FROM jq.jobs j WHERE j.id = retry.id AND j.state IN ('dead', 'cancelled')
    RETURNING j.* INTO v_job;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A job with a concurrency key goes through its key (blocked, then jq._key_fill).
    v_job.state := CASE WHEN v_job.concurrency_key IS NULL THEN 'ready' ELSE 'blocked' END;
    v_job.attempt := 0;
    v_job.lease_expiries := 0;
    v_job.cancel_requested := false;
    v_job.run_at := pg_catalog.now();
    v_job.finished_at := NULL;
    INSERT INTO jq.jobs SELECT v_job.*;
    PERFORM jq._note_retried(v_job.queue, v_job.concurrency_key);
    IF v_job.concurrency_key IS NOT NULL THEN
        PERFORM jq._key_fill(v_job.queue, v_job.concurrency_key, 0);
    END IF;
    -- No longer dead: its kind's on_dead hook, if still pending, is not called again (it runs
    -- anew if the job dies again; sql/kinds.sql).
    DELETE FROM jq.pending_hooks p WHERE p.job_id = retry.id;
    RETURN true;
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'job % cannot be retried: another unfinished job in its queue has the same '
                    'idempotency key', retry.id USING ERRCODE = '23505';
END $$;
COMMENT ON FUNCTION jq.retry(bigint, bigint) IS
'Puts a dead or cancelled job back to ready now, with attempt and lease_expiries reset (its '
'history and last_error stay; a pending on_dead hook is dropped). Returns false for other states or unknown ids. Errors: 23505 when '
'another unfinished job in the queue holds its idempotency key. 42501: the job exists and the caller holds no admin grant on its queue.';

-- An operator takes back a running attempt: a worker that set a lease of years, or one that hangs,
-- pins the job (and a slot of a capped queue or of its key) until the lease ends; this ends it
-- now, as the reaper ends an expired one. Fenced: it acts only on a job still running (and, when
-- lease_token is given, still under that lease), and the worker's later calls with its token
-- change nothing. pg_test/tests/leases/take_back.rs.
CREATE OR REPLACE FUNCTION jq.expire_lease(id bigint, lease_token uuid DEFAULT NULL,
                                caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    IF NOT jq._authorize_job(expire_lease.caller_ticket, expire_lease.id) THEN
        RETURN false;
    END IF;
    -- The job row first (waiting for a worker's call in flight: the operator owns this outcome),
    -- then its key's slot row in jq._end_leases, the order every job end takes them in.
    PERFORM FROM ONLY jq.jobs j
    WHERE j.id = expire_lease.id AND j.state = 'running'
      AND (expire_lease.lease_token IS NULL OR j.lease_token = expire_lease.lease_token)
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- The session's login role names who took it back (the history's error text).
    RETURN jq._end_leases(ARRAY[expire_lease.id], pg_catalog.clock_timestamp(), 'infinity', true,
                          session_user::text) OPERATOR(pg_catalog.=) 1;
END $$;
COMMENT ON FUNCTION jq.expire_lease(bigint, uuid, bigint) IS
'Takes back the running attempt of job id now, as the reaper does when a lease expires: the job is '
'ready again with the attempt refunded and lease_expiries + 1 (cancelled if a cancellation was '
'requested; dead once lease_expiries exceeds the queue''s max_lease_expiries), its key''s or '
'capped queue''s slot is freed, and the execution is recorded with outcome lease_expired and error '
'"lease taken back by <session user>". The worker''s later heartbeat, complete, fail or release with its '
'token change nothing. lease_token (optional): act only if the job still runs under that lease. '
'Returns false when the job is not running (or runs under another lease) or does not exist. '
'Errors: 42501 when the job exists and the caller holds no admin grant on its queue.';
