-- Ending a claim: complete, complete_many, fail, heartbeat (while it runs), and the two calls
-- that hand a running job back without charging the attempt, release and snooze.
--
-- Fencing: complete, fail, heartbeat, release and snooze act only on a job that is still
-- 'running' under the caller's lease token, in the same statement that changes it. A worker
-- whose lease expired (and whose job may be running again under a new token) changes nothing.
--
-- Those lookups by id test `j.state::text = 'running'`, not `j.state = 'running'`: the plain
-- form implies the predicate of the partial index jobs_running_idx, and when the statistics say
-- few jobs run (an ANALYZE while the queue was idle) the planner preferred scanning that whole
-- index over the primary key, which made jq.complete_many take about a second per call. The
-- cast leaves the primary key as the only index. pg_test/tests/plans/finish.rs,
-- worker_calls_find_the_job_by_primary_key_after_an_idle_analyze.
--
-- A cached plan is kept for the life of a connection, and one made while jq.jobs held a few
-- rows would find a job by id with a sequential scan after it grew. jq's planner hook plans
-- jq.jobs as at least jq.plan_min_pages pages (src/planner.rs), so no function pins
-- enable_seqscan = off. pg_test/tests/plans/growth.rs, plans_made_on_a_small_table_stay_index_lookups.

COMMENT ON FUNCTION jq.backoff_seconds(text, double precision, double precision, integer, text, double precision) IS
'Retry delay in seconds (float8) for attempt (1-based, the attempt that just failed) under policy '
'fixed (base), linear (base * attempt) or exponential (base * 2^(attempt-1)), capped at '
'max_seconds; jitter none uses it as is, full scales it by sample (uniform in [0, 1), pass '
'random()): "full jitter", Marc Brooker, Exponential Backoff And Jitter, AWS Architecture Blog, '
'2015. base_seconds and max_seconds are seconds. Pure (IMMUTABLE). Errors: 22023 unknown policy '
'or jitter mode. Implemented in Rust (src/backoff.rs).';

CREATE OR REPLACE FUNCTION jq.max_error_length() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 16384 $$;
COMMENT ON FUNCTION jq.max_error_length() IS
'Longest error text stored by jq.fail: 16,384 characters. Longer errors keep their first '
'16,384 characters followed by a marker " ...[truncated, N characters in all]".';

CREATE OR REPLACE FUNCTION jq._clip_error(error text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN pg_catalog.length(error) <= jq.max_error_length() THEN error
                ELSE pg_catalog.left(error, jq.max_error_length()) || ' ...[truncated, '
                     || pg_catalog.length(error) || ' characters in all]' END
$$;
COMMENT ON FUNCTION jq._clip_error(text) IS
'Internal: error text cut to jq.max_error_length() characters with a truncation marker. Text is '
'stored as text, never spliced into JSON, so quotes, backslashes and "\u0000" survive verbatim.';

-- The effects of a running job's end that free its slots, named: a capped queue has a free slot
-- at commit (jq._wake_slot wakes a waiting claim then: pg_test/tests/bgworker/long_poll.rs,
-- a_waiting_claim_on_a_full_capped_queue_is_woken_when_a_job_completes), and its concurrency
-- key's slot passes to the key's next blocked job (jq._key_fill, called only for a job with a
-- key: pg_test/tests/flow/keys.rs, a_key_slot_freeing_wakes_a_waiting_claim). A plain SQL expression
-- with no settings, so the planner inlines it into the statement that ends the job.
CREATE OR REPLACE FUNCTION jq._note_slot_freed(queue text, concurrency_key text) RETURNS boolean
LANGUAGE sql AS $$
    SELECT jq._wake_slot(queue)
           AND CASE WHEN concurrency_key IS NULL THEN true
                    ELSE jq._key_fill(queue, concurrency_key, 1) OPERATOR(pg_catalog.>=) 0 END
$$;
COMMENT ON FUNCTION jq._note_slot_freed(text, text) IS
'Internal: a running job of queue (with concurrency_key, or NULL) ended: wakes a claim waiting for '
'a free slot of a capped queue at commit and passes the key''s slot to its next blocked job. '
'Always true. Inlined.';

-- A running job went back (snooze; the reaper, sql/maintenance.sql): if it is ready again, the
-- queue's waiting claims are woken at commit and the claim-start hint moves back to it
-- (jq._wake_ready), else (scheduled, dead, cancelled) a capped queue has a free slot at commit
-- (jq._wake_slot). Called in the statement that records the execution, once per job that went
-- back, so that nothing is woken for a job that did not. Exercised by pg_test/tests/flow/rate_limits.rs,
-- snooze_refunds_the_attempt_records_the_execution_and_is_fenced, and pg_test/tests/leases/.
CREATE OR REPLACE FUNCTION jq._note_back(queue text, state jq.job_state, priority integer, run_at timestamptz)
RETURNS boolean
LANGUAGE sql AS $$
    SELECT CASE WHEN state OPERATOR(pg_catalog.=) 'ready' THEN jq._wake_ready(queue, priority, run_at)
                ELSE jq._wake_slot(queue) END
$$;
COMMENT ON FUNCTION jq._note_back(text, jq.job_state, integer, timestamptz) IS
'Internal: a running job of queue went back to state (at priority, run_at): wakes claims at commit '
'(ready: and moves the claim-start hint back to it; else: a capped queue''s slot is free). Always '
'true. Inlined.';

-- A failed attempt (jq.fail): a job ready again at once wakes the queue's waiting claims at
-- commit (jq._wake); a scheduled, dead or cancelled one frees a capped queue's slot
-- (jq._wake_slot). In the statement that records the failed execution, which finds the job
-- only if the fenced update changed it. Exercised by pg_test/tests/retries.rs.
CREATE OR REPLACE FUNCTION jq._note_failed(queue text, state jq.job_state) RETURNS boolean
LANGUAGE sql AS $$
    SELECT CASE WHEN state OPERATOR(pg_catalog.=) 'ready' THEN jq._wake(queue) ELSE jq._wake_slot(queue) END
$$;
COMMENT ON FUNCTION jq._note_failed(text, jq.job_state) IS
'Internal: a failed attempt of a job of queue left it in state: wakes claims at commit (ready: the '
'job is claimable; else: a capped queue''s slot is free). Always true. Inlined.';

-- One of the two hot calls: as the owner with no SET clause, every name schema-qualified,
-- operators too (see sql/claim.sql's head).
CREATE OR REPLACE FUNCTION jq.complete(id bigint, lease_token uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
DECLARE
    v_job  jq.jobs;
    v_slot integer;  -- the done ring's current table
    v_done boolean;  -- jq._note_slot_freed's result (always true)
BEGIN
    -- The job row is the record of a completed execution (sql/schema.sql, jq.executions): no
    -- history row is written here. A completed job leaves the hot table: the fenced delete takes
    -- it out (only if it is still running under this token) and the insert below puts it,
    -- completed, into the current table of the done ring (sql/history.sql). One delete, not an
    -- update that the trigger jobs_retire would then undo: no row version and index entries
    -- written only to die. Three statements and no nested call (jq._archive's work inline, the
    -- slot's effects in the insert): each statement more is a measurable part of a one-job
    -- completion (bench/experiments/ab_variant.sh).
    DELETE FROM ONLY jq.jobs j
    WHERE j.id OPERATOR(pg_catalog.=) complete.id
      AND j.lease_token OPERATOR(pg_catalog.=) complete.lease_token
      AND j.state::pg_catalog.text OPERATOR(pg_catalog.=) 'running'
    RETURNING j.* INTO v_job;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_job.state := 'completed';
    v_job.finished_at := pg_catalog.clock_timestamp();
    v_job.result := complete.result;
    SELECT r.current INTO v_slot FROM jq.history_rings r WHERE r.ring OPERATOR(pg_catalog.=) 'done';
    -- The slot's effects (jq._note_slot_freed) in the insert's RETURNING: they may wait for the
    -- key's slot row (jq._key_fill), and the ring was read just before the insert, which holds
    -- its table from then on (a ring that moves on meanwhile spares the table it left for 10 s
    -- only: sql/history.sql, jq._truncate_history).
    IF v_slot OPERATOR(pg_catalog.=) 1 THEN INSERT INTO jq.jobs_done_1 VALUES (v_job.*)
        RETURNING jq._note_slot_freed(v_job.queue, v_job.concurrency_key) INTO v_done;
    ELSIF v_slot OPERATOR(pg_catalog.=) 2 THEN INSERT INTO jq.jobs_done_2 VALUES (v_job.*)
        RETURNING jq._note_slot_freed(v_job.queue, v_job.concurrency_key) INTO v_done;
    ELSIF v_slot OPERATOR(pg_catalog.=) 3 THEN INSERT INTO jq.jobs_done_3 VALUES (v_job.*)
        RETURNING jq._note_slot_freed(v_job.queue, v_job.concurrency_key) INTO v_done;
    ELSIF v_slot OPERATOR(pg_catalog.=) 4 THEN INSERT INTO jq.jobs_done_4 VALUES (v_job.*)
        RETURNING jq._note_slot_freed(v_job.queue, v_job.concurrency_key) INTO v_done;
    ELSIF v_slot OPERATOR(pg_catalog.=) 5 THEN INSERT INTO jq.jobs_done_5 VALUES (v_job.*)
        RETURNING jq._note_slot_freed(v_job.queue, v_job.concurrency_key) INTO v_done;
    ELSIF v_slot OPERATOR(pg_catalog.=) 6 THEN INSERT INTO jq.jobs_done_6 VALUES (v_job.*)
        RETURNING jq._note_slot_freed(v_job.queue, v_job.concurrency_key) INTO v_done;
    ELSIF v_slot OPERATOR(pg_catalog.=) 7 THEN INSERT INTO jq.jobs_done_7 VALUES (v_job.*)
        RETURNING jq._note_slot_freed(v_job.queue, v_job.concurrency_key) INTO v_done;
    ELSE INSERT INTO jq.jobs_done_0 VALUES (v_job.*)
        RETURNING jq._note_slot_freed(v_job.queue, v_job.concurrency_key) INTO v_done;
    END IF;
    RETURN true;
END $$;
COMMENT ON FUNCTION jq.complete(bigint, uuid, jsonb) IS
'Marks a running job completed and stores result (any JSON, optional); the job row then records '
'the execution (jq.executions). Fenced: true only if the job is still running under this '
'lease_token; otherwise (lease expired and reaped, claimed again, cancelled, dropped, unknown id) '
'false and nothing changes.';

-- Job rows as they are once finished now in state (with results): what jq.complete_many and
-- jq.cancel_dead archive. One call a batch, the rows changed in place.
CREATE OR REPLACE FUNCTION jq._finished(jobs jq.jobs[], state jq.job_state, results jsonb[]) RETURNS jq.jobs[]
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(jobs), 0) LOOP
        jobs[i].state := _finished.state;
        jobs[i].finished_at := v_now;
        IF results IS NOT NULL THEN
            jobs[i].result := results[i];
        END IF;
    END LOOP;
    RETURN jobs;
END $$;
COMMENT ON FUNCTION jq._finished(jq.jobs[], jq.job_state, jsonb[]) IS
'Internal: jobs (jq.jobs rows) with state (completed, dead or cancelled), finished_at now '
'(clock_timestamp(), one instant for all) and result results[i] (results NULL: each keeps its own).';

CREATE OR REPLACE FUNCTION jq._keys_passed_on(moved integer) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$ SELECT true $$;
COMMENT ON FUNCTION jq._keys_passed_on(integer) IS
'Internal: true, whatever moved (the count jq._key_fill_many returned). jq.complete_many reads it '
'from the CTE that passes the keys'' slots on, so that the CTE runs. Inlined.';

-- jq.complete_many reads its arrays through unnest: a custom plan sees the array's length, the
-- generic one estimates it, so whenever the batches a caller sends have the same few elements
-- (one job a call, say) every custom plan looks cheaper and the big statement was planned again
-- on every call, several times its execution for a one-job UPDATE. Its generic plans are the
-- same joins on the primary key and on jq.queues, so they are forced (pg_test/tests/plans/generic_plans.rs,
-- batch_writes_reuse_one_generic_plan).
-- It finds its jobs by j.id = ANY (ids) and joins them to its input arrays. The generic plan
-- estimates one job found, so the planner joined them with a nested loop that ran the input's
-- unnest again for every job: n^2 rows per call, a drain measurably slower at batch 100
-- (bench/experiments/ab_variant.sh). Nested loops are off for it: a hash join, each side read once
-- (pg_test/tests/plans/finish.rs, complete_many_reads_its_input_once). JIT off, as every function
-- with settings (pg_test/tests/plans/generic_plans.rs, functions_with_settings_never_jit).
CREATE OR REPLACE FUNCTION jq.complete_many(ids bigint[], lease_tokens uuid[], results jsonb[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_nestloop = off
SET jit = off
AS $$
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
    ), gone AS (
        -- Completed jobs leave the hot table (as in jq.complete): deleted here, inserted below
        -- into the current history table, completed.
        DELETE FROM ONLY jq.jobs j
        USING input
        WHERE j.id = input.id AND j.lease_token = input.token AND j.state::text = 'running'
          -- an index condition of its own: a join alone may be planned as a full scan of
          -- jobs_pkey under a hash join (src/planner.rs); the jobs it finds
          -- are hash-joined to the input (enable_nestloop = off, above)
          AND j.id = ANY (complete_many.ids)
        RETURNING j AS job, input.result AS result
    ), done AS (
        SELECT (g.job).id, (g.job).queue, (g.job).concurrency_key FROM gone g
    ), archived AS (
        SELECT jq._archive('done', jq._finished(pg_catalog.array_agg(g.job), 'completed', pg_catalog.array_agg(g.result))) AS n
        FROM gone g
    ), keyed AS (
        -- Keys whose slot is freed, all at once in key order (jq._key_fill_many); one row.
        SELECT CASE WHEN count(*) > 0 THEN
                   jq._key_fill_many(pg_catalog.array_agg(d.queue), pg_catalog.array_agg(d.concurrency_key),
                                     pg_catalog.array_agg(1)) END AS moved
        FROM done d WHERE d.concurrency_key IS NOT NULL
    )
    -- As in jq.complete, the job rows record the executions. The statement must read keyed,
    -- or PostgreSQL never runs it (a SELECT in WITH runs only as far as it is read), and the
    -- keys' slots would not pass on (pg_test/tests/flow/keys.rs,
    -- per_key_jobs_never_overlap_and_start_in_enqueue_order_under_ten_claimers, which completes
    -- in batches): jq._keys_passed_on names that read. keyed (one row) as a sub-select, not
    -- joined: with nested loops off a join of it would be a disabled nested loop, whose cost
    -- (10^10) makes PostgreSQL JIT-compile the statement on every call.
    -- archived too (one row): it inserts the completed rows into the history.
    SELECT d.id FROM done d WHERE jq._wake_slot(d.queue) AND (SELECT jq._keys_passed_on(k.moved) FROM keyed k)
      AND (SELECT a.n >= 0 FROM archived a)
    ORDER BY d.id;
END $$;
COMMENT ON FUNCTION jq.complete_many(bigint[], uuid[], jsonb[]) IS
'Batch form of jq.complete: ids[i] with lease_tokens[i] (and results[i], optional). Returns the '
'ids that were completed, ascending; the others were not running under that token and are '
'unchanged. Errors: 22023 arrays of different lengths.';

CREATE OR REPLACE FUNCTION jq.fail(id bigint, lease_token uuid, error text, retry_in interval DEFAULT NULL)
RETURNS jq.job_state
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_job   record;
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_delay interval;
    v_state jq.job_state;
    v_error text := jq._clip_error(fail.error);
BEGIN
    -- The retry policy when the attempt ends: the job's kind's (sql/kinds.sql), else the queue's.
    SELECT j.attempt, j.max_attempts, j.cancel_requested, coalesce(k.backoff, q.backoff) AS backoff,
           coalesce(k.backoff_base, q.backoff_base) AS backoff_base,
           coalesce(k.backoff_max, q.backoff_max) AS backoff_max, coalesce(k.jitter, q.jitter) AS jitter,
           j.queue, j.concurrency_key, k.on_dead
    INTO v_job
    FROM ONLY jq.jobs j LEFT JOIN jq.queues q ON q.name = j.queue
         LEFT JOIN jq.kinds k ON q.has_kinds AND k.queue = j.queue AND k.kind = j.kind
    WHERE j.id = fail.id AND j.lease_token = fail.lease_token AND j.state::text = 'running'
    FOR UPDATE OF j;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF fail.retry_in > interval '100 years'
       OR (fail.retry_in > interval '0' AND NOT jq._interval_fields_nonnegative(fail.retry_in)) THEN
        RAISE EXCEPTION 'retry_in must be at most 100 years, with no negative field, got %', fail.retry_in
            USING ERRCODE = '22023';
    END IF;

    IF v_job.cancel_requested THEN
        v_state := 'cancelled';
    ELSIF v_job.attempt >= v_job.max_attempts THEN
        v_state := 'dead';
    ELSE
        v_delay := coalesce(fail.retry_in,
            jq.backoff_seconds(
                v_job.backoff::text,
                extract(epoch FROM v_job.backoff_base)::float8,
                extract(epoch FROM v_job.backoff_max)::float8,
                v_job.attempt, v_job.jitter::text, pg_catalog.random()) * interval '1 second');
        v_state := CASE WHEN v_delay > interval '0' THEN 'scheduled' ELSE 'ready' END;
    END IF;

    -- The execution is recorded from the update's RETURNING: a job that went dead or cancelled
    -- has left the hot table by the end of the update (sql/history.sql), and a read of jq.jobs
    -- would have to look through every history table for it.
    WITH ended AS (
        UPDATE ONLY jq.jobs j SET
            state = v_state,
            last_error = v_error,
            run_at = CASE WHEN v_state = 'scheduled' THEN v_now + v_delay
                          WHEN v_state = 'ready' THEN v_now ELSE j.run_at END,
            finished_at = CASE WHEN v_state IN ('dead', 'cancelled') THEN v_now END
        WHERE j.id = fail.id AND j.lease_token = fail.lease_token AND j.state::text = 'running'
        RETURNING j.id, j.claims, j.attempt, j.started_at, j.lease_expires_at, j.queue, j.worker
    )
    INSERT INTO jq.execution_log (job_id, seq, attempt, outcome, started_at, lease_expires_at,
                               finished_at, queue, worker, error)
    SELECT e.id, e.claims, e.attempt,
           CASE WHEN v_state = 'cancelled' THEN 'cancelled' ELSE 'failed' END::jq.execution_outcome,
           e.started_at, e.lease_expires_at, v_now, e.queue, e.worker, v_error
    FROM ended e WHERE jq._note_failed(e.queue, v_state);
    -- A retrying job keeps its key's slot (it stays the key's head); a finished one frees it.
    IF v_job.concurrency_key IS NOT NULL AND v_state IN ('dead', 'cancelled') THEN
        PERFORM jq._key_fill(v_job.queue, v_job.concurrency_key, 1);
    END IF;
    -- The kind's exhaustion hook, in this transaction (sql/kinds.sql): a hook that raises is
    -- recorded in jq.pending_hooks and retried by maintenance; this call still returns dead.
    IF v_state = 'dead' AND v_job.on_dead IS NOT NULL THEN
        PERFORM jq._on_dead(ARRAY[fail.id], v_now);
    END IF;
    RETURN v_state;
END $$;
COMMENT ON FUNCTION jq.fail(bigint, uuid, text, interval) IS
'Records a failed attempt of a running job and returns its new state: scheduled (retry at now + '
'backoff; ready when the delay is zero) while attempt < max_attempts, else dead; cancelled if a '
'cancellation was requested. The delay is retry_in (interval, overrides the policy) or the '
'policy of the job''s kind (jq.alter_kind), else of its queue, via jq.backoff_seconds: '
'fixed/linear/exponential from backoff_base, capped at backoff_max, full jitter by default. A job '
'that goes dead runs its kind''s on_dead hook in this transaction (jq.alter_kind). error: any text (quotes, backslashes, "\u0000" kept '
'verbatim; longer than jq.max_error_length() is truncated with a marker). Fenced: NULL and no '
'change unless the job is running under this lease_token. Errors: 22023 retry_in over 100 years '
'or positive with a negative field (a zero or negative retry_in means now).';

CREATE OR REPLACE FUNCTION jq.max_progress_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 65536 $$;
COMMENT ON FUNCTION jq.max_progress_bytes() IS
'Largest progress jq.heartbeat stores: 65,536 bytes of JSON text (as jsonb prints it). Larger '
'progress raises 54000 and changes nothing; keep big checkpoints in a table and report their key.';

-- Progress rides on the heartbeat: the same one fenced UPDATE by primary key, so reporting it
-- costs no statement of its own and a worker that lost its lease writes nothing
-- (pg_test/tests/leases/progress.rs). Not copied into the execution history: it is the job's
-- checkpoint, kept across attempts on the job row, and an append-only copy per failed
-- execution would multiply up to jq.max_progress_bytes() by the attempts for history_retention.
CREATE OR REPLACE FUNCTION jq.heartbeat(id bigint, lease_token uuid, extend interval DEFAULT NULL,
                             progress jsonb DEFAULT NULL,
                             OUT lease_expires_at timestamptz, OUT cancel_requested boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    IF heartbeat.extend IS NOT NULL
       AND (heartbeat.extend <= interval '0' OR heartbeat.extend > interval '100 years'
            OR NOT jq._interval_fields_nonnegative(heartbeat.extend)) THEN
        RAISE EXCEPTION 'extend must be greater than zero and at most 100 years, got %',
            heartbeat.extend USING ERRCODE = '22023';
    END IF;
    IF heartbeat.progress IS NOT NULL
       AND pg_catalog.octet_length(heartbeat.progress::text) > jq.max_progress_bytes() THEN
        RAISE EXCEPTION 'progress of % bytes as JSON text exceeds the maximum of % bytes (jq.max_progress_bytes())',
            pg_catalog.octet_length(heartbeat.progress::text), jq.max_progress_bytes()
            USING ERRCODE = '54000';
    END IF;
    -- Bounded by the queue's max_lease (a lease of years pins the job and its slots), read once.
    UPDATE ONLY jq.jobs j SET (lease_expires_at, lease) = (
        -- Never past the attempt's wall timeout (NULL: none), when maintenance ends it as failed.
        SELECT LEAST(pg_catalog.clock_timestamp() + b.lease, j.started_at + j.timeout), b.lease
        FROM (SELECT LEAST(coalesce(heartbeat.extend, j.lease),
                           (SELECT q.max_lease FROM jq.queues q WHERE q.name = j.queue)) AS lease) b),
        progress = coalesce(heartbeat.progress, j.progress)
    WHERE j.id = heartbeat.id AND j.lease_token = heartbeat.lease_token AND j.state::text = 'running'
    RETURNING j.lease_expires_at, j.cancel_requested
    INTO heartbeat.lease_expires_at, heartbeat.cancel_requested;
END $$;
COMMENT ON FUNCTION jq.heartbeat(bigint, uuid, interval, jsonb) IS
'Extends the lease of a running job to now + extend (interval; default the lease length of the '
'current claim), at most the queue''s max_lease and never past started_at + the job''s timeout, and returns (lease_expires_at, cancel_requested): a true cancel_requested asks '
'the handler to stop (jq.cancel). progress (jsonb, optional; SQL NULL keeps the stored one): the '
'job''s latest progress (any JSON: percent, message, checkpoint), stored on the job, kept across '
'retries and expired leases, returned by the next claim and shown in jq.jobs. Fenced: both NULL and no change (progress '
'included) unless the job is running under this lease_token, so a stale worker cannot extend a newer claim. Errors: 22023 extend <= 0, '
'over 100 years or with a negative field; 54000 progress over jq.max_progress_bytes().';

CREATE OR REPLACE FUNCTION jq.release(id bigint, lease_token uuid) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    WITH back AS (
        UPDATE ONLY jq.jobs j SET
            state = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'ready' END::jq.job_state,
            attempt = j.attempt - 1,
            finished_at = CASE WHEN j.cancel_requested THEN pg_catalog.clock_timestamp() END
        WHERE j.id = release.id AND j.lease_token = release.lease_token AND j.state::text = 'running'
        RETURNING j.id, j.claims, j.attempt, j.state, j.started_at, j.lease_expires_at, j.queue,
                  j.worker, j.concurrency_key, j.priority, j.run_at
    )
    INSERT INTO jq.execution_log (job_id, seq, attempt, outcome, started_at, lease_expires_at,
                               finished_at, queue, worker)
    SELECT b.id, b.claims, b.attempt + 1,
           CASE WHEN b.state = 'cancelled' THEN 'cancelled' ELSE 'released' END::jq.execution_outcome,
           b.started_at, b.lease_expires_at, pg_catalog.clock_timestamp(), b.queue, b.worker
    FROM back b
    WHERE jq._wake_ready(b.queue, b.priority, b.run_at)
      AND (b.state <> 'cancelled' OR jq._wake_awaiters(b.queue))  -- src/awaiting.rs
      AND CASE WHEN b.concurrency_key IS NULL OR b.state <> 'cancelled' THEN true
               ELSE jq._key_fill(b.queue, b.concurrency_key, 1) >= 0 END;
    RETURN FOUND;
END $$;
COMMENT ON FUNCTION jq.release(bigint, uuid) IS
'Hands a running job back without charging the attempt (graceful shutdown: a handler stopped by '
'shutdown has not failed). The job is ready again at its old place in the queue, or cancelled if '
'a cancellation was requested. Fenced: false and no change unless the job is running under this '
'lease_token.';

CREATE OR REPLACE FUNCTION jq.snooze(id bigint, lease_token uuid, delay interval) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_job record;
BEGIN
    IF snooze.delay IS NULL THEN
        RAISE EXCEPTION 'delay must not be NULL (use interval ''0'' to snooze until now)'
            USING ERRCODE = '22004';
    END IF;
    IF snooze.delay > interval '100 years'
       OR (snooze.delay > interval '0' AND NOT jq._interval_fields_nonnegative(snooze.delay)) THEN
        RAISE EXCEPTION 'delay must be at most 100 years, with no negative field, got %', snooze.delay
            USING ERRCODE = '22023';
    END IF;
    -- Fenced like jq.complete: only the current claim (lease token, running) can snooze. The
    -- attempt is refunded; the job keeps its key slot (it is still the key's head) unless a
    -- cancellation was requested, which ends it as cancelled, as jq.release does.
    WITH back AS (
        UPDATE ONLY jq.jobs j SET
            state = CASE WHEN j.cancel_requested THEN 'cancelled'
                         WHEN snooze.delay > interval '0' THEN 'scheduled'
                         ELSE 'ready' END::jq.job_state,
            attempt = j.attempt - 1,
            run_at = CASE WHEN j.cancel_requested THEN j.run_at
                          ELSE v_now + pg_catalog.interval_larger(snooze.delay, interval '0') END,
            finished_at = CASE WHEN j.cancel_requested THEN v_now END
        WHERE j.id = snooze.id AND j.lease_token = snooze.lease_token AND j.state::text = 'running'
        RETURNING j.id, j.claims, j.attempt, j.state, j.started_at, j.lease_expires_at, j.queue,
                  j.worker, j.concurrency_key, j.priority, j.run_at
    ), hist AS (
        INSERT INTO jq.execution_log (job_id, seq, attempt, outcome, started_at, lease_expires_at,
                                   finished_at, queue, worker)
        SELECT b.id, b.claims, b.attempt + 1,
               CASE WHEN b.state = 'cancelled' THEN 'cancelled' ELSE 'snoozed' END::jq.execution_outcome,
               b.started_at, b.lease_expires_at, v_now, b.queue, b.worker
        FROM back b
        WHERE jq._note_back(b.queue, b.state, b.priority, b.run_at)
        RETURNING job_id
    )
    SELECT b.state, b.queue, b.concurrency_key INTO v_job FROM back b;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_job.concurrency_key IS NOT NULL AND v_job.state = 'cancelled' THEN
        PERFORM jq._key_fill(v_job.queue, v_job.concurrency_key, 1);
    END IF;
    RETURN true;
END $$;
COMMENT ON FUNCTION jq.snooze(bigint, uuid, interval) IS
'Puts a running job back to scheduled at now + delay (interval; zero or negative = ready now) '
'without charging the attempt: the handler says "not yet". Records an execution with outcome '
'snoozed (attempt refunded); the job keeps its place as its concurrency key''s head (the slot '
'stays taken). A job with a cancellation request ends cancelled instead. Fenced: true only if '
'the job is running under this lease_token; otherwise false and nothing changes. Errors: 22004 '
'NULL delay, 22023 delay over 100 years or positive with a negative field.';
