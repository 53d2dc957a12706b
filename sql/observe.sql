-- The read API of the operator dashboard (`jqctl dashboard`, docs/dashboard.md), usable by anyone
-- from SQL: what a role may see of its queues, jobs and schedules, and the bulk operator calls on
-- dead jobs.
--
-- Every function runs as the owner (SECURITY DEFINER, pinned search_path) and returns only what
-- the calling role's jq grants allow (jq._may on the caller the ticket names, sql/grants.sql):
-- queue-level figures for any privilege on the queue, job contents (payload, errors) for work or
-- admin, the bulk calls for admin. A queue or job the caller may not see is answered exactly as
-- one that does not exist (no rows), so nothing is learnt of other tenants.
--
-- Cost is bounded per call, whatever the size of jq.jobs: counts are taken over LIMIT n + 1
-- subqueries (a deep queue shows as "n+"), listings page by keyset along the index of their state
-- (no sort, no count; pg_test/tests/plans/observe.rs), and a filtered listing reads at most
-- scan_limit index entries per page.

-- A name (queue or schedule) passed under a nondeterministic collation would compare
-- case-insensitively (say) with the names in jq's tables, and reach another tenant's rows while
-- the grant check looked at the name as given: refused, as src/security.rs refuses it for the
-- functions that authorise through jq._authorize_queue. A PL/pgSQL parameter carries the
-- collation of the call's argument, so pg_collation_for sees it here.
CREATE OR REPLACE FUNCTION jq._refuse_collation(name text) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_collation c
               WHERE c.oid = pg_catalog.pg_collation_for(_refuse_collation.name)::pg_catalog.regcollation
                 AND NOT c.collisdeterministic) THEN
        RAISE EXCEPTION 'jq: queue names cannot be compared under a nondeterministic collation'
            USING ERRCODE = '0A000',
                  HINT = 'Pass the queue name without a COLLATE clause (or with a deterministic collation).';
    END IF;
END $$;
COMMENT ON FUNCTION jq._refuse_collation(text) IS
'Internal: raises 0A000 when name (a queue or schedule name argument) carries a nondeterministic '
'collation, which would widen the comparisons with jq''s names.';

-- The oldest run_at among a queue's ready jobs, read as a loose index scan of jobs_claim_idx: one
-- descent per distinct priority (the first entry of each priority has its smallest run_at), for
-- at most 100 priorities, instead of reading every ready job as min(run_at) would.
CREATE OR REPLACE FUNCTION jq._oldest_claimable(queue text) RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
    WITH RECURSIVE p(priority, run_at) AS (
        (SELECT j.priority, j.run_at FROM ONLY jq.jobs j
         WHERE hashtextextended(j.queue, 0) = hashtextextended(_oldest_claimable.queue, 0) AND j.state = 'ready'
         ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1)
        UNION ALL
        SELECT n.priority, n.run_at FROM p CROSS JOIN LATERAL (
            SELECT j.priority, j.run_at FROM ONLY jq.jobs j
            WHERE hashtextextended(j.queue, 0) = hashtextextended(_oldest_claimable.queue, 0) AND j.state = 'ready'
              AND j.priority < p.priority
            ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1) n
    )
    SELECT min(x.run_at) FROM (SELECT p.run_at FROM p LIMIT 100) x
$$;
COMMENT ON FUNCTION jq._oldest_claimable(text) IS
'Internal: the smallest run_at among the ready jobs of queue (NULL: none), from one index descent '
'per distinct priority of jobs_claim_idx, at most 100 priorities (beyond them, the oldest among the '
'100 highest).';

CREATE OR REPLACE FUNCTION jq.overview(only_queue text DEFAULT NULL, depth_cap integer DEFAULT 10000,
                                       caller_ticket bigint DEFAULT jq._ticket())
RETURNS TABLE (queue text, claimable bigint, scheduled bigint, running bigint, blocked bigint,
               dead bigint, oldest_claimable_age interval, paused boolean, settings jsonb)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._redeem(overview.caller_ticket);
    v_cap    integer := overview.depth_cap;
BEGIN
    PERFORM jq._refuse_collation(overview.only_queue);
    IF v_cap IS NULL OR v_cap < 1 OR v_cap > 10000000 THEN
        RAISE EXCEPTION 'depth_cap must be between 1 and 10000000, got %', v_cap USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    -- Each count reads at most v_cap + 1 entries of its state's index, in the index's order (the
    -- ORDER BY keeps the planner from a sequential scan that would filter the whole table).
    SELECT t.name,
           (SELECT count(*) FROM (SELECT 1 FROM ONLY jq.jobs j  -- jobs_claim_idx
                                  WHERE hashtextextended(j.queue, 0) = hashtextextended(t.name, 0)
                                    AND j.state = 'ready'
                                  ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_cap + 1) x),
           (SELECT count(*) FROM (SELECT 1 FROM ONLY jq.jobs j  -- jobs_scheduled_queue_idx
                                  WHERE hashtextextended(j.queue, 0) = hashtextextended(t.name, 0)
                                    AND j.state = 'scheduled'
                                  ORDER BY j.run_at, j.id LIMIT v_cap + 1) x),
           (SELECT count(*) FROM (SELECT 1 FROM ONLY jq.jobs j  -- jobs_running_idx
                                  WHERE j.queue = t.name AND j.state = 'running'
                                  ORDER BY j.lease_expires_at LIMIT v_cap + 1) x),
           (SELECT count(*) FROM (SELECT 1 FROM ONLY jq.jobs j  -- jobs_blocked_idx
                                  WHERE j.queue = t.name AND j.state = 'blocked'
                                  ORDER BY j.concurrency_key, j.run_at, j.id LIMIT v_cap + 1) x),
           (SELECT count(*) FROM (SELECT 1 FROM jq.jobs j  -- the history's (queue, finished_at, id)
                                  WHERE j.queue = t.name AND j.state = 'dead'
                                  ORDER BY j.finished_at, j.id LIMIT v_cap + 1) x),
           now() - jq._oldest_claimable(t.name),
           t.paused,
           to_jsonb(t) - 'name' - 'paused' - 'rate_tokens' - 'rate_updated' - 'has_kinds'
    FROM jq.queues t
    WHERE (overview.only_queue IS NULL OR t.name = overview.only_queue)
      AND jq._may(v_caller, t.name, 'any')
    ORDER BY t.name;
END $$;
COMMENT ON FUNCTION jq.overview(text, integer, bigint) IS
'One row per queue the caller holds any jq privilege on (or just only_queue, when given): claimable '
'(ready), scheduled, running, blocked and dead job counts, each capped: a value of depth_cap + 1 '
'means "more than depth_cap" (default 10,000; counted over LIMIT depth_cap + 1, so a deep queue '
'costs the same on every call); oldest_claimable_age (interval since the oldest ready job became '
'due, over the 100 highest priorities; NULL when none); paused; settings: the queue''s options as '
'in jq.queues (JSON object: max_attempts, lease, backoff, flow control: max_concurrency, '
'key_concurrency, rate_limit, rate_period, rate_burst, priority_aging, ...). A queue the caller '
'may not see is left out as if it did not exist. Errors: 22023 depth_cap outside 1..10000000.';

CREATE OR REPLACE FUNCTION jq.throughput(only_queue text DEFAULT NULL, since interval DEFAULT '1 hour',
                                         max_rows integer DEFAULT 10000,
                                         caller_ticket bigint DEFAULT jq._ticket())
RETURNS TABLE (queue text, minute timestamptz, completed bigint, failed bigint, dead bigint, partial boolean)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._redeem(throughput.caller_ticket);
    v_from   timestamptz;
BEGIN
    PERFORM jq._refuse_collation(throughput.only_queue);
    IF throughput.since IS NULL OR throughput.since <= interval '0' OR throughput.since > interval '1 day' THEN
        RAISE EXCEPTION 'since must be greater than 0 and at most 1 day, got %', throughput.since
            USING ERRCODE = '22023';
    END IF;
    IF throughput.max_rows IS NULL OR throughput.max_rows < 1 OR throughput.max_rows > 10000000 THEN
        RAISE EXCEPTION 'max_rows must be between 1 and 10000000, got %', throughput.max_rows
            USING ERRCODE = '22023';
    END IF;
    v_from := date_trunc('minute', now() - throughput.since);
    -- Per queue, newest first, at most max_rows completed jobs, max_rows failed executions and
    -- max_rows dead jobs (their indexes, backwards): the latest minutes are exact, and the
    -- minutes at or before the oldest row read are flagged partial when a limit was reached.
    -- So an hour of a million failures costs what max_rows of them do
    -- (pg_test/tests/plans/observe.rs, throughput_reads_at_most_max_rows_per_queue).
    RETURN QUERY
    WITH qs AS (SELECT t.name FROM jq.queues t
                WHERE (throughput.only_queue IS NULL OR t.name = throughput.only_queue)
                  AND jq._may(v_caller, t.name, 'any')),
         c AS (SELECT qs.name AS q, x.at FROM qs CROSS JOIN LATERAL (
                   SELECT j.finished_at AS at FROM jq.jobs j  -- the history's (queue, finished_at, id), backwards
                   WHERE j.queue = qs.name AND j.state = 'completed' AND j.finished_at >= v_from
                   ORDER BY j.finished_at DESC, j.id DESC LIMIT throughput.max_rows) x),
         d AS (SELECT qs.name AS q, x.at FROM qs CROSS JOIN LATERAL (
                   SELECT j.finished_at AS at FROM jq.jobs j  -- the history's (queue, finished_at, id), backwards
                   WHERE j.queue = qs.name AND j.state = 'dead' AND j.finished_at >= v_from
                   ORDER BY j.finished_at DESC, j.id DESC LIMIT throughput.max_rows) x),
         f AS (SELECT qs.name AS q, x.at FROM qs CROSS JOIN LATERAL (
                   SELECT e.finished_at AS at FROM jq.execution_log e  -- execution_log_failed_idx, backwards
                   WHERE e.queue = qs.name AND e.outcome = 'failed' AND e.finished_at >= v_from
                   ORDER BY e.finished_at DESC LIMIT throughput.max_rows) x),
         cut AS (SELECT x.q, max(x.at) AS at FROM (
                     SELECT c.q, min(c.at) AS at FROM c GROUP BY c.q HAVING count(*) >= throughput.max_rows
                     UNION ALL
                     SELECT f.q, min(f.at) FROM f GROUP BY f.q HAVING count(*) >= throughput.max_rows
                     UNION ALL
                     SELECT d.q, min(d.at) FROM d GROUP BY d.q HAVING count(*) >= throughput.max_rows) x
                 GROUP BY x.q),
         cm AS (SELECT c.q, date_trunc('minute', c.at) AS m, count(*) AS n FROM c GROUP BY 1, 2),
         fm AS (SELECT f.q, date_trunc('minute', f.at) AS m, count(*) AS n FROM f GROUP BY 1, 2),
         dm AS (SELECT d.q, date_trunc('minute', d.at) AS m, count(*) AS n FROM d GROUP BY 1, 2)
    SELECT qs.name, g.m, coalesce(cm.n, 0), coalesce(fm.n, 0), coalesce(dm.n, 0),
           coalesce(g.m <= cut.at, false)
    FROM qs
    CROSS JOIN generate_series(v_from, date_trunc('minute', now()), interval '1 minute') AS g(m)
    LEFT JOIN cm ON cm.q = qs.name AND cm.m = g.m
    LEFT JOIN fm ON fm.q = qs.name AND fm.m = g.m
    LEFT JOIN dm ON dm.q = qs.name AND dm.m = g.m
    LEFT JOIN cut ON cut.q = qs.name
    ORDER BY qs.name, g.m;
END $$;
COMMENT ON FUNCTION jq.throughput(text, interval, integer, bigint) IS
'Per queue (only_queue, or every queue the caller holds any privilege on when NULL) and per minute '
'since now() - since (default 1 hour; at most 1 day), oldest first: completed (jobs completed in '
'that minute and still within retention), failed (failed executions, from jq.execution_log within '
'history_retention) and dead (jobs that went dead in that minute, within dead_retention). Reads at '
'most max_rows (default 10,000) completed jobs, max_rows failed executions and max_rows dead jobs '
'per queue, newest first: partial is true for the minutes at or before the oldest row read when a '
'limit was reached (their counts are too low). No rows for '
'a queue the caller holds no privilege on, or that does not exist. Errors: 22023 since or '
'max_rows out of range, 0A000 only_queue under a nondeterministic collation.';

-- The keyset of each state: the order of the state's index, and the condition "after the cursor
-- job" in it ($5.. are the cursor job's key values). Ready jobs are listed in claim order, then by
-- the order their index keeps (scheduled and blocked: due first; running: lease end first;
-- finished: newest first). Every keyset condition is an index condition, so a page reads only
-- its own entries however deep the cursor: a ready page after the cursor is the rest of the
-- cursor's priority from the cursor on, then the lower priorities: two ordered index scans
-- under one Append, which returns its first scan's rows before its second's (every row of the
-- first sorts before every row of the second; an outer ORDER BY made the planner sort the
-- first, whose priority it does not see as constant). One condition "priority <= $5 AND
-- (priority < $5 OR (run_at, id) > ...)" read and filtered away every entry of the cursor's
-- priority before the cursor (pg_test/tests/plans/observe.rs; the order across priorities:
-- worker-client/tests/dashboard.rs, keyset_pages_cover_the_listing_once).
CREATE OR REPLACE FUNCTION jq._list_jobs_sql(state jq.job_state, has_cursor boolean) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
    SELECT CASE
           WHEN _list_jobs_sql.state = 'ready' AND has_cursor THEN
               '(' || h.head
               || 'hashtextextended(j.queue, 0) = hashtextextended($1, 0) AND j.state = ''ready'''
               || ' AND j.priority = $5 AND (j.run_at, j.id) > ($6, $9) ORDER BY j.run_at, j.id LIMIT $11)'
               || ' UNION ALL (' || h.head
               || 'hashtextextended(j.queue, 0) = hashtextextended($1, 0) AND j.state = ''ready'''
               || ' AND j.priority < $5 ORDER BY j.priority DESC, j.run_at, j.id LIMIT $11)'
           ELSE h.head || CASE _list_jobs_sql.state
           WHEN 'ready' THEN
               'hashtextextended(j.queue, 0) = hashtextextended($1, 0) AND j.state = ''ready'''
               || ' ORDER BY j.priority DESC, j.run_at, j.id'
           WHEN 'scheduled' THEN
               'hashtextextended(j.queue, 0) = hashtextextended($1, 0) AND j.state = ''scheduled'''
               || CASE WHEN has_cursor THEN ' AND (j.run_at, j.id) > ($6, $9)' ELSE '' END
               || ' ORDER BY j.run_at, j.id'
           WHEN 'running' THEN
               'j.state = ''running'' AND j.queue = $1'
               || CASE WHEN has_cursor THEN ' AND j.lease_expires_at >= $7 AND (j.lease_expires_at, j.id) > ($7, $9)' ELSE '' END
               || ' ORDER BY j.lease_expires_at, j.id'
           WHEN 'blocked' THEN
               'j.queue = $1 AND j.state = ''blocked'''
               || CASE WHEN has_cursor THEN ' AND (j.concurrency_key, j.run_at, j.id) > ($10, $6, $9)' ELSE '' END
               || ' ORDER BY j.concurrency_key, j.run_at, j.id'
           ELSE
               'j.queue = $1 AND j.state = ' || quote_literal(_list_jobs_sql.state::text)
               || CASE WHEN has_cursor THEN ' AND (j.finished_at, j.id) < ($8, $9)' ELSE '' END
               || ' ORDER BY j.finished_at DESC, j.id DESC'
           END END
        || ' LIMIT $11'
    FROM (SELECT 'SELECT j.id, j.state, j.kind, j.priority, j.attempt, j.max_attempts, j.run_at, j.created_at,'
        || ' j.started_at, j.finished_at, j.lease_expires_at, j.worker, j.concurrency_key,'
        || ' j.idempotency_key, left(j.last_error, 300) AS last_error,'
        || ' (($2::text IS NULL OR j.kind = $2)'
        || '  AND ($3::text IS NULL OR j.concurrency_key = $3 OR j.idempotency_key = $3)'
        || '  AND ($4::text IS NULL OR strpos(lower(j.last_error), lower($4)) > 0)) AS matches'
        || ' FROM jq.jobs j WHERE ' AS head) h
$$;
COMMENT ON FUNCTION jq._list_jobs_sql(jq.job_state, boolean) IS
'Internal: the statement jq.list_jobs runs for state (each along its state''s partial index, '
'with the keyset condition when has_cursor): parameters $1 queue, $2 kind, $3 key, $4 error text, '
'$5..$10 the cursor job''s priority, run_at, lease_expires_at, finished_at, id, concurrency_key, '
'$11 the scan limit.';

CREATE OR REPLACE FUNCTION jq.list_jobs(queue text, job_state jq.job_state, job_kind text DEFAULT NULL,
                                        key text DEFAULT NULL, error text DEFAULT NULL,
                                        after_id bigint DEFAULT NULL, n integer DEFAULT 50,
                                        scan_limit integer DEFAULT 10000,
                                        caller_ticket bigint DEFAULT jq._ticket())
RETURNS TABLE (id bigint, state jq.job_state, kind text, priority integer, attempt integer,
               max_attempts integer, run_at timestamptz, created_at timestamptz,
               started_at timestamptz, finished_at timestamptz, lease_expires_at timestamptz,
               worker text, concurrency_key text, idempotency_key text, last_error text,
               cursor_only boolean)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller  oid := jq._redeem(list_jobs.caller_ticket);
    v_pri     integer;
    v_run     timestamptz;
    v_lease   timestamptz;
    v_fin     timestamptz;
    v_cid     bigint;
    v_ckey    text;
    r         record;
    v_found   integer := 0;
    v_scanned integer := 0;
    v_last    bigint;
BEGIN
    PERFORM jq._refuse_collation(list_jobs.queue);
    IF list_jobs.job_state IS NULL THEN
        RAISE EXCEPTION 'job_state must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF list_jobs.n IS NULL OR list_jobs.n < 1 OR list_jobs.n > 1000 THEN
        RAISE EXCEPTION 'n must be between 1 and 1000, got %', list_jobs.n USING ERRCODE = '22023';
    END IF;
    IF list_jobs.scan_limit IS NULL OR list_jobs.scan_limit < list_jobs.n OR list_jobs.scan_limit > 1000000 THEN
        RAISE EXCEPTION 'scan_limit must be between n and 1000000, got %', list_jobs.scan_limit
            USING ERRCODE = '22023';
    END IF;
    IF list_jobs.queue IS NULL OR NOT jq._may(v_caller, list_jobs.queue, 'work') THEN
        RETURN;
    END IF;
    IF list_jobs.after_id IS NOT NULL THEN
        SELECT j.priority, j.run_at, j.lease_expires_at, j.finished_at, j.id, j.concurrency_key
        INTO v_pri, v_run, v_lease, v_fin, v_cid, v_ckey FROM jq.jobs j WHERE j.id = list_jobs.after_id AND j.queue = list_jobs.queue;
        IF NOT FOUND THEN
            RETURN;  -- the cursor job is gone (pruned): the listing ends there
        END IF;
    END IF;
    FOR r IN EXECUTE jq._list_jobs_sql(list_jobs.job_state, list_jobs.after_id IS NOT NULL)
             USING list_jobs.queue, list_jobs.job_kind, list_jobs.key, list_jobs.error,
                   v_pri, v_run, v_lease, v_fin, v_cid, v_ckey,
                   -- Without filters every row read is returned: the statement's LIMIT is n, so
                   -- the planner sees how few rows are wanted (an ordered index scan).
                   CASE WHEN list_jobs.job_kind IS NULL AND list_jobs.key IS NULL AND list_jobs.error IS NULL
                        THEN list_jobs.n ELSE list_jobs.scan_limit END
    LOOP
        v_scanned := v_scanned + 1;
        v_last := r.id;
        IF r.matches THEN
            id := r.id; state := r.state; kind := r.kind; priority := r.priority;
            attempt := r.attempt; max_attempts := r.max_attempts; run_at := r.run_at;
            created_at := r.created_at; started_at := r.started_at; finished_at := r.finished_at;
            lease_expires_at := r.lease_expires_at; worker := r.worker;
            concurrency_key := r.concurrency_key; idempotency_key := r.idempotency_key;
            last_error := r.last_error; cursor_only := false;
            RETURN NEXT;
            v_found := v_found + 1;
            EXIT WHEN v_found >= list_jobs.n;
        END IF;
    END LOOP;
    IF v_found < list_jobs.n AND v_scanned >= list_jobs.scan_limit THEN
        -- The scan budget ran out before n matches: where the next page resumes.
        id := v_last; state := NULL; kind := NULL; priority := NULL; attempt := NULL;
        max_attempts := NULL; run_at := NULL; created_at := NULL; started_at := NULL;
        finished_at := NULL; lease_expires_at := NULL; worker := NULL; concurrency_key := NULL;
        idempotency_key := NULL; last_error := NULL; cursor_only := true;
        RETURN NEXT;
    END IF;
END $$;
COMMENT ON FUNCTION jq.list_jobs(text, jq.job_state, text, text, text, bigint, integer, integer, bigint) IS
'Jobs of queue in job_state, at most n (1..1000, default 50) per call, in the order of the state''s '
'index: ready in claim order (priority DESC, run_at, id), scheduled by run_at, running by '
'lease_expires_at, blocked by concurrency_key and run_at, completed / cancelled / dead newest '
'finished first. Keyset paging: after_id = the last id of the previous page (a cursor job that '
'left the queue''s listing ends it). Filters: job_kind (equal), key (equal to concurrency_key or '
'idempotency_key), error (case-insensitive text in last_error, first 300 characters returned). '
'At most scan_limit (default 10,000) jobs are read per call: when they run out before n matched, '
'a last row with cursor_only = true carries (in id) where the next call resumes. Never counts or '
'sorts the queue. No rows unless the caller may work or administer the queue. Errors: 22004 '
'job_state NULL, 22023 n or scan_limit out of range.';

CREATE OR REPLACE FUNCTION jq.job_detail(job_id bigint, caller_ticket bigint DEFAULT jq._ticket())
RETURNS TABLE (id bigint, queue text, kind text, state jq.job_state, priority integer,
               attempt integer, max_attempts integer, claims bigint, lease_expiries integer,
               run_at timestamptz, created_at timestamptz, started_at timestamptz,
               finished_at timestamptz, lease_expires_at timestamptz, worker text,
               cancel_requested boolean, concurrency_key text, idempotency_key text,
               timeout interval, payload jsonb, result jsonb, progress jsonb, last_error text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._redeem(job_detail.caller_ticket);
BEGIN
    -- The lease token is left out: it is the running worker's capability.
    RETURN QUERY
    SELECT j.id, j.queue, j.kind, j.state, j.priority, j.attempt, j.max_attempts, j.claims,
           j.lease_expiries, j.run_at, j.created_at, j.started_at, j.finished_at,
           j.lease_expires_at, j.worker, j.cancel_requested, j.concurrency_key, j.idempotency_key,
           j.timeout, j.payload, j.result, j.progress, j.last_error
    FROM jq.jobs j
    WHERE j.id = job_detail.job_id AND jq._may(v_caller, j.queue, 'work');
END $$;
COMMENT ON FUNCTION jq.job_detail(bigint, bigint) IS
'The job job_id (one row, or none): its queue, kind, state, counters, times, lease end and worker, '
'keys, payload, result, progress and last_error; not its lease token. No row when the job does '
'not exist or the caller may not work or administer its queue (the two are not told apart).';

CREATE OR REPLACE FUNCTION jq.job_executions(job_id bigint, caller_ticket bigint DEFAULT jq._ticket())
RETURNS TABLE (seq bigint, attempt integer, outcome jq.execution_outcome, started_at timestamptz,
               lease_expires_at timestamptz, finished_at timestamptz, worker text, error text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._redeem(job_executions.caller_ticket);
BEGIN
    RETURN QUERY
    SELECT e.seq, e.attempt, e.outcome, e.started_at, e.lease_expires_at, e.finished_at, e.worker, e.error
    FROM jq.executions e
    WHERE e.job_id = job_executions.job_id AND jq._may(v_caller, e.queue, 'work')
    ORDER BY e.seq;
END $$;
COMMENT ON FUNCTION jq.job_executions(bigint, bigint) IS
'The ended executions of job job_id from jq.executions, by seq (the running one is in '
'jq.job_detail). No rows when the caller may not work or administer the job''s queue.';

CREATE OR REPLACE FUNCTION jq.schedule_list(caller_ticket bigint DEFAULT jq._ticket())
RETURNS TABLE (name text, cron text, timezone text, queue text, kind text, enabled boolean,
               misfire text, overlap text, next_run_at timestamptz, last_fired_at timestamptz,
               last_job_id bigint, fired_count bigint, skipped_count bigint, last_error text,
               last_error_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._redeem(schedule_list.caller_ticket);
BEGIN
    RETURN QUERY
    SELECT s.name, s.cron, s.timezone, s.queue, s.kind, s.enabled, s.misfire, s.overlap,
           s.next_run_at, s.last_fired_at, s.last_job_id, s.fired_count, s.skipped_count,
           s.last_error, s.last_error_at
    FROM jq.schedules s
    WHERE jq._may(v_caller, s.queue, 'any')
    ORDER BY s.name;
END $$;
COMMENT ON FUNCTION jq.schedule_list(bigint) IS
'The cron schedules whose queue the caller holds any jq privilege on: definition, enabled, next '
'and last fire time, the last job, fired_count and skipped_count, and the last error of a pass.';

CREATE OR REPLACE FUNCTION jq.cron_log(schedule text, n integer DEFAULT 20,
                                       caller_ticket bigint DEFAULT jq._ticket())
RETURNS TABLE (fire_time timestamptz, outcome text, job_id bigint, fired_at timestamptz, error text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._redeem(cron_log.caller_ticket);
BEGIN
    PERFORM jq._refuse_collation(cron_log.schedule);
    IF cron_log.n IS NULL OR cron_log.n < 1 OR cron_log.n > 1000 THEN
        RAISE EXCEPTION 'n must be between 1 and 1000, got %', cron_log.n USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM jq.schedules s
                   WHERE s.name = cron_log.schedule AND jq._may(v_caller, s.queue, 'any')) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT r.fire_time, r.outcome, r.job_id, r.fired_at, r.error
    FROM jq.cron_runs r  -- cron_runs_pkey, backwards
    WHERE r.schedule = cron_log.schedule
    ORDER BY r.fire_time DESC LIMIT cron_log.n;
END $$;
COMMENT ON FUNCTION jq.cron_log(text, integer, bigint) IS
'The last n (1..1000, default 20) fire times of schedule from the fire log jq.cron_runs, newest '
'first: outcome (enqueued, skipped_misfire, skipped_overlap, failed), job_id, when the pass ran, '
'error. No rows for a schedule whose queue the caller holds no privilege on, or that does not '
'exist. Errors: 22023 n out of range.';

-- The dead jobs of a queue a bulk call acts on: oldest first along jobs_dead_idx, at most n,
-- locked (rows another session holds are skipped, never waited for).
CREATE OR REPLACE FUNCTION jq._dead_batch(queue text, kind text, key text, error text, n integer)
RETURNS bigint[]
LANGUAGE sql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
    SELECT coalesce(array_agg(x.id), '{}') FROM (
        SELECT j.id FROM jq.jobs j
        WHERE j.queue = _dead_batch.queue AND j.state = 'dead'
          AND (_dead_batch.kind IS NULL OR j.kind = _dead_batch.kind)
          AND (_dead_batch.key IS NULL OR j.concurrency_key = _dead_batch.key OR j.idempotency_key = _dead_batch.key)
          AND (_dead_batch.error IS NULL OR strpos(lower(j.last_error), lower(_dead_batch.error)) > 0)
        ORDER BY j.finished_at, j.id
        LIMIT _dead_batch.n
        FOR UPDATE OF j SKIP LOCKED) x
$$;
COMMENT ON FUNCTION jq._dead_batch(text, text, text, text, integer) IS
'Internal: ids of at most n dead jobs of queue matching the filters of jq.list_jobs (kind, key, '
'error), oldest first, locked FOR UPDATE (locked rows skipped).';

CREATE OR REPLACE FUNCTION jq._check_bulk(queue text, n integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    PERFORM jq._check_queue_name(queue);
    IF n IS NULL OR n < 1 OR n > 10000 THEN
        RAISE EXCEPTION 'n must be between 1 and 10000, got %', n USING ERRCODE = '22023';
    END IF;
END $$;
COMMENT ON FUNCTION jq._check_bulk(text, integer) IS
'Internal: raises 22004/22023 for a bad queue name and 22023 for a batch size outside 1..10000.';

CREATE OR REPLACE FUNCTION jq.retry_dead(queue text, kind text DEFAULT NULL, key text DEFAULT NULL,
                                         error text DEFAULT NULL, n integer DEFAULT 1000,
                                         caller_ticket bigint DEFAULT jq._ticket())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_id    bigint;
    v_count integer := 0;
BEGIN
    PERFORM jq._check_bulk(retry_dead.queue, retry_dead.n);
    PERFORM jq._authorize_queue(retry_dead.caller_ticket, retry_dead.queue, 'admin');
    FOREACH v_id IN ARRAY jq._dead_batch(retry_dead.queue, retry_dead.kind, retry_dead.key,
                                         retry_dead.error, retry_dead.n) LOOP
        -- jq.retry's own fenced transition (state still dead), as the owner: the caller was
        -- authorised for the queue above. A job whose idempotency key another unfinished job
        -- holds now stays dead (23505 in a subtransaction of its own).
        BEGIN
            IF jq.retry(v_id) THEN
                v_count := v_count + 1;
            END IF;
        EXCEPTION WHEN unique_violation THEN
            NULL;
        END;
    END LOOP;
    RETURN v_count;
END $$;
COMMENT ON FUNCTION jq.retry_dead(text, text, text, text, integer, bigint) IS
'Bulk jq.retry: puts up to n (1..10000, default 1000) dead jobs of queue matching the filters of '
'jq.list_jobs (kind, key, error text) back to ready, oldest first, each with jq.retry''s fenced '
'transition; jobs another session holds locked are skipped, and so is a job whose idempotency key '
'another unfinished job now holds. Returns how many were retried (call again for more). Errors: '
'22004/22023 bad queue name or n, 42501 the caller may not administer queue.';

CREATE OR REPLACE FUNCTION jq.cancel_dead(queue text, kind text DEFAULT NULL, key text DEFAULT NULL,
                                          error text DEFAULT NULL, n integer DEFAULT 1000,
                                          caller_ticket bigint DEFAULT jq._ticket())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_jobs jq.jobs[];
BEGIN
    PERFORM jq._check_bulk(cancel_dead.queue, cancel_dead.n);
    PERFORM jq._authorize_queue(cancel_dead.caller_ticket, cancel_dead.queue, 'admin');
    -- Fenced on state = 'dead' (the rows are locked by the batch, so it still holds). A dead job
    -- holds no slot of its key, and its jq.await callers were answered when it died. Dead jobs
    -- are in the dead ring of the history (sql/schema.sql): each is taken out of it and archived
    -- again, cancelled, into the done ring (pg_test/tests/history.rs,
    -- cancelling_dead_jobs_moves_them_to_the_done_ring).
    WITH gone AS (
        DELETE FROM jq.jobs j
        WHERE j.id = ANY (jq._dead_batch(cancel_dead.queue, cancel_dead.kind, cancel_dead.key,
                                         cancel_dead.error, cancel_dead.n))
          AND j.state = 'dead'
        RETURNING j AS job
    )
    SELECT jq._finished(pg_catalog.array_agg(g.job), 'cancelled', NULL) INTO v_jobs FROM gone g;
    RETURN jq._archive('done', v_jobs);
END $$;
COMMENT ON FUNCTION jq.cancel_dead(text, text, text, text, integer, bigint) IS
'Dismisses up to n (1..10000, default 1000) dead jobs of queue matching the filters of '
'jq.list_jobs (kind, key, error text), oldest first: they become cancelled (finished_at = now, so the '
'queue''s retention of cancelled jobs applies from now; their history and last_error stay, and a '
'pending on_dead hook is still retried). Jobs another session holds locked are skipped. Returns '
'how many. Errors: 22004/22023 bad queue name or n, 42501 the caller may not administer queue.';
