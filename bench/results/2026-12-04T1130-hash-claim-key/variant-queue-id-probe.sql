ALTER TABLE jq.jobs ADD COLUMN queue_id integer NOT NULL DEFAULT 1; DROP INDEX jq.jobs_claim_idx; CREATE INDEX jobs_claim_idx ON jq.jobs (queue_id, priority DESC NULLS FIRST, run_at, id) WHERE state = 'ready';
CREATE OR REPLACE FUNCTION jq.claim(queue text, worker text, n integer DEFAULT 1, lease interval DEFAULT NULL,
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
              WHERE p.queue_id = 1 AND p.queue OPERATOR(pg_catalog.=) claim.queue AND p.state OPERATOR(pg_catalog.=) 'ready'
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
              WHERE p.queue_id = 1 AND p.queue OPERATOR(pg_catalog.=) claim.queue AND p.state OPERATOR(pg_catalog.=) 'ready'
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
            IF NOT EXISTS (SELECT FROM jq.jobs j WHERE j.queue OPERATOR(pg_catalog.=) claim.queue
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
