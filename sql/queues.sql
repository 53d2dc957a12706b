-- Queue administration: create, alter, drop, pause, resume.

-- Queue and schedule names follow one rule (no per-queue DDL, so no identifier limits).
CREATE OR REPLACE FUNCTION jq._check_name(what text, name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION '% name must not be NULL', what USING ERRCODE = '22004';
    END IF;
    IF name !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
        RAISE EXCEPTION 'invalid % name %', what, pg_catalog.quote_literal(pg_catalog.left(name, 200))
            USING ERRCODE = '22023',
                  DETAIL = pg_catalog.format('A %s name has 1 to 128 characters, each an ASCII letter, a digit, or one of _ - . :', what);
    END IF;
END $$;
COMMENT ON FUNCTION jq._check_name(text, text) IS
'Internal: for a name of kind what (queue, schedule), raises 22004 for NULL and 22023 for a name '
'that is not 1-128 characters of [A-Za-z0-9_.:-].';

CREATE OR REPLACE FUNCTION jq._check_queue_name(name text) RETURNS void
LANGUAGE sql IMMUTABLE AS $$ SELECT jq._check_name('queue', name) $$;
COMMENT ON FUNCTION jq._check_queue_name(text) IS
'Internal: raises 22004 for NULL and 22023 for a name that is not 1-128 characters of [A-Za-z0-9_.:-].';

-- Raised where a queue name is well formed but names no queue.
CREATE OR REPLACE FUNCTION jq._unknown_queue(name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    PERFORM jq._check_queue_name(name);
    RAISE EXCEPTION 'queue "%" does not exist', name
        USING ERRCODE = '42704', HINT = 'Create it with jq.create_queue(name).';
END $$;
COMMENT ON FUNCTION jq._unknown_queue(text) IS
'Internal: raises 22004/22023 for a malformed name, else 42704 (undefined_object).';

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

CREATE OR REPLACE FUNCTION jq._check_interval(what text, value interval, allow_zero boolean) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF NOT jq._interval_fields_nonnegative(value) THEN
        RAISE EXCEPTION '% must not have negative fields, got %', what, value
            USING ERRCODE = '22023',
                  DETAIL = 'An interval like ''1 mon -30 days'' is shorter than zero in some months.';
    END IF;
    IF value < interval '0' OR (NOT allow_zero AND value = interval '0') THEN
        RAISE EXCEPTION '% must be % zero, got %', what,
            CASE WHEN allow_zero THEN 'at least' ELSE 'greater than' END, value
            USING ERRCODE = '22023';
    END IF;
    -- Bounded so that now() +/- any queue interval stays a valid timestamp: an unbounded
    -- retention would make every maintenance pass overflow (22008) and stop all queues.
    IF value > interval '100 years' THEN
        RAISE EXCEPTION '% must be at most 100 years, got %', what, value USING ERRCODE = '22023';
    END IF;
END $$;
COMMENT ON FUNCTION jq._check_interval(text, interval, boolean) IS
'Internal: raises 22023 when value is negative (or zero, unless allow_zero) or over 100 years.';

CREATE OR REPLACE FUNCTION jq._check_queue_options(
    max_attempts integer, lease interval, backoff_base interval, backoff_max interval,
    retention interval, dead_retention interval, history_retention interval,
    max_lease_expiries integer
) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF max_attempts IS NOT NULL AND (max_attempts < 1 OR max_attempts > 1000000) THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000000, got %', max_attempts
            USING ERRCODE = '22023';
    END IF;
    IF max_lease_expiries IS NOT NULL AND (max_lease_expiries < 0 OR max_lease_expiries > 1000000) THEN
        RAISE EXCEPTION 'max_lease_expiries must be between 0 and 1000000, got %', max_lease_expiries
            USING ERRCODE = '22023';
    END IF;
    PERFORM jq._check_interval('lease', lease, false);
    PERFORM jq._check_interval('backoff_base', backoff_base, true);
    PERFORM jq._check_interval('backoff_max', backoff_max, true);
    PERFORM jq._check_interval('retention', retention, true);
    PERFORM jq._check_interval('dead_retention', dead_retention, true);
    PERFORM jq._check_interval('history_retention', history_retention, true);
END $$;
COMMENT ON FUNCTION jq._check_queue_options(integer, interval, interval, interval, interval, interval, interval, integer) IS
'Internal: validates queue options (NULL means "not given"); raises 22023.';

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
    key_concurrency    integer DEFAULT 1,
    max_lease          interval DEFAULT NULL
) RETURNS jq.queues
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
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
    IF create_queue.max_lease IS NOT NULL THEN
        PERFORM jq._check_interval('max_lease', create_queue.max_lease, false);
    END IF;

    -- A conflict with a queue that a concurrent jq.drop_queue deletes before the re-read below
    -- sees neither that name nor a same-hash one: try again (bounded; 40001 if it never settles).
    FOR v_try IN 1..10 LOOP
        INSERT INTO jq.queues AS t (name, paused, max_concurrency, max_attempts, lease, backoff,
            backoff_base, backoff_max, jitter, retention, dead_retention, history_retention,
            max_lease_expiries, key_concurrency, max_lease)
        VALUES (create_queue.name, create_queue.paused, create_queue.max_concurrency,
            create_queue.max_attempts, create_queue.lease, create_queue.backoff,
            create_queue.backoff_base, create_queue.backoff_max, create_queue.jitter,
            create_queue.retention, create_queue.dead_retention, create_queue.history_retention,
            create_queue.max_lease_expiries, create_queue.key_concurrency, create_queue.max_lease)
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
COMMENT ON FUNCTION jq.create_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, boolean, integer, interval) IS
'Creates a queue and returns its row. name: 1-128 characters of [A-Za-z0-9_.:-]. Defaults of its '
'jobs: max_attempts 25; lease 5 minutes; retry backoff exponential from backoff_base 1 second, '
'capped at backoff_max 1 hour, with full jitter; finished jobs kept for retention 1 day '
'(completed, cancelled; at least min(history_retention, 5 minutes)) or dead_retention 7 days '
'(dead); the history of executions that did not complete their job (failed, lease_expired, '
'released, snoozed, cancelled) kept for history_retention 7 days (a completed execution is kept '
'with its job); max_concurrency NULL = unlimited running jobs; a job whose lease '
'expires more than max_lease_expiries (10) times goes dead; key_concurrency (1): jobs per '
'concurrency_key holding a slot at once (docs/flow-control.md); max_lease (NULL: none): the '
'longest lease a claim or heartbeat may take, longer requests get max_lease. Errors: 22004 NULL option, 22023 '
'invalid name or value (intervals are at most 100 years), 42710 queue exists (unless '
'if_not_exists, which returns the existing row; its options are not compared), 23505 another '
'queue''s name has the same hash (pg_catalog.hashtextextended(name, 0), the claim index''s key), '
'40001 the name kept being created and dropped concurrently (retry).';

CREATE OR REPLACE FUNCTION jq.alter_queue(
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
    max_lease          interval DEFAULT NULL,
    caller_ticket bigint DEFAULT jq._ticket()
) RETURNS jq.queues
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
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
    IF alter_queue.max_lease IS NOT NULL AND alter_queue.max_lease <> interval '0' THEN
        PERFORM jq._check_interval('max_lease', alter_queue.max_lease, false);
    END IF;
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;  -- before the queue row, as jq.drop_queue
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
        -- max_lease => '0' removes the bound; a lower one applies to later claims and heartbeats.
        max_lease          = CASE WHEN alter_queue.max_lease IS NULL THEN t.max_lease
                                  WHEN alter_queue.max_lease = interval '0' THEN NULL
                                  ELSE alter_queue.max_lease END,
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
COMMENT ON FUNCTION jq.alter_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, integer, integer, interval, integer, interval, interval, bigint) IS
'Changes the given options of a queue (NULL = leave unchanged; max_concurrency => 0 removes the '
'cap) and returns the new row. New defaults apply to jobs enqueued afterwards (max_attempts) and '
'to the next claim, failure or pass (lease, backoff, retention, cap). Flow control '
'(docs/flow-control.md): key_concurrency (1..1000000) jobs per concurrency_key, a raise admits '
'blocked jobs at once; rate_limit (jobs, 1..1e9; 0 removes the limit) per rate_period (interval, '
'default 1 second) with a bucket of burst tokens (default 1): no window of rate_period sees more '
'than rate_limit + burst claims; changing any of the three refills the bucket. priority_aging '
'(interval > 0, at most 100 years; 0 turns it off): a ready job''s priority rises by 1 per '
'interval waited since run_at, for jobs enqueued while it is set. max_lease (interval > 0, at '
'most 100 years; 0 removes it): the longest lease later claims and heartbeats may take (a running '
'lease keeps its expiry; jq.expire_lease takes one back). Errors: 22023 '
'invalid value (also rate_period or burst without a rate limit), 42704 unknown queue. 42501: the caller holds no admin grant on the queue; 0A000: the name under a nondeterministic collation.';

CREATE OR REPLACE FUNCTION jq._check_flow_options(key_concurrency integer, rate_limit integer,
                                       rate_period interval, burst integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF key_concurrency IS NOT NULL AND (key_concurrency < 1 OR key_concurrency > 1000000) THEN
        RAISE EXCEPTION 'key_concurrency must be between 1 and 1000000, got %', key_concurrency
            USING ERRCODE = '22023';
    END IF;
    IF rate_limit IS NOT NULL AND (rate_limit < 0 OR rate_limit > 1000000000) THEN
        RAISE EXCEPTION 'rate_limit must be between 1 and 1000000000, or 0 to remove the limit, got %',
            rate_limit USING ERRCODE = '22023';
    END IF;
    IF rate_period IS NOT NULL THEN
        PERFORM jq._check_interval('rate_period', rate_period, false);
    END IF;
    IF burst IS NOT NULL AND (burst < 1 OR burst > 1000000000) THEN
        RAISE EXCEPTION 'burst must be between 1 and 1000000000, got %', burst USING ERRCODE = '22023';
    END IF;
END $$;
COMMENT ON FUNCTION jq._check_flow_options(integer, integer, interval, integer) IS
'Internal: validates key_concurrency (1..1000000), rate_limit (0..1e9), rate_period (> 0, at most '
'100 years) and burst (1..1e9); NULL means "not given". Raises 22023.';

-- lock_timeout: it waits at most 2 s for its EXCLUSIVE lock on jq.jobs (55P03, see below).
CREATE OR REPLACE FUNCTION jq.drop_queue(name text, force boolean DEFAULT false,
                              caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET lock_timeout = '2s'
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
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
           EXISTS (SELECT 1 FROM ONLY jq.jobs j  -- jobs_claim_idx's key (sql/schema.sql)
                   WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(drop_queue.name, 0)
                     AND j.state = 'ready')
        OR EXISTS (SELECT 1 FROM ONLY jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'running')
        OR EXISTS (SELECT 1 FROM ONLY jq.jobs j  -- jobs_scheduled_queue_idx: this queue's only
                   WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(drop_queue.name, 0)
                     AND j.state = 'scheduled')
        OR EXISTS (SELECT 1 FROM ONLY jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'blocked'))
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
    DELETE FROM ONLY jq.jobs j
    WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(drop_queue.name, 0) AND j.state = 'ready';
    GET DIAGNOSTICS v_count = ROW_COUNT; v_jobs := v_jobs + v_count;
    DELETE FROM ONLY jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'running';
    GET DIAGNOSTICS v_count = ROW_COUNT; v_jobs := v_jobs + v_count;
    DELETE FROM ONLY jq.jobs j
    WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(drop_queue.name, 0) AND j.state = 'scheduled';
    GET DIAGNOSTICS v_count = ROW_COUNT; v_jobs := v_jobs + v_count;
    DELETE FROM ONLY jq.jobs j WHERE j.queue = drop_queue.name AND j.state = 'blocked';
    GET DIAGNOSTICS v_count = ROW_COUNT; v_jobs := v_jobs + v_count;
    DELETE FROM jq.key_slots s WHERE s.queue = drop_queue.name;
    -- Its kinds and their pending exhaustion hooks go with it (sql/kinds.sql).
    DELETE FROM jq.kinds k WHERE k.queue = drop_queue.name;
    DELETE FROM jq.pending_hooks h WHERE h.queue = drop_queue.name;
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
    PERFORM jq._wake_awaiters(drop_queue.name);  -- jq.await of its jobs reports them gone at commit
    RAISE LOG 'jq: dropped queue "%" with % jobs', drop_queue.name, v_jobs;
    RETURN true;
END $$;
COMMENT ON FUNCTION jq.drop_queue(text, boolean, bigint) IS
'Deletes a queue with its jobs, execution history, kinds (jq.kinds) and pending on_dead hooks. Refuses (55006 object_in_use) while the '
'queue has ready, blocked, scheduled or running jobs unless force => true; forced, those jobs are '
'cancelled by deletion and any late jq.complete / jq.fail / jq.heartbeat / jq.release on them is '
'a harmless false/NULL. It locks jq.jobs against writes (EXCLUSIVE) while it runs, so '
'an enqueue racing the drop never leaves a job behind; it waits at most 2 s for that lock, '
'then fails with 55P03 (lock_not_available: a transaction that wrote jobs is still open; retry). '
'Cron schedules targeting the queue also make it refuse (55006) unless force => true, which '
'deletes them (their fire log stays until its retention). '
'Needs READ COMMITTED. Errors: 22004/22023 bad name, 0A000 name under a nondeterministic collation, '
'42704 unknown queue, 55006 jobs or schedules remain, 55P03 busy, 25000 other isolation level. 42501: the caller holds no admin grant on every queue (''*'').';

CREATE OR REPLACE FUNCTION jq.pause(name text, caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    PERFORM jq._authorize_queue(pause.caller_ticket, pause.name, 'admin');
    -- jq.jobs before the queue row, the order jq.drop_queue takes them in (no deadlock).
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;
    UPDATE jq.queues t SET paused = true WHERE t.name = pause.name;
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(pause.name);
    END IF;
    RETURN true;
END $$;
COMMENT ON FUNCTION jq.pause(text, bigint) IS
'Pauses a queue: jq.claim returns no jobs from it until jq.resume. Enqueue, running jobs and '
'maintenance go on. Errors: 22004/22023 bad name, 42704 unknown queue. 42501: the caller holds no admin grant on the queue; 0A000: the name under a nondeterministic collation.';

CREATE OR REPLACE FUNCTION jq.resume(name text, caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    PERFORM jq._authorize_queue(resume.caller_ticket, resume.name, 'admin');
    -- jq.jobs before the queue row, the order jq.drop_queue takes them in (no deadlock).
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;
    UPDATE jq.queues t SET paused = false
    WHERE t.name = resume.name AND jq._wake_n(t.name, 2147483647);  -- every waiter may find work
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(resume.name);
    END IF;
    RETURN true;
END $$;
COMMENT ON FUNCTION jq.resume(text, bigint) IS
'Resumes a paused queue. Errors: 22004/22023 bad name, 42704 unknown queue. 42501: the caller holds no admin grant on the queue; 0A000: the name under a nondeterministic collation.';
