-- Flow control (docs/flow-control.md): per-key serialisation (concurrency keys' slots) and the
-- rate limit's token bucket. The claim side of both lives in sql/claim.sql: a blocked job is in
-- no claim index, and jq._claim_gate takes tokens under the queue row lock it already holds for
-- capped queues.
--
-- Per-key serialisation keeps the claim untouched: a due job of a key that has no free slot is
-- not 'ready' but 'blocked', so it is in no claim index and the claim never sees it, however
-- many keys are blocked. jq._key_fill moves the next blocked jobs of one key to 'ready' when
-- the key has free slots: after an enqueue or promotion puts a job in 'blocked', and after a
-- job that held a slot ends. A job holds a slot of its key while it is ready, running, or
-- scheduled again after a claim (retry backoff, snooze): a key's head that is retrying keeps
-- the key's order; a dead, cancelled or completed head frees it (pg_test/tests/flow/keys.rs,
-- a_dead_head_blocks_no_other_key_and_priority_does_not_reorder_a_key).

-- The advisory lock a transaction holds while it creates a key's slot row: class and id.
-- The two-integer form, with a class of jq's own (27249, 0x6A71: "jq"), stays apart from an
-- application's one-bigint advisory locks. Two keys with the same id share the lock: a creation
-- waits for the other's transaction, and maintenance leaves the other key for its next pass.
CREATE OR REPLACE FUNCTION jq._key_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 27249 $$;
COMMENT ON FUNCTION jq._key_lock_class() IS
'Internal: the first key (27249) of the advisory lock jq._key_fill holds while it creates a key''s slot row.';

CREATE OR REPLACE FUNCTION jq._key_lock_id(queue text, concurrency_key text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT pg_catalog.hashtext(queue OPERATOR(pg_catalog.||) E'\x1f' OPERATOR(pg_catalog.||) concurrency_key)
$$;
COMMENT ON FUNCTION jq._key_lock_id(text, text) IS
'Internal: the second key of the advisory lock jq._key_fill holds while it creates the slot row of (queue, concurrency_key).';

-- Maintenance takes a key's slot row only if nobody holds it: a transaction that enqueued,
-- completed or failed a job of the key and is still open keeps the row locked (or, having just
-- created it, keeps the advisory lock above), and waiting for it stalled every queue's
-- promotions behind one key (pg_test/tests/robustness/held_locks.rs).
CREATE OR REPLACE FUNCTION jq._key_try_lock(queue text, concurrency_key text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_head bigint[];
BEGIN
    FOR i IN 1..3 LOOP
        PERFORM FROM jq.key_slots s
        WHERE s.queue = _key_try_lock.queue AND s.concurrency_key = _key_try_lock.concurrency_key
        FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            -- The key's next blocked jobs, which jq._key_fill locks to make ready, must not be
            -- held either (an open jq.cancel of one, a prepared transaction): locked here now, or
            -- the key waits for the next pass (robustness/held_locks.rs,
            -- reaping_skips_a_key_whose_next_blocked_job_another_transaction_holds).
            v_head := ARRAY(
                SELECT b.id FROM ONLY jq.jobs b
                WHERE b.queue = _key_try_lock.queue AND b.concurrency_key = _key_try_lock.concurrency_key
                  AND b.state = 'blocked'
                ORDER BY b.run_at, b.id
                LIMIT coalesce((SELECT t.key_concurrency FROM jq.queues t WHERE t.name = _key_try_lock.queue), 1));
            RETURN pg_catalog.cardinality(v_head) = 0
                OR pg_catalog.cardinality(ARRAY(SELECT b.id FROM ONLY jq.jobs b WHERE b.id = ANY (v_head)
                                                FOR UPDATE SKIP LOCKED)) = pg_catalog.cardinality(v_head);
        END IF;
        IF EXISTS (SELECT FROM jq.key_slots s WHERE s.queue = _key_try_lock.queue
                                               AND s.concurrency_key = _key_try_lock.concurrency_key) THEN
            RETURN false;  -- there, and locked by another transaction
        END IF;
        IF NOT pg_catalog.pg_try_advisory_xact_lock(jq._key_lock_class(),
                                                    jq._key_lock_id(_key_try_lock.queue, _key_try_lock.concurrency_key)) THEN
            RETURN false;  -- being created by another transaction
        END IF;
        INSERT INTO jq.key_slots AS s (queue, concurrency_key, used)
        VALUES (_key_try_lock.queue, _key_try_lock.concurrency_key, 0)
        ON CONFLICT (queue, concurrency_key) DO NOTHING;
    END LOOP;
    RETURN false;
END $$;
COMMENT ON FUNCTION jq._key_try_lock(text, text) IS
'Internal: locks the slot row of (queue, concurrency_key) for this transaction, creating it if '
'missing, and the key''s next key_concurrency blocked jobs, without ever waiting: false when '
'another transaction holds the row or one of those jobs, or is creating the row. '
'For maintenance (jq._promote, jq._reap), which leaves that key''s jobs for its next pass.';

CREATE OR REPLACE FUNCTION jq._key_fill(queue text, concurrency_key text, freed integer DEFAULT 0)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_k     integer;
    v_used  integer;
    v_orig  integer;
    v_moved integer;
    v_total integer := 0;
BEGIN
    -- The key's row is locked (created if missing) before its blocked jobs are read, so two
    -- fills of one key never both see the same free slot; every caller locks the job rows it
    -- changed before this, and this locks blocked rows only after the key row, so the lock
    -- order is always: jobs that held or take a slot, key row, blocked jobs.
    -- Lock the row (one write at the end, none when a freed slot passes straight to the key's
    -- next job); create it if missing (ON CONFLICT: a concurrent creator wins, then we lock).
    LOOP
        SELECT s.used INTO v_orig FROM jq.key_slots s
        WHERE s.queue = _key_fill.queue AND s.concurrency_key = _key_fill.concurrency_key
        FOR UPDATE;
        EXIT WHEN FOUND;
        -- The creator of a key's row holds this lock until it ends, so maintenance can tell a row
        -- being created from a missing one without waiting (jq._key_try_lock).
        PERFORM pg_catalog.pg_advisory_xact_lock(jq._key_lock_class(), jq._key_lock_id(_key_fill.queue, _key_fill.concurrency_key));
        INSERT INTO jq.key_slots AS s (queue, concurrency_key, used)
        VALUES (_key_fill.queue, _key_fill.concurrency_key, 0)
        ON CONFLICT (queue, concurrency_key) DO NOTHING;
    END LOOP;
    v_used := pg_catalog.int4larger(v_orig - _key_fill.freed, 0);
    SELECT t.key_concurrency INTO v_k FROM jq.queues t WHERE t.name = _key_fill.queue;
    v_k := coalesce(v_k, 1);
    -- A blocked job locked by a concurrent change (cancel) is re-checked and may drop out of
    -- the batch; the loop then takes the next one.
    FOR i IN 1..3 LOOP
        EXIT WHEN v_used >= v_k;
        WITH moved AS (
            UPDATE ONLY jq.jobs j SET state = 'ready'
            WHERE j.id = ANY (ARRAY(
                SELECT b.id FROM ONLY jq.jobs b
                WHERE b.queue = _key_fill.queue AND b.concurrency_key = _key_fill.concurrency_key
                  AND b.state = 'blocked'
                ORDER BY b.run_at, b.id
                LIMIT v_k - v_used
                FOR UPDATE))
              -- ::text: the plain form implies jobs_blocked_idx's predicate, whose columns end
              -- in id, and a plan made while few jobs were blocked walked that whole index
              -- instead of the primary key (sql/finish.sql's head; tests/plans/growth.rs)
              AND j.state::text = 'blocked'
            RETURNING j.queue, j.priority, j.run_at
        )
        -- Once per job made ready, in the statement that moved it: wakes the queue's waiting
        -- claims at commit and moves the claim-start hint back to it (always true).
        SELECT count(*) INTO v_moved FROM moved m WHERE jq._wake_ready(m.queue, m.priority, m.run_at);
        EXIT WHEN v_moved = 0;
        v_used := v_used + v_moved;
        v_total := v_total + v_moved;
    END LOOP;
    IF v_used = 0 THEN
        DELETE FROM jq.key_slots s
        WHERE s.queue = _key_fill.queue AND s.concurrency_key = _key_fill.concurrency_key;
    ELSIF v_used <> v_orig THEN
        UPDATE jq.key_slots s SET used = v_used
        WHERE s.queue = _key_fill.queue AND s.concurrency_key = _key_fill.concurrency_key;
    END IF;
    RETURN v_total;
END $$;
COMMENT ON FUNCTION jq._key_fill(text, text, integer) IS
'Internal: locks the slot row of (queue, concurrency_key), subtracts freed (jobs that held a '
'slot and just ended or went blocked), then moves the key''s oldest blocked jobs (run_at, id) '
'to ready while used < the queue''s key_concurrency, waking one waiting claim per job at '
'commit. Returns how many it moved. Called by enqueue, promotion, job ends and alter_queue.';

CREATE OR REPLACE FUNCTION jq._key_fill_many(queues text[], concurrency_keys text[], freed integer[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r       record;
    v_total integer := 0;
BEGIN
    -- Keys in a fixed (byte) order, so that two batches sharing keys cannot deadlock on them.
    FOR r IN SELECT u.q, u.k, sum(u.f)::integer AS f
             FROM ROWS FROM (pg_catalog.unnest(_key_fill_many.queues),
                             pg_catalog.unnest(_key_fill_many.concurrency_keys),
                             pg_catalog.unnest(_key_fill_many.freed)) AS u(q, k, f)
             WHERE u.k IS NOT NULL
             GROUP BY u.q, u.k
             ORDER BY u.q COLLATE "C", u.k COLLATE "C"
    LOOP
        v_total := v_total + jq._key_fill(r.q, r.k, r.f);
    END LOOP;
    RETURN v_total;
END $$;
COMMENT ON FUNCTION jq._key_fill_many(text[], text[], integer[]) IS
'Internal: jq._key_fill for each distinct (queues[i], concurrency_keys[i]) (NULL keys skipped), '
'with freed summed per key, in byte order of (queue, key) so that batches cannot deadlock. '
'Returns how many blocked jobs became ready.';

CREATE OR REPLACE FUNCTION jq._rate_tokens(queue text, at timestamptz) RETURNS double precision
LANGUAGE sql STABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
    SELECT LEAST(t.rate_burst::double precision,
                 coalesce(t.rate_tokens, t.rate_burst::double precision)
                 + GREATEST(extract(epoch FROM _rate_tokens.at - coalesce(t.rate_updated, _rate_tokens.at))::double precision, 0)
                   * t.rate_limit / extract(epoch FROM t.rate_period)::double precision)
    FROM jq.queues t WHERE t.name = _rate_tokens.queue AND t.rate_limit IS NOT NULL
$$;
COMMENT ON FUNCTION jq._rate_tokens(text, timestamptz) IS
'Internal: tokens in the rate bucket of queue at instant at: the stored rate_tokens (a full '
'bucket of rate_burst when never used) plus rate_limit per rate_period elapsed since '
'rate_updated, capped at rate_burst. NULL for a queue without a rate limit.';

CREATE OR REPLACE FUNCTION jq._rate_next_token(queue text) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_tokens double precision := jq._rate_tokens(_rate_next_token.queue, v_now);
    v_per    double precision;
BEGIN
    IF v_tokens IS NULL OR v_tokens >= 1 THEN
        RETURN v_now;
    END IF;
    SELECT extract(epoch FROM t.rate_period)::double precision / t.rate_limit INTO v_per
    FROM jq.queues t WHERE t.name = _rate_next_token.queue;
    RETURN v_now + (1 - v_tokens) * v_per * interval '1 second';
END $$;
COMMENT ON FUNCTION jq._rate_next_token(text) IS
'Internal: when the rate bucket of queue next holds a whole token (now if it does, or if the '
'queue has no rate limit), by a lock-free read; a long-polling claim sleeps until then.';
