-- The hand-written part of the upgrade jq 0.1.0 -> 0.2.0: first the functions and views of 0.1.0
-- that 0.2.0's CREATE OR REPLACE cannot replace in place, then what changes in the objects of
-- sql/schema.sql (tables, indexes, sequences, types, roles, pg_dump registrations) and the data
-- they hold. tools/upgrade-script runs it before the part of the install script that creates
-- (or replaces) 0.2.0's functions, views, comments and grants (docs/upgrades.md). So the
-- functions of 0.1.0 it did not drop still exist while it runs; plpgsql bodies are not checked
-- against the tables they name, and none of them runs here.
--
-- pg_test/tests/upgrade.rs checks that 0.1.0 + the assembled script has exactly the catalog of a
-- fresh 0.2.0 install (a change to sql/schema.sql needs its counterpart here) and that a
-- populated database keeps every row and lease.
--
-- What changes:
--   * roles jq_admin, jq_producer, jq_worker; table jq.queue_grants;
--   * queues are keyed by the hash of their name (queues_name_hash_idx);
--   * jq.schedules.created_by, checked by every cron fire;
--   * privileges that roles other than the owner held on jq's tables are taken back;
--   * jq.jobs is rebuilt with its columns in a new order (less WAL per claim and completion);
--   * a completion writes no history row: the completed job row records its execution. The
--     table jq.executions becomes jq.execution_log (the other outcomes); jq.executions becomes a
--     view over both (sql/history.sql);
--   * finished jobs move out of jq.jobs into history tables that inherit from it, emptied by
--     TRUNCATE once past retention (jq.history_rings, jq.jobs_done_N, jq.jobs_dead_N).
-- Jobs, leases and history are kept: a worker holding a lease completes it after the upgrade
-- with the same token.

-- What CREATE OR REPLACE cannot do. The functions that name a queue take a new last parameter,
-- caller_ticket, and jq._promote, jq._reap and jq._prune a new last parameter, budget (so their
-- signatures change; CREATE OR REPLACE would add an overload).
-- jq.queue_stats changes its columns and reads jq.jobs, which is rebuilt below. A user object
-- that depends on one of these makes the update fail with 2BP01 and changes nothing
-- (docs/upgrades.md); every other function and view is replaced in place, keeping its grants
-- and dependents.
-- jq.jobs first, before any other table of 0.1.0 is altered: 0.1.0's statements lock jq.jobs
-- before jq.queues (a claim updates jq.jobs FROM jq.queues), so a claim holding jq.jobs and
-- waiting for a queue row's table that this script altered first would deadlock with this
-- script's own lock on jq.jobs below (seen in pg_test/tests/upgrade.rs,
-- upgrade_of_a_populated_database_while_workers_hold_leases). Workers and producers wait on it
-- for as long as the upgrade takes.
LOCK TABLE jq.jobs IN ACCESS EXCLUSIVE MODE;
DROP FUNCTION jq.enqueue(text, jsonb, text, timestamptz, interval, integer, integer, text, text);
DROP FUNCTION jq.enqueue_many(text, jsonb, text, timestamptz, interval, integer, integer, boolean);
DROP FUNCTION jq.create_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, boolean, integer);
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
DROP VIEW jq.queue_stats;

-- Roles and per-queue grants (as in sql/schema.sql).
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

SELECT pg_catalog.pg_extension_config_dump('jq.queue_grants', '');

-- Queues are keyed by the hash of their name in jobs_claim_idx (as in sql/schema.sql).
-- A queue's key in jobs_claim_idx is the 64-bit hash of its name (see there), so no two queues
-- may share one. Two names with the same hash are about 2^-64 apart by chance; a second queue
-- whose name collides with an existing one is refused with 23505 (unique_violation).
CREATE UNIQUE INDEX queues_name_hash_idx ON jq.queues (pg_catalog.hashtextextended(name, 0));

-- Schedules remember who defined them (as in sql/cron.sql).
ALTER TABLE jq.schedules ADD COLUMN created_by regrole;
ALTER TABLE jq.queues ADD COLUMN max_lease interval CHECK (max_lease IS NULL OR max_lease > interval '0');

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

-- 0.1.0 granted nothing and told DBAs to give their roles USAGE on jq and privileges on its
-- tables. In 0.2.0 the tables change only through the functions and payloads are visible only
-- per queue: take back every privilege a role other than the owner holds on jq's tables, views
-- and sequences (sql/grants.sql grants jq_admin's SELECT again). Give those roles queues with
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
CREATE INDEX execution_log_failed_idx ON jq.execution_log (queue, finished_at) WHERE outcome = 'failed';
ALTER SEQUENCE jq.jobs_id_seq OWNED BY NONE;
ALTER TABLE jq.jobs RENAME TO jobs_0_1_0;
-- Free the names the new table's constraints take (constraint names are unique per schema).
ALTER TABLE jq.jobs_0_1_0 DROP CONSTRAINT jobs_pkey, DROP CONSTRAINT jobs_max_attempts_check;
DROP INDEX jq.jobs_claim_idx, jq.jobs_scheduled_idx, jq.jobs_running_idx, jq.jobs_idempotency_idx,
           jq.jobs_blocked_idx, jq.jobs_aging_idx, jq.jobs_finished_idx, jq.jobs_dead_idx;

-- The new jq.jobs, its indexes and statistics, exactly as in sql/schema.sql (which says why each is
-- there).
CREATE TABLE jq.jobs (
    id               bigint PRIMARY KEY DEFAULT nextval('jq.jobs_id_seq'),
    priority         integer NOT NULL DEFAULT 0,
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
    attempt          integer NOT NULL DEFAULT 0,
    claims           bigint NOT NULL DEFAULT 0,
    started_at       timestamptz,
    lease_expires_at timestamptz,
    lease            interval,
    lease_token      uuid,
    worker           text,
    state            jq.job_state NOT NULL,
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

CREATE INDEX jobs_claim_idx ON jq.jobs (pg_catalog.hashtextextended(queue, 0), priority DESC NULLS FIRST, run_at, id)
    INCLUDE (queue) WHERE state = 'ready';

CREATE STATISTICS jq.jobs_queue_hash_stats ON (pg_catalog.hashtextextended(queue, 0)) FROM jq.jobs;

CREATE INDEX jobs_scheduled_idx ON jq.jobs (run_at, id) WHERE state = 'scheduled';

CREATE INDEX jobs_scheduled_queue_idx ON jq.jobs (pg_catalog.hashtextextended(queue, 0), run_at, id)
    INCLUDE (queue) WHERE state = 'scheduled';

CREATE INDEX jobs_running_idx ON jq.jobs (lease_expires_at) WHERE state = 'running';

CREATE UNIQUE INDEX jobs_idempotency_idx ON jq.jobs (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('scheduled', 'blocked', 'ready', 'running');

CREATE INDEX jobs_blocked_idx ON jq.jobs (queue, concurrency_key, run_at, id)
    WHERE state = 'blocked';

CREATE INDEX jobs_aging_idx ON jq.jobs (next_age_at)
    WHERE state = 'ready' AND next_age_at IS NOT NULL;

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

-- Job kinds (sql/kinds.sql; as in sql/schema.sql): a flag on the queue, the wall timeout on the
-- job (and in the claim's row), the kinds' policies and the pending exhaustion hooks. Appended
-- last, as the columns are in sql/schema.sql.
ALTER TABLE jq.queues ADD COLUMN has_kinds boolean NOT NULL DEFAULT false;
ALTER TABLE jq.jobs ADD COLUMN timeout interval;
ALTER TYPE jq.claimed_job ADD ATTRIBUTE timeout interval;
COMMENT ON TYPE jq.claimed_job IS
'One claimed job: pass id and lease_token to jq.complete / jq.fail / jq.heartbeat / jq.release. '
'timeout: the attempt''s wall timeout (its kind''s, NULL: none); the lease never runs past '
'started_at + timeout, when maintenance ends the attempt as failed.';

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
-- Progress (sql/schema.sql): jq.heartbeat stores a worker's latest progress on the job, and the
-- claim returns it. Both are appended last, as in a fresh install; the heartbeat takes a new
-- last parameter, so its 0.1.0 signature goes (CREATE OR REPLACE would add an overload).
DROP FUNCTION jq.heartbeat(bigint, uuid, interval);
ALTER TABLE jq.jobs ADD COLUMN progress jsonb;
ALTER TYPE jq.claimed_job ADD ATTRIBUTE progress jsonb;
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
COMMENT ON TYPE jq.claimed_job IS
'One claimed job: pass id and lease_token to jq.complete / jq.fail / jq.heartbeat / jq.release. '
'timeout: the attempt''s wall timeout (its kind''s, NULL: none); the lease never runs past '
'started_at + timeout, when maintenance ends the attempt as failed. '
'progress: the latest progress reported by an earlier attempt (jq.heartbeat), NULL if none.';
-- The worker fleet (sql/fleet.sql; as in sql/schema.sql): one row per registered worker process, written by its own
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

-- Finished jobs leave the hot table (as in sql/schema.sql, which says why): the history rings,
-- then the finished jobs of the rebuilt jq.jobs moved into the first table of their ring. They
-- are emptied, as every history table, once all their jobs are past retention.
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
WITH moved AS (DELETE FROM ONLY jq.jobs j WHERE j.state IN ('completed', 'cancelled') RETURNING j.*)
INSERT INTO jq.jobs_done_0 SELECT * FROM moved;
WITH moved AS (DELETE FROM ONLY jq.jobs j WHERE j.state = 'dead' RETURNING j.*)
INSERT INTO jq.jobs_dead_0 SELECT * FROM moved;
