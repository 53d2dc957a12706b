-- The operator's calls on one job: cancel (any unfinished job) and retry (a dead or cancelled
-- one). Both check the caller's admin grant on the job's queue (jq._authorize_job, sql/grants.sql)
-- and run as the owner with a pinned search_path.

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
        FROM jq.jobs j WHERE j.id = cancel.id AND j.state IN ('scheduled', 'blocked', 'ready')
        FOR UPDATE;
        IF FOUND THEN
            UPDATE jq.jobs j SET state = 'cancelled', finished_at = pg_catalog.clock_timestamp()
            WHERE j.id = cancel.id;
            -- A ready job, or one scheduled again after a claim, held a slot of its key.
            IF v_job.concurrency_key IS NOT NULL
               AND (v_job.state = 'ready' OR (v_job.state = 'scheduled' AND v_job.claims > 0)) THEN
                PERFORM jq._key_fill(v_job.queue, v_job.concurrency_key, 1);
            END IF;
            RETURN true;
        END IF;
        UPDATE jq.jobs j SET cancel_requested = true
        WHERE j.id = cancel.id AND j.state::text = 'running';
        IF FOUND THEN
            RETURN true;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM jq.jobs j WHERE j.id = cancel.id
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
    v_queue text;
    v_key   text;
BEGIN
    IF NOT jq._authorize_job(retry.caller_ticket, retry.id) THEN
        RETURN false;
    END IF;
    -- A job with a concurrency key goes through its key (blocked, then jq._key_fill).
    UPDATE jq.jobs j SET
        state = CASE WHEN j.concurrency_key IS NULL THEN 'ready' ELSE 'blocked' END::jq.job_state,
        attempt = 0, lease_expiries = 0, cancel_requested = false,
        run_at = pg_catalog.now(), finished_at = NULL
    WHERE j.id = retry.id AND j.state IN ('dead', 'cancelled')
      AND jq._note_retried(j.queue, j.concurrency_key)
    RETURNING j.queue, j.concurrency_key INTO v_queue, v_key;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_key IS NOT NULL THEN
        PERFORM jq._key_fill(v_queue, v_key, 0);
    END IF;
    RETURN true;
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'job % cannot be retried: another unfinished job in its queue has the same '
                    'idempotency key', retry.id USING ERRCODE = '23505';
END $$;
COMMENT ON FUNCTION jq.retry(bigint, bigint) IS
'Puts a dead or cancelled job back to ready now, with attempt and lease_expiries reset (its '
'history and last_error stay). Returns false for other states or unknown ids. Errors: 23505 when '
'another unfinished job in the queue holds its idempotency key. 42501: the job exists and the caller holds no admin grant on its queue.';
