-- jq 0.1.0 -> 0.2.0: least privilege (docs/security.md).
--
-- Released upgrade script: never edit it once released; later changes go into the next
-- version's script (docs/upgrades.md). ALTER EXTENSION jq UPDATE runs it in one transaction.
-- pg_test/tests/upgrade.rs checks that 0.1.0 + this script has exactly the catalog of a fresh
-- 0.2.0 install, and that a populated database keeps every row and lease.
--
-- What changes:
--   * roles jq_admin, jq_producer, jq_worker; table jq.queue_grants; jq.grant / jq.revoke;
--   * jq.schedules.created_by, checked by every cron fire;
--   * the functions that name a queue take a last parameter caller_ticket (so their signatures
--     change: dropped and created again) and check the caller's grants;
--   * SECURITY DEFINER with a pinned search_path (jq.claim and jq.complete: every name
--     schema-qualified instead, no SET clause; batch claims in the new jq._claim_batch);
--     nothing granted to PUBLIC;
--   * claim-start hints (src/claim_hint.rs): the claim, and the paths that make jobs claimable,
--     call the new internal functions jq._claim_hint, jq._hint_* and jq._wake_ready.
--   * jq.jobs is rebuilt with its columns in a new order (less WAL per claim and completion).
--   * a completion writes no history row: the completed job row records its execution. The
--     table jq.executions becomes jq.execution_log (the other outcomes) and jq.executions a view
--     over both; a completed execution is kept as long as its job (retention).
-- Jobs, leases and history are kept: a worker holding a lease completes it after the upgrade
-- with the same token.

-- Roles and per-queue grants (as in sql/schema.sql).
-- Security (docs/security.md). The three roles are cluster-wide, so they are created only if
-- missing (another database's jq, or an earlier install, may have made them) and outlive
-- DROP EXTENSION. They carry EXECUTE on jq's functions (sql/security.sql); queue rights come
-- from jq.queue_grants, except that members of jq_admin (and superusers) may do everything.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['jq_admin', 'jq_producer', 'jq_worker'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- CREATE EXTENSION jq in another database made it meanwhile
            END;
        END IF;
    END LOOP;
END $$;

-- Per-queue grants: which role may enqueue to, work (claim from) or administer which queue.
-- Written through jq.grant / jq.revoke.
CREATE TABLE jq.queue_grants (
    queue      text NOT NULL
               CONSTRAINT queue_grants_queue_valid CHECK (queue = '*' OR queue ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    grantee    regrole NOT NULL,
    privilege  text NOT NULL CHECK (privilege IN ('enqueue', 'work', 'admin')),
    granted_by regrole,
    granted_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_grants_pkey PRIMARY KEY (queue, grantee, privilege)
);

COMMENT ON TABLE jq.queue_grants IS
'Per-queue privileges (jq.grant / jq.revoke): grantee (and every role that has its privileges '
'through membership) may enqueue to, work (claim from, and so read the payloads of) or administer '
'(pause, resume, alter, drop, cancel, retry, schedule; implies enqueue and work) queue; queue '
'''*'' means every queue, present and future. Superusers and members of jq_admin need no row. '
'Rows of a dropped queue are deleted with it; rows of a dropped role are pruned by maintenance.';

-- Queues are keyed by the hash of their name in jobs_claim_idx (as in sql/schema.sql).
-- A queue's key in jobs_claim_idx is the 64-bit hash of its name (see there), so no two queues
-- may share one. Two names with the same hash are about 2^-64 apart by chance; a second queue
-- whose name collides with an existing one is refused with 23505 (unique_violation).
CREATE UNIQUE INDEX queues_name_hash_idx ON jq.queues (pg_catalog.hashtextextended(name, 0));

-- Schedules remember who defined them (as in sql/cron.sql).
ALTER TABLE jq.schedules ADD COLUMN created_by regrole;

COMMENT ON TABLE jq.schedules IS
'One row per cron schedule. Write it through jq.schedule / jq.alter_schedule / jq.unschedule. '
'next_run_at: the next fire time (NULL: none before year 5000); next_run_from: the instant '
'next_run_at was computed from (a pass at an earlier instant means the clock went back: it '
'recomputes next_run_at from its own instant); last_fired_at: the fire time of '
'the last job enqueued (last_job_id); fired_count: jobs enqueued; skipped_count: fire times that '
'enqueued nothing (misfire policy, overlap, failures); last_error / last_error_at: the most '
'recent failure of a pass (cleared by the next pass that succeeds); created_by: the role that last '
'defined it with jq.schedule, whose right to enqueue to the queue every fire checks (a dropped or '
'revoked role makes the fires fail, logged; NULL for schedules made before jq 0.2.0: not checked). '
'See docs/cron.md.';

-- Caller tickets (src/security.rs), lease tokens (src/random.rs) and claim-start hints (src/claim_hint.rs).
CREATE  FUNCTION "_ticket"() RETURNS bigint /* i64 */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_ticket_wrapper';

CREATE  FUNCTION "_lease_token"() RETURNS uuid /* pgrx :: Uuid */
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_lease_token_wrapper';

CREATE  FUNCTION "_redeem"(
	"ticket" bigint /* Option < i64 > */
) RETURNS oid /* pg_sys :: Oid */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_redeem_wrapper';

CREATE  FUNCTION "_authorize"(
	"caller_ticket" bigint, /* Option < i64 > */
	"queues" TEXT[], /* :: std :: option :: Option < pgrx :: datum :: Array < & str > > */
	"privilege" TEXT /* Option < & str > */
) RETURNS oid /* pg_sys :: Oid */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_authorize_wrapper';

CREATE  FUNCTION "_authorize_queue"(
	"caller_ticket" bigint, /* Option < i64 > */
	"queue" TEXT, /* Option < & str > */
	"privilege" TEXT /* Option < & str > */
) RETURNS oid /* pg_sys :: Oid */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_authorize_queue_wrapper';

CREATE  FUNCTION "_wake_ready"(
	"queue" TEXT, /* & str */
	"priority" INT, /* i32 */
	"run_at" timestamp with time zone /* pgrx :: datum :: TimestampWithTimeZone */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_wake_ready_wrapper';

CREATE  FUNCTION "_claim_hint"(
	"queue" TEXT /* & str */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_claim_hint_wrapper';

CREATE  FUNCTION "_hint_priority"() RETURNS INT /* Option < i32 > */
STRICT STABLE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_hint_priority_wrapper';

CREATE  FUNCTION "_hint_run_at"() RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
STRICT STABLE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_hint_run_at_wrapper';

CREATE  FUNCTION "_hint_id"() RETURNS bigint /* Option < i64 > */
STRICT STABLE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_hint_id_wrapper';

CREATE  FUNCTION "_hint_advance"(
	"queue" TEXT, /* & str */
	"priority" INT, /* i32 */
	"run_at" timestamp with time zone, /* TimestampWithTimeZone */
	"id" bigint /* i64 */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_hint_advance_wrapper';

CREATE  FUNCTION "_hint_clear"(
	"queue" TEXT /* & str */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_hint_clear_wrapper';

CREATE  FUNCTION "_hint_turn_end"(
	"queue" TEXT /* & str */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_hint_turn_end_wrapper';

-- The functions written in Rust (src/wakeup.rs, src/claim_hint.rs, src/bgworker.rs).
COMMENT ON FUNCTION jq._wake(text) IS
'Internal: notes that this transaction made one job of queue claimable (call once per job); at '
'commit, one more claim waiting on it (jq.claim with wait) is woken through shared memory, the '
'maintenance worker NOTIFYs jq_ready, and the queue''s claim-start hint is cleared (the job may '
'sort anywhere; src/claim_hint.rs; jq._wake_ready when its place is known). A rolled-back '
'transaction wakes nobody. Returns true (used inside WHERE clauses).';

COMMENT ON FUNCTION jq._wake_n(text, integer) IS
'Internal: as jq._wake for n jobs at once: at commit, up to n claims waiting on queue are woken '
'(a very large n wakes them all). Returns true.';

COMMENT ON FUNCTION jq._wake_on_abort(text) IS
'Internal: if this transaction rolls back, wake claims waiting on queue (a rolled-back claim '
'hands its jobs back). Returns true.';

COMMENT ON FUNCTION jq._wake_ready(text, integer, timestamptz) IS
'Internal: as jq._wake for a job made claimable with this priority and run_at (enqueue, promotion, '
'release, reaping, snooze, a key slot handing over): at commit the queue''s claim-start hint '
'moves back to that key only if the job sorts before it. Returns true.';

COMMENT ON FUNCTION jq._claim_hint(text) IS
'Internal (src/claim_hint.rs): whether claims of queue may start at its claim-start hint now (the '
'key of its last claimed job, in shared memory); the key is then what jq._hint_priority(), '
'jq._hint_run_at() and jq._hint_id() return. False when there is none, jq.claim_hints is off, '
'jq is not preloaded, or it is this claim''s turn to run the full claim (one claim of a queue at a time, at least a second and ten times the previous full claim''s duration apart).';

COMMENT ON FUNCTION jq._hint_priority() IS
'Internal: priority of the claim-start hint read by this backend''s last jq._claim_hint (NULL if none).';

COMMENT ON FUNCTION jq._hint_run_at() IS
'Internal: run_at of the claim-start hint read by this backend''s last jq._claim_hint (NULL if none).';

COMMENT ON FUNCTION jq._hint_id() IS
'Internal: job id of the claim-start hint read by this backend''s last jq._claim_hint (NULL if none).';

COMMENT ON FUNCTION jq._hint_advance(text, integer, timestamptz, bigint) IS
'Internal: called by a claim for each job it claims: moves the queue''s claim-start hint forward to '
'(priority, run_at, id) unless another transaction moved it back or cleared it since this '
'backend''s last jq._claim_hint (READ COMMITTED only); if the transaction rolls back, moves it '
'back to that key. In any isolation level, the first job ends this backend''s turn to run the full '
'claim. Returns true.';

COMMENT ON FUNCTION jq._hint_clear(text) IS
'Internal: at commit, clears the claim-start hint of queue (a path that changes the claim order '
'of ready jobs, such as priority aging). Returns true.';

COMMENT ON FUNCTION jq._hint_turn_end(text) IS
'Internal: called by jq.claim right after a full claim that claimed nothing: if this backend had '
'the turn to run the full claim of queue, it ends now, and the next full claim is due a second or '
'ten times this one''s duration later (at most a minute), not after the caller''s transaction. '
'Returns true.';

-- Functions whose signature changes: dropped, then created as in 0.2.0.
DROP FUNCTION jq.enqueue(text, jsonb, text, timestamptz, interval, integer, integer, text, text);
DROP FUNCTION jq.enqueue_many(text, jsonb, text, timestamptz, interval, integer, integer, boolean);
DROP FUNCTION jq.claim(text, text, integer, interval, interval);
DROP FUNCTION jq.claim(text[], text, integer, interval, interval);
DROP FUNCTION jq.cancel(bigint);
DROP FUNCTION jq.retry(bigint);
DROP FUNCTION jq.alter_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, integer, integer, interval, integer, interval);
DROP FUNCTION jq.drop_queue(text, boolean);
DROP FUNCTION jq.pause(text);
DROP FUNCTION jq.resume(text);
DROP FUNCTION jq.schedule(text, text, text, jsonb, text, text, integer, integer, text, text);
DROP FUNCTION jq.alter_schedule(text, text, text, jsonb, text, text, integer, integer, text, text, boolean);
DROP FUNCTION jq.unschedule(text, boolean);
DROP FUNCTION jq._promote(timestamptz, integer);
DROP FUNCTION jq._reap(timestamptz, integer);
DROP FUNCTION jq._prune(timestamptz, integer);

CREATE FUNCTION jq.enqueue(
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
LANGUAGE plpgsql AS $$
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
                             concurrency_key, base_priority, next_age_at)
        SELECT t.name, coalesce(enqueue.kind, t.name), v_state, coalesce(enqueue.priority, 0),
               coalesce(enqueue.max_attempts, t.max_attempts), v_run_at, v_now, enqueue.payload,
               enqueue.concurrency_key,
               -- priority aging (docs/flow-control.md): NULLs unless the queue ages
               CASE WHEN t.priority_aging IS NOT NULL THEN coalesce(enqueue.priority, 0) END,
               v_run_at + t.priority_aging
        FROM jq.queues t WHERE t.name = enqueue.queue
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
                                 payload, idempotency_key, concurrency_key, base_priority, next_age_at)
            SELECT t.name, coalesce(enqueue.kind, t.name), v_state, coalesce(enqueue.priority, 0),
                   coalesce(enqueue.max_attempts, t.max_attempts), v_run_at, v_now, enqueue.payload,
                   enqueue.idempotency_key, enqueue.concurrency_key,
                   CASE WHEN t.priority_aging IS NOT NULL THEN coalesce(enqueue.priority, 0) END,
                   v_run_at + t.priority_aging
            FROM jq.queues t WHERE t.name = enqueue.queue
              AND (v_state <> 'ready' OR jq._wake_ready(t.name, coalesce(enqueue.priority, 0), v_run_at))
            ON CONFLICT (queue, idempotency_key)
                WHERE idempotency_key IS NOT NULL AND state IN ('scheduled', 'blocked', 'ready', 'running')
                DO NOTHING
            RETURNING id INTO v_id;
            EXIT WHEN v_id IS NOT NULL;
            SELECT j.id INTO v_id FROM jq.jobs j
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
'place. priority: higher runs first (default 0). max_attempts: default the queue''s. '
'idempotency_key: while a job with this key in this queue is scheduled, ready or running, '
'returns that job''s id and changes nothing (safe under concurrency and rollback; under '
'REPEATABLE READ a conflict with a newer row raises 40001, retry the transaction). '
'concurrency_key (1-512 characters): jobs of this queue sharing it run at most the queue''s '
'key_concurrency at a time and start in (run_at, id) order whatever their priority; a due job '
'whose key is full waits in state blocked (docs/flow-control.md). '
'Errors: 42704 unknown queue, 22004 NULL queue or payload, 22023 invalid name/kind/key/'
'max_attempts/run_at, 22008 delay overflow, 54000 payload too large. 42501: the caller holds no enqueue grant on the queue; 0A000: the queue name under a nondeterministic collation.';

CREATE FUNCTION jq.enqueue_many(
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
LANGUAGE plpgsql AS $$
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
                                 base_priority, next_age_at)
            SELECT enqueue_many.queue, coalesce(s.kind, enqueue_many.queue),
                   CASE WHEN d.due > v_now THEN 'scheduled' ELSE 'ready' END::jq.job_state,
                   coalesce(s.priority, 0), coalesce(s.max_attempts, t.max_attempts), d.due, v_now,
                   s.payload,
                   CASE WHEN t.priority_aging IS NOT NULL THEN coalesce(s.priority, 0) END,
                   d.due + t.priority_aging
            FROM jq._job_specs(enqueue_many.payloads, enqueue_many.specs, enqueue_many.kind,
                               enqueue_many.run_at, enqueue_many.delay, enqueue_many.priority,
                               enqueue_many.max_attempts) s,
                 LATERAL (SELECT jq._due_at(s.run_at, s.delay, v_now) AS due) d,
                 jq.queues t
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

CREATE FUNCTION jq.claim(queue text, worker text, n integer DEFAULT 1, lease interval DEFAULT NULL,
                         wait interval DEFAULT NULL, caller_ticket bigint DEFAULT jq._ticket())
RETURNS SETOF jq.claimed_job
LANGUAGE plpgsql AS $$
DECLARE
    -- jq.claim runs as its owner (SECURITY DEFINER) with the caller's search_path: it has no SET
    -- clause, because PostgreSQL 15 saves and restores the settings around every call of a
    -- function with one, which cost about 7% of the drain rate at 64 connections (bench/ab_variant.sh,
    -- docs/BENCHMARKS.md). So every name in it is schema-qualified: tables and functions, types
    -- that are not SQL keywords (pg_catalog.text; a temporary type would be found first), and
    -- operators, which a caller's schema before pg_catalog could otherwise shadow (field case
    -- Q16): OPERATOR(pg_catalog.=). The internal SQL functions it calls are qualified too or
    -- have their own SET (sql/security.sql). Tested with a hostile search_path: pg_test/tests/
    -- security.rs, hot_functions_ignore_the_callers_search_path.
    -- No DECLARE defaults and few plpgsql expressions on the hot path: plpgsql prepares each
    -- expression again in every transaction, and a worker's claim is usually its transaction's
    -- only call (measured: docs/BENCHMARKS.md, "Where jq's time goes").
    v_limit    integer;           -- NULL: claim.n
    v_locked   boolean;           -- a capped claim holds its queue row lock (NULL: false)
    v_paused   boolean;
    v_cap      integer;
    v_running  integer;
    v_deadline pg_catalog.timestamptz;       -- long-poll: when waiting ends
    v_rate     integer;           -- rate-limited queue: its rate_limit (docs/flow-control.md)
    v_tokens   double precision;  -- tokens in the bucket, computed under the queue row lock
    v_token_at pg_catalog.timestamptz;       -- long-poll: when the next token arrives
    v_got      integer;
    v_now      pg_catalog.timestamptz;
    v_caller   pg_catalog.oid;
    v_hinted   integer;           -- jobs claimed past the claim-start hint
    v_below    bigint;            -- after a hinted claim: the full claim looks only at
                                  -- priorities below the hint's (NULL: at every priority)
BEGIN
    v_caller := jq._authorize_queue(claim.caller_ticket, claim.queue, 'work');
    -- One test for the usual arguments; the slow branch tells which one is wrong.
    IF claim.n IS NULL OR claim.n OPERATOR(pg_catalog.<) 1 OR claim.n OPERATOR(pg_catalog.>) jq.max_claim_batch()
       OR claim.worker IS NULL OR pg_catalog.length(claim.worker) OPERATOR(pg_catalog.>) 200
       OR claim.lease IS NOT NULL OR claim.wait IS NOT NULL THEN
        IF claim.n IS NULL OR claim.n OPERATOR(pg_catalog.<) 1 OR claim.n OPERATOR(pg_catalog.>) jq.max_claim_batch() THEN
            RAISE EXCEPTION 'n must be between 1 and %, got %', jq.max_claim_batch(), coalesce(claim.n::pg_catalog.text, 'NULL')
                USING ERRCODE = '22023';
        END IF;
        IF claim.worker IS NULL OR pg_catalog.length(claim.worker) OPERATOR(pg_catalog.>) 200 THEN
            RAISE EXCEPTION 'worker must be a non-NULL name of at most 200 characters'
                USING ERRCODE = '22023';
        END IF;
        IF claim.lease IS NOT NULL AND (claim.lease OPERATOR(pg_catalog.<=) interval '0'
                                        OR claim.lease OPERATOR(pg_catalog.>) interval '100 years'
                                        OR NOT jq._interval_fields_nonnegative(claim.lease)) THEN
            RAISE EXCEPTION 'lease must be greater than zero and at most 100 years, got %', claim.lease
                USING ERRCODE = '22023';
        END IF;
        IF claim.wait IS NOT NULL THEN
            v_deadline := jq._wait_deadline(claim.wait);
        END IF;
        IF v_deadline IS NOT NULL THEN
            -- Registered before the first look, so a commit after that look wakes us.
            PERFORM jq._wait_register(ARRAY[claim.queue],
                ARRAY[EXISTS (SELECT FROM jq.queues t WHERE t.name OPERATOR(pg_catalog.=) claim.queue
                              AND t.max_concurrency IS NOT NULL)]);
        END IF;
    END IF;


    -- Claim-start hint (src/claim_hint.rs): while the queue has one, look first only at the
    -- jobs of the hint's priority from the hint's key on. That range starts past the dead
    -- entries earlier claims left at the head of jobs_claim_idx, which nothing can remove while
    -- an old snapshot is open. Uncapped, unlimited queues only (the gate below); the rest comes
    -- from below the hint's priority (v_below).
    IF jq._claim_hint(claim.queue) THEN
        -- Two copies, as below: the one-job copy has a constant LIMIT 1 and no outer SELECT,
        -- and updates by ctid, with the same fallback by id.
        IF claim.n OPERATOR(pg_catalog.=) 1 THEN
        RETURN QUERY
        UPDATE jq.jobs j SET
            state = 'running',
            attempt = j.attempt OPERATOR(pg_catalog.+) 1,
            claims = j.claims OPERATOR(pg_catalog.+) 1,
            worker = claim.worker,
            lease_token = jq._lease_token(),
            started_at = pg_catalog.clock_timestamp(),
            lease = coalesce(claim.lease, q.lease),
            lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) coalesce(claim.lease, q.lease)
        FROM jq.queues q
        WHERE q.name OPERATOR(pg_catalog.=) claim.queue
          AND j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
              SELECT p.ctid FROM jq.jobs p
              WHERE pg_catalog.hashtextextended(p.queue, 0) OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(claim.queue, 0)
                AND p.state OPERATOR(pg_catalog.=) 'ready'
                AND p.priority OPERATOR(pg_catalog.=) jq._hint_priority()
                AND (p.run_at, p.id) OPERATOR(pg_catalog.>=) (jq._hint_run_at(), jq._hint_id())
                AND EXISTS (SELECT FROM jq.queues g WHERE g.name OPERATOR(pg_catalog.=) claim.queue
                            AND NOT g.paused AND g.max_concurrency IS NULL AND g.rate_limit IS NULL)
              ORDER BY p.run_at, p.id
              LIMIT 1
              FOR UPDATE OF p SKIP LOCKED))
        RETURNING j.id, j.queue, j.kind, j.payload, j.attempt, j.max_attempts, j.lease_token,
                  j.lease_expires_at, j.priority, j.run_at,
                  -- once per claimed row: wake waiters if this claim rolls back, move the hint
                  -- forward (both always true: created_at is returned as is)
                  CASE WHEN jq._wake_on_abort(j.queue)
                            AND jq._hint_advance(j.queue, j.priority, j.run_at, j.id)
                       THEN j.created_at END;
        GET DIAGNOSTICS v_hinted = ROW_COUNT;
        IF v_hinted OPERATOR(pg_catalog.=) 0 AND pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
            -- Found by ctid, a row locked in a version newer than this statement's snapshot
            -- is not updated (see the full claim below): look again by id.
            RETURN QUERY
            SELECT * FROM jq._claim_batch(claim.queue, claim.worker, 1, claim.lease, true, NULL, NULL);
            GET DIAGNOSTICS v_hinted = ROW_COUNT;
        END IF;
        ELSE
        RETURN QUERY
        SELECT * FROM jq._claim_batch(claim.queue, claim.worker, claim.n, claim.lease, true, NULL, NULL);
        GET DIAGNOSTICS v_hinted = ROW_COUNT;
        END IF;
        IF v_hinted OPERATOR(pg_catalog.=) claim.n THEN
            IF v_deadline IS NOT NULL THEN
                PERFORM jq._wait_done();
            END IF;
            RETURN;
        ELSIF v_hinted OPERATOR(pg_catalog.>) 0 THEN
            v_limit := claim.n OPERATOR(pg_catalog.-) v_hinted;  -- the full claim takes the rest (below)
        END IF;
        -- The rest comes from the priorities below the hint's: the hint's own level was just
        -- read from the hint's key on, and a job that becomes claimable before the hint moves
        -- the hint back to it. So a claim on a shallow or empty queue does not walk the dead
        -- head either; the periodic full claim (jq._claim_hint) stays the safety net. Not for
        -- a long-poll: it may sleep next, and a sleeping claim looks again only when woken, so
        -- it takes the rest with the full claim (a job left behind the hint, e.g. a row another
        -- transaction held while claims passed it, is found before it sleeps).
        v_below := CASE WHEN v_deadline IS NULL THEN jq._hint_priority() END;
    END IF;

    <<poll>>
    LOOP
    LOOP
        -- One statement claims: the rows are picked and locked by an uncorrelated sub-select on
        -- the partial claim index (FOR UPDATE SKIP LOCKED), then updated through the primary
        -- key (batches) or by ctid (one job: a Tid Scan, no index to open and descend; 1.07x
        -- the drain rate at 64 connections, bench/ab_variant.sh, before the fallback below was
        -- added, which a claim that gets a job never runs; docs/BENCHMARKS.md). A row
        -- lock holds the row in place, so its ctid stays its own until this transaction ends.
        -- One case differs: if a transaction that committed after this statement's snapshot
        -- updated the row and left it ready (priority aging; a claim and its release), the
        -- lock is taken on that newer version and the sub-select returns its ctid, which the
        -- UPDATE, reading this statement's snapshot, does not see: nothing is claimed though a
        -- row is locked. So when the ctid copy claims nothing but may have locked a row, the
        -- same range is claimed again by id (jq._claim_batch, n = 1, a new snapshot: the
        -- locked row is ours). A row lock needs a transaction id, so a claim whose transaction
        -- has none after the ctid copy locked nothing (an empty queue, a paused one, the first
        -- unlocked look at a capped one) and costs no second statement; inside a transaction
        -- that already wrote, an empty claim always looks again. If a job that sorts first
        -- became claimable between the two statements, the look by id claims that one and the
        -- locked row waits for this transaction to end (then the next full claim, within about
        -- a second, finds it). pg_test/tests/exactly_once.rs,
        -- one_job_claims_find_rows_updated_since_their_snapshot. The queue row gates it
        -- (unpaused, and uncapped unless we hold the cap lock) and gives the default lease, so
        -- the common case costs one statement. Written as ctid (or id) = ANY (ARRAY(...)),
        -- not as a join against a CTE, whose cached generic plan was a
        -- hash join over the whole queue. n = 1 has its own copy with a constant LIMIT and no
        -- ORDER BY (no Sort); the batch copy is in jq._claim_batch (its LIMIT is a parameter,
        -- and it pins plan_cache_mode: see there).
        -- pg_test/tests/plans.rs checks the selection in both plan modes. The
        -- lease starts when the row is claimed (clock_timestamp), not when the caller's
        -- transaction or this statement began, so waiting for locks does not shorten it.
        IF coalesce(v_limit, claim.n) OPERATOR(pg_catalog.=) 1 THEN
        -- One job: no ORDER BY, so no Sort, and no outer SELECT over the UPDATE: the per-row
        -- calls sit in RETURNING, which runs once per row updated (in the UPDATE's WHERE the
        -- planner may run them on rows it then rejects). They wake waiters if this claim rolls
        -- back (it hands its jobs back) and move the claim-start hint forward
        -- (src/claim_hint.rs). This shape drained 1.07-1.12x as fast at 64 connections as a
        -- CTE with an outer SELECT calling them, which the batch copy keeps (it needs the ORDER
        -- BY); measured together with the same change to jq.complete (bench/ab_variant.sh, 5
        -- rounds; docs/BENCHMARKS.md, "a spin-lock stall at every commit").
        RETURN QUERY
        UPDATE jq.jobs j SET
            state = 'running',
            attempt = j.attempt OPERATOR(pg_catalog.+) 1,
            claims = j.claims OPERATOR(pg_catalog.+) 1,
            worker = claim.worker,
            lease_token = jq._lease_token(),
            started_at = pg_catalog.clock_timestamp(),
            lease = coalesce(claim.lease, q.lease),
            lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) coalesce(claim.lease, q.lease)
        FROM jq.queues q
        WHERE q.name OPERATOR(pg_catalog.=) claim.queue
          AND j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
              SELECT p.ctid FROM jq.jobs p
              WHERE pg_catalog.hashtextextended(p.queue, 0) OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(claim.queue, 0)
                AND p.state OPERATOR(pg_catalog.=) 'ready'
                AND p.priority OPERATOR(pg_catalog.<) coalesce(v_below, 2147483648)
                AND EXISTS (SELECT FROM jq.queues g WHERE g.name OPERATOR(pg_catalog.=) claim.queue
                            AND NOT g.paused
                            AND ((g.max_concurrency IS NULL AND g.rate_limit IS NULL) OR v_locked IS NOT NULL))
              ORDER BY p.priority DESC, p.run_at, p.id
              LIMIT 1
              FOR UPDATE OF p SKIP LOCKED))
        RETURNING j.id, j.queue, j.kind, j.payload, j.attempt, j.max_attempts, j.lease_token,
                  j.lease_expires_at, j.priority, j.run_at,
                  -- once per claimed row: wake waiters if this claim rolls back, move the hint
                  -- forward (both always true: created_at is returned as is)
                  CASE WHEN jq._wake_on_abort(j.queue)
                            AND jq._hint_advance(j.queue, j.priority, j.run_at, j.id)
                       THEN j.created_at END;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        IF v_got OPERATOR(pg_catalog.=) 0 AND pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
            -- The ctid fallback (see above): the same range, by id, with a new snapshot.
            RETURN QUERY
            SELECT * FROM jq._claim_batch(claim.queue, claim.worker, 1, claim.lease, false, v_below, v_locked);
            GET DIAGNOSTICS v_got = ROW_COUNT;
        END IF;
        ELSE
        RETURN QUERY
        SELECT * FROM jq._claim_batch(claim.queue, claim.worker, coalesce(v_limit, claim.n), claim.lease,
                                      false, v_below, v_locked);
        GET DIAGNOSTICS v_got = ROW_COUNT;
        END IF;
        IF v_got OPERATOR(pg_catalog.=) 0 THEN
            -- A full claim that took the turn (jq._claim_hint) and found nothing ends it now,
            -- not when this transaction ends or after a long-poll's sleep (src/claim_hint.rs).
            PERFORM jq._hint_turn_end(claim.queue);
        END IF;
        IF v_got OPERATOR(pg_catalog.>) 0 OR v_locked IS NOT NULL OR v_hinted OPERATOR(pg_catalog.>) 0 THEN
            IF v_tokens IS NOT NULL THEN
                -- A rate-limited claim (under the queue row lock): take one token per job claimed.
                UPDATE jq.queues t SET rate_tokens = v_tokens OPERATOR(pg_catalog.-) v_got, rate_updated = v_now
                WHERE t.name OPERATOR(pg_catalog.=) claim.queue;
            END IF;
            IF v_deadline IS NOT NULL THEN
                PERFORM jq._wait_done();
            END IF;
            RETURN;
        END IF;

        -- Nothing claimed: the queue is empty, paused, capped, rate-limited or unknown.
        SELECT t.paused, t.max_concurrency, t.rate_limit INTO v_paused, v_cap, v_rate
        FROM jq.queues t WHERE t.name OPERATOR(pg_catalog.=) claim.queue;
        IF NOT FOUND THEN
            PERFORM jq._unknown_queue(claim.queue);
        END IF;
        IF v_paused OR (v_cap IS NULL AND v_rate IS NULL) THEN
            EXIT;  -- nothing to claim now
        END IF;
        IF v_deadline IS NOT NULL THEN
            -- Long-poll on a capped queue: while it has no ready job or its cap is reached,
            -- wait (an enqueue or a job ending wakes us) instead of taking the queue row lock,
            -- which a claim keeps until its transaction ends; the count is taken again under
            -- the lock below.
            IF NOT EXISTS (SELECT FROM jq.jobs j
                           WHERE pg_catalog.hashtextextended(j.queue, 0) OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(claim.queue, 0)
                             AND j.state OPERATOR(pg_catalog.=) 'ready') THEN
                EXIT;
            END IF;
            IF v_cap IS NOT NULL THEN
                SELECT pg_catalog.count(*) INTO v_running FROM jq.jobs j
                WHERE j.queue OPERATOR(pg_catalog.=) claim.queue AND j.state OPERATOR(pg_catalog.=) 'running';
                IF v_running OPERATOR(pg_catalog.>=) v_cap THEN
                    EXIT;
                END IF;
            END IF;
            IF v_rate IS NOT NULL THEN
                -- No token yet: sleep until the next one arrives (or a wakeup), not spin.
                v_token_at := jq._rate_next_token(claim.queue);
                IF v_token_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN
                    EXIT;
                END IF;
            END IF;
        END IF;
        -- A capped queue: serialise its claims on the queue row (seed A, ADR-003), since
        -- counting and claiming must not interleave with another claimer's, or ten claimers
        -- each see room for the cap. The count is a separate statement so that its snapshot is
        -- taken after the lock; an older snapshot (REPEATABLE READ, SERIALIZABLE) would let
        -- the cap be exceeded, so those are refused.
        IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
            RAISE EXCEPTION 'jq.claim on a queue with max_concurrency or rate_limit needs READ COMMITTED, not %',
                pg_catalog.current_setting('transaction_isolation') USING ERRCODE = '25000';
        END IF;
        IF pg_catalog.current_setting('jq.claim_cap_skip_locked', true) OPERATOR(pg_catalog.=) 'on' THEN
            -- Inside jq.claim(text[]), which already holds, in name order, the rows of the
            -- capped queues it saw. A queue that became capped since is not waited for: its
            -- row is taken only if free (else: no room now, try the next queue), so claims
            -- never wait for a queue row out of order.
            SELECT t.paused, t.max_concurrency, t.rate_limit INTO v_paused, v_cap, v_rate
            FROM jq.queues t WHERE t.name OPERATOR(pg_catalog.=) claim.queue FOR NO KEY UPDATE SKIP LOCKED;
        ELSE
            SELECT t.paused, t.max_concurrency, t.rate_limit INTO v_paused, v_cap, v_rate
            FROM jq.queues t WHERE t.name OPERATOR(pg_catalog.=) claim.queue FOR NO KEY UPDATE;
        END IF;
        IF NOT FOUND OR v_paused THEN
            RETURN;
        END IF;
        v_limit := claim.n;
        IF v_cap IS NOT NULL THEN
            SELECT pg_catalog.count(*) INTO v_running FROM jq.jobs j
            WHERE j.queue OPERATOR(pg_catalog.=) claim.queue AND j.state OPERATOR(pg_catalog.=) 'running';
            v_limit := LEAST(claim.n, v_cap OPERATOR(pg_catalog.-) v_running);
            IF v_limit OPERATOR(pg_catalog.<=) 0 THEN
                RETURN;
            END IF;
        END IF;
        IF v_rate IS NOT NULL THEN
            -- Token bucket (rate_burst tokens, refilled at rate_limit per rate_period), read and
            -- written only under this row lock, so claims across all workers share it.
            v_now := pg_catalog.clock_timestamp();
            v_tokens := jq._rate_tokens(claim.queue, v_now);
            v_limit := LEAST(v_limit, pg_catalog.floor(v_tokens)::integer);
            IF v_limit OPERATOR(pg_catalog.<=) 0 THEN
                RETURN;
            END IF;
        END IF;
        v_locked := true;
        v_below := NULL;  -- capped or rate-limited: the locked claim looks everywhere
    END LOOP;
    -- Nothing claimable. Without wait, or once it ran out, return nothing; else sleep until a
    -- wakeup for this queue (or the deadline) and look again. A capped claim that took the
    -- queue row lock never gets here: it returns, even empty, rather than sleep holding it.
    -- Nor does a transaction that has a transaction id: it may hold a row lock this call took
    -- and did not claim with. A look whose snapshot predates another claimer's commit of the
    -- same row locks that row in its new, running version, and the recheck then rejects it but
    -- keeps the lock (READ COMMITTED); asleep, this call would block that job's jq.complete,
    -- heartbeat, fail, release, snooze and cancel, and the reaper, for up to wait. A row lock
    -- needs a transaction id, so with none there is nothing to hold; with one (also: the
    -- caller's transaction wrote or locked rows before the call) the claim returns what it
    -- found, nothing, instead of sleeping, and the caller's next call, in a new transaction,
    -- waits.
    -- pg_test/tests/robustness.rs, a_long_poll_never_sleeps_holding_row_locks.
    IF v_deadline IS NULL OR pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL
       OR NOT jq._wait(LEAST(v_deadline, coalesce(v_token_at, v_deadline))) THEN
        IF v_deadline IS NOT NULL THEN
            PERFORM jq._wait_done();
        END IF;
        RETURN;
    END IF;
    v_token_at := NULL;
    v_below := NULL;  -- woken: the new jobs may sort anywhere
    END LOOP poll;
END $$;

CREATE FUNCTION jq.claim(queues text[], worker text, n integer DEFAULT 1, lease interval DEFAULT NULL,
                         wait interval DEFAULT NULL, caller_ticket bigint DEFAULT jq._ticket())
RETURNS SETOF jq.claimed_job
LANGUAGE plpgsql AS $$
DECLARE
    v_queue    text;
    v_got      integer := 0;
    v_last     integer;
    v_missing  record;
    v_capped   boolean[];
    v_deadline timestamptz;
    v_ncapped  bigint;   -- listed queues with a max_concurrency or rate_limit
    v_one_capped text;   -- the first of them by name
BEGIN
    IF claim.queues IS NULL OR pg_catalog.cardinality(claim.queues) = 0 THEN
        RAISE EXCEPTION 'queues must be a non-empty array' USING ERRCODE = '22023';
    END IF;
    PERFORM jq._authorize(claim.caller_ticket, claim.queues, 'work');
    IF claim.n IS NULL OR claim.n < 1 OR claim.n > jq.max_claim_batch() THEN
        RAISE EXCEPTION 'n must be between 1 and %, got %', jq.max_claim_batch(), coalesce(claim.n::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    -- Every name is checked up front, so a call fails the same way whatever the queues hold.
    SELECT u.name INTO v_missing
    FROM pg_catalog.unnest(claim.queues) AS u(name)
    WHERE NOT EXISTS (SELECT 1 FROM jq.queues t WHERE t.name = u.name)
    LIMIT 1;
    IF FOUND THEN
        PERFORM jq._unknown_queue(v_missing.name);
    END IF;
    IF claim.wait IS NOT NULL THEN  -- no function call on the hot path without a wait
        v_deadline := jq._wait_deadline(claim.wait);
    END IF;
    IF v_deadline IS NOT NULL THEN
        SELECT pg_catalog.array_agg(EXISTS (SELECT FROM jq.queues t WHERE t.name = u.name
                                            AND (t.max_concurrency IS NOT NULL
                                                 OR t.rate_limit IS NOT NULL)) ORDER BY u.ord)
        INTO v_capped
        FROM pg_catalog.unnest(claim.queues) WITH ORDINALITY AS u(name, ord);
        PERFORM jq._wait_register(claim.queues, v_capped);
    END IF;
    <<poll>>
    LOOP
    -- Long-poll: claim only when a lock-free look finds something, so that nothing (the capped
    -- queues' rows below) is locked while waiting.
    IF v_deadline IS NULL OR jq._claimable(claim.queues) THEN
    -- A capped queue's row stays locked until the transaction ends. Claiming capped queues one
    -- after another would let two callers that list them in different orders deadlock, so
    -- when two or more are capped (or rate-limited), lock all of their rows first, in name
    -- order (jq.jobs before them, the order jq.drop_queue takes). A queue that becomes capped
    -- after this is only claimed if its row is free (jq.claim_cap_skip_locked, read by the
    -- claim below): claims never wait for a queue row out of order. With exactly one capped
    -- queue nothing is locked up front: when the loop reaches it with nothing claimed yet, its
    -- claim waits for its row as jq.claim(text, ...) does (skipping it while another claimer
    -- held the row returned empty with jobs and free slots there; locking it up front made the
    -- earlier queues wait for it). With jobs already claimed it is taken only if free: waiting
    -- would shorten their leases, and a queue capped since may hold a row taken out of order.
    -- pg_test/tests/robustness.rs, a_multi_queue_claim_waits_for_a_busy_capped_queue_row.
    SELECT count(*), min(t.name) INTO v_ncapped, v_one_capped FROM jq.queues t
    WHERE t.name = ANY (claim.queues) AND (t.max_concurrency IS NOT NULL OR t.rate_limit IS NOT NULL);
    IF v_ncapped > 1 THEN
        LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;
        PERFORM 1 FROM (SELECT t.name FROM jq.queues t
                        WHERE t.name = ANY (claim.queues) AND (t.max_concurrency IS NOT NULL OR t.rate_limit IS NOT NULL)
                        ORDER BY t.name COLLATE "C"
                        FOR NO KEY UPDATE) locked;
    END IF;
    PERFORM pg_catalog.set_config('jq.claim_cap_skip_locked', 'on', true);
    FOREACH v_queue IN ARRAY claim.queues LOOP
        IF v_ncapped = 1 THEN
            PERFORM pg_catalog.set_config('jq.claim_cap_skip_locked',
                                          CASE WHEN v_queue = v_one_capped AND v_got = 0 THEN '' ELSE 'on' END, true);
        END IF;
        RETURN QUERY SELECT * FROM jq.claim(v_queue, claim.worker, claim.n - v_got, claim.lease);
        GET DIAGNOSTICS v_last = ROW_COUNT;
        v_got := v_got + v_last;
        EXIT WHEN v_got >= claim.n;
    END LOOP;
    PERFORM pg_catalog.set_config('jq.claim_cap_skip_locked', '', true);
    -- Done unless waiting and nothing was claimed. A capped queue's row may now be locked until
    -- the transaction ends: never sleep holding it, return (empty) instead.
    IF v_deadline IS NULL OR v_got > 0 OR true = ANY (v_capped) THEN
        EXIT poll;
    END IF;
    END IF;
    -- Nothing claimable now (or the jobs the look saw are locked by an unfinished claim, which
    -- wakes us if it rolls back): sleep until a wakeup, the deadline or the next rate token of
    -- a listed rate-limited queue that has ready jobs and room (a token arriving is no commit,
    -- so nothing wakes us for it; as jq.claim(text, ...); pg_test/tests/flow.rs,
    -- a_multi_queue_long_poll_wakes_for_the_next_rate_token), then look again. A token that
    -- fell due since the look: _wait returns at once and the next look claims (it sees what
    -- this query saw, plus the token), so no spin. Only the deadline ends the wait. Not
    -- while the transaction has a transaction id: a look may hold a job's row lock it did not
    -- claim with (see jq.claim(text, ...), where it sleeps), or the caller's transaction holds
    -- row locks of its own.
    IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
        EXIT poll;
    END IF;
    IF NOT jq._wait(LEAST(v_deadline,
                          (SELECT min(jq._rate_next_token(t.name)) FROM jq.queues t
                           WHERE t.name = ANY (claim.queues) AND t.rate_limit IS NOT NULL AND NOT t.paused
                             AND EXISTS (SELECT FROM jq.jobs j
                                         WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(t.name, 0)
                                           AND j.state = 'ready')
                             AND (t.max_concurrency IS NULL
                                  OR (SELECT count(*) FROM jq.jobs r WHERE r.queue = t.name AND r.state = 'running')
                                     < t.max_concurrency))))
       AND pg_catalog.clock_timestamp() >= v_deadline THEN
        EXIT poll;
    END IF;
    END LOOP poll;
    IF v_deadline IS NOT NULL THEN
        PERFORM jq._wait_done();
    END IF;
END $$;

COMMENT ON FUNCTION jq.claim(text, text, integer, interval, interval, bigint) IS
'Claims up to n (1..jq.max_claim_batch()) ready jobs of one queue for worker (a free-form name '
'of at most 200 characters, kept for operators; recovery never depends on it), in order '
'priority DESC, run_at, id, and returns them (jq.claimed_job) with a fresh lease_token each. '
'lease: interval, default the queue''s; every job of the batch gets its own lease of that length, '
'extended one by one with jq.heartbeat. One SELECT ... FOR UPDATE SKIP LOCKED on the partial '
'claim index, then UPDATE, in one statement (a one-job claim that locked a row updated after its '
'snapshot looks again by id in a second): concurrent claimers never get the same job while '
'its lease holds. A paused queue yields nothing. With max_concurrency set, claims on that queue '
'serialise on its row and never exceed the cap. wait (interval, 0 to 1 hour; default NULL = '
'return at once): long-poll: when nothing is claimable, sleep until a transaction that makes '
'a job of this queue claimable commits (enqueue, promotion, reaping, release, retry, resume, '
'and for a capped queue a job ending), then claim; return nothing once wait has passed. '
'Sleeping backends are woken through shared memory with jq in shared_preload_libraries, else '
're-check every jq.poll_interval. The snapshot of the call is held while it sleeps. A capped '
'queue whose cap is reached is not locked while waiting; a claim that locked it and still found '
'nothing returns empty early, and so does one whose transaction has a transaction id (it may '
'hold a row lock a lost race left it, or the caller''s transaction wrote or locked rows before the '
'call): it never sleeps holding row locks. With rate_limit set (jq.alter_queue), claims on that queue serialise '
'on its row like capped ones and take one token per job from its bucket, so no window of '
'rate_period sees more than rate_limit + rate_burst claims; a long-poll with no token sleeps until '
'the next one (docs/flow-control.md). Errors: 22023 bad n, worker, lease or wait; 42704 '
'unknown queue; 22004/22023 bad queue name; 25000 wait, or a capped or rate-limited queue, '
'outside READ COMMITTED. 42501: the caller holds no work grant on the queue; 0A000: the queue name under a nondeterministic collation.';

COMMENT ON FUNCTION jq.claim(text[], text, integer, interval, interval, bigint) IS
'Claims up to n jobs in total from several queues, one queue at a time in the given order (each '
'with the single-queue claim, so each stays on its index; seed A, ADR-002a): earlier queues take '
'precedence. Every name is checked first (22004 NULL, 22023 malformed, 42704 unknown). When two '
'or more of the queues have a max_concurrency or rate_limit, their rows are locked first, in name '
'order, and a queue capped after that is skipped while another claimer holds it, so callers '
'listing them in different orders cannot deadlock; a single such queue, reached with nothing '
'claimed yet, is claimed as jq.claim(text, ...) claims it (waiting for its row), else only if '
'its row is free. wait '
'(interval, 0 to 1 hour; default NULL = return at once): long-poll as in jq.claim(text, ...): '
'sleeps, holding no row lock, until a lock-free look finds a claimable job in any of the queues '
'(woken by a commit, or when a listed rate-limited queue''s next token is due), then claims; if '
'that gets nothing (other claimers '
'were faster), it sleeps again, except when a capped queue is listed: then it returns empty '
'rather than sleep holding that queue''s row lock. It never sleeps while its transaction has a '
'transaction id (as jq.claim(text, ...)): it returns empty instead. Errors: as jq.claim(text, ...), plus 22023 '
'for an empty array. 42501: the caller holds no work grant on one of the queues; 0A000: a queue name under a nondeterministic collation.';

CREATE FUNCTION jq.cancel(id bigint, caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql AS $$
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

CREATE FUNCTION jq.retry(id bigint, caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql AS $$
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
      AND CASE WHEN j.concurrency_key IS NULL THEN jq._wake(j.queue) ELSE true END
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

CREATE FUNCTION jq.alter_queue(
    name               text,
    max_attempts       integer DEFAULT NULL,
    lease              interval DEFAULT NULL,
    backoff            jq.backoff_policy DEFAULT NULL,
    backoff_base       interval DEFAULT NULL,
    backoff_max        interval DEFAULT NULL,
    jitter             jq.jitter_mode DEFAULT NULL,
    retention          interval DEFAULT NULL,
    dead_retention     interval DEFAULT NULL,
    history_retention  interval DEFAULT NULL,
    max_concurrency    integer DEFAULT NULL,
    max_lease_expiries integer DEFAULT NULL,
    paused             boolean DEFAULT NULL,
    key_concurrency    integer DEFAULT NULL,
    rate_limit         integer DEFAULT NULL,
    rate_period        interval DEFAULT NULL,
    burst              integer DEFAULT NULL,
    priority_aging     interval DEFAULT NULL,
    caller_ticket bigint DEFAULT jq._ticket()
) RETURNS jq.queues
LANGUAGE plpgsql AS $$
DECLARE
    q jq.queues;
BEGIN
    PERFORM jq._authorize_queue(alter_queue.caller_ticket, alter_queue.name, 'admin');
    PERFORM jq._check_queue_options(alter_queue.max_attempts, alter_queue.lease,
        alter_queue.backoff_base, alter_queue.backoff_max, alter_queue.retention,
        alter_queue.dead_retention, alter_queue.history_retention, alter_queue.max_lease_expiries);
    IF alter_queue.max_concurrency IS NOT NULL AND alter_queue.max_concurrency < 0 THEN
        RAISE EXCEPTION 'max_concurrency must be at least 1, or 0 to remove the cap, got %',
            alter_queue.max_concurrency USING ERRCODE = '22023';
    END IF;
    PERFORM jq._check_flow_options(alter_queue.key_concurrency, alter_queue.rate_limit,
                                   alter_queue.rate_period, alter_queue.burst);
    IF alter_queue.priority_aging IS NOT NULL AND alter_queue.priority_aging <> interval '0' THEN
        PERFORM jq._check_interval('priority_aging', alter_queue.priority_aging, false);
    END IF;
    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;  -- before the queue row, as jq.drop_queue
    UPDATE jq.queues t SET
        max_attempts       = coalesce(alter_queue.max_attempts, t.max_attempts),
        lease              = coalesce(alter_queue.lease, t.lease),
        backoff            = coalesce(alter_queue.backoff, t.backoff),
        backoff_base       = coalesce(alter_queue.backoff_base, t.backoff_base),
        backoff_max        = coalesce(alter_queue.backoff_max, t.backoff_max),
        jitter             = coalesce(alter_queue.jitter, t.jitter),
        retention          = coalesce(alter_queue.retention, t.retention),
        dead_retention     = coalesce(alter_queue.dead_retention, t.dead_retention),
        history_retention  = coalesce(alter_queue.history_retention, t.history_retention),
        max_concurrency    = CASE WHEN alter_queue.max_concurrency IS NULL THEN t.max_concurrency
                                  WHEN alter_queue.max_concurrency = 0 THEN NULL
                                  ELSE alter_queue.max_concurrency END,
        max_lease_expiries = coalesce(alter_queue.max_lease_expiries, t.max_lease_expiries),
        paused             = coalesce(alter_queue.paused, t.paused),
        key_concurrency    = coalesce(alter_queue.key_concurrency, t.key_concurrency),
        priority_aging     = CASE WHEN alter_queue.priority_aging IS NULL THEN t.priority_aging
                                  WHEN alter_queue.priority_aging = interval '0' THEN NULL
                                  ELSE alter_queue.priority_aging END,
        -- rate_limit => 0 removes the limit; setting it fills the bucket (rate_burst tokens).
        rate_limit         = CASE WHEN alter_queue.rate_limit IS NULL THEN t.rate_limit
                                  WHEN alter_queue.rate_limit = 0 THEN NULL
                                  ELSE alter_queue.rate_limit END,
        rate_period        = CASE WHEN alter_queue.rate_limit = 0 THEN NULL
                                  WHEN alter_queue.rate_limit IS NULL AND t.rate_limit IS NULL THEN NULL
                                  ELSE coalesce(alter_queue.rate_period, t.rate_period, interval '1 second') END,
        rate_burst         = CASE WHEN alter_queue.rate_limit = 0 THEN NULL
                                  WHEN alter_queue.rate_limit IS NULL AND t.rate_limit IS NULL THEN NULL
                                  ELSE coalesce(alter_queue.burst, t.rate_burst, 1) END,
        rate_tokens        = CASE WHEN alter_queue.rate_limit IS NULL AND alter_queue.rate_period IS NULL
                                       AND alter_queue.burst IS NULL THEN t.rate_tokens END,
        rate_updated       = CASE WHEN alter_queue.rate_limit IS NULL AND alter_queue.rate_period IS NULL
                                       AND alter_queue.burst IS NULL THEN t.rate_updated END
    WHERE t.name = alter_queue.name
      AND jq._wake_n(t.name, 2147483647)  -- a raised cap or an unpause: every waiter may find work
    RETURNING * INTO q;
    IF q.name IS NULL THEN
        PERFORM jq._unknown_queue(alter_queue.name);
    END IF;
    IF (alter_queue.rate_period IS NOT NULL OR alter_queue.burst IS NOT NULL) AND q.rate_limit IS NULL THEN
        RAISE EXCEPTION 'rate_period and burst need a rate_limit' USING ERRCODE = '22023';
    END IF;
    IF alter_queue.key_concurrency IS NOT NULL THEN
        -- A raised limit admits blocked jobs now (in key order: jq._key_fill_many).
        PERFORM jq._key_fill_many(pg_catalog.array_agg(s.queue), pg_catalog.array_agg(s.concurrency_key),
                                  pg_catalog.array_agg(0))
        FROM jq.key_slots s WHERE s.queue = alter_queue.name;
    END IF;
    RETURN q;
END $$;

COMMENT ON FUNCTION jq.alter_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, integer, integer, interval, integer, interval, bigint) IS
'Changes the given options of a queue (NULL = leave unchanged; max_concurrency => 0 removes the '
'cap) and returns the new row. New defaults apply to jobs enqueued afterwards (max_attempts) and '
'to the next claim, failure or pass (lease, backoff, retention, cap). Flow control '
'(docs/flow-control.md): key_concurrency (1..1000000) jobs per concurrency_key, a raise admits '
'blocked jobs at once; rate_limit (jobs, 1..1e9; 0 removes the limit) per rate_period (interval, '
'default 1 second) with a bucket of burst tokens (default 1): no window of rate_period sees more '
'than rate_limit + burst claims; changing any of the three refills the bucket. priority_aging '
'(interval > 0, at most 100 years; 0 turns it off): a ready job''s priority rises by 1 per '
'interval waited since run_at, for jobs enqueued while it is set. Errors: 22023 '
'invalid value (also rate_period or burst without a rate limit), 42704 unknown queue. 42501: the caller holds no admin grant on the queue; 0A000: the name under a nondeterministic collation.';

CREATE FUNCTION jq.drop_queue(name text, force boolean DEFAULT false,
                              caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_jobs   bigint := 0;
    v_count  bigint;
    v_admins regrole[];
BEGIN
    -- Global admins only: the drop locks jq.jobs against writes (EXCLUSIVE) until its
    -- transaction ends, which would let one queue's admin stall every queue and maintenance.
    PERFORM jq._authorize_queue(drop_queue.caller_ticket, '*', 'admin');
    -- The name is not passed to jq._authorize_queue, whose refusal of a nondeterministic
    -- collation (src/security.rs) therefore does not see it; the name check's regular
    -- expression refuses one too (0A000), so 'a' COLLATE a_case_insensitive_one cannot drop A.
    PERFORM jq._check_queue_name(drop_queue.name);
    -- Under an older snapshot the refusal check and the deletes could miss jobs committed
    -- after it was taken, and leave them behind in a queue that no longer exists.
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jq.drop_queue needs READ COMMITTED, not %',
            pg_catalog.current_setting('transaction_isolation') USING ERRCODE = '25000';
    END IF;
    PERFORM 1 FROM jq.queues t WHERE t.name = drop_queue.name;
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(drop_queue.name);
    END IF;
    -- History goes before the table lock, so its scan does not hold up other queues' writers;
    -- a history row written after this by a late worker is pruned as an orphan by jq._prune.
    -- SKIP LOCKED: rows another transaction is deleting (another drop of this queue) are left
    -- to it, or to jq._prune if it rolls back. Waiting for them deadlocked: a transaction that
    -- held jq.jobs (an earlier drop or any job write) and then dropped this queue waited here
    -- for the other drop, which held these rows and waited for jq.jobs.
    DELETE FROM jq.execution_log e
    WHERE e.ctid = ANY (ARRAY(SELECT h.ctid FROM jq.execution_log h WHERE h.queue = drop_queue.name
                              FOR UPDATE SKIP LOCKED));
    -- Then wait for every transaction that has written jobs to finish, and hold off new
    -- writers until this one commits: an enqueue under READ COMMITTED racing the drop then
    -- either committed its job before (deleted below) or finds the queue gone (jq.enqueue reads
    -- the queue in its INSERT). Self-conflicting, so two drops queue up instead of
    -- deadlocking. The wait is bounded by lock_timeout (2 s, set on this function) so that a
    -- drop behind a long transaction fails with 55P03 instead of stalling every writer queued
    -- behind it. EXCLUSIVE, not just SHARE ROW EXCLUSIVE, so that it also waits for
    -- transactions that only row-locked jobs so far (jq.fail's SELECT ... FOR UPDATE) instead
    -- of deadlocking with them. The table lock comes before the queue row lock: every jq
    -- function that locks a queue row, or a schedule or grant row this drop deletes (a capped
    -- claim, an enqueue outside READ COMMITTED, pause, resume, alter_queue, the multi-queue
    -- claim, schedule, alter_schedule, unschedule, grant, revoke) takes its lock on jq.jobs
    -- first, so this order cannot deadlock with them. Plain reads of jq.jobs go on meanwhile.
    LOCK TABLE jq.jobs IN EXCLUSIVE MODE;
    PERFORM 1 FROM jq.queues t WHERE t.name = drop_queue.name FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(drop_queue.name);  -- dropped meanwhile
    END IF;
    IF NOT coalesce(drop_queue.force, false) AND (
           EXISTS (SELECT 1 FROM jq.jobs j  -- jobs_claim_idx's key (sql/schema.sql)
                   WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(drop_queue.name, 0)
                     AND j.state = 'ready')
        OR EXISTS (SELECT 1 FROM jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'running')
        OR EXISTS (SELECT 1 FROM jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'scheduled')
        OR EXISTS (SELECT 1 FROM jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'blocked'))
    THEN
        RAISE EXCEPTION 'queue "%" still has ready, scheduled or running jobs', drop_queue.name
            USING ERRCODE = '55006',
                  HINT = 'Pass force => true to cancel and delete them with the queue.';
    END IF;
    -- Cron schedules that target the queue: refused like unfinished jobs, deleted with force
    -- (after the queue row lock, as jq.schedule / jq.alter_schedule lock the queue row FOR KEY
    -- SHARE before their schedule row; jq.cron_tick locks jq.jobs first, as above).
    IF EXISTS (SELECT 1 FROM jq.schedules s WHERE s.queue = drop_queue.name) THEN
        IF NOT coalesce(drop_queue.force, false) THEN
            RAISE EXCEPTION 'queue "%" is the target of % cron schedule(s)', drop_queue.name,
                (SELECT count(*) FROM jq.schedules s WHERE s.queue = drop_queue.name)
                USING ERRCODE = '55006',
                      HINT = 'Unschedule them, point them at another queue, or pass force => true to delete them with the queue.';
        END IF;
        DELETE FROM jq.schedules s WHERE s.queue = drop_queue.name;
    END IF;
    DELETE FROM jq.jobs j
    WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(drop_queue.name, 0) AND j.state = 'ready';
    GET DIAGNOSTICS v_count = ROW_COUNT; v_jobs := v_jobs + v_count;
    DELETE FROM jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'running';
    GET DIAGNOSTICS v_count = ROW_COUNT; v_jobs := v_jobs + v_count;
    DELETE FROM jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'scheduled';
    GET DIAGNOSTICS v_count = ROW_COUNT; v_jobs := v_jobs + v_count;
    DELETE FROM jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'blocked';
    GET DIAGNOSTICS v_count = ROW_COUNT; v_jobs := v_jobs + v_count;
    DELETE FROM jq.key_slots s WHERE s.queue = drop_queue.name;
    DELETE FROM jq.jobs j WHERE j.queue = drop_queue.name AND j.state IN ('completed', 'cancelled');
    GET DIAGNOSTICS v_count = ROW_COUNT; v_jobs := v_jobs + v_count;
    DELETE FROM jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'dead';
    GET DIAGNOSTICS v_count = ROW_COUNT; v_jobs := v_jobs + v_count;
    -- Its grants go with it; a role whose last admin grant this was loses the EXECUTE that
    -- jq.grant gave it (so that DROP ROLE works).
    WITH gone AS (DELETE FROM jq.queue_grants g WHERE g.queue = drop_queue.name
                  RETURNING g.grantee, g.privilege)
    SELECT pg_catalog.array_agg(DISTINCT gone.grantee) FILTER (WHERE gone.privilege = 'admin')
    INTO v_admins FROM gone;
    PERFORM jq._settle_admin_execute(a) FROM pg_catalog.unnest(v_admins) AS a;
    DELETE FROM jq.queues t WHERE t.name = drop_queue.name;
    RAISE LOG 'jq: dropped queue "%" with % jobs', drop_queue.name, v_jobs;
    RETURN true;
END $$;

ALTER FUNCTION jq.drop_queue(text, boolean, bigint) SET lock_timeout = '2s';

COMMENT ON FUNCTION jq.drop_queue(text, boolean, bigint) IS
'Deletes a queue with its jobs and execution history. Refuses (55006 object_in_use) while the '
'queue has ready, blocked, scheduled or running jobs unless force => true; forced, those jobs are '
'cancelled by deletion and any late jq.complete / jq.fail / jq.heartbeat / jq.release on them is '
'a harmless false/NULL. It locks jq.jobs against writes (EXCLUSIVE) while it runs, so '
'an enqueue racing the drop never leaves a job behind; it waits at most 2 s for that lock, '
'then fails with 55P03 (lock_not_available: a transaction that wrote jobs is still open; retry). '
'Cron schedules targeting the queue also make it refuse (55006) unless force => true, which '
'deletes them (their fire log stays until its retention). '
'Needs READ COMMITTED. Errors: 22004/22023 bad name, 0A000 name under a nondeterministic collation, '
'42704 unknown queue, 55006 jobs or schedules remain, 55P03 busy, 25000 other isolation level. 42501: the caller holds no admin grant on every queue (''*'').';

CREATE FUNCTION jq.pause(name text, caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jq._authorize_queue(pause.caller_ticket, pause.name, 'admin');
    -- jq.jobs before the queue row, the order jq.drop_queue takes them in (no deadlock).
    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;
    UPDATE jq.queues t SET paused = true WHERE t.name = pause.name;
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(pause.name);
    END IF;
    RETURN true;
END $$;

COMMENT ON FUNCTION jq.pause(text, bigint) IS
'Pauses a queue: jq.claim returns no jobs from it until jq.resume. Enqueue, running jobs and '
'maintenance go on. Errors: 22004/22023 bad name, 42704 unknown queue. 42501: the caller holds no admin grant on the queue; 0A000: the name under a nondeterministic collation.';

CREATE FUNCTION jq.resume(name text, caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jq._authorize_queue(resume.caller_ticket, resume.name, 'admin');
    -- jq.jobs before the queue row, the order jq.drop_queue takes them in (no deadlock).
    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;
    UPDATE jq.queues t SET paused = false
    WHERE t.name = resume.name AND jq._wake_n(t.name, 2147483647);  -- every waiter may find work
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(resume.name);
    END IF;
    RETURN true;
END $$;

COMMENT ON FUNCTION jq.resume(text, bigint) IS
'Resumes a paused queue. Errors: 22004/22023 bad name, 42704 unknown queue. 42501: the caller holds no admin grant on the queue; 0A000: the name under a nondeterministic collation.';

CREATE FUNCTION jq.schedule(
    name         text,
    cron         text,
    queue        text,
    payload      jsonb DEFAULT '{}',
    kind         text DEFAULT NULL,
    timezone     text DEFAULT 'UTC',
    priority     integer DEFAULT 0,
    max_attempts integer DEFAULT NULL,
    misfire      text DEFAULT 'fire_once',
    overlap      text DEFAULT 'allow',
    caller_ticket bigint DEFAULT jq._ticket()
) RETURNS jq.schedules
LANGUAGE plpgsql AS $$
DECLARE
    v_now    timestamptz := pg_catalog.now();
    v_caller oid := jq._authorize_queue(schedule.caller_ticket, schedule.queue, 'admin');
    s        jq.schedules;
BEGIN
    PERFORM jq._check_schedule_name(schedule.name);
    IF schedule.cron IS NULL OR schedule.timezone IS NULL OR schedule.payload IS NULL
       OR schedule.priority IS NULL OR schedule.misfire IS NULL OR schedule.overlap IS NULL THEN
        RAISE EXCEPTION 'only kind and max_attempts may be NULL; omit an option to take its default'
            USING ERRCODE = '22004';
    END IF;
    PERFORM jq._check_schedule_options(schedule.cron, schedule.timezone, schedule.payload,
        schedule.kind, schedule.max_attempts, schedule.misfire, schedule.overlap);
    PERFORM jq._lock_schedule_queue(schedule.queue);
    -- The same name on another queue is that queue's admins' schedule.
    PERFORM jq._check_schedule_owner(v_caller, t.name, t.queue)
    FROM jq.schedules t WHERE t.name = schedule.name AND t.queue <> schedule.queue;
    -- An existing schedule is updated in place (applications call this on every start): its
    -- timer and counters are kept unless the expression or the zone changed, and enabled is
    -- left as it is.
    INSERT INTO jq.schedules AS t (name, cron, timezone, queue, payload, kind, priority,
        max_attempts, misfire, overlap, next_run_at, next_run_from, created_at, updated_at,
        created_by)
    VALUES (schedule.name, schedule.cron, schedule.timezone, schedule.queue, schedule.payload,
        schedule.kind, schedule.priority, schedule.max_attempts, schedule.misfire,
        schedule.overlap, jq.cron_next(schedule.cron, v_now, schedule.timezone), v_now, v_now,
        v_now, v_caller::regrole)
    ON CONFLICT ON CONSTRAINT schedules_pkey DO UPDATE SET
        cron = excluded.cron, timezone = excluded.timezone, queue = excluded.queue,
        payload = excluded.payload, kind = excluded.kind, priority = excluded.priority,
        max_attempts = excluded.max_attempts, misfire = excluded.misfire,
        overlap = excluded.overlap, created_by = excluded.created_by,
        next_run_at = CASE WHEN t.cron IS DISTINCT FROM excluded.cron
                             OR t.timezone IS DISTINCT FROM excluded.timezone
                           THEN excluded.next_run_at ELSE t.next_run_at END,
        next_run_from = CASE WHEN t.cron IS DISTINCT FROM excluded.cron
                               OR t.timezone IS DISTINCT FROM excluded.timezone
                             THEN excluded.next_run_from ELSE t.next_run_from END,
        updated_at = v_now
    -- Checked again on the row the upsert found: one committed after the check above (the
    -- upsert waits for it) must not be taken over either.
    WHERE t.queue = excluded.queue OR jq._may(v_caller, t.queue, 'admin')
    RETURNING * INTO s;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule "%" targets a queue this role may not administer', schedule.name
            USING ERRCODE = '42501';
    END IF;
    RETURN s;
END $$;

COMMENT ON FUNCTION jq.schedule(text, text, text, jsonb, text, text, integer, integer, text, text, bigint) IS
'Creates or updates (by name) a cron schedule and returns its row. Each fire time enqueues one '
'job into queue with payload, kind (default: the schedule name), priority and max_attempts '
'(default: the queue''s). cron: 5 fields, or 6 with seconds first, @aliases (docs/cron.md); '
'timezone: IANA name the expression is read in. misfire (after downtime): fire_once (one job '
'for the latest missed time), skip (only if at most jq.cron_misfire_grace() late), fire_all (each, '
'up to jq.cron_max_catchup()). overlap: allow, or skip_if_running (no job while the previous one '
'is scheduled, ready or running). On an existing name the timer and counters are kept unless '
'cron or timezone changed (then next_run_at is recomputed from now); enabled is not changed. '
'Errors: 22004 NULL option, 22023 invalid name, expression, time zone, option, 42704 unknown '
'queue, 54000 payload too large; 42501 unless the caller may administer the queue (and the queue '
'of an existing schedule of that name). The caller becomes the schedule''s created_by: each fire '
'enqueues only while that role may enqueue to the queue.';

CREATE FUNCTION jq.alter_schedule(
    name         text,
    cron         text DEFAULT NULL,
    queue        text DEFAULT NULL,
    payload      jsonb DEFAULT NULL,
    kind         text DEFAULT NULL,
    timezone     text DEFAULT NULL,
    priority     integer DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    misfire      text DEFAULT NULL,
    overlap      text DEFAULT NULL,
    enabled      boolean DEFAULT NULL,
    caller_ticket bigint DEFAULT jq._ticket()
) RETURNS jq.schedules
LANGUAGE plpgsql AS $$
DECLARE
    v_now    timestamptz := pg_catalog.now();
    v_caller oid := jq._redeem(alter_schedule.caller_ticket);
    old      jq.schedules;
    s        jq.schedules;
BEGIN
    PERFORM jq._check_schedule_name(alter_schedule.name);
    IF alter_schedule.queue IS NOT NULL THEN
        PERFORM jq._check_may(v_caller, ARRAY[alter_schedule.queue], 'admin');
    END IF;
    PERFORM jq._check_schedule_options(alter_schedule.cron, alter_schedule.timezone,
        alter_schedule.payload, alter_schedule.kind, alter_schedule.max_attempts,
        alter_schedule.misfire, alter_schedule.overlap);
    -- Before the schedule row (which a forced jq.drop_queue deletes) and the queue row, as
    -- jq.drop_queue: else a transaction that altered and then wrote jobs could deadlock with it.
    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;
    IF alter_schedule.queue IS NOT NULL THEN
        PERFORM jq._lock_schedule_queue(alter_schedule.queue);
    END IF;
    SELECT * INTO old FROM jq.schedules t WHERE t.name = alter_schedule.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule "%" does not exist', alter_schedule.name
            USING ERRCODE = '42704', HINT = 'Create it with jq.schedule(name, cron, queue).';
    END IF;
    PERFORM jq._check_schedule_owner(v_caller, old.name, old.queue);
    PERFORM jq._cron_check(coalesce(alter_schedule.cron, old.cron),
                           coalesce(alter_schedule.timezone, old.timezone));
    UPDATE jq.schedules t SET
        cron         = coalesce(alter_schedule.cron, t.cron),
        timezone     = coalesce(alter_schedule.timezone, t.timezone),
        queue        = coalesce(alter_schedule.queue, t.queue),
        payload      = coalesce(alter_schedule.payload, t.payload),
        kind         = coalesce(alter_schedule.kind, t.kind),
        priority     = coalesce(alter_schedule.priority, t.priority),
        max_attempts = coalesce(alter_schedule.max_attempts, t.max_attempts),
        misfire      = coalesce(alter_schedule.misfire, t.misfire),
        overlap      = coalesce(alter_schedule.overlap, t.overlap),
        enabled      = coalesce(alter_schedule.enabled, t.enabled),
        -- A schedule disabled because its creator was dropped fires as whoever enables it.
        created_by   = CASE WHEN alter_schedule.enabled AND t.created_by IS NULL
                            THEN v_caller::regrole ELSE t.created_by END,
        last_error   = CASE WHEN alter_schedule.enabled AND NOT t.enabled THEN NULL ELSE t.last_error END,
        -- From now when the expression or zone changed, or the schedule is being enabled (a
        -- disabled schedule does not catch up on what it missed while disabled).
        next_run_at  = CASE
            WHEN coalesce(alter_schedule.cron, t.cron) IS DISTINCT FROM t.cron
              OR coalesce(alter_schedule.timezone, t.timezone) IS DISTINCT FROM t.timezone
              OR (alter_schedule.enabled AND NOT t.enabled)
            THEN jq.cron_next(coalesce(alter_schedule.cron, t.cron), v_now,
                              coalesce(alter_schedule.timezone, t.timezone))
            ELSE t.next_run_at END,
        next_run_from = CASE
            WHEN coalesce(alter_schedule.cron, t.cron) IS DISTINCT FROM t.cron
              OR coalesce(alter_schedule.timezone, t.timezone) IS DISTINCT FROM t.timezone
              OR (alter_schedule.enabled AND NOT t.enabled)
            THEN v_now ELSE t.next_run_from END,
        updated_at   = v_now
    WHERE t.name = alter_schedule.name
    RETURNING * INTO s;
    RETURN s;
END $$;

COMMENT ON FUNCTION jq.alter_schedule(text, text, text, jsonb, text, text, integer, integer, text, text, boolean, bigint) IS
'Changes the given options of a schedule (NULL = unchanged) and returns the new row. enabled => '
'false pauses it (no fire times are counted while disabled); enabled => true resumes it from now. '
'A new cron or timezone recomputes next_run_at from now; counters are kept. Errors: 22023 invalid '
'option, 42704 unknown schedule or queue, 54000 payload too large, 42501 unless the caller may '
'administer the schedule''s queue (and the new queue). created_by is kept, except that enabling a '
'schedule without one (its creator was dropped) makes the caller its created_by.';

CREATE FUNCTION jq.unschedule(name text, if_exists boolean DEFAULT false,
                              caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_caller oid := jq._redeem(unschedule.caller_ticket);
    v_queue  text;
BEGIN
    PERFORM jq._check_schedule_name(unschedule.name);
    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;  -- before the schedule row, as jq.drop_queue (see jq.alter_schedule)
    SELECT t.queue INTO v_queue FROM jq.schedules t WHERE t.name = unschedule.name FOR UPDATE;
    IF FOUND THEN
        PERFORM jq._check_schedule_owner(v_caller, unschedule.name, v_queue);
        DELETE FROM jq.schedules t WHERE t.name = unschedule.name;
        RETURN true;
    END IF;
    IF coalesce(unschedule.if_exists, false) THEN
        RETURN false;
    END IF;
    RAISE EXCEPTION 'schedule "%" does not exist', unschedule.name USING ERRCODE = '42704';
END $$;

COMMENT ON FUNCTION jq.unschedule(text, boolean, bigint) IS
'Deletes a schedule; returns true. Jobs it already enqueued are untouched; its fire log stays '
'until jq.cron_log_retention(), so re-creating it under the same name cannot re-fire a logged '
'fire time. Unknown name: 42704, or false with if_exists => true. Errors: 22004/22023 bad name, '
'42501 unless the caller may administer the schedule''s queue.';

-- Maintenance duties, each a function of `now` so that tests pass fixed instants and the
-- background worker passes now(). The rows of a batch are picked by an uncorrelated
-- ARRAY(SELECT ... LIMIT batch FOR UPDATE SKIP LOCKED) and written by id: a join against a CTE
-- let the planner hash-join the whole backlog for every batch (pg_test/tests/plans.rs). Each locks its rows with FOR UPDATE SKIP LOCKED in bounded
-- batches and writes only rows still in the state it read, so passes from several sessions at
-- once partition the work instead of repeating it, and a late pass changes nothing.
--
-- That recheck by id tests `j.state::text = '...'`, not `j.state = '...'`: the plain form
-- implies the predicate of the partial index the batch was picked from, and a plan the
-- background worker made while jq.jobs was small (it keeps its plans for the life of its
-- connection) found the batch's rows through that index with the ids as a filter, walking every
-- due row for every batch. The cast leaves the primary key as the only index for it, and jq's
-- planner hook keeps a plan made on a small jq.jobs an index plan (src/planner.rs,
-- sql/security.sql). Test: pg_test/tests/plans.rs,
-- maintenance_plans_made_on_a_small_table_stay_index_lookups.

CREATE FUNCTION jq._promote(now timestamptz, batch integer DEFAULT 5000, budget integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer := 0;
    v_keys  record;
    v_at    timestamptz := '-infinity';  -- the (run_at, id) key the last pass reached
    v_id    bigint := 0;
BEGIN
    -- In passes of batch, due order, until a pass moves fewer or budget went (budget NULL: one
    -- pass). Each pass starts past the key the previous one reached: the entries of the rows
    -- this transaction already moved stay in jobs_scheduled_idx until vacuum, and a pass from
    -- the head would walk them all again (see jq._prune_jobs).
    LOOP
    -- jq._wake (per row, deduplicated in memory) wakes waiting claims of these queues at commit.
    -- A job with a concurrency key that never ran has no slot of its key: it goes blocked, and
    -- jq._key_fill_many (after, in key order) makes the keys' next jobs ready; one scheduled
    -- again after a claim (retry, snooze) still holds its slot and goes ready.
    WITH moved AS (
        UPDATE jq.jobs j SET state = CASE WHEN j.concurrency_key IS NULL OR j.claims > 0 THEN 'ready'
                                          ELSE 'blocked' END::jq.job_state
        WHERE j.id = ANY (ARRAY(
            SELECT d.id FROM jq.jobs d
            WHERE d.state = 'scheduled' AND (d.run_at, d.id) > (v_at, v_id) AND d.run_at <= _promote.now
            ORDER BY d.run_at, d.id
            LIMIT _promote.batch
            FOR UPDATE SKIP LOCKED)) AND j.state::text = 'scheduled' AND j.run_at <= _promote.now
        RETURNING j.id, j.queue, j.state, j.concurrency_key, j.priority, j.run_at
    )
    SELECT count(*) AS n,
           pg_catalog.array_agg(m.queue) FILTER (WHERE m.state = 'blocked') AS queues,
           pg_catalog.array_agg(m.concurrency_key) FILTER (WHERE m.state = 'blocked') AS keys,
           (pg_catalog.array_agg(m.run_at ORDER BY m.run_at DESC, m.id DESC))[1] AS at,
           (pg_catalog.array_agg(m.id ORDER BY m.run_at DESC, m.id DESC))[1] AS id
    INTO v_keys
    FROM moved m WHERE CASE WHEN m.state = 'ready' THEN jq._wake_ready(m.queue, m.priority, m.run_at) ELSE true END;
    v_count := v_count + v_keys.n;
    IF v_keys.queues IS NOT NULL THEN
        PERFORM jq._key_fill_many(v_keys.queues, v_keys.keys,
                                  pg_catalog.array_fill(0, ARRAY[pg_catalog.cardinality(v_keys.queues)]));
    END IF;
    EXIT WHEN v_keys.n = 0 OR v_keys.n < _promote.batch OR _promote.budget IS NULL OR v_count >= _promote.budget;
    v_at := v_keys.at;
    v_id := v_keys.id;
    END LOOP;
    RETURN v_count;
END $$;

COMMENT ON FUNCTION jq._promote(timestamptz, integer, integer) IS
'Maintenance: moves scheduled jobs with run_at <= now to ready, oldest first, in passes of batch '
'until a pass moves fewer or budget went (budget NULL, the default: one pass), each pass starting '
'past the (run_at, id) key the last one reached (run_at is kept: it is '
'when the job became due) and returns how many. A job with a concurrency key that has not run '
'yet goes through its key: blocked, then ready if the key has a free slot. Safe to run concurrently.';

CREATE FUNCTION jq._reap(now timestamptz, batch integer DEFAULT 1000, budget integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer := 0;
    v_n     integer;
    v_at    timestamptz := '-infinity';  -- the latest lease_expires_at the last pass reached
BEGIN
    -- In passes of batch, oldest expiry first, until a pass ends fewer or budget went (budget
    -- NULL: one pass), each starting at the expiry the previous one reached (see jq._promote;
    -- rows of that same expiry already reaped are read again, and skipped).
    LOOP
    WITH back AS (
        UPDATE jq.jobs j SET
            state = CASE
                WHEN j.cancel_requested THEN 'cancelled'
                WHEN j.lease_expiries + 1 > coalesce(
                    (SELECT q.max_lease_expiries FROM jq.queues q WHERE q.name = j.queue), 10)
                    THEN 'dead'
                ELSE 'ready' END::jq.job_state,
            attempt = j.attempt - 1,
            lease_expiries = j.lease_expiries + 1,
            finished_at = CASE
                WHEN j.cancel_requested OR j.lease_expiries + 1 > coalesce(
                    (SELECT q.max_lease_expiries FROM jq.queues q WHERE q.name = j.queue), 10)
                    THEN _reap.now END,
            last_error = CASE
                WHEN NOT j.cancel_requested AND j.lease_expiries + 1 > coalesce(
                    (SELECT q.max_lease_expiries FROM jq.queues q WHERE q.name = j.queue), 10)
                    THEN pg_catalog.format('lease expired %s times (max_lease_expiries); the job '
                         'may be killing its worker', j.lease_expiries + 1)
                ELSE j.last_error END
        WHERE j.id = ANY (ARRAY(
            SELECT x.id FROM jq.jobs x
            WHERE x.state = 'running' AND x.lease_expires_at >= v_at AND x.lease_expires_at < _reap.now
            ORDER BY x.lease_expires_at
            LIMIT _reap.batch
            FOR UPDATE SKIP LOCKED)) AND j.state::text = 'running' AND j.lease_expires_at < _reap.now
        RETURNING j.id, j.claims, j.attempt, j.state, j.started_at, j.lease_expires_at, j.queue,
                  j.worker, j.concurrency_key, j.priority, j.run_at
    ), keyed AS (
        -- A reaped job that ended (dead, cancelled) frees its key's slot; one back in ready
        -- keeps it. All keys at once, in key order (jq._key_fill_many); one row.
        SELECT CASE WHEN count(*) > 0 THEN
                   jq._key_fill_many(pg_catalog.array_agg(b.queue), pg_catalog.array_agg(b.concurrency_key),
                                     pg_catalog.array_agg(1)) END AS moved
        FROM back b WHERE b.concurrency_key IS NOT NULL AND b.state <> 'ready'
    ), logged AS (
    INSERT INTO jq.execution_log (job_id, seq, attempt, outcome, started_at, lease_expires_at,
                               finished_at, queue, worker, error)
    SELECT b.id, b.claims, b.attempt + 1, 'lease_expired', b.started_at, b.lease_expires_at,
           _reap.now, b.queue, b.worker,
           CASE WHEN b.state = 'dead' THEN 'lease expired; max_lease_expiries reached'
                WHEN b.state = 'cancelled' THEN 'lease expired after a cancellation request'
                ELSE 'lease expired' END
    FROM back b, keyed k
    -- At commit, wake waiting claims: the job is claimable again, or its slot of a capped queue
    -- is free.
    WHERE CASE WHEN b.state = 'ready' THEN jq._wake_ready(b.queue, b.priority, b.run_at) ELSE jq._wake_slot(b.queue) END
    RETURNING lease_expires_at
    )
    SELECT count(*), max(l.lease_expires_at) INTO v_n, v_at FROM logged l;
    v_count := v_count + v_n;
    EXIT WHEN v_n = 0 OR v_n < _reap.batch OR _reap.budget IS NULL OR v_count >= _reap.budget;
    END LOOP;
    RETURN v_count;
END $$;

COMMENT ON FUNCTION jq._reap(timestamptz, integer, integer) IS
'Maintenance: ends the running jobs whose lease expired before now and returns how many: oldest '
'expiry first, in passes of batch until a pass ends fewer or budget went (budget NULL, the '
'default: one pass), each pass starting at the lease_expires_at the last one reached. '
'A worker that vanished never gave a verdict, so the attempt is refunded and lease_expiries + 1: '
'the job is ready again at its old place; cancelled if a cancellation was requested; dead once '
'lease_expiries exceeds the queue''s max_lease_expiries (a job that kills its worker must not loop '
'forever). Recovery depends only on the job row, never on worker names. Each gets an execution '
'row with outcome lease_expired. Safe to run concurrently; a job completed meanwhile is skipped.';

CREATE FUNCTION jq._prune(now timestamptz, batch integer DEFAULT 5000, budget integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    q       record;
    v_total integer := 0;
    v_count integer;
    v_hist  integer := 0;
    v_more  text[] := '{}';  -- queues whose first pass was full
BEGIN
    -- Jobs, in two rounds. First one pass (of each kind) per queue, so a backlog in one queue
    -- never holds up the others; then what is left of the budget, shared among the queues whose
    -- pass was full: each in turn gets the rest divided by the queues still to come (at least
    -- one more pass), so one busy queue among idle ones gets nearly all of it and the duty stays
    -- near budget however many queues have a backlog. The second round of a queue starts from
    -- the head again and reads its first pass's entries once more (see jq._prune_jobs).
    -- A completed job is the record of its execution (sql/schema.sql), so finished jobs stay at
    -- least min(history_retention, 5 minutes): jq.queue_stats counts the last 5 minutes of
    -- completions from them, as it counts the other outcomes from the history.
    FOR q IN SELECT t.name,
                    pg_catalog.interval_larger(t.retention,
                        pg_catalog.interval_smaller(t.history_retention, interval '5 minutes')) AS retention,
                    t.dead_retention
             FROM jq.queues t
    LOOP
        v_count := jq._prune_jobs(q.name, _prune.now - q.retention, _prune.now - q.dead_retention,
                                  _prune.batch, NULL);
        v_total := v_total + v_count;
        IF v_count >= _prune.batch AND _prune.budget IS NOT NULL THEN
            v_more := v_more || q.name;
        END IF;
    END LOOP;
    FOR q IN SELECT t.name,
                    pg_catalog.interval_larger(t.retention,
                        pg_catalog.interval_smaller(t.history_retention, interval '5 minutes')) AS retention,
                    t.dead_retention,
                    pg_catalog.count(*) OVER () - pg_catalog.row_number() OVER (ORDER BY t.name) + 1 AS still
             FROM jq.queues t WHERE t.name = ANY (v_more) ORDER BY t.name
    LOOP
        v_total := v_total + jq._prune_jobs(q.name, _prune.now - q.retention, _prune.now - q.dead_retention,
                                            _prune.batch,
                                            pg_catalog.int4larger(_prune.batch,
                                                (_prune.budget - v_total) / q.still::integer));
    END LOOP;
    -- History in one pass over all queues: the BRIN index narrows the scan to rows older than
    -- the shortest history_retention, each row is then held to its own queue's retention, and
    -- rows of queues that no longer exist (written by a late worker after jq.drop_queue) go.
    -- SKIP LOCKED: a pass left open in another session must not block this one. In passes of
    -- batch until one deletes fewer or budget went (budget NULL: one pass). Unlike the jobs
    -- above, a pass here re-reads the rows earlier passes deleted (a BRIN range has no order to
    -- start past them): history holds failures and lease expiries only, far fewer rows.
    LOOP
        DELETE FROM jq.execution_log e WHERE e.ctid = ANY (ARRAY(
            SELECT h.ctid FROM jq.execution_log h LEFT JOIN jq.queues o ON o.name = h.queue
            WHERE h.finished_at < _prune.now - coalesce(
                      (SELECT min(t.history_retention) FROM jq.queues t), interval '0')
              AND (o.name IS NULL OR h.finished_at < _prune.now - o.history_retention)
            LIMIT _prune.batch
            FOR UPDATE OF h SKIP LOCKED));
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_hist := v_hist + v_count;
        EXIT WHEN v_count = 0 OR v_count < _prune.batch OR _prune.budget IS NULL OR v_hist >= _prune.budget;
    END LOOP;
    v_total := v_total + v_hist;
    -- Grants to roles that were dropped (a later role could get the same OID).
    DELETE FROM jq.queue_grants g
    WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = g.grantee);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_total := v_total + v_count;
    -- Schedules whose creator was dropped: disabled and unbound, so that neither a later role with
    -- the same OID nor a restore into another cluster inherits them; enabling one binds it to the
    -- role that does (jq.alter_schedule).
    UPDATE jq.schedules s SET enabled = false, created_by = NULL,
           last_error = pg_catalog.format('disabled: the role that defined it (OID %s) was dropped', s.created_by::oid),
           last_error_at = _prune.now
    WHERE s.created_by IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = s.created_by);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_total + v_count;
END $$;

COMMENT ON FUNCTION jq._prune(timestamptz, integer, integer) IS
'Maintenance: per queue, deletes the completed and cancelled jobs finished more than the '
'queue''s retention before now (but at least min(history_retention, 5 minutes): a completed job '
'is the record of its execution, which jq.queue_stats counts over 5 minutes) and the dead jobs '
'past dead_retention, oldest first, in passes of batch rows (jq._prune_jobs): one pass of each '
'kind per queue, then, with a budget, the rest of budget shared among the queues whose pass was '
'full, each in turn getting the rest divided by the queues still to come (at least one more '
'pass); then jq.execution_log rows past their queue''s history_retention, or of queues that no '
'longer exist (history outlives its jobs), in passes of batch until a pass deletes fewer or '
'budget went. budget NULL (the default): one pass each. Then jq.queue_grants rows of dropped roles; and disables (created_by NULL, '
'last_error set) schedules whose creator was dropped. Returns how many rows it deleted or disabled. Safe to run concurrently: it '
'skips rows another session has locked.';

-- Changed bodies.
-- One schedule's pass: the body of jq.cron_tick's subtransaction. Raises on any problem (the
-- caller records it); writes nothing that outlives a raise.
CREATE OR REPLACE FUNCTION jq._cron_fire(s jq.schedules, at timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_fires    timestamptz[];
    v_total    bigint;
    v_skipped  bigint := 0;
    v_enqueued integer := 0;
    v_next     timestamptz;
    v_job      bigint;
    v_last_job bigint := s.last_job_id;
    v_last     timestamptz := s.last_fired_at;
    f          timestamptz;
BEGIN
    -- Fires with the rights of the role that defined the schedule (NULL: made before jq 0.2.0).
    IF s.created_by IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = s.created_by) THEN
            RAISE EXCEPTION 'the role that defined schedule "%" (OID %) no longer exists',
                s.name, s.created_by::oid
                USING ERRCODE = '42704',
                      HINT = 'Define it again with jq.schedule as a role that may enqueue to its queue.';
        END IF;
        IF NOT jq._may(s.created_by, s.queue, 'enqueue') THEN
            RAISE EXCEPTION 'role "%", which defined schedule "%", may no longer enqueue to queue "%": grant it again with jq.grant, or define the schedule again as a role that may',
                s.created_by, s.name, s.queue
                USING ERRCODE = '42501',
                      HINT = 'Grant it again with jq.grant, or define the schedule again as a role that may.';
        END IF;
    END IF;
    -- The next fire time is computed from the pass instant, never by stepping from the stored
    -- next_run_at, so a long outage costs one computation, not one per missed time.
    v_next := jq.cron_next(s.cron, _cron_fire.at, s.timezone);
    -- Every fire time in [next_run_at, at] is due; at most one of them under normal ticking,
    -- none when the row is here only because the clock went back (next_run_at > at).
    v_total := jq._cron_count(s.cron, s.timezone, s.next_run_at, _cron_fire.at, 1000000);
    v_fires := ARRAY(SELECT jq._cron_latest(s.cron, s.timezone, s.next_run_at, _cron_fire.at,
                         CASE WHEN s.misfire = 'fire_all' THEN jq.cron_max_catchup() ELSE 1 END));
    IF s.misfire = 'skip' AND pg_catalog.cardinality(v_fires) = 1
       AND v_fires[1] < _cron_fire.at - jq.cron_misfire_grace() THEN
        INSERT INTO jq.cron_runs (schedule, fire_time, outcome, fired_at)
        VALUES (s.name, v_fires[1], 'skipped_misfire', _cron_fire.at)
        ON CONFLICT DO NOTHING;
        v_fires := '{}';
    END IF;
    v_skipped := GREATEST(v_total - pg_catalog.cardinality(v_fires), 0);
    FOREACH f IN ARRAY v_fires LOOP
        IF s.overlap = 'skip_if_running' AND v_last_job IS NOT NULL AND EXISTS (
               SELECT 1 FROM jq.jobs j
               WHERE j.id = v_last_job AND j.state IN ('scheduled', 'blocked', 'ready', 'running')) THEN
            INSERT INTO jq.cron_runs (schedule, fire_time, outcome, fired_at)
            VALUES (s.name, f, 'skipped_overlap', _cron_fire.at)
            ON CONFLICT DO NOTHING;
            IF FOUND THEN
                v_skipped := v_skipped + 1;
            END IF;
            CONTINUE;
        END IF;
        -- The fire log first: a fire time some pass already handled (committed, or in flight:
        -- the insert waits for it) conflicts here and enqueues nothing.
        INSERT INTO jq.cron_runs (schedule, fire_time, outcome, fired_at)
        VALUES (s.name, f, 'enqueued', _cron_fire.at)
        ON CONFLICT DO NOTHING;
        CONTINUE WHEN NOT FOUND;
        v_job := jq.enqueue(s.queue, s.payload, coalesce(s.kind, s.name),
                            priority => s.priority, max_attempts => s.max_attempts);
        UPDATE jq.cron_runs r SET job_id = v_job WHERE r.schedule = s.name AND r.fire_time = f;
        v_last_job := v_job;
        v_last := f;
        v_enqueued := v_enqueued + 1;
    END LOOP;
    UPDATE jq.schedules t SET
        next_run_at   = v_next,
        next_run_from = _cron_fire.at,
        last_fired_at = v_last,
        last_job_id   = v_last_job,
        fired_count   = t.fired_count + v_enqueued,
        skipped_count = t.skipped_count + v_skipped,
        last_error    = NULL
    WHERE t.name = s.name;
    RETURN v_enqueued;
END $$;

COMMENT ON FUNCTION jq._cron_fire(jq.schedules, timestamptz) IS
'Internal: one schedule''s part of jq.cron_tick at instant at (the row must be locked): '
'enqueues per its misfire and overlap policies, logs each fire time in jq.cron_runs, sets '
'next_run_at = jq.cron_next(cron, at, timezone), next_run_from = at and the counters; returns jobs '
'enqueued (0 when nothing in [next_run_at, at] is due). Raises on any problem.';

CREATE OR REPLACE FUNCTION jq.cron_tick(at timestamptz DEFAULT now()) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    s          jq.schedules;
    v_total    integer := 0;
    v_message  text;
    v_state    text;
    v_next     timestamptz;
    v_fire     timestamptz;
BEGIN
    IF cron_tick.at IS NULL OR NOT pg_catalog.isfinite(cron_tick.at) THEN
        RAISE EXCEPTION 'at must be a finite timestamp' USING ERRCODE = '22023';
    END IF;
    IF cron_tick.at < '0001-01-02 00:00:00+00'::timestamptz THEN
        RAISE EXCEPTION 'at is before 0001-01-02 00:00:00+00, the earliest instant cron fire times are computed from'
            USING ERRCODE = '22008';
    END IF;
    -- jq.jobs before any schedule row, the order jq.drop_queue takes them in (no deadlock).
    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;
    -- Due schedules in a bounded batch; SKIP LOCKED: passes from several sessions partition the
    -- rows, and a row re-checked after a concurrent pass moved its next_run_at is not due.
    -- The clock guard: a row whose next_run_at was computed from an instant after at (the clock
    -- went back: a forward step that was corrected, a VM resumed, a bad RTC before NTP) is taken
    -- too, also in a bounded batch (by schedules_clock_idx; normally no row), and _cron_fire
    -- recomputes its next_run_at from at. Without it, a pass at at + 1 year would leave the
    -- schedule silent for a year once the clock is back. Fire times the later pass already
    -- handled stay fenced by the fire log.
    FOR s IN SELECT * FROM jq.schedules t WHERE t.name = ANY (ARRAY(
                 SELECT g.name FROM jq.schedules g
                 WHERE g.enabled AND g.next_run_from > cron_tick.at
                 LIMIT 1000
                 FOR UPDATE SKIP LOCKED) || ARRAY(
                 SELECT d.name FROM jq.schedules d
                 WHERE d.enabled AND d.next_run_at <= cron_tick.at
                 ORDER BY d.next_run_at
                 LIMIT 1000
                 FOR UPDATE SKIP LOCKED))
             ORDER BY t.next_run_at, t.name
    LOOP
        BEGIN
            v_total := v_total + jq._cron_fire(s, cron_tick.at);
        EXCEPTION WHEN OTHERS THEN
            -- A broken row (expression or zone made invalid by a direct UPDATE, queue dropped, a
            -- job check failing) is flagged and moved on; the others keep firing.
            GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
            BEGIN
                BEGIN
                    v_next := jq.cron_next(s.cron, cron_tick.at, s.timezone);
                    v_fire := (SELECT max(x) FROM jq._cron_latest(s.cron, s.timezone,
                                   s.next_run_at, cron_tick.at, 1) x);
                EXCEPTION WHEN OTHERS THEN
                    -- The expression or zone itself is broken: retry in an hour, not every pass.
                    v_next := cron_tick.at + interval '1 hour';
                    v_fire := NULL;
                END;
                -- A row taken only by the clock guard has no due fire time: none is logged (a
                -- failed row for a future fire time would keep it from ever firing).
                v_fire := coalesce(v_fire, s.next_run_at);
                IF v_fire > cron_tick.at THEN
                    v_fire := NULL;
                END IF;
                IF v_fire IS NOT NULL THEN
                    INSERT INTO jq.cron_runs (schedule, fire_time, outcome, fired_at, error)
                    VALUES (s.name, v_fire, 'failed', cron_tick.at,
                            pg_catalog.left(v_state || ': ' || v_message, 2000))
                    ON CONFLICT DO NOTHING;
                END IF;
                UPDATE jq.schedules t SET
                    next_run_at   = v_next,
                    next_run_from = cron_tick.at,
                    skipped_count = t.skipped_count + (v_fire IS NOT NULL)::integer,
                    last_error    = pg_catalog.left(v_state || ': ' || v_message, 2000),
                    last_error_at = cron_tick.at
                WHERE t.name = s.name;
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT;
                RAISE WARNING 'jq.cron_tick: cannot record the failure of schedule "%": %',
                    s.name, v_message;
            END;
        END;
    END LOOP;
    -- At least twice what this tick logged (a row per enqueued fire, at most one failure row
    -- per schedule) plus 1000: however long the tick interval and however many fire times a
    -- tick catches up, the fire log cannot outgrow its pruning.
    PERFORM jq._cron_prune(cron_tick.at, 1000 + 2 * v_total);
    RETURN v_total;
END $$;

COMMENT ON FUNCTION jq.cron_tick(timestamptz) IS
'The cron duty at instant at (default now()): for up to 1000 due schedules (enabled, next_run_at '
'<= at; rows locked FOR UPDATE SKIP LOCKED), enqueues their due fire times under their misfire and '
'overlap policies, logs them in jq.cron_runs (one row per schedule and fire time, ever) and '
'moves next_run_at to jq.cron_next(cron, at, timezone); then prunes up to 1000 + 2 x (jobs '
'enqueued) fire-log rows past jq.cron_log_retention(). Clock guard: up to 1000 enabled schedules whose next_run_at was computed '
'from an instant after at (next_run_from > at: the clock went back) get next_run_at recomputed '
'from at. Returns the number of jobs enqueued. Each schedule runs in its own '
'subtransaction: a failing one is recorded (last_error, a failed fire-log row for its due fire time, '
'next_run_at moved on: to its next fire time, or at + 1 hour when its expression or zone is invalid) '
'and never stops the others or raises. Safe to run from several sessions at once. Errors: 22023 '
'infinite at; 22008 at before 0001-01-02 00:00:00+00.';

-- The target queue must exist; FOR KEY SHARE holds off a concurrent jq.drop_queue until this
-- transaction ends (drop_queue then sees the schedule and refuses, or deletes it with force).
-- jq.jobs is locked first, the order of jq.drop_queue: with the queue row alone, a transaction
-- that scheduled and then wrote jobs deadlocked with a drop (pg_test/tests/robustness.rs).
CREATE OR REPLACE FUNCTION jq._lock_schedule_queue(queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;  -- before the queue row, as jq.drop_queue
    PERFORM 1 FROM jq.queues t WHERE t.name = _lock_schedule_queue.queue FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(_lock_schedule_queue.queue);
    END IF;
END $$;

COMMENT ON FUNCTION jq._lock_schedule_queue(text) IS
'Internal: locks jq.jobs ROW EXCLUSIVE, then the queue row FOR KEY SHARE (the order of jq.drop_queue); 22004/22023 bad name, 42704 unknown queue.';

CREATE OR REPLACE FUNCTION jq._claimable(queues text[]) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT FROM jq.queues t
        WHERE t.name = ANY (_claimable.queues) AND NOT t.paused
          AND EXISTS (SELECT FROM jq.jobs j  -- jobs_claim_idx's key (sql/schema.sql)
                      WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(t.name, 0)
                        AND j.state = 'ready')
          AND (t.max_concurrency IS NULL
               OR (SELECT count(*) FROM jq.jobs r WHERE r.queue = t.name AND r.state = 'running')
                  < t.max_concurrency)
          AND (t.rate_limit IS NULL OR jq._rate_next_token(t.name) <= pg_catalog.clock_timestamp()))
$$;

COMMENT ON FUNCTION jq._claimable(text[]) IS
'Internal: whether any of queues (unpaused, under its cap, with a rate token) has a ready job, by a lock-free '
'look; the long-poll of jq.claim(text[], ...) takes locks only when this says yes.';

CREATE OR REPLACE FUNCTION jq.create_queue(
    name               text,
    max_attempts       integer DEFAULT 25,
    lease              interval DEFAULT '5 minutes',
    backoff            jq.backoff_policy DEFAULT 'exponential',
    backoff_base       interval DEFAULT '1 second',
    backoff_max        interval DEFAULT '1 hour',
    jitter             jq.jitter_mode DEFAULT 'full',
    retention          interval DEFAULT '1 day',
    dead_retention     interval DEFAULT '7 days',
    history_retention  interval DEFAULT '7 days',
    max_concurrency    integer DEFAULT NULL,
    max_lease_expiries integer DEFAULT 10,
    paused             boolean DEFAULT false,
    if_not_exists      boolean DEFAULT false,
    key_concurrency    integer DEFAULT 1
) RETURNS jq.queues
LANGUAGE plpgsql AS $$
DECLARE
    q     jq.queues;
    v_try integer;
BEGIN
    PERFORM jq._check_queue_name(create_queue.name);
    IF create_queue.max_attempts IS NULL OR create_queue.lease IS NULL OR create_queue.backoff IS NULL
       OR create_queue.backoff_base IS NULL OR create_queue.backoff_max IS NULL
       OR create_queue.jitter IS NULL OR create_queue.retention IS NULL
       OR create_queue.dead_retention IS NULL OR create_queue.history_retention IS NULL
       OR create_queue.max_lease_expiries IS NULL OR create_queue.paused IS NULL
       OR create_queue.if_not_exists IS NULL OR create_queue.key_concurrency IS NULL THEN
        RAISE EXCEPTION 'only max_concurrency may be NULL (unlimited); omit an option to take its default'
            USING ERRCODE = '22004';
    END IF;
    PERFORM jq._check_queue_options(create_queue.max_attempts, create_queue.lease,
        create_queue.backoff_base, create_queue.backoff_max, create_queue.retention,
        create_queue.dead_retention, create_queue.history_retention, create_queue.max_lease_expiries);
    IF create_queue.max_concurrency IS NOT NULL AND create_queue.max_concurrency < 1 THEN
        RAISE EXCEPTION 'max_concurrency must be at least 1 or NULL (unlimited), got %',
            create_queue.max_concurrency USING ERRCODE = '22023';
    END IF;
    PERFORM jq._check_flow_options(create_queue.key_concurrency, NULL, NULL, NULL);

    -- A conflict with a queue that a concurrent jq.drop_queue deletes before the re-read below
    -- sees neither that name nor a same-hash one: try again (bounded; 40001 if it never settles).
    FOR v_try IN 1..10 LOOP
        INSERT INTO jq.queues AS t (name, paused, max_concurrency, max_attempts, lease, backoff,
            backoff_base, backoff_max, jitter, retention, dead_retention, history_retention,
            max_lease_expiries, key_concurrency)
        VALUES (create_queue.name, create_queue.paused, create_queue.max_concurrency,
            create_queue.max_attempts, create_queue.lease, create_queue.backoff,
            create_queue.backoff_base, create_queue.backoff_max, create_queue.jitter,
            create_queue.retention, create_queue.dead_retention, create_queue.history_retention,
            create_queue.max_lease_expiries, create_queue.key_concurrency)
        -- No conflict target: a concurrent create of the same name must wait and return here,
        -- not fail on queues_name_hash_idx (which a target of queues_pkey alone would check
        -- strictly).
        ON CONFLICT DO NOTHING
        RETURNING * INTO q;
        IF q.name IS NOT NULL THEN
            RETURN q;
        END IF;
        SELECT * INTO q FROM jq.queues t WHERE t.name = create_queue.name;
        IF q.name IS NOT NULL THEN
            IF create_queue.if_not_exists THEN
                RETURN q;
            END IF;
            RAISE EXCEPTION 'queue "%" already exists', create_queue.name
                USING ERRCODE = '42710', HINT = 'Pass if_not_exists => true to accept an existing queue.';
        END IF;
        IF EXISTS (SELECT 1 FROM jq.queues t
                   WHERE pg_catalog.hashtextextended(t.name, 0) = pg_catalog.hashtextextended(create_queue.name, 0)) THEN
            -- Another queue's name has the same 64-bit hash (jobs_claim_idx's key).
            RAISE EXCEPTION 'queue name "%" has the same hash as an existing queue''s; choose another name',
                create_queue.name USING ERRCODE = '23505';
        END IF;
    END LOOP;
    RAISE EXCEPTION 'queue "%" was created and dropped concurrently too often; retry', create_queue.name
        USING ERRCODE = '40001';
END $$;

COMMENT ON FUNCTION jq.create_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, boolean, integer) IS
'Creates a queue and returns its row. name: 1-128 characters of [A-Za-z0-9_.:-]. Defaults of its '
'jobs: max_attempts 25; lease 5 minutes; retry backoff exponential from backoff_base 1 second, '
'capped at backoff_max 1 hour, with full jitter; finished jobs kept for retention 1 day '
'(completed, cancelled; at least min(history_retention, 5 minutes)) or dead_retention 7 days '
'(dead); the history of executions that did not complete their job (failed, lease_expired, '
'released, snoozed, cancelled) kept for history_retention 7 days (a completed execution is kept '
'with its job); max_concurrency NULL = unlimited running jobs; a job whose lease '
'expires more than max_lease_expiries (10) times goes dead; key_concurrency (1): jobs per '
'concurrency_key holding a slot at once (docs/flow-control.md). Errors: 22004 NULL option, 22023 '
'invalid name or value (intervals are at most 100 years), 42710 queue exists (unless '
'if_not_exists, which returns the existing row; its options are not compared), 23505 another '
'queue''s name has the same hash (pg_catalog.hashtextextended(name, 0), the claim index''s key), '
'40001 the name kept being created and dropped concurrently (retry).';

-- True when no field of the interval (months, days, time) is negative. Postgres compares
-- intervals with 30-day months, so '1 mon -30 days 1 second' is "positive" although it ends
-- before it starts in a 31-day month.
CREATE OR REPLACE FUNCTION jq._interval_fields_nonnegative(value interval) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- Qualified to the operators: jq.claim, which has no SET search_path, inlines it with the
    -- caller's search_path (see jq.claim).
    SELECT extract(year FROM value) OPERATOR(pg_catalog.>=) 0
       AND extract(month FROM value) OPERATOR(pg_catalog.>=) 0
       AND extract(day FROM value) OPERATOR(pg_catalog.>=) 0
       AND value OPERATOR(pg_catalog.-) pg_catalog.date_trunc('day', value) OPERATOR(pg_catalog.>=) interval '0'
$$;

COMMENT ON FUNCTION jq._interval_fields_nonnegative(interval) IS
'Internal: true when the interval''s months, days and time fields are all >= 0.';

-- The batch copies of jq.claim's two claim statements (n > 1), called by jq.claim only. Their
-- LIMIT is a parameter, which a generic plan costs at 10% of the queue while a custom plan sees
-- n, so under plan_cache_mode = auto plpgsql found every custom plan cheaper and planned them
-- again on every call (pg_stat_statements with track_planning: as many plans as calls). They
-- live here, pinned to force_generic_plan (sql/security.sql), because jq.claim has no SET
-- clause (see there): with the LIMIT written as a sub-select in jq.claim, which both plan modes
-- cost alike, the drain of bench/run's held-snapshot cell fell from ~32,000 to ~23,500 jobs/s
-- when an autovacuum finished mid-drain and stayed there (0.70x, twice), and gave 0.93x with
-- plan_cache_mode pinned on jq.claim again (docs/BENCHMARKS.md). One call per batch (two when a
-- hinted batch takes the rest from a full claim) pays the settings' save and restore here, not
-- every one-job claim: those stay in jq.claim, whose constant LIMIT 1 makes both plans cost the
-- same few units whatever the table's size. pg_test/tests/plans.rs checks
-- the full claim's selection in both plan modes and the batch claims' cached generic plan.
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
                  WHERE pg_catalog.hashtextextended(p.queue, 0) OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(_claim_batch.queue, 0)
                    AND p.state OPERATOR(pg_catalog.=) 'ready'
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
        WHERE jq._wake_on_abort(c.queue) AND jq._hint_advance(c.queue, c.priority, c.run_at, c.id)
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
                  WHERE pg_catalog.hashtextextended(p.queue, 0) OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(_claim_batch.queue, 0)
                    AND p.state OPERATOR(pg_catalog.=) 'ready'
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
        WHERE jq._wake_on_abort(c.queue) AND jq._hint_advance(c.queue, c.priority, c.run_at, c.id)
        ORDER BY c.priority DESC, c.run_at, c.id;
    END IF;
END $$;

COMMENT ON FUNCTION jq._claim_batch(text, text, integer, interval, boolean, bigint, boolean) IS
'Internal: the batch claim statements of jq.claim (n jobs of queue for worker with lease, NULL = '
'the queue''s): from the claim-start hint when hinted, else at priorities below below (NULL: all), '
'gated on the queue being uncapped and unlimited unless locked. Runs as jq.claim''s caller, i.e. '
'the owner; executable by nobody else.';

CREATE OR REPLACE FUNCTION jq._prune_jobs(queue text, finished_before timestamptz, dead_before timestamptz,
                               batch integer, budget integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_total integer := 0;
    v_count integer;
    v_at    timestamptz;  -- the (finished_at, id) key the last pass reached
    v_id    bigint;
BEGIN
    -- Its own function (it kept sequential scans off while the rest of jq._prune could not;
    -- jq's planner hook now keeps its plans index plans, sql/security.sql).
    -- Oldest first, in passes of batch: completed and cancelled jobs until a pass deletes fewer
    -- than batch or budget went (budget NULL: one pass), then dead jobs alike. Each pass starts
    -- past the (finished_at, id) key the previous one reached: the index entries of the rows
    -- this transaction already deleted stay in jobs_finished_idx until vacuum, and this
    -- transaction cannot mark them dead, so a pass from the start of the range walked them
    -- all again, a heap visit each: 20 passes cost 190 batches of visits, and at 7,200 jobs/s
    -- a prune duty took 9-18 s and fell behind (jq.jobs grew without bound; docs/BENCHMARKS.md).
    v_at := '-infinity';
    v_id := 0;
    LOOP
        WITH gone AS (
            DELETE FROM jq.jobs j WHERE j.id = ANY (ARRAY(
                SELECT f.id FROM jq.jobs f
                WHERE f.queue = _prune_jobs.queue AND f.state IN ('completed', 'cancelled')
                  AND (f.finished_at, f.id) > (v_at, v_id) AND f.finished_at < _prune_jobs.finished_before
                ORDER BY f.finished_at, f.id
                LIMIT _prune_jobs.batch FOR UPDATE SKIP LOCKED))
            RETURNING j.finished_at, j.id)
        SELECT count(*), (pg_catalog.array_agg(g.finished_at ORDER BY g.finished_at DESC, g.id DESC))[1],
               (pg_catalog.array_agg(g.id ORDER BY g.finished_at DESC, g.id DESC))[1]
        INTO v_count, v_at, v_id FROM gone g;
        v_total := v_total + v_count;
        EXIT WHEN v_count = 0 OR v_count < _prune_jobs.batch OR _prune_jobs.budget IS NULL
                  OR v_total >= _prune_jobs.budget;
    END LOOP;
    -- The same loop for dead jobs: a statement of its own, whose constant state predicate
    -- matches jobs_dead_idx (one statement with the state as a parameter would match neither).
    v_at := '-infinity';
    v_id := 0;
    LOOP
        WITH gone AS (
            DELETE FROM jq.jobs j WHERE j.id = ANY (ARRAY(
                SELECT f.id FROM jq.jobs f
                WHERE f.queue = _prune_jobs.queue AND f.state = 'dead'
                  AND (f.finished_at, f.id) > (v_at, v_id) AND f.finished_at < _prune_jobs.dead_before
                ORDER BY f.finished_at, f.id
                LIMIT _prune_jobs.batch FOR UPDATE SKIP LOCKED))
            RETURNING j.finished_at, j.id)
        SELECT count(*), (pg_catalog.array_agg(g.finished_at ORDER BY g.finished_at DESC, g.id DESC))[1],
               (pg_catalog.array_agg(g.id ORDER BY g.finished_at DESC, g.id DESC))[1]
        INTO v_count, v_at, v_id FROM gone g;
        v_total := v_total + v_count;
        EXIT WHEN v_count = 0 OR v_count < _prune_jobs.batch OR _prune_jobs.budget IS NULL
                  OR v_total >= _prune_jobs.budget;
    END LOOP;
    RETURN v_total;
END $$;

COMMENT ON FUNCTION jq._prune_jobs(text, timestamptz, timestamptz, integer, integer) IS
'Internal (jq._prune): deletes the completed and cancelled jobs of queue finished before '
'finished_before, oldest first, in passes of batch until a pass deletes fewer than batch or budget '
'rows went (budget NULL: one pass), then the dead jobs finished before dead_before alike (budget '
'counts both; dead jobs always get at least one pass); returns how many. Each pass starts past '
'the last one''s (finished_at, id) key. Skips rows another session has locked.';

CREATE OR REPLACE FUNCTION jq._age(now timestamptz, batch integer DEFAULT 5000) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer;
BEGIN
    -- Effective priority = base_priority + whole priority_aging intervals waited since run_at
    -- (capped at the integer range); next_age_at = when it next rises. Stored in priority, so
    -- the claim and its index are the same for every queue. A queue whose aging was turned off
    -- gets its jobs' base priority back. Bounded batch, picked like promotion.
    UPDATE jq.jobs j SET
        priority = CASE WHEN q.priority_aging IS NULL THEN j.base_priority
                        ELSE LEAST(j.base_priority::bigint
                                   + jq._age_steps(_age.now, j.run_at, q.priority_aging),
                                   2147483647)::integer END,
        -- Aging stops (next_age_at NULL: out of jobs_aging_idx) once the priority or the step
        -- count reached its cap: such a job's next_age_at would stay in the past, and every
        -- tick would pick it again first (oldest next_age_at) and starve other queues' aging.
        next_age_at = CASE WHEN q.priority_aging IS NULL THEN NULL
                           WHEN j.base_priority::bigint + jq._age_steps(_age.now, j.run_at, q.priority_aging)
                                >= 2147483647
                             OR jq._age_steps(_age.now, j.run_at, q.priority_aging) >= 2147483647 THEN NULL
                           ELSE j.run_at + (jq._age_steps(_age.now, j.run_at, q.priority_aging) + 1)
                                           * q.priority_aging END
    FROM jq.queues q
    WHERE q.name = j.queue
      AND j.id = ANY (ARRAY(
          SELECT x.id FROM jq.jobs x
          WHERE x.state = 'ready' AND x.next_age_at <= _age.now
          ORDER BY x.next_age_at
          LIMIT _age.batch
          FOR UPDATE SKIP LOCKED)) AND j.state::text = 'ready' AND j.next_age_at <= _age.now
      AND jq._hint_clear(j.queue);  -- a raised priority sorts before the claim-start hint
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END $$;

COMMENT ON FUNCTION jq._age(timestamptz, integer) IS
'Maintenance (priority aging, docs/flow-control.md): for up to batch ready jobs whose next_age_at '
'<= now (jobs_aging_idx), sets priority = base_priority + floor((now - run_at) / the queue''s '
'priority_aging) and next_age_at to the next step, or NULL once the priority (2^31-1) or the step '
'count (2^31-1) reached its cap; returns how many. Run by the promote duty. '
'Safe to run concurrently (FOR UPDATE SKIP LOCKED).';

CREATE OR REPLACE FUNCTION jq._maintain(duty text, now timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_total integer := 0;
BEGIN
    CASE _maintain.duty
    WHEN 'promote' THEN
        -- In passes of 5,000, each from where the last one ended, until the due backlog is
        -- gone or 50,000 rows were moved (jq._promote).
        v_total := jq._promote(_maintain.now, 5000, 50000);
        -- Priority aging rides on the promote duty (not counted in its result): one bounded
        -- batch per pass; queues without priority_aging have nothing in jobs_aging_idx.
        PERFORM jq._age(_maintain.now, 5000);
    WHEN 'reap' THEN
        v_total := jq._reap(_maintain.now, 1000, 10000);
    WHEN 'cron' THEN
        v_total := jq.cron_tick(_maintain.now);
    WHEN 'prune' THEN
        -- In passes of 5,000, each from where the last one ended: one per queue, then the rest of
        -- 100,000 shared among the queues with more (jq._prune). One pass per tick (until
        -- 2026-12-04) capped what a queue could finish per second, with a finite retention, at
        -- 5,000 jobs per tick: above that its finished jobs piled up without bound (bench/run's
        -- steady load at 7,158 jobs/s grew jq.jobs from 128 MB to 739 MB in 7 minutes with a
        -- 1-minute retention).
        v_total := jq._prune(_maintain.now, 5000, 100000);
    ELSE
        RAISE EXCEPTION 'unknown maintenance duty %', _maintain.duty USING ERRCODE = '22023';
    END CASE;
    RETURN coalesce(v_total, 0);
END $$;

COMMENT ON FUNCTION jq._maintain(text, timestamptz) IS
'Maintenance: runs one duty at now and returns its count: promote (due scheduled jobs to ready, '
'up to 50,000 in batches of 5,000; then one priority-aging batch, jq._age, not counted), reap (expired leases, up to 10,000 in batches of 1,000), '
'cron (jq.cron_tick: due cron schedules), prune (jq._prune with batch 5,000 and budget 100,000: '
'a pass per queue, then the rest of 100,000 shared among the queues with more). jq.tick() runs all '
'four; the background worker runs each in its own transaction through jq._maintain_guarded. '
'Errors: 22023 unknown duty; errors of the duty itself propagate.';

-- Flow control (docs/flow-control.md): per-key serialisation and snooze. Rate limits live in
-- jq.claim itself (sql/work.sql), which already reads and, for capped queues, locks the queue row.
--
-- Per-key serialisation keeps the claim untouched: a due job of a key that has no free slot is
-- not 'ready' but 'blocked', so it is in no claim index and the claim never sees it, however
-- many keys are blocked. jq._key_fill moves the next blocked jobs of one key to 'ready' when
-- the key has free slots: after an enqueue or promotion puts a job in 'blocked', and after a
-- job that held a slot ends. A job holds a slot of its key while it is ready, running, or
-- scheduled again after a claim (retry backoff, snooze): a key's head that is retrying keeps
-- the key's order; a dead, cancelled or completed head frees it (field case Q09).

CREATE OR REPLACE FUNCTION jq._key_fill(queue text, concurrency_key text, freed integer DEFAULT 0)
RETURNS integer
LANGUAGE plpgsql AS $$
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
            UPDATE jq.jobs j SET state = 'ready'
            WHERE j.id = ANY (ARRAY(
                SELECT b.id FROM jq.jobs b
                WHERE b.queue = _key_fill.queue AND b.concurrency_key = _key_fill.concurrency_key
                  AND b.state = 'blocked'
                ORDER BY b.run_at, b.id
                LIMIT v_k - v_used
                FOR UPDATE))
              -- ::text: the plain form implies jobs_blocked_idx's predicate, whose columns end
              -- in id, and a plan made while few jobs were blocked walked that whole index
              -- instead of the primary key (sql/work.sql's header; tests/plans.rs)
              AND j.state::text = 'blocked'
            RETURNING j.queue, j.priority, j.run_at
        )
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

CREATE OR REPLACE FUNCTION jq.snooze(id bigint, lease_token uuid, delay interval) RETURNS boolean
LANGUAGE plpgsql AS $$
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
        UPDATE jq.jobs j SET
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
        WHERE CASE WHEN b.state = 'ready' THEN jq._wake_ready(b.queue, b.priority, b.run_at) ELSE jq._wake_slot(b.queue) END
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

CREATE OR REPLACE FUNCTION jq.release(id bigint, lease_token uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    WITH back AS (
        UPDATE jq.jobs j SET
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
      AND CASE WHEN b.concurrency_key IS NULL OR b.state <> 'cancelled' THEN true
               ELSE jq._key_fill(b.queue, b.concurrency_key, 1) >= 0 END;
    RETURN FOUND;
END $$;

COMMENT ON FUNCTION jq.release(bigint, uuid) IS
'Hands a running job back without charging the attempt (graceful shutdown: a handler stopped by '
'shutdown has not failed). The job is ready again at its old place in the queue, or cancelled if '
'a cancellation was requested. Fenced: false and no change unless the job is running under this '
'lease_token.';

CREATE OR REPLACE FUNCTION jq.complete(id bigint, lease_token uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_done boolean;  -- the calls' result (always true); FOUND tells whether the job completed
BEGIN
    -- Every name schema-qualified, operators too: no SET search_path (see jq.claim).
    -- The job row is the record of a completed execution (sql/schema.sql, jq.executions): no
    -- history row is written here. The per-row calls sit in RETURNING, which runs once for the
    -- row updated, instead of an outer count(*) over a CTE (measured together with the same
    -- change to jq.claim's one-job copies; see there).
    UPDATE jq.jobs j SET
        state = 'completed',
        finished_at = pg_catalog.clock_timestamp(),
        result = complete.result
    WHERE j.id OPERATOR(pg_catalog.=) complete.id
      AND j.lease_token OPERATOR(pg_catalog.=) complete.lease_token
      AND j.state::pg_catalog.text OPERATOR(pg_catalog.=) 'running'
    RETURNING jq._wake_slot(j.queue)  -- a capped queue has a free slot at commit
              -- its key's slot passes to the key's next blocked job (CASE: called only with a key)
              AND CASE WHEN j.concurrency_key IS NULL THEN true
                       ELSE jq._key_fill(j.queue, j.concurrency_key, 1) OPERATOR(pg_catalog.>=) 0 END
    INTO v_done;
    RETURN FOUND;
END $$;

COMMENT ON FUNCTION jq.complete(bigint, uuid, jsonb) IS
'Marks a running job completed and stores result (any JSON, optional); the job row then records '
'the execution (jq.executions). Fenced: true only if the job is still running under this '
'lease_token; otherwise (lease expired and reaped, claimed again, cancelled, dropped, unknown id) '
'false and nothing changes.';

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
    SELECT d.id FROM done d WHERE jq._wake_slot(d.queue) AND (SELECT k.moved IS NULL OR true FROM keyed k)
    ORDER BY d.id;
END $$;

COMMENT ON FUNCTION jq.complete_many(bigint[], uuid[], jsonb[]) IS
'Batch form of jq.complete: ids[i] with lease_tokens[i] (and results[i], optional). Returns the '
'ids that were completed, ascending; the others were not running under that token and are '
'unchanged. Errors: 22023 arrays of different lengths.';

CREATE OR REPLACE FUNCTION jq.fail(id bigint, lease_token uuid, error text, retry_in interval DEFAULT NULL)
RETURNS jq.job_state
LANGUAGE plpgsql AS $$
DECLARE
    v_job   record;
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_delay interval;
    v_state jq.job_state;
    v_error text := jq._clip_error(fail.error);
BEGIN
    SELECT j.attempt, j.max_attempts, j.cancel_requested, q.backoff, q.backoff_base,
           q.backoff_max, q.jitter, j.queue, j.concurrency_key
    INTO v_job
    FROM jq.jobs j LEFT JOIN jq.queues q ON q.name = j.queue
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

    UPDATE jq.jobs j SET
        state = v_state,
        last_error = v_error,
        run_at = CASE WHEN v_state = 'scheduled' THEN v_now + v_delay
                      WHEN v_state = 'ready' THEN v_now ELSE j.run_at END,
        finished_at = CASE WHEN v_state IN ('dead', 'cancelled') THEN v_now END
    WHERE j.id = fail.id AND j.lease_token = fail.lease_token AND j.state::text = 'running';

    INSERT INTO jq.execution_log (job_id, seq, attempt, outcome, started_at, lease_expires_at,
                               finished_at, queue, worker, error)
    SELECT j.id, j.claims, j.attempt,
           CASE WHEN v_state = 'cancelled' THEN 'cancelled' ELSE 'failed' END::jq.execution_outcome,
           j.started_at, j.lease_expires_at, v_now, j.queue, j.worker, v_error
    FROM jq.jobs j WHERE j.id = fail.id
      AND CASE WHEN v_state = 'ready' THEN jq._wake(j.queue) ELSE jq._wake_slot(j.queue) END;
    -- A retrying job keeps its key's slot (it stays the key's head); a finished one frees it.
    IF v_job.concurrency_key IS NOT NULL AND v_state IN ('dead', 'cancelled') THEN
        PERFORM jq._key_fill(v_job.queue, v_job.concurrency_key, 1);
    END IF;
    RETURN v_state;
END $$;

COMMENT ON FUNCTION jq.fail(bigint, uuid, text, interval) IS
'Records a failed attempt of a running job and returns its new state: scheduled (retry at now + '
'backoff; ready when the delay is zero) while attempt < max_attempts, else dead; cancelled if a '
'cancellation was requested. The delay is retry_in (interval, overrides the policy) or the '
'queue''s policy via jq.backoff_seconds: fixed/linear/exponential from backoff_base, capped at '
'backoff_max, full jitter by default. error: any text (quotes, backslashes, "\u0000" kept '
'verbatim; longer than jq.max_error_length() is truncated with a marker). Fenced: NULL and no '
'change unless the job is running under this lease_token. Errors: 22023 retry_in over 100 years '
'or positive with a negative field (a zero or negative retry_in means now).';

-- Changed comments.
COMMENT ON FUNCTION jq.tick() IS
'One maintenance pass at now(), in the caller''s transaction: promote due scheduled jobs (up to '
'50,000), reap expired leases (up to 10,000), fire due cron schedules (jq.cron_tick), prune past '
'retention (passes of up to 5,000 jobs, oldest first: one per queue, then the rest of 100,000 '
'shared among the queues with more; execution rows until a pass prunes fewer or 100,000 went); returns the '
'counts. Safe to run from several sessions at once and beside the background worker. With jq '
'in shared_preload_libraries the background worker does this every jq.tick_interval; otherwise '
'call it about once a second, from pg_cron or any client (see README).';

COMMENT ON FUNCTION jq.status() IS
'The background workers, one row per database the launcher tracks (all databases of the '
'cluster): state (running, starting, restarting, no extension, suspended while the database '
'is dropped/renamed/copied, waiting for a worker slot), the worker''s pid, when it started, '
'the time, number and duration (pass_ms, milliseconds) of its passes with the counts of the '
'last one (promoted, reaped, fired cron jobs, pruned rows, NOTIFYs sent on channel jq_ready), '
'and its last error with its time. Without jq in shared_preload_libraries: one row saying so. '
'The calling database, if the launcher tracks no slot for it (not in jq.databases, or more than '
'64 databases), gets a row in state not served, whose last_error says why.';

-- 0.1.0 granted nothing and told DBAs to give their roles USAGE on jq and privileges on its
-- tables. In 0.2.0 the tables change only through the functions and payloads are visible only
-- per queue: take back every privilege a role other than the owner holds on jq's tables, views
-- and sequences (jq_admin's SELECT is granted again below). Give those roles queues with
-- jq.grant (docs/upgrades.md).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT c.oid::regclass AS rel, pg_catalog.format('jq.%I', c.relname) AS label,
                    c.relkind, a.grantee::regrole AS grantee
             FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
             WHERE c.relnamespace = 'jq'::regnamespace AND c.relkind IN ('r', 'S', 'v')
               AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        -- WARNING, not NOTICE: PostgreSQL raises client_min_messages to WARNING while it runs
        -- an extension script, so a NOTICE would never reach the DBA.
        RAISE WARNING 'jq 0.2.0: revoking the privileges of role % on %; give it queues with jq.grant', r.grantee, r.label;
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s',
            CASE r.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, r.rel, r.grantee);
    END LOOP;
END $$;

-- jq.jobs is rebuilt with its columns in 0.2.0's order (sql/schema.sql says why: a claim or a
-- completion logs only the columns it writes). Every row is copied with its id, state, lease
-- token and lease; the id sequence is kept. Workers and producers wait on the table's lock
-- for as long as the copy takes.
LOCK TABLE jq.jobs IN ACCESS EXCLUSIVE MODE;
DROP VIEW jq.queue_stats;
-- History: the table keeps the executions that did not complete their job; a completed one is
-- its job row (sql/schema.sql). The rows of completions whose job row is still there go (the
-- view jq.executions shows them from the job); those of pruned jobs stay, until
-- history_retention.
-- The rename needs jq.executions' ACCESS EXCLUSIVE lock while this holds jq.jobs'. A 0.1.0
-- jq.complete running a cached plan locks jq.executions first and then waits for jq.jobs,
-- behind this script: waiting for it would be a deadlock, and the deadlock check would as
-- likely abort the upgrade as the worker (seen in a test run). So the upgrade cancels the
-- statements of exactly those sessions (they hold a lock on jq.executions and wait for this
-- one; their calls fail with 57014 and their clients retry) and queues its own lock request at
-- once, before their retries, which then wait behind it. It waits 200 ms per round for the
-- sessions that were not waiting for it to finish.
DO $$
DECLARE
    v_rel     regclass := 'jq.executions'::regclass;
    v_timeout text := pg_catalog.current_setting('lock_timeout');
BEGIN
    FOR i IN 1 .. 50 LOOP
        PERFORM pg_catalog.pg_cancel_backend(l.pid)
        FROM pg_catalog.pg_locks l
        WHERE l.relation = v_rel AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
          AND pg_catalog.pg_backend_pid() = ANY (pg_catalog.pg_blocking_pids(l.pid));
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', '200ms', true);
            LOCK TABLE jq.executions IN ACCESS EXCLUSIVE MODE;
            PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- the setting is rolled back with the block
        END;
    END LOOP;
    LOCK TABLE jq.executions IN ACCESS EXCLUSIVE MODE;  -- after ~10 s: wait like any DDL
END $$;
ALTER TABLE jq.executions RENAME TO execution_log;
ALTER INDEX jq.executions_pkey RENAME TO execution_log_pkey;
ALTER INDEX jq.executions_finished_brin RENAME TO execution_log_finished_brin;
DELETE FROM jq.execution_log e USING jq.jobs j
WHERE e.outcome = 'completed' AND j.id = e.job_id AND j.claims = e.seq AND j.state = 'completed';
ALTER SEQUENCE jq.jobs_id_seq OWNED BY NONE;
ALTER TABLE jq.jobs RENAME TO jobs_0_1_0;
-- Free the names the new table's constraints take (constraint names are unique per schema).
ALTER TABLE jq.jobs_0_1_0 DROP CONSTRAINT jobs_pkey, DROP CONSTRAINT jobs_max_attempts_check;
DROP INDEX jq.jobs_claim_idx, jq.jobs_scheduled_idx, jq.jobs_running_idx, jq.jobs_idempotency_idx,
           jq.jobs_blocked_idx, jq.jobs_aging_idx, jq.jobs_finished_idx, jq.jobs_dead_idx;

-- Storage settings for a high-churn table. Every job is inserted, updated 2-3 times (claim,
-- complete or fail, maybe heartbeats) and deleted by retention, so most of the table's life is
-- dead tuples. fillfactor 70 leaves room on each page so the new version of a row usually lands
-- on the same page as the old one (state changes move rows between partial indexes, so they are
-- not HOT, but same-page updates still keep the heap compact and the visibility map useful).
-- Autovacuum is triggered by 2% dead rows (instead of 20%), so that the partial indexes the
-- claim walks do not fill with dead entries between runs: a bloated claim index is the classic
-- way a Postgres queue slows down under load. Its cost delay is PostgreSQL's default, 2 ms (0
-- until 2026-12-04): after a long-held snapshot, an unthrottled vacuum removing 15M versions took
-- one of two vCPUs from the workers; claims start past the dead head (claim hints), so a slower
-- vacuum no longer slows them (docs/BENCHMARKS.md, held snapshot with vacuum cost delay 2 ms).
--
-- Column order is chosen for the write-ahead log. When the new version of a row lands on the
-- same page, PostgreSQL logs only the bytes between the longest unchanged prefix and the longest
-- unchanged suffix of the row's data (log_heap_update in src/backend/access/heap/heapam.c). So
-- the columns no hot-path transition writes come first, then those the claim writes, then
-- state, then those only the end of an execution writes: a claim logs attempt..state and a
-- completion only state..result, not the whole row (about 110 bytes less WAL per job than the
-- 0.1.0 order; docs/BENCHMARKS.md, "WAL per job"). Keep new columns out of the middle.
CREATE TABLE jq.jobs (
    -- Written at enqueue only (or by rare paths: aging, cancel requests, lease expiries).
    id               bigint PRIMARY KEY DEFAULT nextval('jq.jobs_id_seq'),
    priority         integer NOT NULL DEFAULT 0,
    -- 1..1000000, enforced where jobs are made (jq._job_problem raises 22023; the queue and
    -- schedule defaults have CHECKs of their own). Not a CHECK here: PostgreSQL parses a
    -- table's CHECK constraints from their stored text and compiles them again in every INSERT
    -- and UPDATE statement, and every claim and completion updates this table. That was about
    -- 4% of a backend's CPU per claimed and completed job (perf; docs/BENCHMARKS.md). jq.jobs
    -- keeps no CHECK constraints (pg_test/tests/plans.rs checks).
    max_attempts     integer NOT NULL,
    run_at           timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    lease_expiries   integer NOT NULL DEFAULT 0,
    cancel_requested boolean NOT NULL DEFAULT false,
    base_priority    integer,
    next_age_at      timestamptz,
    queue            text NOT NULL,
    kind             text NOT NULL,
    idempotency_key  text,
    concurrency_key  text,
    payload          jsonb NOT NULL,
    -- Written by every claim.
    attempt          integer NOT NULL DEFAULT 0,
    claims           bigint NOT NULL DEFAULT 0,
    started_at       timestamptz,
    lease_expires_at timestamptz,
    lease            interval,
    lease_token      uuid,
    worker           text,
    -- Written by every transition.
    state            jq.job_state NOT NULL,
    -- Written when an execution ends.
    finished_at      timestamptz,
    last_error       text,
    result           jsonb
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 2
);

INSERT INTO jq.jobs (id, priority, max_attempts, run_at, created_at, lease_expiries, cancel_requested, base_priority, next_age_at, queue, kind, idempotency_key, concurrency_key, payload, attempt, claims, started_at, lease_expires_at, lease, lease_token, worker, state, finished_at, last_error, result)
SELECT id, priority, max_attempts, run_at, created_at, lease_expiries, cancel_requested, base_priority, next_age_at, queue, kind, idempotency_key, concurrency_key, payload, attempt, claims, started_at, lease_expires_at, lease, lease_token, worker, state, finished_at, last_error, result
FROM jq.jobs_0_1_0;
-- Out of the extension first: that also takes the old table out of pg_extension.extconfig (the
-- list pg_dump reads), which DROP TABLE alone would leave pointing at a dropped table.
ALTER EXTENSION jq DROP TABLE jq.jobs_0_1_0;
DROP TABLE jq.jobs_0_1_0;

ALTER SEQUENCE jq.jobs_id_seq OWNED BY jq.jobs.id;

COMMENT ON TABLE jq.jobs IS
'One row per job. Change it only through jq functions: every transition is fenced on the state '
'(and lease token) it read. claims counts executions started (the seq of the current one); '
'attempt counts executions charged (lease expiries and releases are refunded); lease is the '
'length of the current lease, reused by jq.heartbeat when no extension is given. '
'concurrency_key: jobs sharing it in one queue run at most key_concurrency at a time, in '
'(run_at, id) order (docs/flow-control.md). base_priority / next_age_at: set only in queues with '
'priority_aging: the priority given at enqueue, and when the aging pass next raises priority.';

-- Claim: WHERE hashtextextended(queue, 0) = hashtextextended($1, 0) AND state = 'ready'
-- ORDER BY priority DESC, run_at, id LIMIT n.
-- The key leads with a 64-bit hash of the queue's name, not the name: every key column then
-- has a fixed width, so PostgreSQL finds priority, run_at and id at a cached offset in each
-- index entry instead of walking past the variable-width name (nocache_index_getattr), in
-- every comparison of the descent and of the scan. That cost a claim about 2% of its CPU
-- (perf), and 3-10% of the batch-1 drain rate (bench/ab_variant.sh; docs/BENCHMARKS.md).
-- The hash is a queue's key: no two queues share one (queues_name_hash_idx), and a dropped
-- queue's jobs go with it, so the jobs with a queue's hash are exactly that queue's. Queries
-- compare the hash alone: with the name compared too, the planner multiplied the two
-- selectivities, estimated a deep queue at a few rows, and chose a sorted bitmap scan of the
-- whole queue for its custom plans (pg_test/tests/plans.rs).
-- NULLS FIRST is what a plain DESC means; pinned so that nobody "fixes" it into NULLS LAST,
-- which silently turns the claim into a sort of the whole queue (seed A, ADR-016).
-- INCLUDE (queue), after the fixed-width key, keeps jq.queue_stats' count of claimable jobs an
-- index-only scan.
CREATE INDEX jobs_claim_idx ON jq.jobs (pg_catalog.hashtextextended(queue, 0), priority DESC NULLS FIRST, run_at, id)
    INCLUDE (queue) WHERE state = 'ready';

-- The planner ignores the statistics of a partial index's expressions (they describe only the
-- index's rows), so without these it estimated every queue at 0.5% of the table and planned a
-- deep queue's batch claim as a sorted bitmap scan of all of it (pg_test/tests/plans.rs).
-- ANALYZE keeps them for the whole table, as it does for the column.
CREATE STATISTICS jq.jobs_queue_hash_stats ON (pg_catalog.hashtextextended(queue, 0)) FROM jq.jobs;

-- Promotion: WHERE state = 'scheduled' AND (run_at, id) > $last AND run_at <= $now ORDER BY
-- run_at, id (id: a unique key, so each pass starts exactly past the previous one; jq._promote).
CREATE INDEX jobs_scheduled_idx ON jq.jobs (run_at, id) WHERE state = 'scheduled';

-- Reaping: WHERE state = 'running' AND lease_expires_at >= $last AND lease_expires_at < $now
-- ORDER BY lease_expires_at (jq._reap). Without id: a wider key tipped the running count of a
-- capped queue's claim (queue = $1 AND state = 'running', filtered from this index) into a
-- sequential scan (pg_test/tests/plans.rs).
CREATE INDEX jobs_running_idx ON jq.jobs (lease_expires_at) WHERE state = 'running';

-- Idempotency: one unfinished job per (queue, key); enqueue uses INSERT ... ON CONFLICT with
-- exactly this predicate as its arbiter.
CREATE UNIQUE INDEX jobs_idempotency_idx ON jq.jobs (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('scheduled', 'blocked', 'ready', 'running');

-- Per-key serialisation: the next blocked jobs of one key, WHERE queue = $1 AND
-- concurrency_key = $2 AND state = 'blocked' ORDER BY run_at, id LIMIT free slots. Blocked jobs
-- are never in jobs_claim_idx, so the claim never reads a job of a key at its limit.
CREATE INDEX jobs_blocked_idx ON jq.jobs (queue, concurrency_key, run_at, id)
    WHERE state = 'blocked';

-- Priority aging: WHERE state = 'ready' AND next_age_at <= $now ORDER BY next_age_at LIMIT
-- batch. Jobs of queues without priority_aging have next_age_at NULL and are not in it.
CREATE INDEX jobs_aging_idx ON jq.jobs (next_age_at)
    WHERE state = 'ready' AND next_age_at IS NOT NULL;

-- Retention: WHERE queue = $1 AND state IN ('completed', 'cancelled') AND (finished_at, id) >
-- $last AND finished_at < $cutoff ORDER BY finished_at, id, and the same for dead jobs, which have
-- their own (longer) retention. Two indexes, so that neither pass wades through the other's rows;
-- each finished row is in exactly one of them. id makes the key unique, so each pass of a prune
-- starts exactly past the rows the previous one deleted (jq._prune_jobs).
CREATE INDEX jobs_finished_idx ON jq.jobs (queue, finished_at, id)
    WHERE state IN ('completed', 'cancelled');

CREATE INDEX jobs_dead_idx ON jq.jobs (queue, finished_at, id)
    WHERE state = 'dead';

SELECT pg_catalog.pg_extension_config_dump('jq.jobs', '');

ANALYZE jq.jobs;

COMMENT ON TABLE jq.execution_log IS
'Append-only history of the executions that did not complete their job: one row per claim that '
'ended as failed, lease_expired, released, snoozed or cancelled, kept for the queue''s '
'history_retention (a completed execution is its job row). Written only by jq functions; read '
'jq.executions, which adds the completed executions.';

-- The log has no completed row of a job that is still there, except one restored from a dump of
-- 0.1.0 (whose history table held every outcome; see the trigger below): the view shows such a
-- row once, from the job.
CREATE VIEW jq.executions AS
SELECT l.job_id, l.seq, l.attempt, l.outcome, l.started_at, l.lease_expires_at, l.finished_at,
       l.queue, l.worker, l.error
FROM jq.execution_log l
WHERE l.outcome <> 'completed'
   OR NOT EXISTS (SELECT FROM jq.jobs d WHERE d.id = l.job_id AND d.claims = l.seq AND d.state = 'completed')
UNION ALL
SELECT j.id, j.claims, j.attempt, 'completed'::jq.execution_outcome, j.started_at,
       j.lease_expires_at, j.finished_at, j.queue, j.worker, NULL::text
FROM jq.jobs j
WHERE j.state = 'completed';

COMMENT ON VIEW jq.executions IS
'Execution history: one row per execution once it has ended (job_id, seq = the job''s claims '
'count when it started, attempt = the attempt number it ran as, outcome, started_at, '
'lease_expires_at, finished_at, queue, worker, error). Completed executions come from the job '
'rows of completed jobs, so they are kept as long as the job (the queue''s retention); the '
'other outcomes from jq.execution_log, kept for history_retention. For outcomes lease_expired, '
'released and snoozed the attempt was refunded. A running execution is visible in its jq.jobs '
'row (started_at, worker, lease_expires_at).';

-- A dump taken under 0.1.0, when jq.executions was the history table, restores its rows with
-- COPY jq.executions: they go to the log (docs/upgrades.md, "Dump and restore").
CREATE FUNCTION jq._executions_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jq.execution_log (job_id, seq, attempt, outcome, started_at, lease_expires_at,
                                  finished_at, queue, worker, error)
    VALUES (NEW.job_id, NEW.seq, NEW.attempt, NEW.outcome, NEW.started_at, NEW.lease_expires_at,
            NEW.finished_at, NEW.queue, NEW.worker, NEW.error);
    RETURN NEW;
END $$;

COMMENT ON FUNCTION jq._executions_insert() IS
'Internal: INSTEAD OF INSERT trigger of the view jq.executions; writes the row to '
'jq.execution_log. For restoring dumps taken under jq 0.1.0 (COPY jq.executions); jq itself '
'never inserts into the view.';

CREATE TRIGGER executions_insert INSTEAD OF INSERT ON jq.executions
    FOR EACH ROW EXECUTE FUNCTION jq._executions_insert();

-- Again for the relations this script created: default privileges a DBA set on schema jq
-- (ALTER DEFAULT PRIVILEGES IN SCHEMA jq GRANT SELECT ON TABLES ..., as 0.1.0's docs invited)
-- gave them to the new jq.jobs and jq.executions.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT c.oid::regclass AS rel, pg_catalog.format('jq.%I', c.relname) AS label,
                    c.relkind, a.grantee::regrole AS grantee
             FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
             WHERE c.relnamespace = 'jq'::regnamespace AND c.relkind IN ('r', 'S', 'v')
               AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        -- WARNING, not NOTICE: PostgreSQL raises client_min_messages to WARNING while it runs
        -- an extension script, so a NOTICE would never reach the DBA.
        RAISE WARNING 'jq 0.2.0: revoking the privileges of role % on %; give it queues with jq.grant', r.grantee, r.label;
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s',
            CASE r.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, r.rel, r.grantee);
    END LOOP;
END $$;

-- security_barrier: a reader's own (leaky) function in a WHERE on this view is evaluated only
-- on the rows the view lets it see (docs/security.md).
CREATE VIEW jq.queue_stats WITH (security_barrier) AS
SELECT t.name AS queue,
       c.claimable + s.scheduled AS depth,
       c.claimable,
       s.scheduled,
       r.running,
       f.dead,
       f.completed,
       f.cancelled,
       c.oldest_claimable_age,
       t.paused,
       b.blocked,
       hc.completed_5m,
       h.failed_5m,
       h.failed_15m,
       h.lease_expired_15m,
       w.wait_p95_5m
FROM jq.queues t
CROSS JOIN LATERAL (
    SELECT count(*) AS claimable, pg_catalog.now() - min(j.run_at) AS oldest_claimable_age
    FROM jq.jobs j  -- jobs_claim_idx's key (sql/schema.sql); index-only
    WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(t.name, 0) AND j.state = 'ready') c
CROSS JOIN LATERAL (
    SELECT count(*) AS scheduled FROM jq.jobs j WHERE j.queue = t.name AND j.state = 'scheduled') s
CROSS JOIN LATERAL (
    SELECT count(*) AS running FROM jq.jobs j WHERE j.queue = t.name AND j.state = 'running') r
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE j.state = 'dead') AS dead,
           count(*) FILTER (WHERE j.state = 'completed') AS completed,
           count(*) FILTER (WHERE j.state = 'cancelled') AS cancelled
    FROM jq.jobs j WHERE j.queue = t.name AND j.state IN ('completed', 'dead', 'cancelled')) f
CROSS JOIN LATERAL (
    SELECT count(*) AS blocked FROM jq.jobs j WHERE j.queue = t.name AND j.state = 'blocked') b
-- Recent history. Completions are the completed job rows (jobs_finished_idx); the other
-- outcomes are in jq.execution_log, whose BRIN index on finished_at limits the scan to the last
-- 15 minutes.
CROSS JOIN LATERAL (
    SELECT count(*) AS completed_5m
    FROM jq.jobs j
    WHERE j.queue = t.name AND j.state = 'completed'
      AND j.finished_at > pg_catalog.now() - interval '5 minutes') hc
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE e.outcome = 'failed'
                              AND e.finished_at > pg_catalog.now() - interval '5 minutes') AS failed_5m,
           count(*) FILTER (WHERE e.outcome = 'failed') AS failed_15m,
           count(*) FILTER (WHERE e.outcome = 'lease_expired') AS lease_expired_15m
    FROM jq.execution_log e
    WHERE e.finished_at > pg_catalog.now() - interval '15 minutes' AND e.queue = t.name) h
-- Wait = claim time - due time (started_at - run_at) of the jobs claimed in the last 5 minutes
-- that are still running or completed since (a failed job's run_at has moved to its retry).
CROSS JOIN LATERAL (
    SELECT pg_catalog.percentile_cont(0.95) WITHIN GROUP (ORDER BY x.wait) AS wait_p95_5m
    FROM (SELECT j.started_at - j.run_at AS wait
          FROM jq.jobs j
          WHERE j.queue = t.name AND j.state = 'running'
            AND j.started_at > pg_catalog.now() - interval '5 minutes'
          UNION ALL
          SELECT j.started_at - j.run_at
          FROM jq.jobs j
          WHERE j.queue = t.name AND j.state = 'completed'
            AND j.finished_at > pg_catalog.now() - interval '5 minutes'
            AND j.started_at > pg_catalog.now() - interval '5 minutes') x) w
-- Only the queues the reader holds a jq privilege on (docs/security.md).
WHERE pg_catalog.pg_has_role('jq_admin', 'USAGE')
   OR EXISTS (SELECT 1 FROM jq.queue_grants g
              WHERE g.queue IN (t.name, '*') AND pg_catalog.pg_has_role(g.grantee, 'USAGE'));

COMMENT ON VIEW jq.queue_stats IS
'One row per queue: depth = claimable (ready, due now) + scheduled (waiting for run_at, including '
'retries in backoff); running; dead, completed and cancelled jobs still within retention; '
'oldest_claimable_age (interval since the oldest claimable job became due; NULL when none); '
'paused; blocked: due jobs waiting for a slot of their concurrency_key (not in depth); from the '
'execution history: completed_5m and failed_5m (executions completed / failed '
'in the last 5 minutes), failed_15m, lease_expired_15m (expired leases reaped in the last 15 '
'minutes: crashed or stuck workers); wait_p95_5m: 95th percentile of the wait between a job '
'becoming due and being claimed (started_at - run_at, interval), over the jobs claimed in the '
'last 5 minutes that are running or completed (NULL when none). completed_5m and wait_p95_5m '
'count completed jobs, which pruning keeps at least min(history_retention, 5 minutes); the other '
'history counts need the queue''s history_retention to be at least 15 minutes. Shows only the queues the reader may use '
'(a superuser or member of jq_admin, or a jq.grant on the queue or ''*'').';

-- The privilege policy (sql/security.sql, whole).
-- Security: who may call what, and on which queue (docs/security.md).
--
-- Two layers, as in PostgreSQL itself (schema USAGE, then object privileges):
--   * EXECUTE on the functions, held by three roles: jq_producer (enqueue), jq_worker (claim and
--     the calls that end a claim), jq_admin (everything). Nothing is granted to PUBLIC, and jq's
--     tables are granted to no one but jq_admin (read only): they change only through the
--     functions, which are SECURITY DEFINER with a pinned search_path.
--   * Per-queue rights in jq.queue_grants (jq.grant / jq.revoke): enqueue, work, admin. The
--     functions that name a queue check the calling role against them (jq._authorize), through
--     a caller ticket (src/security.rs): inside a SECURITY DEFINER function current_user is the
--     owner, so the caller's role travels in the default of the last parameter, caller_ticket.
--   Calls that act on a claimed job (complete, fail, heartbeat, release, snooze) are authorised
--   by its lease token: an unguessable capability that only an authorised claim hands out.
-- pg_test/tests/security.rs enumerates every function of the schema from the catalog and checks
-- every role against this file.

-- jq.queue_grants (sql/schema.sql) is dumped by pg_dump with the other configuration tables.
SELECT pg_catalog.pg_extension_config_dump('jq.queue_grants', '');

CREATE FUNCTION jq._may(caller oid, queue text, privilege text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    -- Qualified to the operators: jq.claim and jq.complete, which have no SET search_path,
    -- reach it through jq._authorize_queue with the caller's search_path (see jq.claim).
    SELECT pg_catalog.pg_has_role(caller, 'jq_admin', 'USAGE')
        OR EXISTS (SELECT 1 FROM jq.queue_grants g
                   WHERE g.queue OPERATOR(pg_catalog.=) ANY (ARRAY[_may.queue, '*'])
                     AND (g.privilege OPERATOR(pg_catalog.=) _may.privilege
                          OR g.privilege OPERATOR(pg_catalog.=) 'admin'
                          OR _may.privilege OPERATOR(pg_catalog.=) 'any')
                     AND pg_catalog.pg_has_role(caller, g.grantee, 'USAGE'))
$$;

COMMENT ON FUNCTION jq._may(oid, text, text) IS
'Internal: whether role caller may exercise privilege (enqueue, work, admin, or any) on queue: '
'a superuser or member of jq_admin, or a jq.queue_grants row for the queue or ''*'' with that '
'privilege or admin, granted to caller or a role whose privileges caller has.';

CREATE FUNCTION jq._denial(caller oid, queues text[], privilege text) RETURNS text
LANGUAGE sql STABLE AS $$
    -- Qualified to the operators, as jq._may.
    SELECT pg_catalog.format('permission denied: role "%s" may not %s queue "%s"', caller::pg_catalog.regrole,
               CASE WHEN privilege OPERATOR(pg_catalog.=) 'enqueue' THEN 'enqueue to'
                    WHEN privilege OPERATOR(pg_catalog.=) 'work' THEN 'claim from'
                    ELSE 'administer' END, q)
    FROM pg_catalog.unnest(queues) AS q
    WHERE NOT pg_catalog.pg_has_role(caller, 'jq_admin', 'USAGE')
      AND (q IS NULL OR NOT jq._may(caller, q, privilege))
    LIMIT 1
$$;

COMMENT ON FUNCTION jq._denial(oid, text[], text) IS
'Internal: NULL when role caller may exercise privilege (enqueue, work, admin) on every queue in '
'queues, else the 42501 message for the first one it may not use (NULL or unknown queues count as '
'not granted).';

CREATE FUNCTION jq._check_schedule_owner(caller oid, schedule text, queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF jq._denial(caller, ARRAY[queue], 'admin') IS NOT NULL THEN
        -- Without the queue's name: schedule names are global, queue names are not to be learnt.
        RAISE EXCEPTION 'permission denied: schedule "%" targets a queue role "%" may not administer',
            schedule, caller::regrole USING ERRCODE = '42501';
    END IF;
END $$;

COMMENT ON FUNCTION jq._check_schedule_owner(oid, text, text) IS
'Internal: raises 42501, naming the schedule but not its queue, unless role caller may administer '
'queue (the queue of an existing schedule).';

CREATE FUNCTION jq._check_may(caller oid, queues text[], privilege text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_message text := jq._denial(caller, queues, privilege);
BEGIN
    IF v_message IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = v_message,
            HINT = 'A member of jq_admin can grant it with jq.grant(queue, role, privilege).';
    END IF;
END $$;

COMMENT ON FUNCTION jq._check_may(oid, text[], text) IS
'Internal: raises 42501 unless role caller may exercise privilege (enqueue, work, admin) on every '
'queue in queues. A NULL or unknown queue counts as not granted, so a role learns nothing of '
'queues it may not use.';

-- jq._authorize(caller_ticket, queues, privilege) and jq._authorize_queue(caller_ticket, queue,
-- privilege) are Rust (src/security.rs): jq._redeem, a
-- syscache-only pass for superusers and jq_admin members, else jq._denial.
COMMENT ON FUNCTION jq._authorize(bigint, text[], text) IS
'Internal: redeems caller_ticket (42501 if it is not a ticket of this session), then, unless '
'that role is a superuser or has the privileges of jq_admin, raises jq._denial''s message; returns the calling '
'role. Rust (src/security.rs).';

COMMENT ON FUNCTION jq._authorize_queue(bigint, text, text) IS
'Internal: jq._authorize for the one queue queue (NULL: granted to no role but superusers and '
'jq_admin members; ''*'': every queue), with no array to build: the form every function naming one '
'queue calls. Errors: 42501. Rust (src/security.rs).';

CREATE FUNCTION jq._authorize_job(caller_ticket bigint, id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_caller oid := jq._redeem(caller_ticket);
    v_queue  text;
BEGIN
    -- A job's queue never changes and ids are never reused, so the queue read here is the one of
    -- every later statement's row with this id; a job committed after this read is not acted on
    -- (the caller returns false), or a check on "no row" would let it through.
    SELECT j.queue INTO v_queue FROM jq.jobs j WHERE j.id = _authorize_job.id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF jq._denial(v_caller, ARRAY[v_queue], 'admin') IS NOT NULL THEN
        -- Without the queue's name: a role must not learn other tenants' queues by job id.
        RAISE EXCEPTION 'permission denied: role "%" may not administer the queue of job %',
            v_caller::regrole, _authorize_job.id USING ERRCODE = '42501';
    END IF;
    RETURN true;
END $$;

COMMENT ON FUNCTION jq._authorize_job(bigint, bigint) IS
'Internal: redeems caller_ticket; false when job id does not exist now (the caller then changes '
'nothing, even if such a job commits meanwhile); else raises 42501 unless that role may administer '
'the job''s queue, and returns true.';

CREATE FUNCTION jq._queue_admin_functions() RETURNS regprocedure[]
LANGUAGE sql STABLE AS $$
    SELECT ARRAY['jq.alter_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, integer, integer, interval, integer, interval, bigint)',
                 'jq.pause(text, bigint)',
                 'jq.resume(text, bigint)',
                 'jq.cancel(bigint, bigint)',
                 'jq.retry(bigint, bigint)',
                 'jq.schedule(text, text, text, jsonb, text, text, integer, integer, text, text, bigint)',
                 'jq.alter_schedule(text, text, text, jsonb, text, text, integer, integer, text, text, boolean, bigint)',
                 'jq.unschedule(text, boolean, bigint)']::regprocedure[]
$$;

COMMENT ON FUNCTION jq._queue_admin_functions() IS
'Internal: the functions a per-queue admin grant lets a role execute (each checks the queue).';

CREATE FUNCTION jq._settle_admin_execute(role regrole) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_role name;
    f      regprocedure;
BEGIN
    SELECT r.rolname INTO v_role FROM pg_catalog.pg_roles r WHERE r.oid = _settle_admin_execute.role;
    IF v_role IS NULL OR v_role IN ('jq_admin', 'jq_producer', 'jq_worker')
       OR EXISTS (SELECT 1 FROM jq.queue_grants g
                  WHERE g.grantee = _settle_admin_execute.role AND g.privilege = 'admin') THEN
        RETURN;
    END IF;
    FOREACH f IN ARRAY jq._queue_admin_functions() LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM %I', f, v_role);
    END LOOP;
END $$;

COMMENT ON FUNCTION jq._settle_admin_execute(regrole) IS
'Internal: when role holds no admin grant any more (jq.revoke, jq.drop_queue), revokes the EXECUTE '
'jq.grant gave it on the per-queue admin functions, which would otherwise keep DROP ROLE from '
'working. jq''s own roles are left alone.';

CREATE FUNCTION jq.grant(queue text, role regrole, privilege text,
                         caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    -- "grant" is a reserved word, so the parameters cannot be qualified by the function name.
    g_queue     ALIAS FOR $1;
    g_role      ALIAS FOR $2;
    g_privilege ALIAS FOR $3;
    g_ticket    ALIAS FOR $4;
    v_role name;
    f      regprocedure;
BEGIN
    IF g_queue IS NULL OR g_role IS NULL OR g_privilege IS NULL THEN
        RAISE EXCEPTION 'queue, role and privilege must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF g_privilege NOT IN ('enqueue', 'work', 'admin') THEN
        RAISE EXCEPTION 'unknown privilege "%"', g_privilege
            USING ERRCODE = '22023', HINT = 'Privileges: enqueue, work, admin.';
    END IF;
    -- Before the queue row and the catalogs' pg_proc rows (GRANT EXECUTE below), as jq.drop_queue.
    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;
    -- Then one grant or revoke at a time (self-conflicting; plain reads of the grants, as every
    -- authorization does, go on): two of them both run GRANT/REVOKE EXECUTE on the same pg_proc
    -- rows (or GRANT jq_producer TO the same role), and the second failed with XX000 "tuple
    -- concurrently updated" (or 23505 on pg_auth_members) once the first committed.
    LOCK TABLE jq.queue_grants IN SHARE ROW EXCLUSIVE MODE;
    IF g_queue <> '*' THEN
        PERFORM jq._check_queue_name(g_queue);
        PERFORM 1 FROM jq.queues t WHERE t.name = g_queue FOR KEY SHARE;
        IF NOT FOUND THEN
            PERFORM jq._unknown_queue(g_queue);
        END IF;
    END IF;
    SELECT r.rolname INTO v_role FROM pg_catalog.pg_roles r WHERE r.oid = g_role;
    IF v_role IS NULL THEN
        RAISE EXCEPTION 'role with OID % does not exist', g_role::oid USING ERRCODE = '42704';
    END IF;
    -- The EXECUTE the privilege needs (membership carries no queue rights of its own). jq's
    -- own roles are left as the extension made them: granting one of them a queue gives the
    -- queue to its members, who hold its EXECUTE already.
    IF v_role NOT IN ('jq_admin', 'jq_producer', 'jq_worker') THEN
        IF g_privilege IN ('enqueue', 'admin') AND NOT pg_catalog.pg_has_role(g_role, 'jq_producer', 'MEMBER') THEN
            EXECUTE pg_catalog.format('GRANT jq_producer TO %I', v_role);
        END IF;
        IF g_privilege IN ('work', 'admin') AND NOT pg_catalog.pg_has_role(g_role, 'jq_worker', 'MEMBER') THEN
            EXECUTE pg_catalog.format('GRANT jq_worker TO %I', v_role);
        END IF;
        IF g_privilege = 'admin' THEN
            FOREACH f IN ARRAY jq._queue_admin_functions() LOOP
                EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I', f, v_role);
            END LOOP;
        END IF;
    END IF;
    INSERT INTO jq.queue_grants (queue, grantee, privilege, granted_by, granted_at)
    VALUES (g_queue, g_role, g_privilege, jq._redeem(g_ticket)::regrole,
            pg_catalog.now())
    ON CONFLICT ON CONSTRAINT queue_grants_pkey DO NOTHING;
    RETURN FOUND;
END $$;

COMMENT ON FUNCTION jq.grant(text, regrole, text, bigint) IS
'grant(queue, role, privilege): lets role, and the roles that have its privileges, enqueue to '
'(enqueue), claim from and so read the payloads of (work), or administer (admin: pause, resume, '
'alter_queue, cancel, retry, schedule, alter_schedule, unschedule; implies enqueue '
'and work) queue; queue ''*'' = every queue, present and future. Also gives role the EXECUTE '
'the privilege needs: membership in jq_producer (enqueue, admin) and jq_worker (work, admin), '
'and EXECUTE on the per-queue admin functions (admin), except to jq''s own three roles, which are '
'left as the extension made them; revoking the last admin grant takes that EXECUTE back, memberships stay (they grant no queue). Returns true when the grant is new. Executable by jq_admin. Errors: 22004 NULL '
'argument, 22023 unknown privilege or invalid queue name, 42704 unknown queue or role.';

CREATE FUNCTION jq.revoke(queue text, role regrole, privilege text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF revoke.queue IS NULL OR revoke.role IS NULL OR revoke.privilege IS NULL THEN
        RAISE EXCEPTION 'queue, role and privilege must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF revoke.privilege NOT IN ('enqueue', 'work', 'admin') THEN
        RAISE EXCEPTION 'unknown privilege "%"', revoke.privilege
            USING ERRCODE = '22023', HINT = 'Privileges: enqueue, work, admin.';
    END IF;
    -- Before the grant row (which jq.drop_queue deletes) and pg_proc's rows, as jq.drop_queue;
    -- then one grant or revoke at a time (see jq.grant).
    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;
    LOCK TABLE jq.queue_grants IN SHARE ROW EXCLUSIVE MODE;
    -- Compared under the column's collation: a caller's nondeterministic one (say, case
    -- insensitive) would otherwise also revoke the grant on a queue differing only in case.
    DELETE FROM jq.queue_grants g
    WHERE g.queue = revoke.queue COLLATE pg_catalog."default" AND g.grantee = revoke.role
      AND g.privilege = revoke.privilege COLLATE pg_catalog."default";
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF revoke.privilege = 'admin' THEN
        PERFORM jq._settle_admin_execute(revoke.role);
    END IF;
    RETURN true;
END $$;

COMMENT ON FUNCTION jq.revoke(text, regrole, text) IS
'revoke(queue, role, privilege): removes exactly that jq.grant (queue ''*'' removes the '
'every-queue grant, not per-queue ones); returns whether it existed. Takes effect for the next '
'call: a job already claimed can still be completed with its lease token. Revoking a role''s last '
'admin grant also revokes the EXECUTE jq.grant gave it on the per-queue admin functions (so DROP '
'ROLE works); memberships in jq_producer / jq_worker stay (they grant no queue). Executable by jq_admin. Errors: 22004 NULL argument, 22023 '
'unknown privilege.';

-- ---------------------------------------------------------------------------------------------
-- The privilege policy. Every function that reads or writes jq's tables on a caller's behalf
-- runs as the owner, with a search_path no caller can shadow (field case Q16).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'jq.enqueue(text, jsonb, text, timestamptz, interval, integer, integer, text, text, bigint)',
        'jq.enqueue_many(text, jsonb, text, timestamptz, interval, integer, integer, boolean, bigint)',
        'jq.claim(text[], text, integer, interval, interval, bigint)',
        'jq.complete_many(bigint[], uuid[], jsonb[])',
        'jq.fail(bigint, uuid, text, interval)',
        'jq.heartbeat(bigint, uuid, interval)',
        'jq.release(bigint, uuid)',
        'jq.snooze(bigint, uuid, interval)',
        'jq.create_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, boolean, integer)',
        'jq.drop_queue(text, boolean, bigint)',
        'jq.tick()',
        'jq.cron_tick(timestamptz)',
        'jq.status()',
        'jq.grant(text, regrole, text, bigint)',
        'jq.revoke(text, regrole, text)']::regprocedure[] || jq._queue_admin_functions()
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, jq, pg_temp', f);
    END LOOP;
END $$;

-- The two calls of every job's life, jq.claim and jq.complete, run as the owner with no SET
-- clause: PostgreSQL 15 saves and restores the settings around every call of a function that
-- has one (and walks all of them when it returns), which cost about 7% of the drain rate at 64
-- connections (docs/BENCHMARKS.md). Instead every name in them is schema-qualified, operators
-- included, and so are the internal SQL functions that run inside them with the caller's
-- search_path (jq._may and jq._denial through jq._authorize_queue, jq._interval_fields_nonnegative,
-- inlined); the plpgsql and non-inlined ones below get their own SET: they run on the other
-- paths (batch claims, once per batch; capped, rate-limited and keyed queues; long-polls).
-- Field case Q16 for these paths: pg_test/tests/security.rs,
-- hot_functions_ignore_the_callers_search_path.
ALTER FUNCTION jq.claim(text, text, integer, interval, interval, bigint) SECURITY DEFINER;

ALTER FUNCTION jq.complete(bigint, uuid, jsonb) SECURITY DEFINER;

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'jq._wait_deadline(interval)', 'jq._unknown_queue(text)', 'jq._rate_tokens(text, timestamptz)',
        'jq._rate_next_token(text)', 'jq._key_fill(text, text, integer)',
        'jq._claim_batch(text, text, integer, interval, boolean, bigint, boolean)']::regprocedure[]
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, jq, pg_temp', f);
    END LOOP;
END $$;

-- jq.claim's batch statements, in jq._claim_batch, take LIMIT n as a parameter. A generic plan
-- costs a LIMIT parameter at 10% of the queue, so plpgsql's plan cache judged every custom plan
-- cheaper and planned those statements again on every call (pg_stat_statements with
-- track_planning: as many plans as calls). Its generic plans are the same index walks
-- (pg_test/tests/plans.rs checks both plan modes), so they are forced.
ALTER FUNCTION jq._claim_batch(text, text, integer, interval, boolean, bigint, boolean)
    SET plan_cache_mode = force_generic_plan;

-- jq.complete_many and jq.enqueue_many read their arrays through unnest / jq._job_specs: a
-- custom plan sees the array's length, the generic one estimates it, so whenever the batches a
-- caller sends have the same few elements (one job a call, say) every
-- custom plan looks cheaper and the big statement was planned again on every call (about 200 µs
-- for complete_many's one-job UPDATE, five times its execution; enqueue_many's INSERT was
-- planned on every call even with sizes that varied). Their generic plans are the same joins on
-- the primary key and on jq.queues (tests/plans.rs, batch_writes_reuse_one_generic_plan).
ALTER FUNCTION jq.complete_many(bigint[], uuid[], jsonb[]) SET plan_cache_mode = force_generic_plan;

-- complete_many finds its jobs by j.id = ANY (ids) and joins them to its input arrays. The
-- generic plan estimates one job found, so the planner joined them with a nested loop that ran
-- the input's unnest again for every job: n^2 rows per call (10,000 at 100 jobs; at batch 100,
-- 16 connections, bench/ab_variant.sh drained 1.37-1.59x faster without the ANY). Nested loops
-- are off for it: a hash join, each side read once.
-- Tests: tests/plans.rs, complete_many_reads_its_input_once.
ALTER FUNCTION jq.complete_many(bigint[], uuid[], jsonb[]) SET enable_nestloop = off;

-- jq._prune_jobs deletes in passes of 5,000, each past the (finished_at, id) key the previous
-- one reached, which only an Index Scan of jobs_finished_idx / jobs_dead_idx in key order
-- keeps linear. When fewer rows are estimated past retention than a batch (stale statistics,
-- a queue that just grew), the planner sorted a bitmap scan of the whole range instead, which
-- every pass then reads again (seen in a CI run of tests/plans.rs, 2,240 estimated for 10,250).
-- Sorts and bitmap scans are off for it: its two selections have the index order, so no chosen
-- plan is a disabled one (whose cost would also make PostgreSQL JIT-compile it), and it calls
-- no other function. Tests: tests/plans.rs, maintenance_and_idempotency_selections_use_their_partial_indexes.
ALTER FUNCTION jq._prune_jobs(text, timestamptz, timestamptz, integer, integer)
    SET enable_sort = off SET enable_bitmapscan = off;

ALTER FUNCTION jq.enqueue_many(text, jsonb, text, timestamptz, interval, integer, integer, boolean, bigint)
    SET plan_cache_mode = force_generic_plan;

-- A cached plan is kept for the life of a connection (until ANALYZE or VACUUM of the table
-- invalidates it), and one made while jq.jobs held a few rows would find a job by id with a
-- sequential scan after it grew. jq's planner hook plans jq.jobs as at least jq.plan_min_pages
-- pages (src/planner.rs), so no function needs to pin enable_seqscan = off (as 0.2.0 did until
-- its last changes). complete_many also names its ids as an index condition (sql/work.sql), and
-- _key_fill tests state::text so that its lookup by id has no partial index but the primary key
-- (sql/flow.sql). Tests: tests/plans.rs, plans_made_on_a_small_table_stay_index_lookups and
-- maintenance_plans_made_on_a_small_table_stay_index_lookups.

REVOKE ALL ON SCHEMA jq FROM PUBLIC;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jq FROM PUBLIC;

REVOKE ALL ON ALL TABLES IN SCHEMA jq FROM PUBLIC;

REVOKE ALL ON ALL SEQUENCES IN SCHEMA jq FROM PUBLIC;

GRANT USAGE ON SCHEMA jq TO jq_admin, jq_producer, jq_worker;

-- Everyone with a jq role: the caller ticket, status, pure helpers, queue_stats (rows of the
-- queues the reader holds a privilege on).
GRANT EXECUTE ON FUNCTION
    jq._ticket(), jq.status(), jq.cron_next(text, timestamptz, text),
    jq.cron_fires(text, timestamptz, timestamptz, text, integer),
    jq.backoff_seconds(text, double precision, double precision, integer, text, double precision),
    jq.max_payload_bytes(), jq.max_error_length(), jq.max_claim_batch(),
    jq.cron_log_retention(), jq.cron_misfire_grace(), jq.cron_max_catchup()
    TO jq_admin, jq_producer, jq_worker;

GRANT SELECT ON jq.queue_stats TO jq_admin, jq_producer, jq_worker;

GRANT EXECUTE ON FUNCTION
    jq.enqueue(text, jsonb, text, timestamptz, interval, integer, integer, text, text, bigint),
    jq.enqueue_many(text, jsonb, text, timestamptz, interval, integer, integer, boolean, bigint)
    TO jq_producer, jq_admin;

GRANT EXECUTE ON FUNCTION
    jq.claim(text, text, integer, interval, interval, bigint),
    jq.claim(text[], text, integer, interval, interval, bigint),
    jq.complete(bigint, uuid, jsonb), jq.complete_many(bigint[], uuid[], jsonb[]),
    jq.fail(bigint, uuid, text, interval), jq.heartbeat(bigint, uuid, interval),
    jq.release(bigint, uuid), jq.snooze(bigint, uuid, interval)
    TO jq_worker, jq_admin;

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY jq._queue_admin_functions() || ARRAY[
        'jq.create_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, boolean, integer)',
        'jq.drop_queue(text, boolean, bigint)', 'jq.tick()', 'jq.cron_tick(timestamptz)',
        'jq.grant(text, regrole, text, bigint)', 'jq.revoke(text, regrole, text)']::regprocedure[]
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO jq_admin', f);
    END LOOP;
END $$;

GRANT SELECT ON ALL TABLES IN SCHEMA jq TO jq_admin;

COMMENT ON FUNCTION jq._ticket() IS
'Internal: a caller ticket (bigint, 64 random bits) for the current role, kept in this backend '
'until jq._redeem uses it. The default of every caller_ticket parameter; never pass one '
'yourself. See src/security.rs and docs/security.md.';

COMMENT ON FUNCTION jq._lease_token() IS
'Internal: a new lease token (uuid), a random version-4 UUID as gen_random_uuid makes it (RFC '
'9562, section 5.4), from CSPRNG bits this backend draws 1 KiB at a time (src/random.rs). Set '
'by the claim statements, once per job claimed. Errors: XX000 if the CSPRNG fails.';

COMMENT ON FUNCTION jq._redeem(bigint) IS
'Internal: the role (oid) a caller ticket of this session was issued to; uses the ticket up. '
'Errors: 42501 unknown, reused or NULL ticket.';

-- JIT off for every jq function that carries settings of its own (the batch claims, the batch
-- writes, the maintenance duties; the functions without a SET clause keep none, see jq.claim).
-- A generic plan costs a LIMIT parameter at 10% of the queue: past ~9M ready jobs the batch
-- claim's generic plan cost 137,000, over jit_above_cost (100,000), and PostgreSQL JIT-compiled
-- it on every call (~140 ms of code emission for a 10-job claim, run 2026-12-04T1811: the
-- held-snapshot drain over a 12M-job queue ran at 1,190 jobs/s instead of ~28,000). jq's
-- statements are short index walks that JIT cannot speed up. Tests: tests/plans.rs,
-- functions_with_settings_never_jit.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
             WHERE p.pronamespace = 'jq'::regnamespace AND p.proconfig IS NOT NULL
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET jit = off', f);
    END LOOP;
END $$;

