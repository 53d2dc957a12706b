-- jq schema: types, tables and the partial indexes the hot paths rely on.
--
-- Every index below is coupled to one query. A partial index is used only when the query's
-- predicate implies the index predicate, and a descending column only when its NULLS placement
-- matches the ORDER BY; nothing warns when they drift apart, so pg_test/tests/plans/ checks
-- each hot path with EXPLAIN. Change a predicate here and there together.

COMMENT ON SCHEMA jq IS
'jq: a durable job queue with a SQL API. See docs/semantics.md and docs/sql-api.md.';

CREATE TYPE jq.job_state AS ENUM ('scheduled', 'blocked', 'ready', 'running', 'completed', 'dead', 'cancelled');
COMMENT ON TYPE jq.job_state IS
'State of a job. scheduled: waiting for run_at (delayed or backing off before a retry); '
'blocked: due, but its concurrency_key has no free slot (docs/flow-control.md); ready: claimable now; running: claimed under a lease; completed, dead (attempts or lease '
'expiries exhausted: the dead-letter state) and cancelled are finished. See docs/semantics.md.';

CREATE TYPE jq.backoff_policy AS ENUM ('fixed', 'linear', 'exponential');
COMMENT ON TYPE jq.backoff_policy IS
'Retry delay before jitter: fixed = base; linear = base * attempt; exponential = base * 2^(attempt-1); '
'each capped at the queue''s backoff_max.';

CREATE TYPE jq.jitter_mode AS ENUM ('none', 'full');
COMMENT ON TYPE jq.jitter_mode IS
'none: the computed delay exactly; full: uniform in [0, computed delay) ("full jitter", '
'AWS Architecture Blog, Exponential Backoff And Jitter, 2015).';

CREATE TYPE jq.execution_outcome AS ENUM ('completed', 'failed', 'lease_expired', 'released', 'cancelled', 'snoozed');
COMMENT ON TYPE jq.execution_outcome IS
'How one execution (one claim) ended: completed; failed (jq.fail, attempt charged); '
'lease_expired (reaped, attempt refunded); released (jq.release, attempt refunded); '
'snoozed (jq.snooze, attempt refunded, due again after its delay); '
'cancelled (ended by a cancellation request).';

-- One row per queue. Queue names are plain values in shared tables: no per-queue DDL, so no
-- identifier limits, no truncation collisions and no per-queue grants to forget.
CREATE TABLE jq.queues (
    name               text PRIMARY KEY
                       CONSTRAINT queue_name_valid CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    paused             boolean NOT NULL DEFAULT false,
    max_concurrency    integer CHECK (max_concurrency IS NULL OR max_concurrency > 0),
    max_attempts       integer NOT NULL DEFAULT 25 CHECK (max_attempts BETWEEN 1 AND 1000000),
    lease              interval NOT NULL DEFAULT '5 minutes' CHECK (lease > interval '0'),
    backoff            jq.backoff_policy NOT NULL DEFAULT 'exponential',
    backoff_base       interval NOT NULL DEFAULT '1 second' CHECK (backoff_base >= interval '0'),
    backoff_max        interval NOT NULL DEFAULT '1 hour' CHECK (backoff_max >= interval '0'),
    jitter             jq.jitter_mode NOT NULL DEFAULT 'full',
    retention          interval NOT NULL DEFAULT '1 day' CHECK (retention >= interval '0'),
    dead_retention     interval NOT NULL DEFAULT '7 days' CHECK (dead_retention >= interval '0'),
    history_retention  interval NOT NULL DEFAULT '7 days' CHECK (history_retention >= interval '0'),
    max_lease_expiries integer NOT NULL DEFAULT 10 CHECK (max_lease_expiries BETWEEN 0 AND 1000000),
    -- Flow control (docs/flow-control.md). key_concurrency: running (or ready, or retrying)
    -- jobs per concurrency_key. rate_*: a token bucket of rate_burst tokens refilled at
    -- rate_limit per rate_period; rate_tokens / rate_updated are its state, written only by a
    -- claim holding this row's lock.
    key_concurrency    integer NOT NULL DEFAULT 1 CHECK (key_concurrency BETWEEN 1 AND 1000000),
    rate_limit         integer CHECK (rate_limit IS NULL OR rate_limit BETWEEN 1 AND 1000000000),
    rate_period        interval CHECK (rate_period IS NULL OR rate_period > interval '0'),
    rate_burst         integer CHECK (rate_burst IS NULL OR rate_burst BETWEEN 1 AND 1000000000),
    rate_tokens        double precision,
    rate_updated       timestamptz,
    -- Opt-in priority aging: a ready job's priority rises by 1 per priority_aging waited.
    priority_aging     interval CHECK (priority_aging IS NULL OR priority_aging > interval '0'),
    CONSTRAINT rate_limit_complete CHECK ((rate_limit IS NULL) = (rate_period IS NULL)
                                          AND (rate_limit IS NULL) = (rate_burst IS NULL)),
    created_at         timestamptz NOT NULL DEFAULT now(),
    -- The longest lease a claim or heartbeat of this queue may take (NULL: 100 years, the bound
    -- of every interval argument); longer requests get this one. Last: added in 0.2.0.
    max_lease          interval CHECK (max_lease IS NULL OR max_lease > interval '0'),
    -- Whether jq.kinds has a row of this queue: enqueues read a kind's defaults only then, so
    -- queues without kinds pay nothing for them (written by jq.alter_kind / jq.drop_kind).
    has_kinds          boolean NOT NULL DEFAULT false
);
-- A queue's key in jobs_claim_idx is the 64-bit hash of its name (see there), so no two queues
-- may share one. Two names with the same hash are about 2^-64 apart by chance; a second queue
-- whose name collides with an existing one is refused with 23505 (unique_violation).
CREATE UNIQUE INDEX queues_name_hash_idx ON jq.queues (pg_catalog.hashtextextended(name, 0));
COMMENT ON TABLE jq.queues IS
'One row per queue: pause flag, concurrency cap and the defaults of its jobs. Write it only '
'through jq.create_queue / jq.alter_queue / jq.drop_queue / jq.pause / jq.resume.';

CREATE SEQUENCE jq.jobs_id_seq AS bigint;

-- Storage settings for a high-churn table. Every job is inserted, updated 2-3 times (claim,
-- complete or fail, maybe heartbeats) and deleted by retention, so most of the table's life is
-- dead tuples. fillfactor 70 leaves room on each page so the new version of a row usually lands
-- on the same page as the old one (state changes move rows between partial indexes, so they are
-- not HOT, but same-page updates still keep the heap compact and the visibility map useful).
-- Autovacuum is triggered by 2% dead rows (instead of 20%), so that the partial indexes the
-- claim walks do not fill with dead entries between runs: a bloated claim index is the classic
-- way a Postgres queue slows down under load. Its cost delay is PostgreSQL's default, 2 ms, not
-- 0: after a long-held snapshot, an unthrottled vacuum removing millions of versions took a
-- whole vCPU from the workers; claims start past the dead head (claim hints), so a slower
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
    -- and UPDATE statement, and every claim and completion updates this table: a measurable
    -- share of a backend's CPU per claimed and completed job (perf; docs/BENCHMARKS.md). jq.jobs
    -- keeps no CHECK constraints (pg_test/tests/plans/tables.rs, hot_tables_have_no_check_constraints).
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
    result           jsonb,
    -- Written at enqueue (from its kind, sql/kinds.sql): the wall timeout of each attempt. A
    -- claim and a heartbeat never set lease_expires_at past started_at + timeout, so the reaper
    -- finds an overdue attempt in jobs_running_idx and ends it as failed (jq._time_out).
    timeout          interval,
    -- Written by jq.heartbeat when a worker reports progress (sql/finish.sql); kept across
    -- retries and lease expiries. Last: added in 0.2.0, and no claim or completion writes it.
    progress         jsonb
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 2
);
ALTER SEQUENCE jq.jobs_id_seq OWNED BY jq.jobs.id;
COMMENT ON TABLE jq.jobs IS
'One row per job. Change it only through jq functions: every transition is fenced on the state '
'(and lease token) it read. claims counts executions started (the seq of the current one); '
'attempt counts executions charged (lease expiries and releases are refunded); lease is the '
'length of the current lease, reused by jq.heartbeat when no extension is given. '
'concurrency_key: jobs sharing it in one queue run at most key_concurrency at a time, in '
'(run_at, id) order (docs/flow-control.md). base_priority / next_age_at: set only in queues with '
'priority_aging: the priority given at enqueue, and when the aging pass next raises priority. '
'progress: the latest progress a worker reported with jq.heartbeat (any JSON), kept across '
'retries and expired leases so the next attempt can resume from it; NULL until reported. '
'The table itself holds the live jobs (scheduled, blocked, ready, running); a job that finishes '
'moves to one of its history tables (jq.jobs_done_N, jq.jobs_dead_N, which inherit from it), so '
'SELECT ... FROM jq.jobs finds every job within retention and FROM ONLY jq.jobs the live ones '
'(docs/semantics.md, "Where finished jobs live").';

-- Claim: WHERE hashtextextended(queue, 0) = hashtextextended($1, 0) AND state = 'ready'
-- ORDER BY priority DESC, run_at, id LIMIT n.
-- The key leads with a 64-bit hash of the queue's name, not the name: every key column then
-- has a fixed width, so PostgreSQL finds priority, run_at and id at a cached offset in each
-- index entry instead of walking past the variable-width name (nocache_index_getattr), in
-- every comparison of the descent and of the scan, a cost seen both in a claim's CPU profile
-- (perf) and in the batch-1 drain rate (bench/experiments/ab_variant.sh; docs/BENCHMARKS.md).
-- The hash is a queue's key: no two queues share one (queues_name_hash_idx), and a dropped
-- queue's jobs go with it, so the jobs with a queue's hash are exactly that queue's. Queries
-- compare the hash alone: with the name compared too, the planner multiplied the two
-- selectivities, estimated a deep queue at a few rows, and chose a sorted bitmap scan of the
-- whole queue for its custom plans (pg_test/tests/plans/).
-- NULLS FIRST is what a plain DESC means; pinned so that nobody "fixes" it into NULLS LAST,
-- which silently turns the claim into a sort of the whole queue (pg_test/tests/plans/claim.rs,
-- claim_index_keeps_nulls_first_and_nulls_last_loses_the_ordered_claim).
-- INCLUDE (queue), after the fixed-width key, keeps jq.queue_stats' count of claimable jobs an
-- index-only scan.
CREATE INDEX jobs_claim_idx ON jq.jobs (pg_catalog.hashtextextended(queue, 0), priority DESC NULLS FIRST, run_at, id)
    INCLUDE (queue) WHERE state = 'ready';
-- The planner ignores the statistics of a partial index's expressions (they describe only the
-- index's rows), so without these it estimated every queue at 0.5% of the table and planned a
-- deep queue's batch claim as a sorted bitmap scan of all of it (pg_test/tests/plans/).
-- ANALYZE keeps them for the whole table, as it does for the column.
CREATE STATISTICS jq.jobs_queue_hash_stats ON (pg_catalog.hashtextextended(queue, 0)) FROM jq.jobs;
-- Promotion: WHERE state = 'scheduled' AND (run_at, id) > $last AND run_at <= $now ORDER BY
-- run_at, id (id: a unique key, so each pass starts exactly past the previous one; jq._promote).
CREATE INDEX jobs_scheduled_idx ON jq.jobs (run_at, id) WHERE state = 'scheduled';
-- One queue's scheduled jobs, due first: jq.queue_stats' and jq.overview's counts and
-- jq.list_jobs' page of them read only that queue's entries (keyed by the queue's hash, as
-- jobs_claim_idx). jobs_scheduled_idx, which promotion walks across queues in due order, made
-- each queue's count read every queue's scheduled jobs: queues x backlog per metrics scrape
-- (pg_test/tests/plans/observe.rs). Only jobs entering the scheduled state (a future run_at, a
-- retry's backoff, a snooze) write an entry; the claim and the completion do not. INCLUDE
-- (queue), as jobs_claim_idx: the counts are index-only scans.
CREATE INDEX jobs_scheduled_queue_idx ON jq.jobs (pg_catalog.hashtextextended(queue, 0), run_at, id)
    INCLUDE (queue) WHERE state = 'scheduled';
-- Reaping: WHERE state = 'running' AND lease_expires_at >= $last AND lease_expires_at < $now
-- ORDER BY lease_expires_at (jq._reap). Without id: a wider key tipped the running count of a
-- capped queue's claim (queue = $1 AND state = 'running', filtered from this index) into a
-- sequential scan (pg_test/tests/plans/claim.rs).
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
-- Finished jobs: the hot table holds one only within the statement that finishes it (the
-- trigger jobs_retire moves it to the history, below), so these two stay all but empty. They let
-- a query of jq.jobs for finished jobs (the dashboard's lists and counts, jq.queue_stats) pass
-- over the hot table with an index probe instead of a scan of the live jobs; the history tables
-- carry the same (queue, finished_at, id) key.
CREATE INDEX jobs_finished_idx ON jq.jobs (queue, finished_at, id)
    WHERE state IN ('completed', 'cancelled');
CREATE INDEX jobs_dead_idx ON jq.jobs (queue, finished_at, id)
    WHERE state = 'dead';

-- Finished jobs leave the hot table. jq.jobs itself holds the live jobs (scheduled, blocked,
-- ready, running); a job that finishes is moved, in the statement that finishes it, into a
-- history table that inherits from jq.jobs (jq._retire_job, sql/history.sql). So a query of
-- jq.jobs still finds every job of its retention, live or finished ("what happened to job N"),
-- while the claim, the reaper and every other hot path read `ONLY jq.jobs`: a table of live
-- jobs, whose size and dead tuples do not grow with the history (docs/semantics.md, "Where
-- finished jobs live").
--
-- The history is two rings of eight tables each: jq.jobs_done_0..7 (completed and cancelled
-- jobs, kept for their queue's retention) and jq.jobs_dead_0..7 (dead jobs, dead_retention).
-- Each ring writes into its current table (jq.history_rings.current). Maintenance moves a ring
-- on to its next table once that one is empty and the current one has been written for a
-- ring's span / 6 (jq._rotate_history), and empties a table with TRUNCATE, never row deletes,
-- once every job in it is past its queue's retention (jq._truncate_history). TRUNCATE frees the
-- table's storage at once, whatever snapshot another session holds, and leaves nothing for
-- vacuum. The tables exist from CREATE EXTENSION on (no DDL at run time), so pg_dump
-- dumps them like any other table of jq's.
-- Their CHECK constraints let the planner skip a ring whose state a query excludes
-- (constraint_exclusion = partition, the default): jq.jobs WHERE state = 'dead' reads the
-- parent and the dead ring only. The hot table itself keeps no CHECK (see above).
CREATE TABLE jq.history_rings (
    ring    text PRIMARY KEY CHECK (ring IN ('done', 'dead')),
    current integer NOT NULL CHECK (current BETWEEN 0 AND 7),
    since   timestamptz NOT NULL
);
COMMENT ON TABLE jq.history_rings IS
'The two rings of history tables that finished jobs move to: done (jq.jobs_done_0..7: completed '
'and cancelled jobs) and dead (jq.jobs_dead_0..7). current: the table a finishing job is written '
'to; since: when it became current. Written only by maintenance (jq._rotate_history).';
INSERT INTO jq.history_rings (ring, current, since) VALUES ('done', 0, now()), ('dead', 0, now());
-- Not registered for pg_dump: it times the rotation, and CREATE EXTENSION writes its rows. A
-- restore starts both rings at table 0 again, which is correct whatever the restored tables
-- hold: a table is emptied only once every job in it is past retention.

DO $$
DECLARE
    v_ring  text;
    v_slot  integer;
    v_table text;
BEGIN
    FOREACH v_ring IN ARRAY ARRAY['done', 'dead'] LOOP
        FOR v_slot IN 0..7 LOOP
            v_table := pg_catalog.format('jobs_%s_%s', v_ring, v_slot);
            EXECUTE pg_catalog.format(
                'CREATE TABLE jq.%I (CONSTRAINT %I CHECK (%s)) INHERITS (jq.jobs)',
                v_table, v_table || '_state',
                CASE v_ring WHEN 'done' THEN $c$state IN ('completed', 'cancelled')$c$
                            ELSE $c$state = 'dead'$c$ END);
            -- By id: "what happened to job N". By (queue, finished_at, id): the dashboard's
            -- lists and counts, jq.queue_stats and the retention check of jq._truncate_history.
            EXECUTE pg_catalog.format('CREATE INDEX %I ON jq.%I (id)', v_table || '_id_idx', v_table);
            EXECUTE pg_catalog.format('CREATE INDEX %I ON jq.%I (queue, finished_at, id)',
                                      v_table || '_queue_idx', v_table);
            EXECUTE pg_catalog.format('COMMENT ON TABLE jq.%I IS %L', v_table,
                pg_catalog.format('History of jq.jobs, ring %s, table %s: finished jobs (%s), '
                                  'moved here when they finished; emptied by TRUNCATE once all are '
                                  'past their retention (docs/semantics.md). Read it through jq.jobs.',
                                  v_ring, v_slot,
                                  CASE v_ring WHEN 'done' THEN 'completed, cancelled' ELSE 'dead' END));
            PERFORM pg_catalog.pg_extension_config_dump(pg_catalog.format('jq.%I', v_table)::regclass, '');
        END LOOP;
    END LOOP;
END $$;

-- Execution history. A completed execution is recorded in its job row, which keeps everything
-- the execution was (claims is its seq; attempt, started_at, lease_expires_at, worker and
-- finished_at are left as the completion found them, and a completed job never changes state
-- again). Every other way an execution ends (jq.fail, jq.release, jq.snooze, the reaper, a
-- cancellation) appends one row to jq.execution_log, which outlives job pruning until the
-- queue's history_retention. So the completion, the path every job takes, writes no history
-- row: that row and its primary-key entry were about 190 of its WAL bytes per job
-- (docs/BENCHMARKS.md). jq.executions, the view below, reads both as one history.
--
-- The log's primary key makes (job_id, seq) unique: seq comes from jobs.claims and is never
-- reused, even when the attempt is refunded (pg_test/tests/flow/rate_limits.rs,
-- snooze_refunds_the_attempt_records_the_execution_and_is_fenced). The BRIN index serves pruning at
-- almost no insert cost because rows arrive in finished_at order (autosummarize keeps new
-- ranges from being read on every pass).
CREATE TABLE jq.execution_log (
    job_id           bigint NOT NULL,
    seq              bigint NOT NULL,
    attempt          integer NOT NULL,
    outcome          jq.execution_outcome NOT NULL,
    started_at       timestamptz NOT NULL,
    lease_expires_at timestamptz,
    finished_at      timestamptz NOT NULL,
    queue            text NOT NULL,
    worker           text,
    error            text,
    CONSTRAINT execution_log_pkey PRIMARY KEY (job_id, seq)
) WITH (
    autovacuum_vacuum_insert_scale_factor = 0.05
);
CREATE INDEX execution_log_finished_brin ON jq.execution_log USING brin (finished_at)
    WITH (pages_per_range = 32, autosummarize = on);
-- The failed executions of a queue, newest first: jq.throughput reads at most its max_rows of
-- them per queue (an index-only scan, backwards), however many failures the hour had
-- (pg_test/tests/plans/observe.rs, throughput_reads_at_most_max_rows_per_queue). Only failed
-- rows carry an entry, so only the failure path pays for it.
CREATE INDEX execution_log_failed_idx ON jq.execution_log (queue, finished_at) WHERE outcome = 'failed';
COMMENT ON TABLE jq.execution_log IS
'Append-only history of the executions that did not complete their job: one row per claim that '
'ended as failed, lease_expired, released, snoozed or cancelled, kept for the queue''s '
'history_retention (a completed execution is its job row). Written only by jq functions; read '
'jq.executions, which adds the completed executions.';

-- Per-key slot counts: one row per (queue, concurrency_key) with a job holding a slot (ready,
-- running, or scheduled for a retry or after a snooze). Every change of a key's slots locks
-- its row first, so the count and the promotion of blocked jobs never interleave; the row is
-- deleted when its count drops to 0 (then the key has no blocked job either).
CREATE TABLE jq.key_slots (
    queue           text NOT NULL,
    concurrency_key text NOT NULL,
    used            integer NOT NULL CHECK (used >= 0),
    PRIMARY KEY (queue, concurrency_key)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
COMMENT ON TABLE jq.key_slots IS
'Per-key serialisation state: used = jobs of (queue, concurrency_key) holding a slot (ready, '
'running, or scheduled again after a claim: retry backoff, snooze). At most the queue''s '
'key_concurrency; the rest of the key''s due jobs wait in state blocked. Written only by jq '
'functions (jq._key_fill).';

-- The row jq.claim returns per claimed job.
CREATE TYPE jq.claimed_job AS (
    id               bigint,
    queue            text,
    kind             text,
    payload          jsonb,
    attempt          integer,
    max_attempts     integer,
    lease_token      uuid,
    lease_expires_at timestamptz,
    priority         integer,
    run_at           timestamptz,
    created_at       timestamptz,
    timeout          interval,
    progress         jsonb
);
COMMENT ON TYPE jq.claimed_job IS
'One claimed job: pass id and lease_token to jq.complete / jq.fail / jq.heartbeat / jq.release. '
'timeout: the attempt''s wall timeout (its kind''s, NULL: none); the lease never runs past '
'started_at + timeout, when maintenance ends the attempt as failed. '
'progress: the latest progress reported by an earlier attempt (jq.heartbeat), NULL if none.';

CREATE TYPE jq.tick_result AS (
    promoted integer,
    reaped   integer,
    pruned   integer,
    fired    integer
);
COMMENT ON TYPE jq.tick_result IS
'Counts of one maintenance pass: jobs promoted scheduled -> ready, expired leases reaped, '
'finished jobs and execution rows pruned, jobs enqueued by cron schedules.';

-- Extension tables are left out of pg_dump unless registered: without this a dump/restore
-- silently loses every queue, job and history row.
SELECT pg_catalog.pg_extension_config_dump('jq.queues', '');
SELECT pg_catalog.pg_extension_config_dump('jq.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('jq.jobs_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jq.execution_log', '');
SELECT pg_catalog.pg_extension_config_dump('jq.key_slots', '');

-- Security (docs/security.md). The three roles are cluster-wide, so they are created only if
-- missing (another database's jq, or an earlier install, may have made them) and outlive
-- DROP EXTENSION. They carry EXECUTE on jq's functions (sql/grants.sql); queue rights come
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
-- Registered for pg_dump in sql/grants.sql (last, where 0.1.0's upgrade script registers it too).

CREATE TABLE jq.schedules (
    name          text PRIMARY KEY
                  CONSTRAINT schedule_name_valid CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    cron          text NOT NULL,
    timezone      text NOT NULL DEFAULT 'UTC',
    queue         text NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}',
    kind          text,
    priority      integer NOT NULL DEFAULT 0,
    max_attempts  integer CHECK (max_attempts BETWEEN 1 AND 1000000),
    misfire       text NOT NULL DEFAULT 'fire_once'
                  CHECK (misfire IN ('fire_once', 'skip', 'fire_all')),
    overlap       text NOT NULL DEFAULT 'allow' CHECK (overlap IN ('allow', 'skip_if_running')),
    enabled       boolean NOT NULL DEFAULT true,
    next_run_at   timestamptz,
    next_run_from timestamptz NOT NULL DEFAULT now(),
    last_fired_at timestamptz,
    last_job_id   bigint,
    fired_count   bigint NOT NULL DEFAULT 0,
    skipped_count bigint NOT NULL DEFAULT 0,
    last_error    text,
    last_error_at timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    created_by    regrole
);
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

-- jq.cron_tick: WHERE enabled AND next_run_at <= $at ORDER BY next_run_at.
CREATE INDEX schedules_due_idx ON jq.schedules (next_run_at) WHERE enabled;
-- jq.cron_tick's clock guard: WHERE enabled AND next_run_from > $at (normally no row).
CREATE INDEX schedules_clock_idx ON jq.schedules (next_run_from) WHERE enabled;

CREATE TABLE jq.cron_runs (
    schedule  text NOT NULL,
    fire_time timestamptz NOT NULL,
    outcome   text NOT NULL
              CHECK (outcome IN ('enqueued', 'skipped_misfire', 'skipped_overlap', 'failed')),
    job_id    bigint,
    fired_at  timestamptz NOT NULL,
    error     text,
    CONSTRAINT cron_runs_pkey PRIMARY KEY (schedule, fire_time)
);
COMMENT ON TABLE jq.cron_runs IS
'The cron fire log: at most one row per (schedule, fire_time) (primary key), written in the same '
'transaction as the job it enqueued, so a fire time is never enqueued twice. outcome: enqueued '
'(job_id), skipped_misfire (the latest due fire time was outside the skip policy''s grace), '
'skipped_overlap (the previous job was still unfinished), failed (error). fired_at: the pass '
'instant. Kept for jq.cron_log_retention() after fire_time, independently of job retention.';
-- Retention: WHERE fire_time < $cutoff. Workers find the fire time of their job by job_id.
CREATE INDEX cron_runs_fire_time_idx ON jq.cron_runs (fire_time);
CREATE INDEX cron_runs_job_idx ON jq.cron_runs (job_id) WHERE job_id IS NOT NULL;

SELECT pg_catalog.pg_extension_config_dump('jq.schedules', '');
SELECT pg_catalog.pg_extension_config_dump('jq.cron_runs', '');

-- Job kinds (sql/kinds.sql): the policy of one kind of job in one queue. A NULL option falls
-- back to the queue's. max_attempts and timeout are copied into each job at enqueue; backoff,
-- jitter and on_dead are read when an attempt ends (docs/semantics.md, "Job kinds").
-- on_dead is kept as text (the hook's qualified name and argument type), not regprocedure:
-- pg_upgrade refuses tables with regprocedure columns, and the text resolves again after a
-- dump and restore. on_dead_owner / on_dead_by: the hook's owner and the role that registered
-- it, checked again at every call (jq._hook_problem).
CREATE TABLE jq.kinds (
    queue         text NOT NULL,
    kind          text NOT NULL CHECK (kind <> '' AND length(kind) <= 200),
    max_attempts  integer CHECK (max_attempts BETWEEN 1 AND 1000000),
    backoff       jq.backoff_policy,
    backoff_base  interval CHECK (backoff_base >= interval '0'),
    backoff_max   interval CHECK (backoff_max >= interval '0'),
    jitter        jq.jitter_mode,
    timeout       interval CHECK (timeout > interval '0'),
    on_dead       text,
    on_dead_owner regrole,
    on_dead_by    regrole,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT kinds_pkey PRIMARY KEY (queue, kind),
    CONSTRAINT kinds_hook_complete CHECK ((on_dead IS NULL) = (on_dead_owner IS NULL)
                                          AND (on_dead IS NULL) = (on_dead_by IS NULL))
);
COMMENT ON TABLE jq.kinds IS
'Per-kind policy of a queue (jq.alter_kind / jq.drop_kind; read it through jq.kind_policies): '
'max_attempts, backoff, backoff_base, backoff_max, jitter (NULL: the queue''s), timeout (the '
'wall timeout of an attempt; NULL: none) and on_dead (a function taking jq.jobs, called in the '
'transaction that moves a job of this kind to dead, as its owner on_dead_owner; on_dead_by '
'registered it). Rows of a dropped queue are deleted with it.';

-- Dead jobs whose on_dead hook raised: maintenance calls the hook again at next_at (backoff
-- doubling from 10 seconds up to an hour) until it succeeds or jq.clear_hook removes the row.
-- job: the dead job row as JSON, which the hook gets again once retention has pruned the job;
-- while the job row exists it gets that row, and a job that jq.retry took out of dead drops
-- its pending hook.
CREATE TABLE jq.pending_hooks (
    job_id     bigint PRIMARY KEY,
    queue      text NOT NULL,
    kind       text NOT NULL,
    hook       text NOT NULL,
    job        jsonb NOT NULL,
    attempts   integer NOT NULL,
    next_at    timestamptz NOT NULL,
    last_error text,
    failed_at  timestamptz
);
-- Retries: WHERE next_at <= $now ORDER BY next_at LIMIT batch (jq._retry_hooks).
CREATE INDEX pending_hooks_next_idx ON jq.pending_hooks (next_at);
COMMENT ON TABLE jq.pending_hooks IS
'One row per dead job whose on_dead hook has not succeeded: the hook (qualified name and '
'argument), the job row as it went dead (job, JSON), how often it was called (attempts), when maintenance calls it next (next_at), the '
'error of the last call (last_error, "SQLSTATE: message") and when it failed (failed_at); attempts 0 with last_error and failed_at NULL: '
'queued by the background worker''s reaper, not called yet. '
'Written only by jq functions; jq.clear_hook deletes a row.';

SELECT pg_catalog.pg_extension_config_dump('jq.kinds', '');
SELECT pg_catalog.pg_extension_config_dump('jq.pending_hooks', '');

-- The worker fleet (sql/fleet.sql): one row per registered worker process, written by its own
-- calls (jq.register_worker, a beat every jq.worker_beat_interval(), jq.deregister_worker) and
-- pruned by maintenance. Nothing on the claim or completion path reads or writes it: leases
-- stay the only truth about who runs what, and recovery never looks here.
-- A beat updates in_flight, rss_bytes, last_beat_at and samples, none of them indexed, so with
-- the free room fillfactor leaves on each page the new row version stays on its page (a HOT
-- update: no index entry, pruned in place). samples is kept inline and compressed (STORAGE
-- MAIN): 60 samples compress to well under a page, and an out-of-line value would be copied to
-- the TOAST table on every beat. Not registered for pg_dump: it describes processes, not data;
-- after a restore each worker's next beat returns false and it registers again.
CREATE TABLE jq.workers (
    worker_id      uuid PRIMARY KEY,
    name           text NOT NULL CHECK (name <> '' AND length(name) <= 200),
    hostname       text NOT NULL CHECK (length(hostname) <= 255),
    pid            integer NOT NULL CHECK (pid > 0),
    client_version text CHECK (length(client_version) <= 100),
    jq_version     text,
    queues         text[] NOT NULL CHECK (cardinality(queues) BETWEEN 1 AND 100),
    concurrency    integer NOT NULL CHECK (concurrency BETWEEN 1 AND 1000000),
    in_flight      integer NOT NULL DEFAULT 0 CHECK (in_flight >= 0),
    rss_bytes      bigint NOT NULL DEFAULT 0 CHECK (rss_bytes >= 0),
    started_at     timestamptz NOT NULL,
    last_beat_at   timestamptz NOT NULL,
    stopped_at     timestamptz,
    samples        jsonb NOT NULL DEFAULT '[]'
                   CHECK (jsonb_typeof(samples) = 'array' AND jsonb_array_length(samples) <= 60),
    registered_by  regrole NOT NULL
) WITH (fillfactor = 50);
ALTER TABLE jq.workers ALTER COLUMN samples SET STORAGE MAIN;
COMMENT ON TABLE jq.workers IS
'The worker fleet: one row per worker process registered with jq.register_worker (read it '
'through the view jq.fleet). name, hostname, pid, client_version: as the worker gave them; '
'jq_version: the extension version at registration; queues and concurrency: what it works; '
'in_flight (jobs held) and rss_bytes (resident memory, bytes; 0 unknown) as of its last beat '
'(last_beat_at); started_at: registration; stopped_at: jq.deregister_worker (graceful stop), '
'NULL while running; samples: a JSON array, oldest first, of at most 60 '
'{"at": epoch seconds, "running": in_flight, "rss": bytes}, one per beat; registered_by: the '
'role that registered it, the only one (with jq_admin) whose beats and deregistration count. '
'Never read by claims, completions or recovery. Pruned by maintenance jq.worker_retention() '
'after its stop or last beat.';
