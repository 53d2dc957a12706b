-- Working jobs: claim, complete, fail, heartbeat, release; and the operator's cancel and retry.
--
-- Fencing: complete, fail, heartbeat and release act only on a job that is still 'running'
-- under the caller's lease token, in the same statement that changes it. A worker whose lease
-- expired (and whose job may be running again under a new token) changes nothing.
--
-- Those lookups by id test `j.state::text = 'running'`, not `j.state = 'running'`: the plain
-- form implies the predicate of the partial index jobs_running_idx, and when the statistics say
-- few jobs run (an ANALYZE while the queue was idle) the planner preferred scanning that whole
-- index over the primary key: the benchmark saw jq.complete_many at 1 s per call. The cast
-- leaves the primary key as the only index; pg_test/tests/plans.rs checks it.

COMMENT ON FUNCTION jq.backoff_seconds(text, double precision, double precision, integer, text, double precision) IS
'Retry delay in seconds (float8) for attempt (1-based, the attempt that just failed) under policy '
'fixed (base), linear (base * attempt) or exponential (base * 2^(attempt-1)), capped at '
'max_seconds; jitter none uses it as is, full scales it by sample (uniform in [0, 1), pass '
'random()): "full jitter", Marc Brooker, Exponential Backoff And Jitter, AWS Architecture Blog, '
'2015. base_seconds and max_seconds are seconds. Pure (IMMUTABLE). Errors: 22023 unknown policy '
'or jitter mode. Implemented in Rust (src/backoff.rs).';

CREATE FUNCTION jq.max_error_length() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 16384 $$;
COMMENT ON FUNCTION jq.max_error_length() IS
'Longest error text stored by jq.fail: 16,384 characters. Longer errors keep their first '
'16,384 characters followed by a marker " ...[truncated, N characters in all]".';

CREATE FUNCTION jq._clip_error(error text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN pg_catalog.length(error) <= jq.max_error_length() THEN error
                ELSE pg_catalog.left(error, jq.max_error_length()) || ' ...[truncated, '
                     || pg_catalog.length(error) || ' characters in all]' END
$$;
COMMENT ON FUNCTION jq._clip_error(text) IS
'Internal: error text cut to jq.max_error_length() characters with a truncation marker. Text is '
'stored as text, never spliced into JSON, so quotes, backslashes and "\u0000" survive verbatim.';

CREATE FUNCTION jq.max_claim_batch() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1000 $$;
COMMENT ON FUNCTION jq.max_claim_batch() IS 'Largest n accepted by jq.claim: 1,000 jobs per call.';

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
CREATE FUNCTION jq._claim_batch(queue text, worker text, n integer, lease interval, hinted boolean,
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

CREATE FUNCTION jq._wait_deadline(wait interval) RETURNS timestamptz
LANGUAGE plpgsql AS $$
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

CREATE FUNCTION jq._claimable(queues text[]) RETURNS boolean
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

CREATE FUNCTION jq.complete(id bigint, lease_token uuid, result jsonb DEFAULT NULL) RETURNS boolean
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

CREATE FUNCTION jq.complete_many(ids bigint[], lease_tokens uuid[], results jsonb[] DEFAULT NULL)
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

CREATE FUNCTION jq.fail(id bigint, lease_token uuid, error text, retry_in interval DEFAULT NULL)
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

CREATE FUNCTION jq.heartbeat(id bigint, lease_token uuid, extend interval DEFAULT NULL,
                             OUT lease_expires_at timestamptz, OUT cancel_requested boolean)
LANGUAGE plpgsql AS $$
BEGIN
    IF heartbeat.extend IS NOT NULL
       AND (heartbeat.extend <= interval '0' OR heartbeat.extend > interval '100 years'
            OR NOT jq._interval_fields_nonnegative(heartbeat.extend)) THEN
        RAISE EXCEPTION 'extend must be greater than zero and at most 100 years, got %',
            heartbeat.extend USING ERRCODE = '22023';
    END IF;
    UPDATE jq.jobs j SET
        lease_expires_at = pg_catalog.clock_timestamp() + coalesce(heartbeat.extend, j.lease),
        lease = coalesce(heartbeat.extend, j.lease)
    WHERE j.id = heartbeat.id AND j.lease_token = heartbeat.lease_token AND j.state::text = 'running'
    RETURNING j.lease_expires_at, j.cancel_requested
    INTO heartbeat.lease_expires_at, heartbeat.cancel_requested;
END $$;
COMMENT ON FUNCTION jq.heartbeat(bigint, uuid, interval) IS
'Extends the lease of a running job to now + extend (interval; default the lease length of the '
'current claim) and returns (lease_expires_at, cancel_requested): a true cancel_requested asks '
'the handler to stop (jq.cancel). Fenced: both NULL and no change unless the job is running '
'under this lease_token, so a stale worker cannot extend a newer claim. Errors: 22023 extend <= 0, '
'over 100 years or with a negative field.';

CREATE FUNCTION jq.release(id bigint, lease_token uuid) RETURNS boolean
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
