-- Cron schedules: jq.schedule / jq.alter_schedule / jq.unschedule, the fire log jq.cron_runs
-- and the cron duty jq.cron_tick(at). The expression arithmetic (parse, time zones, DST) is Rust:
-- jq.cron_next, jq.cron_fires, jq._cron_check, jq._cron_latest, jq._cron_count (src/cron/sql.rs).
-- See docs/cron.md.
--
-- Exactly once per (schedule, fire time): the fire log's primary key. jq.cron_tick writes the
-- fire-log row, the job (through jq.enqueue) and the schedule's new next_run_at in one
-- subtransaction, so they commit together or not at all, and a second pass for
-- the same fire time, from another session, a restarted worker, a promoted replica or after a
-- clock step, finds the row and enqueues nothing (pg_test/tests/cron/firing.rs,
-- two_passes_for_the_same_minute_enqueue_one_job_even_after_a_clock_step and
-- concurrent_passes_at_the_same_instant_enqueue_each_fire_time_once). The log is pruned by its own retention
-- (jq.cron_log_retention()), never with the jobs.

COMMENT ON FUNCTION jq.cron_next(text, timestamptz, text) IS
'cron_next(cron, after, timezone => ''UTC''): the first fire time of the cron expression strictly '
'after the instant after, evaluated in the IANA time zone (DST policy in docs/cron.md); NULL when '
'there is none before year 5000 (as an instant in UTC and as a wall time in the zone). 5 fields, '
'or 6 with seconds first; names, ranges, steps, lists, L, @aliases; day of month OR day of week. '
'Pure: use it to check an expression. Errors: 22023 invalid expression (the message names the '
'field), unknown time zone, infinite after; 22008 after before 0001-01-02 00:00:00+00.';
COMMENT ON FUNCTION jq.cron_fires(text, timestamptz, timestamptz, text, integer) IS
'cron_fires(cron, after, until, timezone => ''UTC'', max => 1000): the fire times in (after, '
'until], in order, at most max (0..1000000). Pure. Errors: 22023 and 22008 as jq.cron_next, or '
'22023 max out of range.';
COMMENT ON FUNCTION jq._cron_check(text, text) IS
'Internal: raises 22023 naming the problem when the cron expression or the time zone is invalid, '
'22004 when either is NULL.';
COMMENT ON FUNCTION jq._cron_latest(text, text, timestamptz, timestamptz, integer) IS
'Internal: the latest keep (0..100000) fire times in [since, until], in order; cost independent of '
'how long ago since was. Errors: 22023; 22008 since before 0001-01-02 00:00:00+00.';
COMMENT ON FUNCTION jq._cron_count(text, text, timestamptz, timestamptz, bigint) IS
'Internal: the number of fire times in [since, until], counting at most cap. Errors: 22023; 22008 '
'since before 0001-01-02 00:00:00+00.';

CREATE OR REPLACE FUNCTION jq.cron_log_retention() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT interval '7 days' $$;
COMMENT ON FUNCTION jq.cron_log_retention() IS
'How long jq.cron_runs keeps a row after its fire_time: 7 days. Within it, a fire time is never '
'enqueued twice, whatever happens to the schedule''s timer or to the job.';

CREATE OR REPLACE FUNCTION jq.cron_misfire_grace() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT interval '60 seconds' $$;
COMMENT ON FUNCTION jq.cron_misfire_grace() IS
'misfire => ''skip'': the latest due fire time is still enqueued when it is at most this late '
'(60 seconds) at the pass; older ones are skipped.';

CREATE OR REPLACE FUNCTION jq.cron_max_catchup() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 100 $$;
COMMENT ON FUNCTION jq.cron_max_catchup() IS
'misfire => ''fire_all'': at most this many (100) missed fire times are enqueued in one pass, the '
'latest ones; older missed fire times are counted in skipped_count.';

-- Checks of schedule options shared by jq.schedule and jq.alter_schedule (NULL = not given).
CREATE OR REPLACE FUNCTION jq._check_schedule_options(cron text, timezone text, payload jsonb, kind text,
                                           max_attempts integer, misfire text, overlap text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_code    text;
    v_message text;
BEGIN
    IF cron IS NOT NULL OR timezone IS NOT NULL THEN
        PERFORM jq._cron_check(coalesce(cron, '* * * * *'), coalesce(timezone, 'UTC'));
    END IF;
    IF misfire IS NOT NULL AND misfire NOT IN ('fire_once', 'skip', 'fire_all') THEN
        RAISE EXCEPTION 'misfire must be fire_once, skip or fire_all, got %',
            pg_catalog.quote_literal(pg_catalog.left(misfire, 100)) USING ERRCODE = '22023';
    END IF;
    IF overlap IS NOT NULL AND overlap NOT IN ('allow', 'skip_if_running') THEN
        RAISE EXCEPTION 'overlap must be allow or skip_if_running, got %',
            pg_catalog.quote_literal(pg_catalog.left(overlap, 100)) USING ERRCODE = '22023';
    END IF;
    SELECT p.sqlstate, p.message INTO v_code, v_message
    FROM jq._job_problem(coalesce(payload, '{}'::jsonb), kind, max_attempts, NULL) p;
    IF v_code IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = v_code, MESSAGE = v_message;
    END IF;
END $$;
COMMENT ON FUNCTION jq._check_schedule_options(text, text, jsonb, text, integer, text, text) IS
'Internal: validates schedule options (NULL = not given). Errors: 22023 invalid cron expression, '
'time zone, misfire, overlap, kind or max_attempts; 54000 payload too large.';

CREATE OR REPLACE FUNCTION jq._check_schedule_name(name text) RETURNS void
LANGUAGE sql IMMUTABLE AS $$ SELECT jq._check_name('schedule', name) $$;
COMMENT ON FUNCTION jq._check_schedule_name(text) IS
'Internal: raises 22004 for NULL and 22023 for a name that is not 1-128 characters of [A-Za-z0-9_.:-].';

-- The target queue must exist; FOR KEY SHARE holds off a concurrent jq.drop_queue until this
-- transaction ends (drop_queue then sees the schedule and refuses, or deletes it with force).
-- jq.jobs is locked first, the order of jq.drop_queue: with the queue row alone, a transaction
-- that scheduled and then wrote jobs deadlocked with a drop (pg_test/tests/robustness/drops.rs).
CREATE OR REPLACE FUNCTION jq._lock_schedule_queue(queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;  -- before the queue row, as jq.drop_queue
    PERFORM 1 FROM jq.queues t WHERE t.name = _lock_schedule_queue.queue FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(_lock_schedule_queue.queue);
    END IF;
END $$;
COMMENT ON FUNCTION jq._lock_schedule_queue(text) IS
'Internal: locks jq.jobs ROW EXCLUSIVE, then the queue row FOR KEY SHARE (the order of jq.drop_queue); 22004/22023 bad name, 42704 unknown queue.';

CREATE OR REPLACE FUNCTION jq.schedule(
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
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
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

CREATE OR REPLACE FUNCTION jq.alter_schedule(
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
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
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
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;
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

CREATE OR REPLACE FUNCTION jq.unschedule(name text, if_exists boolean DEFAULT false,
                              caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._redeem(unschedule.caller_ticket);
    v_queue  text;
BEGIN
    PERFORM jq._check_schedule_name(unschedule.name);
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;  -- before the schedule row, as jq.drop_queue (see jq.alter_schedule)
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
               SELECT 1 FROM ONLY jq.jobs j
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
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
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
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;
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

CREATE OR REPLACE FUNCTION jq._cron_prune(at timestamptz, batch integer DEFAULT 1000) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer;
BEGIN
    DELETE FROM jq.cron_runs r WHERE r.ctid = ANY (ARRAY(
        SELECT o.ctid FROM jq.cron_runs o
        WHERE o.fire_time < _cron_prune.at - jq.cron_log_retention()
        ORDER BY o.fire_time
        LIMIT _cron_prune.batch
        FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END $$;
COMMENT ON FUNCTION jq._cron_prune(timestamptz, integer) IS
'Maintenance: deletes up to batch jq.cron_runs rows whose fire_time is more than '
'jq.cron_log_retention() before at (by the fire_time index); returns how many.';
