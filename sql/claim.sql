-- Claiming: jq.claim (one queue, then several) and its helpers. A job meets this file when it
-- is 'ready'; it leaves 'running' under a fresh lease token, and sql/finish.sql ends the claim.
--
-- The claim's two hot calls, jq.claim and jq.complete, run as the owner (SECURITY DEFINER)
-- with no SET clause: PostgreSQL 15 saves and restores the settings around every call of a
-- function that has one, and walks all of them when it returns, a cost measured on the drain
-- rate (docs/BENCHMARKS.md). So every name in them is schema-qualified: tables and functions,
-- types that are not SQL keywords (pg_catalog.text; a temporary type would be found first), and
-- operators, which a caller's schema before pg_catalog could otherwise shadow:
-- OPERATOR(pg_catalog.=). The internal SQL functions inlined into them are qualified too; the
-- plpgsql and non-inlined ones they call have their own SET search_path. Those run only on the
-- other paths (batch claims, once per batch; capped, rate-limited and keyed queues; long-polls;
-- argument errors). pg_test/tests/security/search_path.rs, hot_functions_ignore_the_callers_search_path.
--
-- No DECLARE defaults and few plpgsql expressions on the hot path: plpgsql prepares each
-- expression again in every transaction, and a worker's claim is usually its transaction's
-- only call (docs/BENCHMARKS.md, "Where jq's time goes").
--
-- The claim statement. One statement claims: the rows are picked and locked by an
-- uncorrelated sub-select on the partial claim index (FOR UPDATE SKIP LOCKED), then updated
-- through the primary key (batches) or by ctid (one job: a Tid Scan, no index to open and
-- descend, which drains faster; docs/BENCHMARKS.md). A row lock holds the row in place, so its
-- ctid stays its own until this transaction ends. One case differs: if a transaction that
-- committed after this statement's snapshot updated the row and left it ready (priority aging;
-- a claim and its release), the lock is taken on that newer version and the sub-select returns
-- its ctid, which the UPDATE, reading this statement's snapshot, does not see: nothing is
-- claimed though a row is locked. So when the ctid copy claims nothing but may have locked a
-- row, the same range is claimed again by id (jq._claim_batch, n = 1, a new snapshot: the
-- locked row is ours). A row lock needs a transaction id, so a claim whose transaction has none
-- after the ctid copy locked nothing (an empty queue, a paused one, the first unlocked look at a
-- capped one) and costs no second statement; inside a transaction that already wrote, an empty
-- claim always looks again. If a job that sorts first became claimable between the two
-- statements, the look by id claims that one and the locked row waits for this transaction to
-- end (then the next full claim, within about a second, or up to a minute while an old snapshot
-- is open, finds it).
-- pg_test/tests/exactly_once/one_job.rs, one_job_claims_find_rows_updated_since_their_snapshot.
-- The queue row gates it (unpaused, and uncapped unless we hold the cap lock) and gives the
-- default lease, so the common case costs one statement. Written as ctid (or id) = ANY
-- (ARRAY(...)), not as a join against a CTE, whose cached generic plan was a hash join over the
-- whole queue. The lease starts when the row is claimed (clock_timestamp), not when the
-- caller's transaction or this statement began, so waiting for locks does not shorten it.
--
-- The four copies of the claim statement. The partial claim index is matched only by a
-- predicate written out in each statement, and the one-job and batch forms need different
-- shapes, so the statement exists four times, kept side by side: in jq.claim, the hinted and
-- the full one-job copies (constant LIMIT 1, no ORDER BY so no Sort, no outer SELECT: the
-- per-row calls sit in RETURNING, which runs once per row updated); in jq._claim_batch, the
-- hinted and the full batch copies (a parameter LIMIT and an outer SELECT for the ORDER BY).
-- Their SET and RETURNING lists must stay the same: pg_test/tests/catalog.rs,
-- the_four_claim_statements_set_and_return_the_same_columns.
-- pg_test/tests/plans/claim.rs checks the selections in both plan modes.

CREATE OR REPLACE FUNCTION jq.max_claim_batch() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1000 $$;
COMMENT ON FUNCTION jq.max_claim_batch() IS 'Largest n accepted by jq.claim: 1,000 jobs per call.';

-- The per-row effects of a claim, named. Each claimed row must, in the statement that claims
-- it, (1) ask for the queue's waiters to be woken if this claim rolls back (it hands its jobs
-- back: pg_test/tests/bgworker/long_poll.rs, a_claim_rolled_back_to_a_savepoint_wakes_a_waiter) and
-- (2) move the claim-start hint past it (src/claim_hint.rs; pg_test/tests/claim_hint.rs).
-- They run once per row actually claimed: in the one-job copies' RETURNING, in the batch
-- copies' outer SELECT over the claimed rows, never in the UPDATE's WHERE, where the planner
-- may run them on rows it then rejects. Both functions are plain SQL expressions with no
-- settings, so the planner inlines them: the plans are those of the expressions written out.
CREATE OR REPLACE FUNCTION jq._note_claimed(queue text, priority integer, run_at timestamptz, id bigint)
RETURNS boolean
LANGUAGE sql AS $$
    SELECT jq._wake_on_abort(queue) AND jq._hint_advance(queue, priority, run_at, id)
$$;
COMMENT ON FUNCTION jq._note_claimed(text, integer, timestamptz, bigint) IS
'Internal: the per-row effects of claiming job id of queue (at priority, run_at): wakes the '
'queue''s waiters if the claim rolls back and moves the claim-start hint past the job. Always '
'true; a filter of the batch claim''s rows. Inlined.';

CREATE OR REPLACE FUNCTION jq._note_claimed_created_at(queue text, priority integer, run_at timestamptz, id bigint,
                                            created_at timestamptz)
RETURNS timestamptz
LANGUAGE sql AS $$
    SELECT CASE WHEN jq._note_claimed(queue, priority, run_at, id) THEN created_at END
$$;
COMMENT ON FUNCTION jq._note_claimed_created_at(text, integer, timestamptz, bigint, timestamptz) IS
'Internal: jq._note_claimed for one claimed job, returning its created_at unchanged: the last '
'column of the one-job claim''s RETURNING list, which runs once per row updated. Inlined.';

-- jq.claim, in the order it runs (its comments are here, so that the function reads in one go):
-- * The arguments: one test for the usual ones; jq._claim_bad_arguments tells which one is
--   wrong. A long-poll (wait) registers before the first look (jq._claim_wait_start), so a
--   commit after that look wakes it.
-- * The claim-start hint (src/claim_hint.rs): while the queue has one, look first only at the
--   jobs of the hint's priority from the hint's key on (the hinted copies). That range starts
--   past the dead entries earlier claims left at the head of jobs_claim_idx, which nothing can
--   remove while an old snapshot is open. Uncapped, unlimited queues only. The rest comes from
--   the priorities below the hint's (v_below): the hint's own level was just read from the
--   hint's key on, and a job that becomes claimable before the hint moves the hint back to it.
--   So a claim on a shallow or empty queue does not walk the dead head either; the periodic
--   full claim (jq._claim_hint) stays the safety net. A long-poll too, on every look: the
--   first and each after a wakeup (at 800 jobs/s with 32 waiters nearly every claim is a
--   woken look; taking the rest from the head made each walk every entry dead since an old
--   snapshot was taken: bench/experiments/longpoll_pinned.sh). pg_test/tests/claim_hint.rs,
--   a_long_poll_during_a_held_snapshot_starts_past_the_dead_head.
-- * The full claim, from the head of the queue (below the hint's priority after a hinted claim;
--   anywhere once the gate holds the queue row). A claim that took the turn (jq._hint_turn)
--   runs it for one job, then claims the rest from the hint, which the full claim moved back to
--   the queue's true head: while an old snapshot is open the full claim walks the whole dead
--   head, and every job found by that walk waits for it (a full batch of 10 once a second was
--   over 1% of the jobs at 800 jobs/s: the p99 pickup rose with the length of the hold;
--   bench/experiments/longpoll_pinned.sh). A turn that finds nothing leaves nothing for the
--   full claim below (v_below: an empty range) but a capped queue's locked claim. A one-job
--   copy found by ctid that claimed nothing may have locked a row in a version newer than its
--   snapshot: it looks again by id (the ctid fallback, see above). A full claim that took the turn (jq._claim_hint) and found
--   nothing ends the turn now, not when this transaction ends or after a long-poll's sleep
--   (jq._hint_turn_end; pg_test/tests/claim_hint.rs,
--   the_turn_ends_with_the_full_claim_statement_not_its_transaction). A rate-limited claim,
--   under the queue row lock, takes one token per job claimed.
-- * Nothing claimed: the queue is empty, paused, capped, rate-limited or unknown. A capped or
--   rate-limited queue goes through jq._claim_gate, which locks the queue row and says how many
--   jobs the claim may take (or, for a long-poll, that it should sleep without locking); a claim
--   holding that lock returns, even empty, rather than sleep holding it.
-- * Nothing claimable: without wait, return nothing; else sleep until a wakeup for this queue,
--   the deadline or the next rate token, and look again (jq._claim_sleep), from the hint: a
--   job made claimable before it moves the hint back to the job before the wakeup is sent
--   (src/xact.rs), so the woken look finds it. A job nothing wakes anyone for (left behind the
--   hint by a row another transaction held) is found by the queue's periodic full claim, which
--   runs only when a claim looks: one sleeper per queue, the watcher, sleeps at most until that
--   full claim is due (jq._hint_watch) and its next look takes the turn. pg_test/tests/
--   claim_hint.rs, a_sleeping_long_poll_claims_a_job_left_behind_the_hint. A watcher whose
--   statement returns offers the watch to another sleeper of the queue, which takes it without
--   looking (src/wakeup.rs). Before sleeping, a long-poll updates the batch and cap a commit
--   counts it for to what the queue hands out now (jq._wait_rebatch).
-- SECURITY DEFINER, as the owner, with no SET clause: every name in it is schema-qualified (see
-- the file's head).
CREATE OR REPLACE FUNCTION jq.claim(queue text, worker text, n integer DEFAULT 1, lease interval DEFAULT NULL,
                         wait interval DEFAULT NULL, caller_ticket bigint DEFAULT jq._ticket())
RETURNS SETOF jq.claimed_job
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
DECLARE
    v_limit    integer;           -- NULL: claim.n
    v_locked   boolean;           -- a capped claim holds its queue row lock (NULL: false)
    v_paused   boolean; v_cap integer; v_rate integer;  -- the queue row, read without a lock
    v_deadline pg_catalog.timestamptz;       -- long-poll: when waiting ends
    v_tokens   double precision;  -- rate-limited queue: tokens in the bucket, under the row lock
    v_now      pg_catalog.timestamptz;       -- ... as of this instant
    v_token_at pg_catalog.timestamptz;       -- long-poll: when the next token arrives
    v_got      integer;
    v_caller   pg_catalog.oid;
    v_hinted   integer;           -- jobs claimed past the claim-start hint
    v_below    bigint;            -- after a hinted claim: priorities below the hint's (NULL: all)
BEGIN
    v_caller := jq._authorize_queue(claim.caller_ticket, claim.queue, 'work');
    IF claim.n IS NULL OR claim.n OPERATOR(pg_catalog.<) 1 OR claim.n OPERATOR(pg_catalog.>) jq.max_claim_batch()
       OR claim.worker IS NULL OR pg_catalog.length(claim.worker) OPERATOR(pg_catalog.>) 200
       OR (claim.lease IS NOT NULL AND (claim.lease OPERATOR(pg_catalog.<=) interval '0'
                                        OR claim.lease OPERATOR(pg_catalog.>) interval '100 years'
                                        OR NOT jq._interval_fields_nonnegative(claim.lease))) THEN
        PERFORM jq._claim_bad_arguments(claim.n, claim.worker, claim.lease);
    END IF;
    IF claim.wait IS NOT NULL THEN
        v_deadline := jq._claim_wait_start(claim.queue, claim.wait, claim.n);
    END IF;
    <<poll>>
    LOOP
    IF jq._claim_hint(claim.queue) THEN
        IF claim.n OPERATOR(pg_catalog.=) 1 THEN
        RETURN QUERY
        UPDATE ONLY jq.jobs j SET
            state = 'running',
            attempt = j.attempt OPERATOR(pg_catalog.+) 1,
            claims = j.claims OPERATOR(pg_catalog.+) 1,
            worker = claim.worker,
            lease_token = jq._lease_token(),
            started_at = pg_catalog.clock_timestamp(),
            lease = LEAST(coalesce(claim.lease, q.lease), q.max_lease),
            lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) LEAST(coalesce(claim.lease, q.lease), q.max_lease, j.timeout)
        FROM jq.queues q
        WHERE q.name OPERATOR(pg_catalog.=) claim.queue
          AND j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
              SELECT p.ctid FROM ONLY jq.jobs p
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
                  jq._note_claimed_created_at(j.queue, j.priority, j.run_at, j.id, j.created_at), j.timeout, j.progress;
        GET DIAGNOSTICS v_hinted = ROW_COUNT;
        IF v_hinted OPERATOR(pg_catalog.=) 0 AND pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
            -- Found by ctid, a row locked in a newer version is not updated: look again by id.
            RETURN QUERY
            SELECT * FROM jq._claim_batch(claim.queue, claim.worker, 1, claim.lease, true, NULL, NULL);
            GET DIAGNOSTICS v_hinted = ROW_COUNT;
        END IF;
        ELSE
        RETURN QUERY
        SELECT * FROM jq._claim_batch(claim.queue, claim.worker, claim.n, claim.lease, true, NULL, NULL);
        GET DIAGNOSTICS v_hinted = ROW_COUNT;
        END IF;
        v_below := jq._hint_priority();
    ELSIF jq._hint_turn() THEN
        -- The turn: the full claim takes one job, and moves the hint back to it (the queue's true
        -- head); the rest comes from there.
        RETURN QUERY
        SELECT * FROM jq._claim_batch(claim.queue, claim.worker, 1, claim.lease, false, NULL, NULL);
        GET DIAGNOSTICS v_hinted = ROW_COUNT;
        IF v_hinted OPERATOR(pg_catalog.=) 0 THEN
            PERFORM jq._hint_turn_end(claim.queue);
            v_below := -2147483648;  -- nothing claimable now: no second walk from the head below
        ELSIF claim.n OPERATOR(pg_catalog.>) 1 AND jq._claim_hint(claim.queue) THEN
            RETURN QUERY
            SELECT * FROM jq._claim_batch(claim.queue, claim.worker, claim.n OPERATOR(pg_catalog.-) 1, claim.lease,
                                          true, NULL, NULL);
            GET DIAGNOSTICS v_got = ROW_COUNT;
            v_hinted := v_hinted OPERATOR(pg_catalog.+) v_got;
            v_below := jq._hint_priority();
        END IF;
    END IF;
    -- After either branch: all n claimed, or the full claim below takes the rest. v_hinted is
    -- NULL or 0 when neither ran (a look from the head), so this is then a no-op.
    IF v_hinted OPERATOR(pg_catalog.=) claim.n THEN
        IF v_deadline IS NOT NULL THEN PERFORM jq._wait_done(); END IF;
        RETURN;
    ELSIF v_hinted OPERATOR(pg_catalog.>) 0 THEN
        v_limit := claim.n OPERATOR(pg_catalog.-) v_hinted;  -- the full claim takes the rest (below)
    END IF;

    LOOP
        IF coalesce(v_limit, claim.n) OPERATOR(pg_catalog.=) 1 THEN
        RETURN QUERY
        UPDATE ONLY jq.jobs j SET
            state = 'running',
            attempt = j.attempt OPERATOR(pg_catalog.+) 1,
            claims = j.claims OPERATOR(pg_catalog.+) 1,
            worker = claim.worker,
            lease_token = jq._lease_token(),
            started_at = pg_catalog.clock_timestamp(),
            lease = LEAST(coalesce(claim.lease, q.lease), q.max_lease),
            lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) LEAST(coalesce(claim.lease, q.lease), q.max_lease, j.timeout)
        FROM jq.queues q
        WHERE q.name OPERATOR(pg_catalog.=) claim.queue
          AND j.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
              SELECT p.ctid FROM ONLY jq.jobs p
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
                  jq._note_claimed_created_at(j.queue, j.priority, j.run_at, j.id, j.created_at), j.timeout, j.progress;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        IF v_got OPERATOR(pg_catalog.=) 0 AND pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
            -- The ctid fallback: the same range, by id, with a new snapshot.
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
        IF v_got OPERATOR(pg_catalog.=) 0 THEN PERFORM jq._hint_turn_end(claim.queue); END IF;
        IF v_got OPERATOR(pg_catalog.>) 0 OR v_locked IS NOT NULL OR v_hinted OPERATOR(pg_catalog.>) 0 THEN
            IF v_tokens IS NOT NULL THEN
                UPDATE jq.queues t SET rate_tokens = v_tokens OPERATOR(pg_catalog.-) v_got, rate_updated = v_now
                WHERE t.name OPERATOR(pg_catalog.=) claim.queue;
            END IF;
            IF v_deadline IS NOT NULL THEN PERFORM jq._wait_done(); END IF;
            RETURN;
        END IF;
        SELECT t.paused, t.max_concurrency, t.rate_limit INTO v_paused, v_cap, v_rate
        FROM jq.queues t WHERE t.name OPERATOR(pg_catalog.=) claim.queue;
        IF NOT FOUND THEN PERFORM jq._unknown_queue(claim.queue); END IF;
        IF v_paused OR (v_cap IS NULL AND v_rate IS NULL) THEN
            EXIT;  -- nothing to claim now
        END IF;
        SELECT g.allowed, g.tokens, g.at, g.token_at INTO v_limit, v_tokens, v_now, v_token_at
        FROM jq._claim_gate(claim.queue, claim.n, v_deadline IS NOT NULL, v_cap, v_rate) g;
        IF v_limit IS NULL THEN
            EXIT;  -- a long-poll with no room or no token now: sleep (until v_token_at at most)
        ELSIF v_limit OPERATOR(pg_catalog.<=) 0 THEN
            -- The queue row is locked: return, even empty, rather than sleep holding it; and end
            -- the wait as every other return does (a waiter left registered in the caller's open
            -- transaction could be chosen for a wakeup it never acts on; pg_test/tests/bgworker/
            -- lost_wakeups.rs, a_capped_long_poll_that_returns_under_the_row_lock_ends_its_wait).
            IF v_deadline IS NOT NULL THEN PERFORM jq._wait_done(); END IF;
            RETURN;
        END IF;
        v_locked := true;
        v_below := NULL;  -- capped or rate-limited: the locked claim looks everywhere
    END LOOP;
    EXIT poll WHEN v_deadline IS NULL;
    -- Before sleeping, the registration is brought up to what the queue hands out now (this
    -- look read its row): a queue capped or rate-limited since the wait started counts this
    -- waiter for 1 job and wakes it when a slot frees (jq._wait_rebatch; jq.alter_queue woke
    -- every waiter, so each gets here). If that changed it, look again first: a commit after
    -- this look counted the old registration.
    IF NOT jq._wait_rebatch(v_cap IS NOT NULL, CASE WHEN v_cap IS NOT NULL OR v_rate IS NOT NULL THEN 1 ELSE claim.n END) THEN
        EXIT poll WHEN NOT jq._claim_sleep(v_deadline, LEAST(v_token_at, jq._hint_watch(claim.queue)));
    END IF;
    v_token_at := NULL;
    v_limit := NULL;
    v_below := NULL;  -- woken: look again from the hint (above), else from the head
    END LOOP poll;
END $$;
COMMENT ON FUNCTION jq.claim(text, text, integer, interval, interval, bigint) IS
'Claims up to n (1..jq.max_claim_batch()) ready jobs of one queue for worker (a free-form name '
'of at most 200 characters, kept for operators; recovery never depends on it), in order '
'priority DESC, run_at, id, and returns them (jq.claimed_job) with a fresh lease_token each. '
'lease: interval, default the queue''s, at most the queue''s max_lease; every job of the batch gets its own lease of that length, '
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


-- The batch copies of jq.claim's two claim statements (n > 1), called by jq.claim only. Their
-- LIMIT is a parameter, which a generic plan costs at 10% of the queue while a custom plan sees
-- n, so under plan_cache_mode = auto plpgsql found every custom plan cheaper and planned them
-- again on every call (pg_stat_statements with track_planning: as many plans as calls). They
-- live here, pinned to force_generic_plan, because jq.claim has no SET clause (see the file's
-- head): with the LIMIT written as a sub-select in jq.claim, which both plan modes cost alike,
-- the drain of bench/run's held-snapshot cell fell once an autovacuum finished mid-drain, and
-- pinning plan_cache_mode on jq.claim itself slowed every one-job claim (docs/BENCHMARKS.md).
-- One call per batch (two when a hinted batch takes the rest from a full claim) pays the
-- settings' save and restore here, not every one-job claim: those stay in jq.claim, whose
-- constant LIMIT 1 makes both plans cost the same few units whatever the table's size. Its
-- generic plans are the same index walks (pg_test/tests/plans/ checks the full claim's
-- selection in both plan modes and, in batch_claims_reuse_one_generic_plan, the batch claims'
-- cached generic plan).
--
-- JIT off, as for every function with settings of its own: a generic plan costs a LIMIT
-- parameter at 10% of the queue, so on a deep enough queue (millions of ready jobs) the batch
-- claim's generic plan cost passed jit_above_cost and PostgreSQL JIT-compiled it on every call,
-- which cost far more than the short index walk itself. pg_test/tests/plans/generic_plans.rs,
-- functions_with_settings_never_jit.
CREATE OR REPLACE FUNCTION jq._claim_batch(queue text, worker text, n integer, lease interval, hinted boolean,
                                below bigint, locked boolean)
RETURNS SETOF jq.claimed_job
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
BEGIN
    IF _claim_batch.hinted THEN
        -- From the claim-start hint's key on, at the hint's priority (see jq.claim).
        RETURN QUERY
        WITH claimed AS (
            UPDATE ONLY jq.jobs j SET
                state = 'running',
                attempt = j.attempt OPERATOR(pg_catalog.+) 1,
                claims = j.claims OPERATOR(pg_catalog.+) 1,
                worker = _claim_batch.worker,
                lease_token = jq._lease_token(),
                started_at = pg_catalog.clock_timestamp(),
                lease = LEAST(coalesce(_claim_batch.lease, q.lease), q.max_lease),
                lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) LEAST(coalesce(_claim_batch.lease, q.lease), q.max_lease, j.timeout)
            FROM jq.queues q
            WHERE q.name OPERATOR(pg_catalog.=) _claim_batch.queue
              AND j.id OPERATOR(pg_catalog.=) ANY (ARRAY(
                  SELECT p.id FROM ONLY jq.jobs p
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
                      j.lease_expires_at, j.priority, j.run_at, j.created_at, j.timeout, j.progress
        )
        SELECT c.id, c.queue, c.kind, c.payload, c.attempt, c.max_attempts, c.lease_token,
               c.lease_expires_at, c.priority, c.run_at, c.created_at, c.timeout, c.progress
        FROM claimed c
        WHERE jq._note_claimed(c.queue, c.priority, c.run_at, c.id)  -- once per claimed row
        ORDER BY c.run_at, c.id;
    ELSE
        -- The full claim: every priority below below (NULL: all); gated on the queue row as in
        -- jq.claim (locked: the caller holds a capped or rate-limited queue's row lock).
        RETURN QUERY
        WITH claimed AS (
            UPDATE ONLY jq.jobs j SET
                state = 'running',
                attempt = j.attempt OPERATOR(pg_catalog.+) 1,
                claims = j.claims OPERATOR(pg_catalog.+) 1,
                worker = _claim_batch.worker,
                lease_token = jq._lease_token(),
                started_at = pg_catalog.clock_timestamp(),
                lease = LEAST(coalesce(_claim_batch.lease, q.lease), q.max_lease),
                lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) LEAST(coalesce(_claim_batch.lease, q.lease), q.max_lease, j.timeout)
            FROM jq.queues q
            WHERE q.name OPERATOR(pg_catalog.=) _claim_batch.queue
              AND j.id OPERATOR(pg_catalog.=) ANY (ARRAY(
                  SELECT p.id FROM ONLY jq.jobs p
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
                      j.lease_expires_at, j.priority, j.run_at, j.created_at, j.timeout, j.progress
        )
        SELECT c.id, c.queue, c.kind, c.payload, c.attempt, c.max_attempts, c.lease_token,
               c.lease_expires_at, c.priority, c.run_at, c.created_at, c.timeout, c.progress
        FROM claimed c
        WHERE jq._note_claimed(c.queue, c.priority, c.run_at, c.id)  -- once per claimed row
        ORDER BY c.priority DESC, c.run_at, c.id;
    END IF;
END $$;
COMMENT ON FUNCTION jq._claim_batch(text, text, integer, interval, boolean, bigint, boolean) IS
'Internal: the batch claim statements of jq.claim (n jobs of queue for worker with lease, NULL = '
'the queue''s): from the claim-start hint when hinted, else at priorities below below (NULL: all), '
'gated on the queue being uncapped and unlimited unless locked. Runs as jq.claim''s caller, i.e. '
'the owner; executable by nobody else.';

-- The branches of jq.claim that the plain claim never takes, as named functions: a wrong
-- argument, a capped or rate-limited queue, and the long-poll's sleep. Each runs with its own
-- search_path (and so JIT off, as every function with settings), called only on its branch.

CREATE OR REPLACE FUNCTION jq._claim_bad_arguments(n integer, worker text, lease interval) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    IF _claim_bad_arguments.n IS NULL OR _claim_bad_arguments.n < 1
       OR _claim_bad_arguments.n > jq.max_claim_batch() THEN
        RAISE EXCEPTION 'n must be between 1 and %, got %', jq.max_claim_batch(),
            coalesce(_claim_bad_arguments.n::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF _claim_bad_arguments.worker IS NULL OR length(_claim_bad_arguments.worker) > 200 THEN
        RAISE EXCEPTION 'worker must be a non-NULL name of at most 200 characters'
            USING ERRCODE = '22023';
    END IF;
    IF _claim_bad_arguments.lease IS NOT NULL
       AND (_claim_bad_arguments.lease <= interval '0' OR _claim_bad_arguments.lease > interval '100 years'
            OR NOT jq._interval_fields_nonnegative(_claim_bad_arguments.lease)) THEN
        RAISE EXCEPTION 'lease must be greater than zero and at most 100 years, got %', _claim_bad_arguments.lease
            USING ERRCODE = '22023';
    END IF;
END $$;
COMMENT ON FUNCTION jq._claim_bad_arguments(integer, text, interval) IS
'Internal: raises 22023 naming the first of jq.claim''s arguments n (1..jq.max_claim_batch()), '
'worker (non-NULL, at most 200 characters) and lease (NULL, or over zero and at most 100 years '
'with no negative field) that is out of range; returns when none is.';

-- A capped queue: serialise its claims on the queue row, since counting and claiming must not
-- interleave with another claimer's, or ten claimers each see room for the cap
-- (pg_test/tests/exactly_once/cap.rs, the cap tests; negative control cap_no_queue_lock). The count
-- is a separate statement so that its snapshot is taken after the lock; an older snapshot
-- (REPEATABLE READ, SERIALIZABLE) would let the cap be exceeded, so those are refused. A
-- rate-limited queue's token bucket is read and written under the same lock, so claims across
-- all workers share it (docs/flow-control.md; pg_test/tests/flow/rate_limits.rs).
CREATE OR REPLACE FUNCTION jq._claim_wait_start(queue text, wait interval, n integer) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_deadline timestamptz := jq._wait_deadline(_claim_wait_start.wait);
    v_capped   boolean;
    v_limited  boolean;
BEGIN
    IF v_deadline IS NOT NULL THEN
        SELECT t.max_concurrency IS NOT NULL, t.max_concurrency IS NOT NULL OR t.rate_limit IS NOT NULL
        INTO v_capped, v_limited
        FROM jq.queues t WHERE t.name = _claim_wait_start.queue;
        -- Registered before the first look, so a commit after that look wakes us. A look of
        -- this claim takes up to n of the queue's jobs, so a commit wakes one such waiter per n
        -- jobs (src/wakeup.rs, set_latches); a capped or rate-limited queue's look may take
        -- fewer than it finds, so there each job wakes a waiter (batch 1).
        PERFORM jq._wait_register_batch(ARRAY[_claim_wait_start.queue], ARRAY[coalesce(v_capped, false)],
                                        CASE WHEN v_limited THEN 1 ELSE _claim_wait_start.n END);
    END IF;
    RETURN v_deadline;
END $$;
COMMENT ON FUNCTION jq._claim_wait_start(text, interval, integer) IS
'Internal: the start of a long-polling jq.claim of up to n jobs on queue: validates wait '
'(jq._wait_deadline) and, unless it is NULL or 0, registers the backend as a waiter for queue '
'(as one waiting for a free slot when the queue is capped) that a commit wakes for n of the jobs '
'it makes claimable (for 1 on a capped or rate-limited queue). Returns when waiting ends, or NULL '
'(do not wait). Errors: as jq._wait_deadline.';

CREATE OR REPLACE FUNCTION jq._claim_gate(queue text, n integer, waiting boolean, cap integer, rate integer,
                               OUT allowed integer, OUT tokens double precision, OUT at timestamptz,
                               OUT token_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
-- Its running count reads jobs_running_idx: with finished jobs out of the hot table, a capped
-- queue with thousands running among a few tens of thousands of live jobs is costed cheaper as
-- a sequential scan, which every claim of the queue would then pay (pg_test/tests/plans/claim.rs).
SET enable_seqscan = off
AS $$
DECLARE
    v_paused  boolean;
    v_cap     integer;
    v_rate    integer;
    v_running integer;
BEGIN
    IF _claim_gate.waiting THEN
        -- Long-poll on a capped queue: while it has no ready job or its cap is reached,
        -- wait (an enqueue or a job ending wakes us) instead of taking the queue row lock,
        -- which a claim keeps until its transaction ends; the count is taken again under
        -- the lock below.
        IF NOT EXISTS (SELECT FROM ONLY jq.jobs j
                       WHERE pg_catalog.hashtextextended(j.queue, 0) OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(_claim_gate.queue, 0)
                         AND j.state OPERATOR(pg_catalog.=) 'ready') THEN
            RETURN;
        END IF;
        IF _claim_gate.cap IS NOT NULL THEN
            SELECT pg_catalog.count(*) INTO v_running FROM ONLY jq.jobs j
            WHERE j.queue OPERATOR(pg_catalog.=) _claim_gate.queue AND j.state OPERATOR(pg_catalog.=) 'running';
            IF v_running OPERATOR(pg_catalog.>=) _claim_gate.cap THEN
                RETURN;
            END IF;
        END IF;
        IF _claim_gate.rate IS NOT NULL THEN
            -- No token yet: sleep until the next one arrives (or a wakeup), not spin.
            token_at := jq._rate_next_token(_claim_gate.queue);
            IF token_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN
                RETURN;
            END IF;
        END IF;
    END IF;
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
        FROM jq.queues t WHERE t.name OPERATOR(pg_catalog.=) _claim_gate.queue FOR NO KEY UPDATE SKIP LOCKED;
    ELSE
        SELECT t.paused, t.max_concurrency, t.rate_limit INTO v_paused, v_cap, v_rate
        FROM jq.queues t WHERE t.name OPERATOR(pg_catalog.=) _claim_gate.queue FOR NO KEY UPDATE;
    END IF;
    allowed := 0;
    IF NOT FOUND OR v_paused THEN
        RETURN;
    END IF;
    allowed := _claim_gate.n;
    IF v_cap IS NOT NULL THEN
        SELECT pg_catalog.count(*) INTO v_running FROM ONLY jq.jobs j
        WHERE j.queue OPERATOR(pg_catalog.=) _claim_gate.queue AND j.state OPERATOR(pg_catalog.=) 'running';
        allowed := LEAST(_claim_gate.n, v_cap OPERATOR(pg_catalog.-) v_running);
        IF allowed OPERATOR(pg_catalog.<=) 0 THEN
            RETURN;
        END IF;
    END IF;
    IF v_rate IS NOT NULL THEN
        -- Token bucket (rate_burst tokens, refilled at rate_limit per rate_period).
        at := pg_catalog.clock_timestamp();
        tokens := jq._rate_tokens(_claim_gate.queue, at);
        allowed := LEAST(allowed, pg_catalog.floor(tokens)::integer);
    END IF;
END $$;
COMMENT ON FUNCTION jq._claim_gate(text, integer, boolean, integer, integer) IS
'Internal: how many of n jobs jq.claim may claim from queue, a capped (cap = its max_concurrency) '
'or rate-limited (rate = its rate_limit) queue, as seen before the lock. allowed NULL: a '
'long-poll (waiting) finds no ready job, no free slot or no token (token_at: when the next one is '
'due) and should sleep without locking anything; else the queue row is locked (FOR NO KEY '
'UPDATE, SKIP LOCKED inside jq.claim(text[])) and allowed is the room under the cap and the '
'whole tokens of the bucket (tokens, computed at instant at), 0 or less for none. Errors: 25000 '
'outside READ COMMITTED.';

-- The long-poll's sleep. A capped claim that took the queue row lock never gets here: it
-- returns, even empty, rather than sleep holding it. Nor does a transaction that has a
-- transaction id: it may hold a row lock this call took and did not claim with. A look whose
-- snapshot predates another claimer's commit of the same row locks that row in its new, running
-- version, and the recheck then rejects it but keeps the lock (READ COMMITTED); asleep, this call
-- would block that job's jq.complete, heartbeat, fail, release, snooze and cancel, and the
-- reaper, for up to wait. A row lock needs a transaction id, so with none there is nothing to
-- hold; with one (also: the caller's transaction wrote or locked rows before the call) the claim
-- returns what it found, nothing, instead of sleeping, and the caller's next call, in a new
-- transaction, waits. pg_test/tests/robustness/lock_order.rs, a_long_poll_never_sleeps_holding_row_locks.
-- token_at is when to look again at the latest, before the deadline: the next rate token, or
-- for the queue's watcher the next due full claim (jq._hint_watch); one already past means look
-- again now, not the end of the wait.
CREATE OR REPLACE FUNCTION jq._claim_sleep(deadline timestamptz, token_at timestamptz) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL
       OR (NOT jq._wait(LEAST(_claim_sleep.deadline, coalesce(_claim_sleep.token_at, _claim_sleep.deadline)))
           AND pg_catalog.clock_timestamp() >= _claim_sleep.deadline) THEN
        PERFORM jq._wait_done();
        RETURN false;
    END IF;
    RETURN true;
END $$;
COMMENT ON FUNCTION jq._claim_sleep(timestamptz, timestamptz) IS
'Internal: the sleep of a long-polling jq.claim that found nothing: until a wakeup for its '
'queue, deadline or token_at (when to look again at the latest: the next rate token, or the '
'queue''s next due full claim for its watcher; NULL: none), whichever comes first. True when '
'woken or token_at came before the deadline (look again); false, after ending the wait '
'(jq._wait_done), when the deadline passed or the transaction has a transaction id (it never '
'sleeps holding row locks).';

CREATE OR REPLACE FUNCTION jq._wait_deadline(wait interval) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    IF _wait_deadline.wait IS NULL OR _wait_deadline.wait = interval '0' THEN
        RETURN NULL;
    END IF;
    IF _wait_deadline.wait < interval '0' OR _wait_deadline.wait > interval '1 hour'
       OR NOT jq._interval_fields_nonnegative(_wait_deadline.wait) THEN
        RAISE EXCEPTION 'wait must be between 0 and 1 hour, got %', _wait_deadline.wait
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jq.claim with wait needs READ COMMITTED (each look needs a new snapshot), not %',
            pg_catalog.current_setting('transaction_isolation') USING ERRCODE = '25000';
    END IF;
    RETURN pg_catalog.clock_timestamp() + _wait_deadline.wait;
END $$;
COMMENT ON FUNCTION jq._wait_deadline(interval) IS
'Internal: validates a claim''s wait (interval, 0 to 1 hour; NULL or 0 = do not wait) and returns '
'when the wait ends, or NULL. Errors: 22023 out of range, 25000 outside READ COMMITTED.';

CREATE OR REPLACE FUNCTION jq._claimable(queues text[]) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT FROM jq.queues t
        WHERE t.name = ANY (_claimable.queues) AND NOT t.paused
          AND EXISTS (SELECT FROM ONLY jq.jobs j  -- jobs_claim_idx's key (sql/schema.sql)
                      WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(t.name, 0)
                        AND j.state = 'ready')
          AND (t.max_concurrency IS NULL
               OR (SELECT count(*) FROM ONLY jq.jobs r WHERE r.queue = t.name AND r.state = 'running')
                  < t.max_concurrency)
          AND (t.rate_limit IS NULL OR jq._rate_next_token(t.name) <= pg_catalog.clock_timestamp()))
$$;
COMMENT ON FUNCTION jq._claimable(text[]) IS
'Internal: whether any of queues (unpaused, under its cap, with a rate token) has a ready job, by a lock-free '
'look; the long-poll of jq.claim(text[], ...) takes locks only when this says yes.';

-- Several queues: one after another, each with jq.claim(text, ...). Runs as the owner with a
-- pinned search_path (it is no hot path: the worker's usual claim names one queue).
CREATE OR REPLACE FUNCTION jq.claim(queues text[], worker text, n integer DEFAULT 1, lease interval DEFAULT NULL,
                         wait interval DEFAULT NULL, caller_ticket bigint DEFAULT jq._ticket())
RETURNS SETOF jq.claimed_job
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
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
    -- pg_test/tests/robustness/lock_order.rs, a_multi_queue_claim_waits_for_a_busy_capped_queue_row.
    SELECT count(*), min(t.name) INTO v_ncapped, v_one_capped FROM jq.queues t
    WHERE t.name = ANY (claim.queues) AND (t.max_concurrency IS NOT NULL OR t.rate_limit IS NOT NULL);
    IF v_ncapped > 1 THEN
        LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;
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
    -- so nothing wakes us for it; as jq.claim(text, ...); pg_test/tests/flow/rate_limits.rs,
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
                             AND EXISTS (SELECT FROM ONLY jq.jobs j
                                         WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(t.name, 0)
                                           AND j.state = 'ready')
                             AND (t.max_concurrency IS NULL
                                  OR (SELECT count(*) FROM ONLY jq.jobs r WHERE r.queue = t.name AND r.state = 'running')
                                     < t.max_concurrency))))
       AND pg_catalog.clock_timestamp() >= v_deadline THEN
        EXIT poll;
    END IF;
    END LOOP poll;
    IF v_deadline IS NOT NULL THEN
        PERFORM jq._wait_done();
    END IF;
END $$;
COMMENT ON FUNCTION jq.claim(text[], text, integer, interval, interval, bigint) IS
'Claims up to n jobs in total from several queues, one queue at a time in the given order (each '
'with the single-queue claim, so each stays on its index): earlier queues take '
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
