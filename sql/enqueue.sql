-- Producing jobs: jq.enqueue and jq.enqueue_many. Both run inside the caller's transaction, so
-- a job commits or rolls back with the row that needed it (also from a trigger).

-- Limits shared by both producers: jq.max_payload_bytes() reads the setting of that name
-- (src/gucs.rs).
COMMENT ON FUNCTION jq.max_payload_bytes() IS
'Largest accepted payload in bytes, both as JSON text and as stored: the setting '
'jq.max_payload_bytes (superuser; default 1 MiB, 1kB to 256MB). Larger payloads raise 54000 '
'(program_limit_exceeded): keep big data in a table and enqueue its key.';

-- When a job becomes due, from the run_at / delay arguments. NULL run_at and delay: now. A zero
-- or negative delay means now; a past run_at keeps its place in the queue.
CREATE OR REPLACE FUNCTION jq._due_at(run_at timestamptz, delay interval, at timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF run_at IS NOT NULL THEN
        IF delay IS NOT NULL THEN
            RAISE EXCEPTION 'give run_at or delay, not both' USING ERRCODE = '22023';
        END IF;
        IF pg_catalog.isfinite(run_at) THEN
            RETURN run_at;
        END IF;
        RAISE EXCEPTION 'run_at must be a finite timestamp, got %', run_at USING ERRCODE = '22023';
    END IF;
    IF delay IS NOT NULL AND delay > interval '0' THEN
        IF NOT jq._interval_fields_nonnegative(delay) THEN
            RAISE EXCEPTION 'delay must not mix positive and negative fields, got %', delay
                USING ERRCODE = '22023';
        END IF;
        RETURN at + delay;  -- an overflow raises 22008 (datetime_field_overflow)
    END IF;
    RETURN at;
END $$;
COMMENT ON FUNCTION jq._due_at(timestamptz, interval, timestamptz) IS
'Internal: the due time of a new job. Errors: 22023 both given, infinite run_at or a positive '
'delay with a negative field (''1 mon -30 days 1 second''), 22008 overflow.';

-- The first problem with a job's fields, as (sqlstate, message), or NULLs when it is valid.
-- One place for the rules, used by jq.enqueue (raises it) and jq.enqueue_many (raises it with
-- the element's position).
CREATE OR REPLACE FUNCTION jq._job_problem(payload jsonb, kind text, max_attempts integer,
                                idempotency_key text, OUT sqlstate text, OUT message text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF payload IS NULL THEN
        sqlstate := '22004'; message := 'payload must not be SQL NULL (JSON null is accepted)';
    ELSIF pg_catalog.pg_column_size(payload) > jq.max_payload_bytes()
          OR (pg_catalog.pg_column_size(payload) > 2000
              AND pg_catalog.octet_length(payload::text) > jq.max_payload_bytes()) THEN
        -- The second test measures the JSON text, so a compressed value is judged by its real
        -- size; it only runs for values big enough to have been compressed (over 2000 bytes).
        sqlstate := '54000';
        message := pg_catalog.format('payload of %s bytes stored, %s bytes as JSON text, exceeds the maximum of %s bytes (setting jq.max_payload_bytes)',
                                     pg_catalog.pg_column_size(payload), pg_catalog.octet_length(payload::text),
                                     jq.max_payload_bytes());
    ELSIF kind IS NOT NULL AND (kind = '' OR pg_catalog.length(kind) > 200) THEN
        sqlstate := '22023'; message := 'kind must have 1 to 200 characters';
    ELSIF max_attempts IS NOT NULL AND (max_attempts < 1 OR max_attempts > 1000000) THEN
        sqlstate := '22023';
        message := pg_catalog.format('max_attempts must be between 1 and 1000000, got %s', max_attempts);
    ELSIF idempotency_key IS NOT NULL
          AND (idempotency_key = '' OR pg_catalog.length(idempotency_key) > 512) THEN
        sqlstate := '22023'; message := 'idempotency_key must have 1 to 512 characters';
    END IF;
END $$;
COMMENT ON FUNCTION jq._job_problem(jsonb, text, integer, text) IS
'Internal: (sqlstate, message) of the first invalid field of a job, or NULLs: 22004 SQL NULL '
'payload, 54000 payload over jq.max_payload_bytes(), 22023 kind not 1-200 characters, '
'max_attempts not in 1..1000000, idempotency_key not 1-512 characters.';

-- Normalises enqueue_many's input into one row per job, in array order. With specs, each
-- element is an object whose fields override the call's arguments (a field that is missing or
-- JSON null takes the call's argument); run_at and delay replace the call's pair together;
-- delay is an interval string or a number of seconds.
CREATE OR REPLACE FUNCTION jq._job_specs(payloads jsonb, specs boolean, def_kind text,
                              def_run_at timestamptz, def_delay interval, def_priority integer,
                              def_max_attempts integer)
RETURNS TABLE (ord bigint, payload jsonb, kind text, run_at timestamptz, delay interval,
               priority integer, max_attempts integer, idempotency_key text,
               concurrency_key text)
LANGUAGE sql STABLE AS $$
    SELECT e.ord,
           CASE WHEN specs THEN coalesce(e.val -> 'payload', '{}'::jsonb) ELSE e.val END,
           CASE WHEN specs THEN coalesce(e.val ->> 'kind', def_kind) ELSE def_kind END,
           CASE WHEN specs AND (e.val ->> 'run_at' IS NOT NULL OR e.val ->> 'delay' IS NOT NULL)
                THEN (e.val ->> 'run_at')::timestamptz ELSE def_run_at END,
           CASE WHEN specs AND (e.val ->> 'run_at' IS NOT NULL OR e.val ->> 'delay' IS NOT NULL)
                THEN CASE pg_catalog.jsonb_typeof(e.val -> 'delay')
                         -- float8 * interval raises 22008 on overflow (make_interval would wrap)
                         WHEN 'number' THEN (e.val ->> 'delay')::float8 * interval '1 second'
                         ELSE (e.val ->> 'delay')::interval END
                ELSE def_delay END,
           CASE WHEN specs THEN coalesce((e.val ->> 'priority')::integer, def_priority)
                ELSE def_priority END,
           CASE WHEN specs THEN coalesce((e.val ->> 'max_attempts')::integer, def_max_attempts)
                ELSE def_max_attempts END,
           CASE WHEN specs THEN e.val ->> 'idempotency_key' END,
           CASE WHEN specs THEN e.val ->> 'concurrency_key' END
    FROM pg_catalog.jsonb_array_elements(payloads) WITH ORDINALITY AS e(val, ord)
$$;
COMMENT ON FUNCTION jq._job_specs(jsonb, boolean, text, timestamptz, interval, integer, integer) IS
'Internal: one normalised row per element of jq.enqueue_many''s array, in order. Casts raise '
'Postgres'' own errors (22P02, 22007, 22008).';

-- Under REPEATABLE READ or SERIALIZABLE the caller's snapshot may predate a committed
-- jq.drop_queue, so reading the queue row in the INSERT is not enough: lock it FOR KEY SHARE,
-- which raises 40001 (serialization_failure) if the row was deleted since the snapshot (the
-- transaction then rolls back the jobs it inserted), and makes a later drop wait for this
-- transaction. Called after the INSERT: jq.jobs is locked before the queue row, the same order
-- as jq.drop_queue, so the two cannot deadlock. READ COMMITTED (the common case) skips the lock:
-- a row lock per enqueue would write WAL and contend between producers of one queue.
CREATE OR REPLACE FUNCTION jq._lock_queue_for_snapshot(queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM jq.queues t WHERE t.name = _lock_queue_for_snapshot.queue FOR KEY SHARE;
    END IF;
END $$;
COMMENT ON FUNCTION jq._lock_queue_for_snapshot(text) IS
'Internal: outside READ COMMITTED, locks the queue row FOR KEY SHARE (40001 if it was dropped '
'after the snapshot). Used by jq.enqueue and jq.enqueue_many.';

-- A kind's defaults for a new job (sql/kinds.sql): its max_attempts and timeout, or NULLs. Only
-- in a queue with kinds (has_kinds, the queue row's flag) is jq.kinds read; else the function
-- is a row of NULLs. A plain SQL function the planner inlines into the enqueue's INSERT (a
-- set-returning one: only those are inlined in FROM).
CREATE OR REPLACE FUNCTION jq._kind_defaults(has_kinds boolean, queue text, kind text)
RETURNS TABLE (max_attempts integer, timeout interval)
LANGUAGE sql STABLE AS $$
    SELECT k.max_attempts, k.timeout
    FROM (SELECT) one LEFT JOIN jq.kinds k
         ON _kind_defaults.has_kinds AND k.queue = _kind_defaults.queue AND k.kind = _kind_defaults.kind
$$;
COMMENT ON FUNCTION jq._kind_defaults(boolean, text, text) IS
'Internal: one row, max_attempts and timeout of kind in queue from jq.kinds (NULLs when has_kinds is '
'false or the kind has no row): the defaults jq.enqueue and jq.enqueue_many give a new job.';

CREATE OR REPLACE FUNCTION jq.enqueue(
    queue           text,
    payload         jsonb DEFAULT '{}',
    kind            text DEFAULT NULL,
    run_at          timestamptz DEFAULT NULL,
    delay           interval DEFAULT NULL,
    priority        integer DEFAULT 0,
    max_attempts    integer DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    caller_ticket bigint DEFAULT jq._ticket()
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now     timestamptz := pg_catalog.now();
    v_run_at  timestamptz;
    v_state   jq.job_state;
    v_id      bigint;
    v_code    text;
    v_message text;
BEGIN
    PERFORM jq._authorize_queue(enqueue.caller_ticket, enqueue.queue, 'enqueue');
    SELECT p.sqlstate, p.message INTO v_code, v_message
    FROM jq._job_problem(enqueue.payload, enqueue.kind, enqueue.max_attempts,
                         enqueue.idempotency_key) p;
    IF v_code IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = v_code, MESSAGE = v_message;
    END IF;
    IF enqueue.concurrency_key IS NOT NULL
       AND (enqueue.concurrency_key = '' OR pg_catalog.length(enqueue.concurrency_key) > 512) THEN
        RAISE EXCEPTION 'concurrency_key must have 1 to 512 characters' USING ERRCODE = '22023';
    END IF;
    v_run_at := jq._due_at(enqueue.run_at, enqueue.delay, v_now);
    -- A due job with a concurrency key starts blocked; jq._key_fill below makes it ready if its
    -- key has a free slot (docs/flow-control.md).
    v_state := CASE WHEN v_run_at > v_now THEN 'scheduled'
                    WHEN enqueue.concurrency_key IS NOT NULL THEN 'blocked' ELSE 'ready' END;
    -- The queue row is read in the INSERT itself, not in an earlier statement: the INSERT locks
    -- jq.jobs before it takes its snapshot, and jq.drop_queue holds a lock on jq.jobs that
    -- conflicts, so under READ COMMITTED an enqueue racing a drop either lands before the drop
    -- (and is deleted with the queue) or sees the queue gone. Older snapshots are handled at
    -- the end. No job is ever left behind in a dropped queue.
    IF enqueue.idempotency_key IS NULL THEN
        INSERT INTO jq.jobs (queue, kind, state, priority, max_attempts, run_at, created_at, payload,
                             concurrency_key, base_priority, next_age_at, timeout)
        SELECT t.name, coalesce(enqueue.kind, t.name), v_state, coalesce(enqueue.priority, 0),
               coalesce(enqueue.max_attempts, k.max_attempts, t.max_attempts), v_run_at, v_now, enqueue.payload,
               enqueue.concurrency_key,
               -- priority aging (docs/flow-control.md): NULLs unless the queue ages
               CASE WHEN t.priority_aging IS NOT NULL THEN coalesce(enqueue.priority, 0) END,
               v_run_at + t.priority_aging, k.timeout
        FROM jq.queues t
        -- The kind's defaults (sql/kinds.sql), read only in a queue that has kinds.
        LEFT JOIN LATERAL jq._kind_defaults(t.has_kinds, t.name, coalesce(enqueue.kind, t.name)) k ON true
        WHERE t.name = enqueue.queue
          -- A job that is claimable at once wakes the claims waiting on its queue when this
          -- transaction commits, and moves the queue's claim-start hint back if it sorts before
          -- it (jq._wake_ready returns true; it only notes the queue and the job's key).
          AND (v_state <> 'ready' OR jq._wake_ready(t.name, coalesce(enqueue.priority, 0), v_run_at))
        RETURNING id INTO v_id;
        IF v_id IS NULL THEN
            PERFORM jq._unknown_queue(enqueue.queue);
        END IF;
    ELSE
        -- With a key: the unique partial index is the arbiter. ON CONFLICT waits for an
        -- uncommitted holder of the same key; if it rolls back we insert, if it commits we
        -- return its id. The loop covers the holder finishing between our two statements.
        LOOP
            INSERT INTO jq.jobs (queue, kind, state, priority, max_attempts, run_at, created_at,
                                 payload, idempotency_key, concurrency_key, base_priority, next_age_at, timeout)
            SELECT t.name, coalesce(enqueue.kind, t.name), v_state, coalesce(enqueue.priority, 0),
                   coalesce(enqueue.max_attempts, k.max_attempts, t.max_attempts), v_run_at, v_now, enqueue.payload,
                   enqueue.idempotency_key, enqueue.concurrency_key,
                   CASE WHEN t.priority_aging IS NOT NULL THEN coalesce(enqueue.priority, 0) END,
                   v_run_at + t.priority_aging, k.timeout
            FROM jq.queues t
            LEFT JOIN LATERAL jq._kind_defaults(t.has_kinds, t.name, coalesce(enqueue.kind, t.name)) k ON true
            WHERE t.name = enqueue.queue
              AND (v_state <> 'ready' OR jq._wake_ready(t.name, coalesce(enqueue.priority, 0), v_run_at))
            ON CONFLICT (queue, idempotency_key)
                WHERE idempotency_key IS NOT NULL AND state IN ('scheduled', 'blocked', 'ready', 'running')
                DO NOTHING
            RETURNING id INTO v_id;
            EXIT WHEN v_id IS NOT NULL;
            SELECT j.id INTO v_id FROM ONLY jq.jobs j
            WHERE j.queue = enqueue.queue AND j.idempotency_key = enqueue.idempotency_key
              AND j.state IN ('scheduled', 'blocked', 'ready', 'running');
            EXIT WHEN v_id IS NOT NULL;
            IF NOT EXISTS (SELECT 1 FROM jq.queues t WHERE t.name = enqueue.queue) THEN
                PERFORM jq._unknown_queue(enqueue.queue);
            END IF;
        END LOOP;
    END IF;
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        -- Inline copy of jq._lock_queue_for_snapshot (the hot path saves a call); after the
        -- INSERT, so that jq.jobs is locked before the queue row, as in jq.drop_queue.
        PERFORM 1 FROM jq.queues t WHERE t.name = enqueue.queue FOR KEY SHARE;
    END IF;
    IF v_state = 'blocked' THEN
        -- After the INSERT: the key row is locked after our job row exists, so a concurrent
        -- fill either sees our job or leaves the slot to this one.
        PERFORM jq._key_fill(enqueue.queue, enqueue.concurrency_key, 0);
    END IF;
    RETURN v_id;
END $$;
COMMENT ON FUNCTION jq.enqueue(text, jsonb, text, timestamptz, interval, integer, integer, text, text, bigint) IS
'Enqueues one job in the caller''s transaction and returns its id. payload: any JSON value '
'(object, array, scalar or JSON null; not SQL NULL), at most jq.max_payload_bytes(). kind: the '
'name handlers dispatch on, default the queue name. run_at (timestamptz) or delay (interval) '
'set when it becomes due; neither = now; a zero or negative delay = now; a past run_at keeps its '
'place. priority: higher runs first (default 0). max_attempts: default its kind''s (jq.alter_kind), '
'else the queue''s; the job''s timeout is its kind''s. '
'idempotency_key: while a job with this key in this queue is scheduled, ready or running, '
'returns that job''s id and changes nothing (safe under concurrency and rollback; under '
'REPEATABLE READ a conflict with a newer row raises 40001, retry the transaction). '
'concurrency_key (1-512 characters): jobs of this queue sharing it run at most the queue''s '
'key_concurrency at a time and start in (run_at, id) order whatever their priority; a due job '
'whose key is full waits in state blocked (docs/flow-control.md). '
'Errors: 42704 unknown queue, 22004 NULL queue or payload, 22023 invalid name/kind/key/'
'max_attempts/run_at, 22008 delay overflow, 54000 payload too large. 42501: the caller holds no enqueue grant on the queue; 0A000: the queue name under a nondeterministic collation.';

-- jq.enqueue_many reads its array through jq._job_specs: a custom plan sees the array's length,
-- the generic one estimates it, so its INSERT was planned again on every call (even with sizes
-- that varied). Its generic plan is the same join on jq.queues, so it is forced
-- (pg_test/tests/plans/generic_plans.rs, batch_writes_reuse_one_generic_plan).
CREATE OR REPLACE FUNCTION jq.enqueue_many(
    queue        text,
    payloads     jsonb,
    kind         text DEFAULT NULL,
    run_at       timestamptz DEFAULT NULL,
    delay        interval DEFAULT NULL,
    priority     integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    specs        boolean DEFAULT false,
    caller_ticket bigint DEFAULT jq._ticket()
) RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    v_now          timestamptz := pg_catalog.now();
    v_bad          record;
    v_ids          bigint[];
    r              record;
BEGIN
    PERFORM jq._authorize_queue(enqueue_many.caller_ticket, enqueue_many.queue, 'enqueue');
    PERFORM 1 FROM jq.queues t WHERE t.name = enqueue_many.queue;
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(enqueue_many.queue);
    END IF;
    IF enqueue_many.payloads IS NULL OR pg_catalog.jsonb_typeof(enqueue_many.payloads) <> 'array' THEN
        RAISE EXCEPTION 'payloads must be a JSON array' USING ERRCODE = '22023';
    END IF;
    IF enqueue_many.specs IS NULL THEN
        RAISE EXCEPTION 'specs must not be NULL' USING ERRCODE = '22004';
    END IF;

    IF enqueue_many.specs THEN
        SELECT e.ord, k.key INTO v_bad
        FROM pg_catalog.jsonb_array_elements(enqueue_many.payloads) WITH ORDINALITY AS e(val, ord)
        LEFT JOIN LATERAL pg_catalog.jsonb_object_keys(
            CASE WHEN pg_catalog.jsonb_typeof(e.val) = 'object' THEN e.val END) AS k(key) ON true
        WHERE pg_catalog.jsonb_typeof(e.val) <> 'object'
           OR k.key NOT IN ('payload', 'kind', 'run_at', 'delay', 'priority', 'max_attempts',
                            'idempotency_key', 'concurrency_key')
        ORDER BY e.ord LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'job % of payloads (1-based) is not an object of known fields%', v_bad.ord,
                coalesce(': unknown field ' || pg_catalog.quote_literal(v_bad.key), '')
                USING ERRCODE = '22023',
                      HINT = 'Known fields: payload, kind, run_at, delay, priority, max_attempts, idempotency_key, concurrency_key.';
        END IF;
    END IF;

    -- Validate every element before writing anything; report the first bad one by position.
    SELECT s.ord, p.sqlstate, p.message INTO v_bad
    FROM jq._job_specs(enqueue_many.payloads, enqueue_many.specs, enqueue_many.kind,
                       enqueue_many.run_at, enqueue_many.delay, enqueue_many.priority,
                       enqueue_many.max_attempts) s,
         LATERAL jq._job_problem(s.payload, s.kind, s.max_attempts, s.idempotency_key) p
    WHERE p.sqlstate IS NOT NULL
       OR (s.run_at IS NOT NULL AND (s.delay IS NOT NULL OR NOT pg_catalog.isfinite(s.run_at)))
       OR s.concurrency_key = '' OR pg_catalog.length(s.concurrency_key) > 512
    ORDER BY s.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job % of payloads (1-based): %', v_bad.ord,
            coalesce(v_bad.message, 'give run_at or delay, not both, and a finite run_at; a '
                                    'concurrency_key has 1 to 512 characters')
            USING ERRCODE = coalesce(v_bad.sqlstate, '22023');
    END IF;

    IF NOT EXISTS (SELECT 1 FROM jq._job_specs(enqueue_many.payloads, enqueue_many.specs, NULL,
                       NULL, NULL, 0, NULL) s
                   WHERE s.idempotency_key IS NOT NULL OR s.concurrency_key IS NOT NULL) THEN
        -- One statement for the whole batch; ids follow array order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO jq.jobs (queue, kind, state, priority, max_attempts, run_at, created_at, payload,
                                 base_priority, next_age_at, timeout)
            SELECT enqueue_many.queue, coalesce(s.kind, enqueue_many.queue),
                   CASE WHEN d.due > v_now THEN 'scheduled' ELSE 'ready' END::jq.job_state,
                   coalesce(s.priority, 0), coalesce(s.max_attempts, k.max_attempts, t.max_attempts), d.due, v_now,
                   s.payload,
                   CASE WHEN t.priority_aging IS NOT NULL THEN coalesce(s.priority, 0) END,
                   d.due + t.priority_aging, k.timeout
            FROM jq._job_specs(enqueue_many.payloads, enqueue_many.specs, enqueue_many.kind,
                               enqueue_many.run_at, enqueue_many.delay, enqueue_many.priority,
                               enqueue_many.max_attempts) s,
                 LATERAL (SELECT jq._due_at(s.run_at, s.delay, v_now) AS due) d,
                 jq.queues t
                 -- The kind's defaults (sql/kinds.sql), read only in a queue that has kinds.
                 LEFT JOIN LATERAL jq._kind_defaults(t.has_kinds, t.name, coalesce(s.kind, enqueue_many.queue)) k ON true
            WHERE t.name = enqueue_many.queue  -- see jq.enqueue: no job for a dropped queue
              -- one wakeup per job claimable at once (jq._wake_ready only counts it)
              AND (d.due > v_now OR jq._wake_ready(t.name, coalesce(s.priority, 0), d.due))
            ORDER BY s.ord
            RETURNING jq.jobs.id
        )
        SELECT ins.id FROM ins ORDER BY ins.id;
        IF NOT FOUND AND pg_catalog.jsonb_array_length(enqueue_many.payloads) > 0 THEN
            PERFORM jq._unknown_queue(enqueue_many.queue);  -- dropped while we waited
        END IF;
        PERFORM jq._lock_queue_for_snapshot(enqueue_many.queue);
        RETURN;
    END IF;

    -- Keyed jobs go one by one through jq.enqueue, which owns the idempotency protocol, in key
    -- order: two batches that share keys then wait for each other's keys in the same order
    -- instead of deadlocking. The ids are returned in array order.
    v_ids := pg_catalog.array_fill(NULL::bigint, ARRAY[pg_catalog.jsonb_array_length(enqueue_many.payloads)]);
    FOR r IN SELECT * FROM jq._job_specs(enqueue_many.payloads, enqueue_many.specs,
                 enqueue_many.kind, enqueue_many.run_at, enqueue_many.delay,
                 enqueue_many.priority, enqueue_many.max_attempts) s
             ORDER BY s.concurrency_key COLLATE "C" NULLS LAST,
                      s.idempotency_key COLLATE "C" NULLS LAST, s.ord
    LOOP
        v_ids[r.ord] := jq.enqueue(enqueue_many.queue, r.payload, r.kind, r.run_at, r.delay,
                                   r.priority, r.max_attempts, r.idempotency_key,
                                   r.concurrency_key);
    END LOOP;
    RETURN QUERY SELECT u.id FROM pg_catalog.unnest(v_ids) AS u(id);
END $$;
COMMENT ON FUNCTION jq.enqueue_many(text, jsonb, text, timestamptz, interval, integer, integer, boolean, bigint) IS
'Enqueues many jobs in one statement and returns their ids in array order. payloads: a JSON '
'array; each element is a payload, or with specs => true an object with any of the fields '
'payload, kind, run_at, delay (interval string or seconds), priority, max_attempts, '
'idempotency_key, concurrency_key, which override the call''s arguments (same meanings as '
'jq.enqueue). All '
'elements are validated before anything is written; an error names the first bad element '
'(1-based), except a delay overflow (22008), raised by the INSERT (which still writes nothing). '
'Casts of spec fields raise Postgres'' own errors (22P02, 22007, 22003, 22008). Batches with '
'idempotency or concurrency keys are enqueued one by one in key order (concurrency key, then '
'idempotency key); the others in one INSERT '
'(200,000 jobs in one call work). Errors: as jq.enqueue, plus 22023 when payloads is not an array '
'or a spec has an unknown field. 42501: the caller holds no enqueue grant on the queue; 0A000: the queue name under a nondeterministic collation.';
