-- Awaiting a job's outcome: jq.await sleeps until the job is completed, dead or cancelled, or
-- until its wait runs out. Woken through shared memory (src/awaiting.rs): it registers the job's
-- queue before its first look, and every commit that ends a job of that queue sets its latch;
-- without shared_preload_libraries it looks every jq.poll_interval.
-- pg_test/tests/awaiting.rs.

CREATE OR REPLACE FUNCTION jq._await_deadline(wait interval) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    IF _await_deadline.wait IS NULL OR _await_deadline.wait = interval '0' THEN
        RETURN NULL;
    END IF;
    IF _await_deadline.wait < interval '0' OR _await_deadline.wait > interval '1 hour'
       OR NOT jq._interval_fields_nonnegative(_await_deadline.wait) THEN
        RAISE EXCEPTION 'wait must be between 0 and 1 hour, got %', _await_deadline.wait
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jq.await with wait needs READ COMMITTED (each look needs a new snapshot), not %',
            pg_catalog.current_setting('transaction_isolation') USING ERRCODE = '25000';
    END IF;
    -- A transaction that wrote may hold the locks the job's end needs (its own enqueue is not
    -- even visible to workers yet): sleeping would wait for itself.
    IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'jq.await with wait cannot run in a transaction that has written (commit first)'
            USING ERRCODE = '25000';
    END IF;
    RETURN pg_catalog.clock_timestamp() + _await_deadline.wait;
END $$;
COMMENT ON FUNCTION jq._await_deadline(interval) IS
'Internal: validates jq.await''s wait (interval, 0 to 1 hour; NULL or 0 = do not wait) and returns '
'when the wait ends, or NULL. Errors: 22023 out of range or a negative field, 25000 outside READ '
'COMMITTED or in a transaction that has a transaction id.';

-- The look is one primary-key read. A job's queue never changes and ids are never reused, so
-- the queue read for the authorization and the registration is the queue of every later look.
CREATE OR REPLACE FUNCTION jq.await(id bigint, wait interval DEFAULT NULL,
                                    caller_ticket bigint DEFAULT jq._ticket(),
                                    OUT state jq.job_state, OUT result jsonb, OUT last_error text,
                                    OUT progress jsonb, OUT finished_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller   oid := jq._redeem(await.caller_ticket);
    v_queue    text;
    v_deadline timestamptz;
BEGIN
    IF await.id IS NULL THEN
        RAISE EXCEPTION 'id must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- The hot table first: a read of jq.jobs locks every history table (ACCESS SHARE) until
    -- this transaction ends, which would keep maintenance from truncating them for the whole
    -- wait (sql/history.sql). Only a finished job is looked up in the history, and then there
    -- is no wait.
    SELECT j.queue INTO v_queue FROM ONLY jq.jobs j WHERE j.id = await.id;
    IF NOT FOUND THEN
        SELECT j.queue INTO v_queue FROM jq.jobs j WHERE j.id = await.id;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % does not exist', await.id USING ERRCODE = '42704';
    END IF;
    IF NOT jq._may(v_caller, v_queue, 'any') THEN
        -- Without the queue's name, as jq._authorize_job.
        RAISE EXCEPTION 'permission denied: role "%" holds no privilege on the queue of job %',
            v_caller::regrole, await.id USING ERRCODE = '42501',
            HINT = 'Any jq.grant on the queue (enqueue, work or admin) lets a role await its jobs.';
    END IF;
    v_deadline := jq._await_deadline(await.wait);
    IF v_deadline IS NOT NULL THEN
        PERFORM jq._await_register(v_queue);
    END IF;
    LOOP
        SELECT j.state, j.result, j.last_error, j.progress, j.finished_at
        INTO await.state, await.result, await.last_error, await.progress, await.finished_at
        FROM ONLY jq.jobs j WHERE j.id = await.id;
        IF NOT FOUND THEN
            -- Finished (moved to the history in the statement that finished it), or gone.
            SELECT j.state, j.result, j.last_error, j.progress, j.finished_at
            INTO await.state, await.result, await.last_error, await.progress, await.finished_at
            FROM jq.jobs j WHERE j.id = await.id;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'job % no longer exists (its queue was dropped, or it was pruned)', await.id
                    USING ERRCODE = '42704';
            END IF;
            EXIT;
        END IF;
        EXIT WHEN v_deadline IS NULL OR NOT jq._await_sleep(v_deadline);
    END LOOP;
    IF v_deadline IS NOT NULL THEN
        PERFORM jq._await_done();
    END IF;
END $$;
COMMENT ON FUNCTION jq.await(bigint, interval, bigint) IS
'Waits for job id to finish and returns (state, result, last_error, progress, finished_at): at once '
'when it is completed, dead or cancelled; else after at most wait (interval, 0 to 1 hour; NULL or '
'0 = do not wait), returning the state it has then (scheduled, blocked, ready or running, with '
'finished_at NULL): the caller tells the two apart by state. Woken by the commit that ends the '
'job, through shared memory (polling every jq.poll_interval when jq is not preloaded); takes no '
'row lock, and reads the history tables only once the job has finished. result: what jq.complete stored; last_error: the last jq.fail error (also kept on a '
'completed job that failed before). Any role holding a privilege (enqueue, work or admin) on the '
'job''s queue may await it. Errors: 22004 NULL id; 42704 the job does not exist or disappeared '
'while awaited (queue dropped, job pruned); 42501 the caller holds no privilege on its queue; '
'22023 wait negative, over 1 hour or with a negative field; 25000 a wait outside READ COMMITTED or '
'in a transaction that has written (commit the enqueue first).';

COMMENT ON FUNCTION jq._wake_awaiters(text) IS
'Internal: at this transaction''s commit, wakes the jq.await callers awaiting a job of queue, for a '
'job that ended without freeing a running slot (cancelled while not running, released as '
'cancelled, queue dropped). Always true. Rust (src/wakeup.rs).';
COMMENT ON FUNCTION jq._await_register(text) IS
'Internal: registers this backend as awaiting a job of queue and resets its latch, until '
'jq._await_done or the end of the transaction. False when awaiting polls instead (jq not '
'preloaded). Rust (src/awaiting.rs).';
COMMENT ON FUNCTION jq._await_sleep(timestamptz) IS
'Internal: sleeps until a commit ends a job of the registered queue, or deadline (unregistered: at '
'most jq.poll_interval); false if deadline had passed. Rust (src/awaiting.rs).';
COMMENT ON FUNCTION jq._await_done() IS
'Internal: ends this backend''s await registration. Rust (src/awaiting.rs).';
COMMENT ON FUNCTION jq._await_wakeups() IS
'Internal: how many awaiters were woken (latches set) since the server started; NULL when jq is '
'not preloaded. Rust (src/awaiting.rs).';
