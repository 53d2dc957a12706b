-- Maintenance duties, each a function of `now` so that tests pass fixed instants and the
-- background worker passes now(). The rows of a batch are picked by an uncorrelated
-- ARRAY(SELECT ... LIMIT batch FOR UPDATE SKIP LOCKED) and written by id: a join against a CTE
-- let the planner hash-join the whole backlog for every batch (pg_test/tests/plans/maintenance.rs). Each locks its rows with FOR UPDATE SKIP LOCKED in bounded
-- batches and writes only rows still in the state it read, so passes from several sessions at
-- once partition the work instead of repeating it, and a late pass changes nothing.
--
-- That recheck by id tests `j.state::text = '...'`, not `j.state = '...'`: the plain form
-- implies the predicate of the partial index the batch was picked from, and a plan the
-- background worker made while jq.jobs was small (it keeps its plans for the life of its
-- connection) found the batch's rows through that index with the ids as a filter, walking every
-- due row for every batch. The cast leaves the primary key as the only index for it, and jq's
-- planner hook keeps a plan made on a small jq.jobs an index plan (src/planner.rs). Test:
-- pg_test/tests/plans/growth.rs,
-- maintenance_plans_made_on_a_small_table_stay_index_lookups.

-- A scheduled job became due (jq._promote): a ready one wakes the queue's waiting claims at
-- commit and moves the claim-start hint back to it (jq._wake_ready); a blocked one waits for its
-- key, whose jq._key_fill_many after the statement wakes for the jobs it makes ready. In the
-- statement that moved the jobs, once per job moved, so nothing is woken for a job that was not.
-- Exercised by pg_test/tests/claim_hint.rs,
-- jobs_that_become_claimable_behind_the_hint_are_claimed_next (control no_hint_move_back).
CREATE OR REPLACE FUNCTION jq._note_promoted(queue text, state jq.job_state, priority integer, run_at timestamptz)
RETURNS boolean
LANGUAGE sql AS $$
    SELECT CASE WHEN state OPERATOR(pg_catalog.=) 'ready' THEN jq._wake_ready(queue, priority, run_at) ELSE true END
$$;
COMMENT ON FUNCTION jq._note_promoted(text, jq.job_state, integer, timestamptz) IS
'Internal: a scheduled job of queue became due in state (at priority, run_at): when ready, wakes '
'claims at commit and moves the claim-start hint back to it. Always true. Inlined.';

-- Its selection walks jobs_scheduled_idx in due order, one batch at a time: when most live jobs
-- are scheduled (finished jobs are out of the hot table) the planner costed a sort of every due
-- job cheaper, which a backlog after an outage makes every pass repeat. Sorts are off for it;
-- its statements have the index order, so no chosen plan is a disabled one
-- (pg_test/tests/plans/maintenance.rs).
CREATE OR REPLACE FUNCTION jq._promote(now timestamptz, batch integer DEFAULT 5000, budget integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    v_count integer := 0;
    v_read  integer := 0;   -- due rows picked, moved or left for their key's next pass
    v_ids   bigint[];
    v_keys  record;
    v_busy  text[] := '{}';  -- queue || E'\x1f' || key of the keys another transaction holds
    v_at    timestamptz := '-infinity';  -- the (run_at, id) key the last pass reached
    v_id    bigint := 0;
BEGIN
    -- In passes of batch, due order, until a pass picks fewer or budget went (budget NULL: one
    -- pass). Each pass starts past the key the previous one reached: the entries of the rows
    -- this transaction already moved stay in jobs_scheduled_idx until vacuum, and a pass from
    -- the head would walk them all again.
    LOOP
    v_ids := ARRAY(
            SELECT d.id FROM ONLY jq.jobs d
            WHERE d.state = 'scheduled' AND (d.run_at, d.id) > (v_at, v_id) AND d.run_at <= _promote.now
              AND (d.concurrency_key IS NULL OR NOT (d.queue || E'\x1f' || d.concurrency_key = ANY (v_busy)))
            ORDER BY d.run_at, d.id
            LIMIT _promote.batch
            FOR UPDATE SKIP LOCKED);
    EXIT WHEN pg_catalog.cardinality(v_ids) = 0;
    -- jq._wake (per row, deduplicated in memory) wakes waiting claims of these queues at commit.
    -- A job with a concurrency key that never ran has no slot of its key: it goes blocked, and
    -- jq._key_fill_many (after, in key order) makes the keys' next jobs ready; one scheduled
    -- again after a claim (retry, snooze) still holds its slot and goes ready. The first kind
    -- moves only if its key's slot row can be locked without waiting (jq._key_try_lock): one
    -- another transaction holds stays scheduled for the next pass, and the other keys and queues
    -- are promoted now (pg_test/tests/robustness/held_locks.rs).
    WITH moved AS (
        UPDATE ONLY jq.jobs j SET state = CASE WHEN j.concurrency_key IS NULL OR j.claims > 0 THEN 'ready'
                                          ELSE 'blocked' END::jq.job_state
        WHERE j.id = ANY (v_ids) AND j.state::text = 'scheduled' AND j.run_at <= _promote.now
          AND (j.concurrency_key IS NULL OR j.claims > 0 OR jq._key_try_lock(j.queue, j.concurrency_key))
        RETURNING j.id, j.queue, j.state, j.concurrency_key, j.priority, j.run_at
    )
    SELECT count(*) AS n,
           pg_catalog.array_agg(m.queue) FILTER (WHERE m.state = 'blocked') AS queues,
           pg_catalog.array_agg(m.concurrency_key) FILTER (WHERE m.state = 'blocked') AS keys
    INTO v_keys
    FROM moved m WHERE jq._note_promoted(m.queue, m.state, m.priority, m.run_at);
    v_count := v_count + v_keys.n;
    v_read := v_read + pg_catalog.cardinality(v_ids);
    IF v_keys.n < pg_catalog.cardinality(v_ids) THEN
        -- Keys left for their holder: later passes of this call pick none of their jobs, so a
        -- held key with a long due backlog does not use up the read bound before other queues'
        -- due jobs are reached (robustness/held_locks.rs,
        -- a_held_key_with_a_long_backlog_delays_no_other_queue).
        v_busy := v_busy || ARRAY(
            SELECT DISTINCT j.queue || E'\x1f' || j.concurrency_key FROM ONLY jq.jobs j
            WHERE j.id = ANY (v_ids) AND j.state::text = 'scheduled'
              AND j.concurrency_key IS NOT NULL AND j.claims = 0);
    END IF;
    IF v_keys.queues IS NOT NULL THEN
        PERFORM jq._key_fill_many(v_keys.queues, v_keys.keys,
                                  pg_catalog.array_fill(0, ARRAY[pg_catalog.cardinality(v_keys.queues)]));
    END IF;
    -- Rows left for a busy key count against twice the budget, so a key with a long due backlog
    -- held by another transaction cannot make one pass read without end.
    EXIT WHEN pg_catalog.cardinality(v_ids) < _promote.batch OR _promote.budget IS NULL
              OR v_count >= _promote.budget OR v_read >= 2 * _promote.budget;
    SELECT d.run_at, d.id INTO v_at, v_id FROM ONLY jq.jobs d WHERE d.id = v_ids[pg_catalog.cardinality(v_ids)];
    END LOOP;
    RETURN v_count;
END $$;
COMMENT ON FUNCTION jq._promote(timestamptz, integer, integer) IS
'Maintenance: moves scheduled jobs with run_at <= now to ready, oldest first, in passes of batch '
'until a pass picks fewer or budget went (budget NULL, the default: one pass; at most 2 x budget '
'rows read), each pass starting past the (run_at, id) key the last one reached (run_at is kept: it is '
'when the job became due) and returns how many. A job with a concurrency key that has not run '
'yet goes through its key: blocked, then ready if the key has a free slot; while another '
'transaction holds the key''s slot row it stays scheduled (jq._key_try_lock). Never waits for a '
'lock: rows other sessions hold are left for the next pass. Safe to run concurrently.';

CREATE OR REPLACE FUNCTION jq._age_steps(now timestamptz, run_at timestamptz, aging interval) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT LEAST(GREATEST(pg_catalog.floor(extract(epoch FROM now - run_at)
                                           / extract(epoch FROM aging)), 0), 2147483647)::bigint
$$;
COMMENT ON FUNCTION jq._age_steps(timestamptz, timestamptz, interval) IS
'Internal: whole aging intervals (aging, > 0) between run_at and now, 0 to 2^31-1.';

CREATE OR REPLACE FUNCTION jq._age(now timestamptz, batch integer DEFAULT 5000) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer;
BEGIN
    -- Effective priority = base_priority + whole priority_aging intervals waited since run_at
    -- (capped at the integer range); next_age_at = when it next rises. Stored in priority, so
    -- the claim and its index are the same for every queue. A queue whose aging was turned off
    -- gets its jobs' base priority back. Bounded batch, picked like promotion.
    UPDATE ONLY jq.jobs j SET
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
          SELECT x.id FROM ONLY jq.jobs x
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

-- The end of an attempt whose lease is over, for the reaper (jq._reap: leases that expired) and
-- the operator (jq.expire_lease: a lease taken back before it expired). The worker vanished or
-- is to be ignored and gave no verdict, so the attempt is refunded, as for jq.release.
CREATE OR REPLACE FUNCTION jq._end_leases(ids bigint[], now timestamptz, expired_before timestamptz,
                                          wait_for_keys boolean, taken_by text,
                                          defer_hooks boolean DEFAULT false) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n    integer;
    v_dead bigint[];  -- the jobs that went dead: their kinds' on_dead hooks run after
BEGIN
    WITH back AS (
        UPDATE ONLY jq.jobs j SET
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
                    THEN _end_leases.now END,
            last_error = CASE
                WHEN NOT j.cancel_requested AND j.lease_expiries + 1 > coalesce(
                    (SELECT q.max_lease_expiries FROM jq.queues q WHERE q.name = j.queue), 10)
                    THEN pg_catalog.format('lease expired %s times (max_lease_expiries); the job '
                         'may be killing its worker', j.lease_expiries + 1)
                ELSE j.last_error END
        WHERE j.id = ANY (_end_leases.ids) AND j.state::text = 'running'
          AND j.lease_expires_at < _end_leases.expired_before
          -- A keyed job that ends here frees its key's slot, which needs the key's slot row: for
          -- the reaper, one another open transaction holds stays running (its lease expired) for
          -- the next pass (jq._key_try_lock; pg_test/tests/robustness/held_locks.rs).
          AND (j.concurrency_key IS NULL OR _end_leases.wait_for_keys
               OR NOT (j.cancel_requested OR j.lease_expiries + 1 > coalesce(
                   (SELECT q.max_lease_expiries FROM jq.queues q WHERE q.name = j.queue), 10))
               OR jq._key_try_lock(j.queue, j.concurrency_key))
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
           _end_leases.now, b.queue, b.worker,
           coalesce('lease taken back by ' || _end_leases.taken_by, 'lease expired')
           || CASE WHEN b.state = 'dead' THEN '; max_lease_expiries reached'
                   WHEN b.state = 'cancelled' THEN ' after a cancellation request'
                   ELSE '' END
    FROM back b, keyed k
    -- At commit, wake waiting claims: the job is claimable again, or its slot of a capped queue
    -- is free.
    WHERE jq._note_back(b.queue, b.state, b.priority, b.run_at)  -- sql/finish.sql
    RETURNING lease_expires_at
    )
    SELECT (SELECT count(*) FROM logged l),
           (SELECT pg_catalog.array_agg(b.id) FROM back b WHERE b.state = 'dead')
    INTO v_n, v_dead;
    -- max_lease_expiries reached: the kinds' exhaustion hooks, in this transaction, or queued
    -- for the hooks duty (defer_hooks: the background worker's reaper; sql/kinds.sql,
    -- src/bgworker/hooks.rs).
    IF v_dead IS NOT NULL THEN
        PERFORM jq._on_dead(v_dead, _end_leases.now, _end_leases.defer_hooks);
    END IF;
    RETURN v_n;
END $$;
COMMENT ON FUNCTION jq._end_leases(bigint[], timestamptz, timestamptz, boolean, text, boolean) IS
'Internal: ends the attempts of the jobs ids (locked by the caller) that are running with '
'lease_expires_at < expired_before, at instant now: ready again with the attempt refunded and '
'lease_expiries + 1; cancelled if a cancellation was requested; dead once lease_expiries exceeds '
'the queue''s max_lease_expiries (then its kind''s on_dead hook runs). Each gets an execution row with outcome lease_expired (error '
'"lease expired…", or "lease taken back by <taken_by>…"). A keyed job that ends frees its key''s '
'slot; unless wait_for_keys, one whose key''s slot row another transaction holds is left running '
'(jq._key_try_lock). With defer_hooks the on_dead hooks are queued (jq._on_dead). Returns how many attempts it ended.';

-- Whether a running attempt is over its wall timeout rather than its lease: the claim and
-- jq.heartbeat never set lease_expires_at past started_at + timeout, so an attempt whose lease
-- reached that instant was still held by its worker when its time was up. A lease that expired
-- before it (the worker vanished) is an expired lease, refunded as ever.
CREATE OR REPLACE FUNCTION jq._overdue(timeout interval, started_at timestamptz, lease_expires_at timestamptz)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT timeout IS NOT NULL AND lease_expires_at >= started_at + timeout
$$;
COMMENT ON FUNCTION jq._overdue(interval, timestamptz, timestamptz) IS
'Internal: whether a running attempt with this timeout (NULL: none), started_at and '
'lease_expires_at reached its wall timeout with its lease held (the lease is never set past '
'started_at + timeout). Inlined.';

-- The end of attempts that ran past their kind's wall timeout, for the reaper (jq._reap). Unlike
-- an expired lease, a timeout is a verdict on the attempt: it is charged and failed as by
-- jq.fail (backoff of the kind or queue, dead once max_attempts is reached, cancelled if a
-- cancellation was requested), with the error 'timed out after …' and an execution row with
-- outcome failed. Fenced on the state and the lease it read: a job completed, failed or claimed
-- again meanwhile is not running under that lease any more and is skipped.
-- pg_test/tests/kinds/timeouts.rs.
CREATE OR REPLACE FUNCTION jq._time_out(ids bigint[], now timestamptz, defer_hooks boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n    integer;
    v_dead bigint[];
BEGIN
    WITH due AS (
        SELECT j.id, j.lease_token,
               CASE WHEN j.cancel_requested THEN 'cancelled'
                    WHEN j.attempt >= j.max_attempts THEN 'dead'
                    ELSE 'scheduled' END AS verdict,
               jq.backoff_seconds(coalesce(k.backoff, q.backoff, 'exponential')::text,
                   extract(epoch FROM coalesce(k.backoff_base, q.backoff_base, interval '1 second'))::float8,
                   extract(epoch FROM coalesce(k.backoff_max, q.backoff_max, interval '1 hour'))::float8,
                   j.attempt, coalesce(k.jitter, q.jitter, 'full')::text, pg_catalog.random())
               * interval '1 second' AS delay
        FROM ONLY jq.jobs j
        LEFT JOIN jq.queues q ON q.name = j.queue
        LEFT JOIN jq.kinds k ON k.queue = j.queue AND k.kind = j.kind
        WHERE j.id = ANY (_time_out.ids) AND j.state::text = 'running'
          AND jq._overdue(j.timeout, j.started_at, j.lease_expires_at)
          AND j.lease_expires_at < _time_out.now
    ), ended AS (
        UPDATE ONLY jq.jobs j SET
            state = CASE WHEN d.verdict = 'scheduled' AND d.delay <= interval '0' THEN 'ready'
                         ELSE d.verdict END::jq.job_state,
            last_error = pg_catalog.format('timed out after %s (the wall timeout of kind %s; ended by maintenance)',
                                           j.timeout, pg_catalog.quote_literal(j.kind)),
            run_at = CASE WHEN d.verdict = 'scheduled' THEN _time_out.now + pg_catalog.interval_larger(d.delay, interval '0')
                          ELSE j.run_at END,
            finished_at = CASE WHEN d.verdict IN ('dead', 'cancelled') THEN _time_out.now END
        FROM due d
        WHERE j.id = d.id AND j.lease_token = d.lease_token AND j.state::text = 'running'
          -- A keyed job that ends frees its key's slot: left running for the next pass while
          -- another transaction holds the key's slot row (as jq._end_leases).
          AND (j.concurrency_key IS NULL OR d.verdict = 'scheduled'
               OR jq._key_try_lock(j.queue, j.concurrency_key))
        RETURNING j.id, j.claims, j.attempt, j.state, j.started_at, j.lease_expires_at, j.queue,
                  j.worker, j.concurrency_key, j.priority, j.run_at, j.last_error
    ), keyed AS (
        SELECT CASE WHEN count(*) > 0 THEN
                   jq._key_fill_many(pg_catalog.array_agg(e.queue), pg_catalog.array_agg(e.concurrency_key),
                                     pg_catalog.array_agg(1)) END AS moved
        FROM ended e WHERE e.concurrency_key IS NOT NULL AND e.state IN ('dead', 'cancelled')
    ), logged AS (
        INSERT INTO jq.execution_log (job_id, seq, attempt, outcome, started_at, lease_expires_at,
                                      finished_at, queue, worker, error)
        SELECT e.id, e.claims, e.attempt,
               CASE WHEN e.state = 'cancelled' THEN 'cancelled' ELSE 'failed' END::jq.execution_outcome,
               e.started_at, e.lease_expires_at, _time_out.now, e.queue, e.worker, e.last_error
        FROM ended e, keyed k
        WHERE jq._note_back(e.queue, e.state, e.priority, e.run_at)  -- sql/finish.sql
        RETURNING job_id
    )
    SELECT (SELECT count(*) FROM logged l),
           (SELECT pg_catalog.array_agg(e.id) FROM ended e WHERE e.state = 'dead')
    INTO v_n, v_dead;
    IF v_dead IS NOT NULL THEN
        PERFORM jq._on_dead(v_dead, _time_out.now, _time_out.defer_hooks);  -- as jq._end_leases
    END IF;
    RETURN v_n;
END $$;
COMMENT ON FUNCTION jq._time_out(bigint[], timestamptz, boolean) IS
'Internal (jq._reap): ends as failed the attempts of the jobs ids (locked by the caller) that are '
'running past their wall timeout (jq._overdue) with lease_expires_at < now: charged, retried after '
'the backoff of the job''s kind or queue, dead once attempt reached max_attempts (then the kind''s '
'on_dead hook runs), cancelled if a cancellation was requested; error "timed out after …"; an '
'execution row with outcome failed (cancelled). A keyed job that would end while another '
'transaction holds its key''s slot row is left running for the next pass. With defer_hooks the '
'on_dead hooks are queued (jq._on_dead). Returns how many attempts it ended.';

CREATE OR REPLACE FUNCTION jq._reap(now timestamptz, batch integer DEFAULT 1000, budget integer DEFAULT NULL,
                                    defer_hooks boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer := 0;
    v_n     integer;
    v_read  integer := 0;   -- expired leases picked, ended or left for their key's next pass
    v_ids   bigint[];
    v_from  timestamptz;    -- where this call starts (NULL: at the oldest expiry, a full pass)
    v_at    timestamptz;    -- the latest lease_expires_at the last pass reached
    v_last  timestamptz;
    v_all   boolean := false;  -- every expired lease from v_from on was read
    v_left  timestamptz;    -- the earliest expiry of a picked row left running (a held key)
BEGIN
    -- Past the entries of jobs completed since the backend's last complete pass, which a held
    -- snapshot keeps in jobs_running_idx (src/reap_start.rs says when a full pass runs instead).
    v_from := jq._reap_start(_reap.now);
    v_at := coalesce(v_from, '-infinity');
    -- In passes of batch, oldest expiry first, until a pass picks fewer or budget went (budget
    -- NULL: one pass), each starting at the expiry the previous one reached (see jq._promote;
    -- rows of that same expiry already reaped are read again, and skipped).
    LOOP
    -- v_last: the latest expiry picked, where the next pass starts (read here: a job this pass
    -- ends as dead or cancelled is in the history afterwards).
    SELECT pg_catalog.array_agg(p.id), pg_catalog.max(p.lease_expires_at) INTO v_ids, v_last
    FROM (SELECT x.id, x.lease_expires_at FROM ONLY jq.jobs x
          WHERE x.state = 'running' AND x.lease_expires_at >= v_at AND x.lease_expires_at < _reap.now
          ORDER BY x.lease_expires_at
          LIMIT _reap.batch
          FOR UPDATE SKIP LOCKED) p;
    v_all := v_ids IS NULL;
    EXIT WHEN v_all;
    -- Attempts over their wall timeout fail (charged); the other expired leases are refunded.
    v_n := jq._time_out(v_ids, _reap.now, _reap.defer_hooks)
         + jq._end_leases(ARRAY(SELECT x.id FROM ONLY jq.jobs x
                                WHERE x.id = ANY (v_ids) AND x.state::text = 'running'
                                  AND NOT jq._overdue(x.timeout, x.started_at, x.lease_expires_at)),
                          _reap.now, _reap.now, false, NULL, _reap.defer_hooks);
    v_count := v_count + v_n;
    -- Rows picked but left running (jq._key_try_lock) are read again by the next call.
    SELECT LEAST(v_left, pg_catalog.min(x.lease_expires_at)) INTO v_left FROM ONLY jq.jobs x
    WHERE x.id = ANY (v_ids) AND x.state::text = 'running' AND x.lease_expires_at < _reap.now;
    v_read := v_read + pg_catalog.cardinality(v_ids);
    v_all := pg_catalog.cardinality(v_ids) < _reap.batch;
    EXIT WHEN v_all OR _reap.budget IS NULL OR v_count >= _reap.budget OR v_read >= 2 * _reap.budget;
    v_at := v_last;
    END LOOP;
    IF _reap.batch > 0 THEN
        PERFORM jq._reap_end(_reap.now, v_from IS NULL, LEAST(v_left, CASE WHEN v_all THEN NULL ELSE v_last END));
    END IF;
    RETURN v_count;
END $$;
COMMENT ON FUNCTION jq._reap(timestamptz, integer, integer, boolean) IS
'Maintenance: ends the running jobs whose lease expired before now and returns how many: oldest '
'expiry first, in passes of batch until a pass ends fewer or budget went (budget NULL, the '
'default: one pass), each pass starting at the lease_expires_at the last one reached; the first '
'pass starts where this backend''s last committed call at the real time left off (5 s before its '
'now, or earlier where it ran out of budget or left a picked row running), except for a full pass '
'from the oldest expiry at least once a minute (src/reap_start.rs). '
'A worker that vanished never gave a verdict, so the attempt is refunded and lease_expiries + 1: '
'the job is ready again at its old place; cancelled if a cancellation was requested; dead once '
'lease_expiries exceeds the queue''s max_lease_expiries (a job that kills its worker must not loop '
'forever). Recovery depends only on the job row, never on worker names. Each gets an execution '
'row with outcome lease_expired. An attempt whose lease reached its wall timeout (jq._overdue) is '
'ended as failed instead (jq._time_out). Never waits for a lock: rows other sessions hold, and keyed jobs '
'that would end while another transaction holds their key''s slot row (jq._key_try_lock), are left '
'for the next pass. Safe to run concurrently; a job completed meanwhile is skipped. The on_dead hooks of jobs it makes dead run in this transaction, or, with defer_hooks, are queued for the hooks duty (jq._on_dead).';

CREATE OR REPLACE FUNCTION jq._prune(now timestamptz, batch integer DEFAULT 5000, budget integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_total integer := 0;
    v_count integer;
    v_hist  integer := 0;
BEGIN
    -- Finished jobs: whole history tables are emptied by TRUNCATE once every job in them is
    -- past its queue's retention, then the rings move on (sql/history.sql); in that order, so
    -- that a table a ring leaves now is never truncated in the transaction that left it. No row
    -- deletes, so no batches and nothing for vacuum; a table in use is left for the next pass.
    v_total := jq._truncate_history(_prune.now);
    PERFORM jq._rotate_history(_prune.now);
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
    -- Grants to roles that were dropped (a later role could get the same OID). jq.grant and
    -- jq.revoke hold jq.queue_grants in SHARE ROW EXCLUSIVE mode: while one is open this is left
    -- for the next pass (NOWAIT, in a subtransaction of its own, so the jobs pruned above stay
    -- pruned; pg_test/tests/robustness/held_locks.rs).
    BEGIN
        LOCK TABLE jq.queue_grants IN ROW EXCLUSIVE MODE NOWAIT;
        DELETE FROM jq.queue_grants g WHERE g.ctid = ANY (ARRAY(
            SELECT d.ctid FROM jq.queue_grants d
            WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = d.grantee)
            FOR UPDATE SKIP LOCKED));
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_total := v_total + v_count;
    EXCEPTION WHEN lock_not_available THEN
        NULL;
    END;
    -- Schedules whose creator was dropped: disabled and unbound, so that neither a later role with
    -- the same OID nor a restore into another cluster inherits them; enabling one binds it to the
    -- role that does (jq.alter_schedule). A row another session holds waits for the next pass.
    UPDATE jq.schedules s SET enabled = false, created_by = NULL,
           last_error = pg_catalog.format('disabled: the role that defined it (OID %s) was dropped', s.created_by::oid),
           last_error_at = _prune.now
    WHERE s.name = ANY (ARRAY(
            SELECT d.name FROM jq.schedules d
            WHERE d.created_by IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = d.created_by)
            FOR UPDATE SKIP LOCKED))
      AND s.created_by IS NOT NULL;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_total + v_count;
END $$;
COMMENT ON FUNCTION jq._prune(timestamptz, integer, integer) IS
'Maintenance: empties with TRUNCATE each history table of finished jobs whose jobs are all past '
'their queue''s retention at now (completed and cancelled: retention, but at least '
'min(history_retention, 5 minutes), as jq.queue_stats counts 5 minutes of completions; dead: '
'dead_retention) and moves the history rings on (jq._truncate_history, jq._rotate_history); '
'then jq.execution_log rows past their queue''s history_retention, or of queues that no '
'longer exist (history outlives its jobs), in passes of batch until a pass deletes fewer or '
'budget went (budget NULL, the default: one pass). Then jq.queue_grants rows of dropped roles; and disables (created_by NULL, '
'last_error set) schedules whose creator was dropped. Returns how many rows it deleted or disabled. Safe to run concurrently: it '
'skips rows another session has locked, and the grants while a jq.grant or jq.revoke is open; it never waits for a lock.';

CREATE OR REPLACE FUNCTION jq._maintain(duty text, now timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_total   integer := 0;
    v_timeout text := pg_catalog.current_setting('lock_timeout');
BEGIN
    -- Every duty writes jq.jobs. A session holding it in a mode that excludes writers (an open
    -- jq.drop_queue, a DBA's LOCK TABLE) fails the duty within 200 ms (55P03, recorded by
    -- jq._maintain_guarded; jq.tick raises it) instead of making it wait: nothing else in a duty
    -- waits for a lock either (pg_test/tests/robustness/held_locks.rs). Not NOWAIT: autovacuum
    -- takes the table ACCESS EXCLUSIVE for a moment when it truncates empty pages at its end (and
    -- gives way to a waiter), which failed a pass of the background worker under load.
    PERFORM pg_catalog.set_config('lock_timeout', '200ms', true);
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;
    PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
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
    WHEN 'reap_deferring_hooks' THEN
        -- The background worker's reap: the jobs go dead with their hooks queued for the hooks
        -- duty, so that no hook holds up reaping (src/bgworker/hooks.rs).
        v_total := jq._reap(_maintain.now, 1000, 10000, true);
    WHEN 'hooks' THEN
        -- on_dead hooks due: queued by the reaper, or failed before (sql/kinds.sql). The
        -- background worker runs its own loop of the same steps under jq.hook_timeout instead.
        v_total := jq._retry_hooks(_maintain.now, 100);
    WHEN 'cron' THEN
        v_total := jq.cron_tick(_maintain.now);
    WHEN 'prune' THEN
        -- Finished jobs by whole history tables; execution rows in passes of 5,000 up to
        -- 100,000 (jq._prune).
        v_total := jq._prune(_maintain.now, 5000, 100000);
        -- Workers stopped or silent past jq.worker_retention() (sql/fleet.sql), counted.
        v_total := v_total + jq._prune_workers(_maintain.now, 1000);
    ELSE
        RAISE EXCEPTION 'unknown maintenance duty %', _maintain.duty USING ERRCODE = '22023';
    END CASE;
    RETURN coalesce(v_total, 0);
END $$;
COMMENT ON FUNCTION jq._maintain(text, timestamptz) IS
'Maintenance: runs one duty at now and returns its count: promote (due scheduled jobs to ready, '
'up to 50,000 in batches of 5,000; then one priority-aging batch, jq._age, not counted), reap (expired leases and wall timeouts, up to 10,000 in batches of 1,000; reap_deferring_hooks: the same with the on_dead hooks queued instead of called), hooks (up to 100 due on_dead hook calls, jq._retry_hooks), '
'cron (jq.cron_tick: due cron schedules), prune (jq._prune with batch 5,000 and budget 100,000: '
'history tables of finished jobs past retention truncated, execution rows deleted; then up to 1,000 '
'workers past jq.worker_retention(), jq._prune_workers). jq.tick() runs all '
'four and then hooks; the background worker runs each in its own transaction through jq._maintain_guarded '
'(its reap with the hooks queued), and the hooks one call per transaction. '
'Errors: 22023 unknown duty; errors of the duty itself propagate.';

CREATE OR REPLACE FUNCTION jq._maintain_guarded(duty text, now timestamptz, OUT done integer, OUT error text)
LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    done := 0;
    BEGIN
        done := jq._maintain(_maintain_guarded.duty, _maintain_guarded.now);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS error = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
        error := v_state || ': ' || error;
    END;
END $$;
COMMENT ON FUNCTION jq._maintain_guarded(text, timestamptz) IS
'jq._maintain for the background worker: an error is returned as text ("SQLSTATE: message"), '
'with the duty''s work rolled back, instead of raised, so a failing duty never stops the worker '
'or the other duties.';

CREATE OR REPLACE FUNCTION jq.tick() RETURNS jq.tick_result
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_now    timestamptz := pg_catalog.now();
    v_result jq.tick_result;
BEGIN
    v_result.promoted := jq._maintain('promote', v_now);
    v_result.reaped := jq._maintain('reap', v_now);
    v_result.fired := jq._maintain('cron', v_now);
    v_result.pruned := jq._maintain('prune', v_now);
    PERFORM jq._maintain('hooks', v_now);  -- not counted in jq.tick_result
    RETURN v_result;
END $$;
COMMENT ON FUNCTION jq.tick() IS
'One maintenance pass at now(), in the caller''s transaction: promote due scheduled jobs (up to '
'50,000), reap expired leases (up to 10,000), fire due cron schedules (jq.cron_tick), prune past '
'retention (history tables of finished jobs whose jobs are all past retention, by TRUNCATE; '
'execution rows until a pass prunes fewer or 100,000 went), then '
'call up to 100 due on_dead hooks (not counted); returns the counts. Safe to run from several sessions at once and beside the background worker. With jq '
'in shared_preload_libraries the background worker does this every jq.tick_interval; otherwise '
'call it about once a second, from pg_cron or any client (see README).';

CREATE OR REPLACE FUNCTION jq.status(
    OUT database name, OUT state text, OUT pid integer, OUT started_at timestamptz,
    OUT last_pass_at timestamptz, OUT passes bigint, OUT promoted bigint, OUT reaped bigint,
    OUT fired bigint, OUT pruned bigint, OUT notified bigint, OUT pass_ms float8,
    OUT last_error text, OUT last_error_at timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
    SELECT d.datname, s.state, s.pid, s.started_at, s.last_pass_at, s.passes, s.promoted,
           s.reaped, s.fired, s.pruned, s.notified, s.pass_ms, s.last_error, s.last_error_at
    FROM jq._status() s LEFT JOIN pg_catalog.pg_database d ON d.oid = s.dboid
    UNION ALL
    SELECT pg_catalog.current_database(), 'not preloaded', NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, 0,
           'jq is not in shared_preload_libraries: no background worker and no wakeups; call '
           'jq.tick() about once a second (see README)', NULL
    WHERE NOT jq._preloaded()
    ORDER BY 1
$$;
COMMENT ON FUNCTION jq.status() IS
'The background workers, one row per database with jq that the launcher has a slot for (any '
'database of the cluster; databases without jq have no row): state (running, starting, '
'restarting, suspended while the database is dropped/renamed/copied, waiting for a worker slot, '
'no extension for a moment after jq was dropped), the worker''s pid, when it started, '
'the time, number and duration (pass_ms, milliseconds) of its passes with the counts of the '
'last one (promoted, reaped, fired cron jobs, pruned rows, NOTIFYs sent on channel jq_ready), '
'and its last error with its time. Without jq in shared_preload_libraries: one row saying so. '
'A row in state not served, whose last_error says why, for each database with jq left without '
'a slot because all jq.max_databases are taken (the first 64), and for the calling database '
'when it has jq but no slot (not in jq.databases, or not found yet).';

-- A database that just got jq is served within a second rather than at the next recheck.
SELECT jq._launcher_wake();

-- One queue's figures for jq.queue_stats. A function with JIT off, not the view's own joins:
-- a view cannot carry settings, and its plan over jq.jobs and the 16 history tables is estimated
-- in the millions on any installation (tables never analyzed), far past jit_above_cost, so
-- every read of the view compiled it with LLVM first, seconds of CPU for one queue
-- (pg_test/tests/plans/tables.rs,
-- monitoring_views_stay_below_the_jit_threshold). Called per queue, so a reader's WHERE queue
-- = ... still reads one queue only. SECURITY DEFINER (it reads jq's tables as the owner), so it
-- answers only for a queue the caller may see, as the view's own filter.
CREATE OR REPLACE FUNCTION jq._queue_figures(queue text, caller_ticket bigint DEFAULT jq._ticket())
RETURNS TABLE (claimable bigint, oldest_claimable_age interval, scheduled bigint, running bigint,
               dead bigint, completed bigint, cancelled bigint, blocked bigint, completed_5m bigint,
               failed_5m bigint, failed_15m bigint, lease_expired_15m bigint, wait_p95_5m interval,
               hooks_pending bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
ROWS 1
AS $$
DECLARE
    v_caller oid := jq._redeem(_queue_figures.caller_ticket);
BEGIN
    -- Checked before anything is counted (a denied call reads nothing): a nondeterministic
    -- collation on the argument would make the check and the counts match other queues' names
    -- (0A000, as every function naming a queue); then the caller's grants and the queue.
    PERFORM jq._refuse_collation(_queue_figures.queue);
    IF _queue_figures.queue IS NULL OR NOT jq._may(v_caller, _queue_figures.queue, 'any')
       OR NOT EXISTS (SELECT 1 FROM jq.queues t WHERE t.name = _queue_figures.queue) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT c.claimable, c.oldest_claimable_age, s.scheduled, r.running, f.dead, f.completed, f.cancelled,
           b.blocked, hc.completed_5m, h.failed_5m, h.failed_15m, h.lease_expired_15m, w.wait_p95_5m,
           ph.hooks_pending
    FROM (SELECT _queue_figures.queue AS name) q
    CROSS JOIN LATERAL (
        SELECT count(*) AS claimable, pg_catalog.now() - min(j.run_at) AS oldest_claimable_age
        FROM ONLY jq.jobs j  -- jobs_claim_idx's key (sql/schema.sql); index-only
        WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(q.name, 0) AND j.state = 'ready') c
    CROSS JOIN LATERAL (
        SELECT count(*) AS scheduled FROM ONLY jq.jobs j  -- jobs_scheduled_queue_idx: this queue's only
        WHERE pg_catalog.hashtextextended(j.queue, 0) = pg_catalog.hashtextextended(q.name, 0)
          AND j.state = 'scheduled') s
    CROSS JOIN LATERAL (
        SELECT count(*) AS running FROM ONLY jq.jobs j WHERE j.queue = q.name AND j.state = 'running') r
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE j.state = 'dead') AS dead,
               count(*) FILTER (WHERE j.state = 'completed') AS completed,
               count(*) FILTER (WHERE j.state = 'cancelled') AS cancelled
        -- Written as two conditions, one per partial index of the live table (jobs_dead_idx,
        -- jobs_finished_idx): one IN list matches neither predicate, and every queue's call
        -- scanned the whole live table (pg_test/tests/plans/tables.rs).
        FROM jq.jobs j WHERE j.queue = q.name AND (j.state = 'dead' OR j.state IN ('completed', 'cancelled'))) f
    CROSS JOIN LATERAL (
        SELECT count(*) AS blocked FROM ONLY jq.jobs j WHERE j.queue = q.name AND j.state = 'blocked') b
    -- Recent history. Completions are the completed job rows (in the history tables, by their
    -- (queue, finished_at, id) index); the other
    -- outcomes are in jq.execution_log, whose BRIN index on finished_at limits the scan to the last
    -- 15 minutes.
    CROSS JOIN LATERAL (
        SELECT count(*) AS completed_5m
        FROM jq.jobs j
        WHERE j.queue = q.name AND j.state = 'completed'
          AND j.finished_at > pg_catalog.now() - interval '5 minutes') hc
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE e.outcome = 'failed'
                                  AND e.finished_at > pg_catalog.now() - interval '5 minutes') AS failed_5m,
               count(*) FILTER (WHERE e.outcome = 'failed') AS failed_15m,
               count(*) FILTER (WHERE e.outcome = 'lease_expired') AS lease_expired_15m
        FROM jq.execution_log e
        WHERE e.finished_at > pg_catalog.now() - interval '15 minutes' AND e.queue = q.name) h
    -- Wait = claim time - due time (started_at - run_at) of the jobs claimed in the last 5 minutes
    -- that are still running or completed since (a failed job's run_at has moved to its retry).
    CROSS JOIN LATERAL (
        SELECT pg_catalog.percentile_cont(0.95) WITHIN GROUP (ORDER BY x.wait) AS wait_p95_5m
        FROM (SELECT j.started_at - j.run_at AS wait
              FROM ONLY jq.jobs j
              WHERE j.queue = q.name AND j.state = 'running'
                AND j.started_at > pg_catalog.now() - interval '5 minutes'
              UNION ALL
              SELECT j.started_at - j.run_at
              FROM jq.jobs j
              WHERE j.queue = q.name AND j.state = 'completed'
                AND j.finished_at > pg_catalog.now() - interval '5 minutes'
                AND j.started_at > pg_catalog.now() - interval '5 minutes') x) w
    -- Dead jobs whose kind's on_dead hook has not succeeded yet (sql/kinds.sql).
    CROSS JOIN LATERAL (
        SELECT count(*) AS hooks_pending FROM jq.pending_hooks p WHERE p.queue = q.name) ph;
END
$$;
COMMENT ON FUNCTION jq._queue_figures(text, bigint) IS
'Internal: the figures of jq.queue_stats for one queue (one row; none when the queue does not '
'exist or the caller may not see it: a superuser or member of jq_admin, or a jq.grant on it or '
'''*''). STABLE: one snapshot for every queue of a read of the view. JIT off: see '
'sql/maintenance.sql. Errors: 42501 for a caller_ticket not issued in this session, 0A000 for a '
'queue name under a nondeterministic collation.';

-- security_barrier: a reader's own (leaky) function in a WHERE on this view is evaluated only
-- on the rows the view lets it see (docs/security.md).
CREATE OR REPLACE VIEW jq.queue_stats WITH (security_barrier) AS
SELECT t.name AS queue,
       x.claimable + x.scheduled AS depth,
       x.claimable,
       x.scheduled,
       x.running,
       x.dead,
       x.completed,
       x.cancelled,
       x.oldest_claimable_age,
       t.paused,
       x.blocked,
       x.completed_5m,
       x.failed_5m,
       x.failed_15m,
       x.lease_expired_15m,
       x.wait_p95_5m,
       x.hooks_pending
FROM jq.queues t
CROSS JOIN LATERAL jq._queue_figures(t.name) x
-- Only the queues the reader holds a jq privilege on (docs/security.md); evaluated before a
-- reader's own conditions (security_barrier), and checked again inside jq._queue_figures.
WHERE pg_catalog.pg_has_role('jq_admin', 'USAGE')
   OR EXISTS (SELECT 1 FROM jq.queue_grants g
              WHERE g.queue IN (t.name, '*') AND pg_catalog.pg_has_role(g.grantee, 'USAGE'));
COMMENT ON VIEW jq.queue_stats IS
'One row per queue: depth = claimable (ready, due now) + scheduled (waiting for run_at, including '
'retries in backoff); running; dead, completed and cancelled jobs not yet retired (within '
'retention, or in a history table not yet truncated); '
'oldest_claimable_age (interval since the oldest claimable job became due; NULL when none); '
'paused; blocked: due jobs waiting for a slot of their concurrency_key (not in depth); from the '
'execution history: completed_5m and failed_5m (executions completed / failed '
'in the last 5 minutes), failed_15m, lease_expired_15m (expired leases reaped in the last 15 '
'minutes: crashed or stuck workers); wait_p95_5m: 95th percentile of the wait between a job '
'becoming due and being claimed (started_at - run_at, interval), over the jobs claimed in the '
'last 5 minutes that are running or completed (NULL when none). completed_5m and wait_p95_5m '
'count completed jobs, which pruning keeps at least min(history_retention, 5 minutes); the other '
'history counts need the queue''s history_retention to be at least 15 minutes. hooks_pending: dead '
'jobs whose kind''s on_dead hook raised and is not yet retried successfully (jq.pending_hooks). Shows only the queues the reader may use '
'(a superuser or member of jq_admin, or a jq.grant on the queue or ''*'').';

CREATE OR REPLACE VIEW jq.table_health AS
SELECT c.relname::text AS table_name,
       -- NULL rather than waiting when another session holds or awaits a conflicting lock
       -- (src/table_size.rs).
       jq._table_bytes(c.oid) AS total_bytes,
       st.n_live_tup AS live_tuples,
       st.n_dead_tup AS dead_tuples,
       CASE WHEN st.n_live_tup + st.n_dead_tup > 0
            THEN round(st.n_dead_tup::numeric / (st.n_live_tup + st.n_dead_tup), 3) END AS dead_ratio,
       st.last_autovacuum,
       st.autovacuum_count,
       o.oldest_xmin_age,
       o.oldest_xact_age,
       o.oldest_xact_pid
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'jq'
LEFT JOIN pg_catalog.pg_stat_all_tables st ON st.relid = c.oid
CROSS JOIN LATERAL (
    -- What holds vacuum back: the oldest snapshot (xmin) of any session, prepared transaction or
    -- replication slot. Dead jobs older than it cannot be removed, whatever autovacuum does.
    SELECT (SELECT max(x.age) FROM (
                SELECT pg_catalog.age(a.backend_xmin) AS age FROM pg_catalog.pg_stat_activity a
                WHERE a.backend_xmin IS NOT NULL
                UNION ALL SELECT pg_catalog.age(p.transaction) FROM pg_catalog.pg_prepared_xacts p
                UNION ALL SELECT pg_catalog.age(s.xmin) FROM pg_catalog.pg_replication_slots s
                WHERE s.xmin IS NOT NULL
                UNION ALL SELECT pg_catalog.age(s.catalog_xmin) FROM pg_catalog.pg_replication_slots s
                WHERE s.catalog_xmin IS NOT NULL) x) AS oldest_xmin_age,
           a.oldest_xact_age, a.oldest_xact_pid
    FROM (SELECT pg_catalog.clock_timestamp() - a.xact_start AS oldest_xact_age, a.pid AS oldest_xact_pid
          FROM pg_catalog.pg_stat_activity a
          WHERE a.backend_xmin IS NOT NULL AND a.pid <> pg_catalog.pg_backend_pid()
          ORDER BY a.xact_start NULLS LAST LIMIT 1) a
    RIGHT JOIN (SELECT 1) one ON true) o
WHERE c.relkind = 'r'
ORDER BY total_bytes DESC NULLS LAST;
COMMENT ON VIEW jq.table_health IS
'One row per jq table: total_bytes (table, indexes and TOAST; NULL when another session holds or '
'awaits a lock on the table, an index or its TOAST table that conflicts with reading its size: '
'it never waits for a lock), live_tuples and dead_tuples with '
'dead_ratio, last_autovacuum and autovacuum_count (pg_stat_all_tables); and, the same on every '
'row, what holds vacuum back: oldest_xmin_age (transactions, the oldest xmin of any session, '
'prepared transaction or replication slot), oldest_xact_age (interval) and oldest_xact_pid of '
'the longest-open transaction holding a snapshot. A growing dead_tuples with a large '
'oldest_xact_age means a long transaction keeps the queue''s dead rows alive. History tables '
'that stay large although past retention: jq.history_tables().';

-- The functions written in Rust (src/wakeup.rs, src/claim_hint.rs, src/bgworker/).
COMMENT ON FUNCTION jq._wake(text) IS
'Internal: notes that this transaction made one job of queue claimable (call once per job); at '
'commit, one more claim waiting on it (jq.claim with wait) is woken through shared memory, the '
'maintenance worker NOTIFYs jq_ready, and the queue''s claim-start hint is cleared (the job may '
'sort anywhere; src/claim_hint.rs; jq._wake_ready when its place is known). A rolled-back '
'transaction wakes nobody. Returns true (used inside WHERE clauses).';
COMMENT ON FUNCTION jq._wake_ready(text, integer, timestamptz) IS
'Internal: as jq._wake for a job made claimable with this priority and run_at (enqueue, promotion, '
'release, reaping, snooze, a key slot handing over): at commit the queue''s claim-start hint '
'moves back to that key only if the job sorts before it. Returns true.';
COMMENT ON FUNCTION jq._claim_hint(text) IS
'Internal (src/claim_hint.rs): whether claims of queue may start at its claim-start hint now (the '
'key of its last claimed job, in shared memory); the key is then what jq._hint_priority(), '
'jq._hint_run_at() and jq._hint_id() return. False when there is none, jq.claim_hints is off, '
'jq is not preloaded, or it is this claim''s turn to run the full claim (one claim of a queue at a time, at least a second and a hundred times the CPU time of the previous full claim apart, at most a minute).';
COMMENT ON FUNCTION jq._hint_priority() IS
'Internal: priority of the claim-start hint read by this backend''s last jq._claim_hint (NULL if none).';
COMMENT ON FUNCTION jq._hint_run_at() IS
'Internal: run_at of the claim-start hint read by this backend''s last jq._claim_hint (NULL if none).';
COMMENT ON FUNCTION jq._hint_id() IS
'Internal: job id of the claim-start hint read by this backend''s last jq._claim_hint (NULL if none).';
COMMENT ON FUNCTION jq._hint_advance(text, integer, timestamptz, bigint) IS
'Internal: called by a claim for each job it claims: moves the queue''s claim-start hint forward to '
'(priority, run_at, id) unless another transaction made a job of the queue claimable or cleared the hint since this '
'backend''s last jq._claim_hint (READ COMMITTED only); if the transaction rolls back, moves it '
'back to that key. In any isolation level, the first job ends this backend''s turn to run the full '
'claim. Returns true.';
COMMENT ON FUNCTION jq._hint_turn() IS
'Internal: whether this backend''s last jq._claim_hint gave it the turn to run the full claim '
'(jq.claim then claims one job: its full claim may walk a long dead head, and the jobs it '
'returns wait for the walk).';
COMMENT ON FUNCTION jq._hint_watch(text) IS
'Internal: called by a long-polling jq.claim about to sleep: when it must wake at the latest to '
'look again, so that the queue''s periodic full claim (which finds a job left behind the '
'claim-start hint) also runs while every consumer sleeps: the next due full claim, at most a '
'second away, for one sleeping claim per queue (the watcher); NULL for the others, for a queue '
'without a hint, and in a transaction with a transaction id.';
COMMENT ON FUNCTION jq._hint_turn_end(text) IS
'Internal: called by jq.claim right after a full claim that claimed nothing: if this backend had '
'the turn to run the full claim of queue, it ends now, and the next full claim is due a second or '
'a hundred times the CPU time this one used later (at most a minute), not after the caller''s transaction. '
'Returns true.';
COMMENT ON FUNCTION jq._reap_start(timestamptz) IS
'Internal (src/reap_start.rs): the lease_expires_at where a jq._reap call at now starts: 5 s before '
'the now of this backend''s last committed call, or earlier where that call ran out of budget or '
'left a picked row running; NULL (a full pass from the oldest expiry) in a backend''s first call, '
'when now is more than 2 s from the clock, and when a full pass is due (a minute after the last, or '
'ten times its duration, at most ten minutes).';
COMMENT ON FUNCTION jq._reap_end(timestamptz, boolean, timestamptz) IS
'Internal: a jq._reap call at now (a full pass if full) ended, having read every expired lease '
'except from reached on (NULL: none); at commit, this backend''s next call starts at reached or '
'5 s before now, whichever is earlier. Returns true.';
COMMENT ON FUNCTION jq._hint_clear(text) IS
'Internal: at commit, clears the claim-start hint of queue (a path that changes the claim order '
'of ready jobs, such as priority aging). Returns true.';
COMMENT ON FUNCTION jq._wake_n(text, integer) IS
'Internal: as jq._wake for n jobs at once: at commit, up to n claims waiting on queue are woken '
'(a very large n wakes them all). Returns true.';
COMMENT ON FUNCTION jq._wake_slot(text) IS
'Internal: notes that a running job of queue ended; at commit, claims waiting on it are woken if '
'they wait on it as a capped queue (a slot is free). Returns true.';
COMMENT ON FUNCTION jq._wake_on_abort(text) IS
'Internal: if this transaction rolls back, wake claims waiting on queue (a rolled-back claim '
'hands its jobs back). Returns true.';
COMMENT ON FUNCTION jq._wait_register(text[], boolean[]) IS
'Internal: registers this backend as waiting for jobs in queues (capped[i]: also for a running '
'job of queues[i] ending) until jq._wait_done() or the end of the transaction, and resets its '
'latch. Returns false when waiting must poll (jq not preloaded, or more than 4,096 processes).';
COMMENT ON FUNCTION jq._wait_register_batch(text[], boolean[], integer) IS
'Internal: as jq._wait_register for a waiter whose every look claims up to batch jobs of its '
'queues: a commit that makes k jobs claimable wakes waiters until their batches cover k '
'(batch below 1 counts as 1). Returns false when waiting must poll.';
COMMENT ON FUNCTION jq._wait(timestamptz) IS
'Internal: sleeps until woken or deadline (with jq not preloaded: at most jq.poll_interval), '
'answering query cancel and termination (checked before a wakeup is consumed, so a cancelled '
'sleeper passes its wakeup on). An offer of its queue''s watch does not end the sleep: it takes '
'the watch and sleeps on, until the watch''s time at the latest. Returns false if deadline had passed.';
COMMENT ON FUNCTION jq._wait_done() IS
'Internal: ends this backend''s waiter registration (also done at transaction end); a watch of its '
'queue''s sleepers that it held is offered to another sleeper at once.';
COMMENT ON FUNCTION jq._wait_rebatch(boolean, integer) IS
'Internal: called by a long-polling jq.claim about to sleep: updates its registration to what its '
'queue hands out now (capped: also woken when a running job ends; batch: the jobs a commit counts '
'it for). True when that changed something (the claim then looks again before sleeping).';
COMMENT ON FUNCTION jq._waiters() IS
'Internal: the long-poll registrations of this database''s backends (pid, number of queues or -1 '
'for all, batch, capped, watchable, woken: 1 owes a look, 2 offered the watch), read without locks; '
'for tests and diagnosis.';
COMMENT ON FUNCTION jq._queue_bit(text) IS
'Internal: the bit (0..1023) of queue in the per-database ready filter read by the maintenance '
'worker to send its jq_ready NOTIFYs.';
COMMENT ON FUNCTION jq._wakeups() IS
'How many waiting claims were woken through shared memory since the server started (bigint; '
'NULL without shared_preload_libraries). A commit that makes k jobs claimable wakes waiters of '
'their queue until the jobs each claims per look (its n) cover k: at most k waiters, one per n '
'jobs for claims of n jobs.';
COMMENT ON FUNCTION jq._status() IS
'Internal: the background workers'' shared-memory table behind jq.status(), by database oid.';
COMMENT ON FUNCTION jq._table_bytes(oid) IS
'Internal (src/table_size.rs), jq.table_health''s sizes: pg_total_relation_size(rel) in bytes (table, '
'indexes and TOAST), or NULL when another session holds or awaits a lock on the table, one of its '
'indexes or its TOAST table that conflicts with ACCESS SHARE, or rel is no relation. Never waits for '
'a lock and holds none when it returns.';
COMMENT ON FUNCTION jq._preloaded() IS
'Whether jq is in shared_preload_libraries (background workers and shared-memory wakeups on).';
COMMENT ON FUNCTION jq._launcher_wake() IS
'Internal: when the transaction commits, tells the launcher that jq may have appeared in this '
'database, which it then checks within a second (run by CREATE EXTENSION jq and ALTER EXTENSION '
'jq UPDATE).';
