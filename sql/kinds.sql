-- Job kinds: the policy of one kind of job in one queue (jq.alter_kind, jq.drop_kind,
-- jq.kind_policies) and its exhaustion hook, on_dead, called in the transaction that moves a
-- job of the kind to dead (jq._on_dead), retried by maintenance when it raised
-- (jq._retry_hooks, jq.pending_hooks) until it succeeds or jq.clear_hook removes it.
--
-- When a kind's policy applies (docs/semantics.md, "Job kinds"): max_attempts and timeout are
-- copied into the job when it is enqueued (jq._kind_defaults, sql/enqueue.sql), as the queue's
-- max_attempts always was; backoff, backoff_base, backoff_max and jitter are read when an
-- attempt fails (jq.fail, jq._time_out), and on_dead when the job goes dead. So a change applies
-- to jobs enqueued, attempts failed and jobs dying after it, never to what already happened.
--
-- Hooks run with the privileges of the role that registered them, never with jq's owner's.
-- jq's functions are SECURITY DEFINER, so a function called from them runs as the extension's
-- owner (usually a superuser) unless it is SECURITY DEFINER itself; SET ROLE is refused inside
-- them. So a hook must be a SECURITY DEFINER function owned by the registering role (or a role
-- whose privileges it has), and every call checks again that it still is one, still has that
-- owner, and that its owner is no superuser unless a superuser registered it
-- (jq._hook_problem). A non-superuser jq_admin thus gains nothing through a hook:
-- pg_test/tests/kinds/hooks.rs, a_hook_runs_as_its_owner_and_a_jq_admin_gains_no_privilege.

CREATE OR REPLACE FUNCTION jq.hook_lock_timeout() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT '2s'::text $$;
COMMENT ON FUNCTION jq.hook_lock_timeout() IS
'The lock_timeout an on_dead hook runs under (2s): a hook waiting longer for a lock fails with '
'55P03 and is retried by maintenance, so it never holds up the failing worker''s jq.fail or a '
'maintenance pass for long.';

CREATE OR REPLACE FUNCTION jq._hook_retry_delay(attempts integer) RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT pg_catalog.interval_smaller(interval '10 seconds' * pg_catalog.power(2, LEAST(attempts - 1, 20)),
                                       interval '1 hour')
$$;
COMMENT ON FUNCTION jq._hook_retry_delay(integer) IS
'Internal: the delay before the next call of an on_dead hook that failed attempts times: 10 '
'seconds, doubling, at most 1 hour.';

-- The hook's name as stored in jq.kinds.on_dead: schema and function qualified, with its
-- argument type, so that it resolves (to_regprocedure) whatever the search_path, also after a
-- dump and restore.
CREATE OR REPLACE FUNCTION jq._hook_name(hook regprocedure) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT pg_catalog.format('%I.%I(jq.jobs)', n.nspname, f.proname)
    FROM pg_catalog.pg_proc f JOIN pg_catalog.pg_namespace n ON n.oid = f.pronamespace
    WHERE f.oid = hook
$$;
COMMENT ON FUNCTION jq._hook_name(regprocedure) IS
'Internal: the qualified text of an on_dead hook, "schema.name(jq.jobs)".';

-- Registration: raises unless caller may register hook.
CREATE OR REPLACE FUNCTION jq._check_hook(hook regprocedure, caller oid) RETURNS regrole
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    p record;
BEGIN
    SELECT f.proowner, f.prosecdef, f.prokind, f.pronargs, f.proargtypes, f.proretset,
           r.rolsuper AS owner_super
    INTO p
    FROM pg_catalog.pg_proc f JOIN pg_catalog.pg_roles r ON r.oid = f.proowner
    WHERE f.oid = hook;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'function with OID % does not exist', hook::oid USING ERRCODE = '42883';
    END IF;
    IF p.prokind <> 'f' OR p.pronargs <> 1 OR p.proargtypes[0] <> 'jq.jobs'::regtype OR p.proretset THEN
        RAISE EXCEPTION 'on_dead must be a function of one argument of type jq.jobs, not %', hook
            USING ERRCODE = '42P13', HINT = 'CREATE FUNCTION app.on_dead(job jq.jobs) RETURNS void ...';
    END IF;
    IF NOT p.prosecdef THEN
        RAISE EXCEPTION 'on_dead % must be SECURITY DEFINER', hook
            USING ERRCODE = '42P13',
                  HINT = 'jq calls a hook as its owner: declare it SECURITY DEFINER with SET search_path, owned by the role that registers it.';
    END IF;
    IF NOT pg_catalog.pg_has_role(caller, p.proowner, 'USAGE') THEN
        RAISE EXCEPTION 'on_dead % is owned by role %, whose privileges role % does not have', hook,
            p.proowner::regrole, caller::regrole USING ERRCODE = '42501';
    END IF;
    IF p.owner_super AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = caller) THEN
        RAISE EXCEPTION 'on_dead % is owned by a superuser: only a superuser may register it', hook
            USING ERRCODE = '42501';
    END IF;
    IF NOT pg_catalog.has_function_privilege(caller, hook, 'EXECUTE') THEN
        RAISE EXCEPTION 'role % may not execute %', caller::regrole, hook USING ERRCODE = '42501';
    END IF;
    RETURN p.proowner::regrole;
END $$;
COMMENT ON FUNCTION jq._check_hook(regprocedure, oid) IS
'Internal (jq.alter_kind): returns the owner of hook if role caller may register it as an on_dead '
'hook: a function (not a procedure or aggregate) of one argument of type jq.jobs returning no '
'set (else 42P13), SECURITY DEFINER (else 42P13), owned by a role whose privileges caller has, '
'not a superuser unless caller is one, and executable by caller (else 42501).';

-- Every call: is the registered hook still what was registered?
CREATE OR REPLACE FUNCTION jq._hook_problem(hook text, owner regrole, registered_by regrole) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    p  record;
    v_by record;
BEGIN
    SELECT f.proowner, f.prosecdef, r.rolsuper AS owner_super INTO p
    FROM pg_catalog.pg_proc f JOIN pg_catalog.pg_roles r ON r.oid = f.proowner
    WHERE f.oid = pg_catalog.to_regprocedure(hook);
    IF NOT FOUND THEN
        RETURN pg_catalog.format('hook %s does not exist', hook);
    END IF;
    IF NOT p.prosecdef THEN
        RETURN pg_catalog.format('hook %s is not SECURITY DEFINER any more: not called', hook);
    END IF;
    IF p.proowner <> owner THEN
        RETURN pg_catalog.format('hook %s is owned by %s, not by %s who was its owner when it was registered: not called',
                                 hook, p.proowner::regrole, owner);
    END IF;
    SELECT r.rolsuper INTO v_by FROM pg_catalog.pg_roles r WHERE r.oid = registered_by;
    IF NOT FOUND THEN
        RETURN pg_catalog.format('the role that registered hook %s (OID %s) was dropped: not called', hook, registered_by::oid);
    END IF;
    IF NOT pg_catalog.pg_has_role(registered_by, owner, 'USAGE') THEN
        RETURN pg_catalog.format('role %s, which registered hook %s, no longer has the privileges of its owner %s: not called',
                                 registered_by, hook, owner);
    END IF;
    IF p.owner_super AND NOT v_by.rolsuper THEN
        RETURN pg_catalog.format('hook %s is owned by a superuser but was registered by %s, who is none: not called',
                                 hook, registered_by);
    END IF;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION jq._hook_problem(text, regrole, regrole) IS
'Internal: NULL when the on_dead hook (qualified text) may be called: it exists, is still '
'SECURITY DEFINER, still owned by owner, registered_by still exists and has owner''s '
'privileges, and owner is no superuser unless registered_by is one; else why not.';

-- One call of a hook, in a subtransaction, under jq.hook_lock_timeout(). Returns NULL on
-- success, else the error as "SQLSTATE: message" (the subtransaction, with whatever the hook
-- did, rolled back).
-- Every setting of the session, as one text: a hook must leave them as it found them. A plain
-- SET (or set_config(..., false)) inside a function outlives the function, SET clauses
-- notwithstanding, so a hook could otherwise put its own schema first in search_path and have
-- the rest of the caller's transaction (jq.fail's worker, the maintenance worker, a superuser)
-- resolve operators to its functions. No SET clause (it would hide the search_path it must
-- see); every name and operator is qualified instead, so it means the same whatever the hook
-- did. Checked by pg_test/tests/kinds/hooks.rs
-- `a_hook_that_changes_a_session_setting_is_rolled_back`.
CREATE OR REPLACE FUNCTION jq._session_settings() RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.string_agg(s.name OPERATOR(pg_catalog.||) '=' OPERATOR(pg_catalog.||) s.setting, ';'
                                 ORDER BY s.name)
    FROM pg_catalog.pg_settings s
$$;
COMMENT ON FUNCTION jq._session_settings() IS
'Internal: every setting of this session (name=setting;...), compared before and after an '
'on_dead hook (jq._call_hook) so that a hook cannot leave a changed setting behind.';

-- Temporary objects outlive the hook that made them too, and pg_temp is searched first for
-- relation and type names: a temporary domain pg_temp.float8 made by a hook would be what the
-- caller's later unqualified float8 means, its CHECK run as the caller (the maintenance worker:
-- a superuser). So the session's temporary objects are compared around the call as well
-- (pg_test/tests/kinds/breakit.rs, a_hook_cannot_plant_a_type_that_maintenance_then_runs_as_superuser).
CREATE OR REPLACE FUNCTION jq._session_objects() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
    SELECT coalesce(string_agg(o, ',' ORDER BY o), '') FROM (
        SELECT 'c' || c.oid::text AS o FROM pg_catalog.pg_class c WHERE c.relnamespace = pg_catalog.pg_my_temp_schema()
        UNION ALL
        SELECT 't' || t.oid::text FROM pg_catalog.pg_type t WHERE t.typnamespace = pg_catalog.pg_my_temp_schema()
        UNION ALL
        SELECT 'p' || p.oid::text FROM pg_catalog.pg_proc p WHERE p.pronamespace = pg_catalog.pg_my_temp_schema()
        UNION ALL
        SELECT 'o' || o.oid::text FROM pg_catalog.pg_operator o WHERE o.oprnamespace = pg_catalog.pg_my_temp_schema()
        UNION ALL
        SELECT 'l' || l.oid::text FROM pg_catalog.pg_collation l WHERE l.collnamespace = pg_catalog.pg_my_temp_schema()
        UNION ALL
        SELECT 'v' || v.oid::text FROM pg_catalog.pg_conversion v WHERE v.connamespace = pg_catalog.pg_my_temp_schema()) x
$$;
COMMENT ON FUNCTION jq._session_objects() IS
'Internal: the objects of this session''s temporary schema (relations, types, functions, '
'operators, collations, conversions), as a text compared before and after an on_dead hook '
'(jq._call_hook) so that a hook cannot leave a temporary object behind.';

-- Text equality under a fixed search_path (see jq._session_settings): after a hook, the
-- caller's own unqualified operators cannot be trusted until its settings are known unchanged.
CREATE OR REPLACE FUNCTION jq._same_text(a text, b text) RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$ SELECT a OPERATOR(pg_catalog.=) b $$;
COMMENT ON FUNCTION jq._same_text(text, text) IS
'Internal: a = b (text), evaluated with search_path pg_catalog whatever the session''s is.';

-- jq._hook_timer_start() and jq._hook_timer_stop() are Rust (src/hook_timer.rs).
COMMENT ON FUNCTION jq._hook_timer_start() IS
'Internal (jq._call_hook): arms this backend''s two timers of an on_dead hook call: a cancel '
'(57014) at jq.hook_timeout, a termination of the session at twice it plus 1 s. Disarmed by '
'jq._hook_timer_stop() or at the end of the transaction. Rust (src/hook_timer.rs).';
COMMENT ON FUNCTION jq._hook_timer_stop() IS
'Internal (jq._call_hook): disarms the timers of jq._hook_timer_start(); true when the cancel '
'fired (the hook ran past jq.hook_timeout). Rust (src/hook_timer.rs).';

CREATE OR REPLACE FUNCTION jq._call_hook(job jq.jobs, hook text, owner regrole, registered_by regrole)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_problem text := jq._hook_problem(hook, owner, registered_by);
    v_sql     text;
    v_lock    text := pg_catalog.current_setting('lock_timeout');
    v_settings text;
    v_objects text;
    v_state   text;
    v_message text;
BEGIN
    IF v_problem IS NOT NULL THEN
        RETURN '42501: ' || v_problem;
    END IF;
    SELECT pg_catalog.format('SELECT %I.%I($1)', n.nspname, f.proname) INTO v_sql
    FROM pg_catalog.pg_proc f JOIN pg_catalog.pg_namespace n ON n.oid = f.pronamespace
    WHERE f.oid = pg_catalog.to_regprocedure(hook);
    BEGIN
        PERFORM pg_catalog.set_config('lock_timeout', jq.hook_lock_timeout(), true);
        v_settings := jq._session_settings();
        v_objects := jq._session_objects();
        -- jq.hook_timeout: a cancel, then a termination of the session (src/hook_timer.rs).
        PERFORM jq._hook_timer_start();
        EXECUTE v_sql USING job;
        PERFORM jq._hook_timer_stop();
        -- A changed setting (search_path above all) or a temporary object left behind is
        -- refused: raising here rolls back the subtransaction, and with it the hook's work, its
        -- settings and its objects (jq._session_settings, jq._session_objects).
        IF NOT jq._same_text(jq._session_settings(), v_settings) THEN
            RAISE EXCEPTION 'the hook changed a setting of the session (SET or set_config); hooks must not'
                USING ERRCODE = '42501';
        END IF;
        IF NOT jq._same_text(jq._session_objects(), v_objects) THEN
            RAISE EXCEPTION 'the hook left a temporary object in the session; hooks must not'
                USING ERRCODE = '42501';
        END IF;
        PERFORM pg_catalog.set_config('lock_timeout', v_lock, true);
    EXCEPTION
    WHEN query_canceled THEN
        -- The hook's own timer, or a cancel meant for the caller's statement: passed on.
        IF NOT jq._hook_timer_stop() THEN
            RAISE;
        END IF;
        RAISE LOG 'jq: on_dead hook % of job % ran past jq.hook_timeout', hook, job.id;
        RETURN '57014: the hook ran longer than jq.hook_timeout (' || pg_catalog.current_setting('jq.hook_timeout') || ')';
    WHEN OTHERS THEN
        PERFORM jq._hook_timer_stop();
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
        RAISE LOG 'jq: on_dead hook % of job % failed: %: %', hook, job.id, v_state, v_message;
        RETURN jq._clip_error(v_state || ': ' || v_message);
    END;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION jq._call_hook(jq.jobs, text, regrole, regrole) IS
'Internal: calls on_dead hook (qualified text) with job, as its owner (it is SECURITY DEFINER, '
'checked by jq._hook_problem first), in a subtransaction with lock_timeout jq.hook_lock_timeout() '
'and the time limit jq.hook_timeout (a cancel; a session termination at twice that plus 1 s for a '
'hook that ignores it). Returns NULL on success, else "SQLSTATE: message" with the hook''s work '
'rolled back: 57014 past the time limit, 42501 when it changed a setting or left a temporary object.';

-- The jobs ids just went dead in this transaction: run their kinds' hooks, or (defer: the
-- background worker's reaper, which no hook may hold up) queue them for the hooks duty.
CREATE OR REPLACE FUNCTION jq._on_dead(ids bigint[], now timestamptz, defer boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    r        record;
    v_error  text;
    v_failed integer := 0;
BEGIN
    FOR r IN SELECT j AS job, k.on_dead, k.on_dead_owner, k.on_dead_by
             FROM jq.jobs j JOIN jq.kinds k ON k.queue = j.queue AND k.kind = j.kind
             WHERE j.id = ANY (_on_dead.ids) AND j.state::text = 'dead' AND k.on_dead IS NOT NULL
             ORDER BY j.id
    LOOP
        IF NOT _on_dead.defer THEN
            v_error := jq._call_hook(r.job, r.on_dead, r.on_dead_owner, r.on_dead_by);
            CONTINUE WHEN v_error IS NULL;
            v_failed := v_failed + 1;
        END IF;
        INSERT INTO jq.pending_hooks AS p (job_id, queue, kind, hook, job, attempts, next_at, last_error, failed_at)
        VALUES ((r.job).id, (r.job).queue, (r.job).kind, r.on_dead, pg_catalog.to_jsonb(r.job),
                CASE WHEN _on_dead.defer THEN 0 ELSE 1 END,
                CASE WHEN _on_dead.defer THEN _on_dead.now ELSE _on_dead.now + jq._hook_retry_delay(1) END,
                v_error, CASE WHEN _on_dead.defer THEN NULL ELSE _on_dead.now END)
        -- Dead again after jq.retry: a new round of calls.
        ON CONFLICT (job_id) DO UPDATE SET hook = excluded.hook, job = excluded.job, attempts = excluded.attempts,
            next_at = excluded.next_at, last_error = excluded.last_error, failed_at = excluded.failed_at;
    END LOOP;
    RETURN v_failed;
END $$;
COMMENT ON FUNCTION jq._on_dead(bigint[], timestamptz, boolean) IS
'Internal: for each job of ids that is dead and whose kind has an on_dead hook, calls the hook '
'(jq._call_hook) in the caller''s transaction; a hook that fails leaves a jq.pending_hooks row '
'(retried by maintenance from now + 10 s). With defer (the background worker''s reaper) no hook '
'is called: each gets a row due at now '
'(attempts 0), called by the hooks duty (jq._take_hook, jq._run_hook). Returns how many hooks '
'failed. Called by jq.fail, jq.expire_lease and the reaper (max_lease_expiries, wall timeouts).';

-- Maintenance: hooks due (queued by the background worker's reaper, or failed before), one at a time. The
-- background worker takes a row in a transaction of its own (jq._take_hook: the attempt is
-- counted and next_at moved before the hook runs), then calls it in another one under
-- jq.hook_timeout (jq._run_hook), and records a call that timed out (jq._hook_interrupted): a
-- hook that hangs costs at most jq.hook_timeout per call and waits its backoff like any failure
-- (pg_test/tests/kinds/hooks.rs, a_hanging_hook_does_not_hold_up_maintenance).
CREATE OR REPLACE FUNCTION jq._take_hook(now timestamptz, OUT job_id bigint, OUT attempt integer)
LANGUAGE sql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
    UPDATE jq.pending_hooks p
    SET attempts = p.attempts + 1, next_at = _take_hook.now + jq._hook_retry_delay(p.attempts + 1)
    WHERE p.job_id = (SELECT h.job_id FROM jq.pending_hooks h WHERE h.next_at <= _take_hook.now
                      ORDER BY h.next_at LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING p.job_id, p.attempts
$$;
COMMENT ON FUNCTION jq._take_hook(timestamptz) IS
'Internal (hooks duty): the oldest jq.pending_hooks row due at now that no other session holds, '
'with its attempt counted and next_at moved past the retry delay before the hook is called; '
'job_id NULL when none is due. Never waits for a lock.';

CREATE OR REPLACE FUNCTION jq._run_hook(job_id bigint, attempt integer, now timestamptz) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    r       record;
    k       record;
    v_row   record;
    v_job   jq.jobs;
    v_error text;
BEGIN
    -- Fenced on the attempt jq._take_hook counted: a row taken again since is not this call's.
    SELECT p.queue, p.kind, p.job INTO r FROM jq.pending_hooks p
    WHERE p.job_id = _run_hook.job_id AND p.attempts = _run_hook.attempt FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT j.state::text AS state, j AS job INTO v_row FROM jq.jobs j WHERE j.id = _run_hook.job_id FOR SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM jq.jobs j WHERE j.id = _run_hook.job_id) THEN
            RETURN false;  -- held (jq.retry): called again at next_at
        END IF;
        v_job := pg_catalog.jsonb_populate_record(NULL::jq.jobs, r.job);  -- pruned: as it died
    ELSIF v_row.state = 'dead' THEN
        v_job := v_row.job;
    ELSE
        DELETE FROM jq.pending_hooks p WHERE p.job_id = _run_hook.job_id;  -- retried: no longer dead
        RETURN true;
    END IF;
    -- The kind's hook now: re-registering a fixed hook fixes the pending calls.
    SELECT x.on_dead, x.on_dead_owner, x.on_dead_by INTO k FROM jq.kinds x WHERE x.queue = r.queue AND x.kind = r.kind;
    IF k.on_dead IS NULL THEN
        DELETE FROM jq.pending_hooks p WHERE p.job_id = _run_hook.job_id;  -- the kind has no hook any more
        RETURN true;
    END IF;
    v_error := jq._call_hook(v_job, k.on_dead, k.on_dead_owner, k.on_dead_by);
    IF v_error IS NULL THEN
        DELETE FROM jq.pending_hooks p WHERE p.job_id = _run_hook.job_id;
        RETURN true;
    END IF;
    UPDATE jq.pending_hooks p SET hook = k.on_dead, last_error = v_error, failed_at = _run_hook.now
    WHERE p.job_id = _run_hook.job_id;
    RETURN false;
END $$;
COMMENT ON FUNCTION jq._run_hook(bigint, integer, timestamptz) IS
'Internal (hooks duty): calls the kind''s current on_dead hook for the pending row job_id taken by '
'jq._take_hook as attempt (nothing when the row moved on or another session holds it or the job), '
'with the job''s row (or, once pruned, the row as it went dead); deletes the row when the call '
'succeeds, the job is no longer dead (jq.retry) or the kind has no hook any more (true), else '
'records the error (false). Never waits for a lock.';

CREATE OR REPLACE FUNCTION jq._hook_interrupted(job_id bigint, attempt integer, error text, now timestamptz)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
    UPDATE jq.pending_hooks p SET last_error = jq._clip_error(_hook_interrupted.error), failed_at = _hook_interrupted.now
    WHERE p.job_id = _hook_interrupted.job_id AND p.attempts = _hook_interrupted.attempt
    RETURNING true
$$;
COMMENT ON FUNCTION jq._hook_interrupted(bigint, integer, text, timestamptz) IS
'Internal (hooks duty): records error ("SQLSTATE: message") for the call attempt of job_id''s '
'hook that did not finish (jq.hook_timeout, or another error outside the hook''s own '
'subtransaction); true when the row was still at that attempt.';

CREATE OR REPLACE FUNCTION jq._retry_hooks(now timestamptz, batch integer DEFAULT 100) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_id      bigint;
    v_attempt integer;
    v_done    integer := 0;
BEGIN
    FOR i IN 1 .. _retry_hooks.batch LOOP
        SELECT t.job_id, t.attempt INTO v_id, v_attempt FROM jq._take_hook(_retry_hooks.now) t;
        EXIT WHEN v_id IS NULL;
        IF jq._run_hook(v_id, v_attempt, _retry_hooks.now) THEN
            v_done := v_done + 1;
        END IF;
    END LOOP;
    RETURN v_done;
END $$;
COMMENT ON FUNCTION jq._retry_hooks(timestamptz, integer) IS
'Maintenance (the hooks duty of jq.tick, in the caller''s transaction and under its '
'statement_timeout): up to batch due jq.pending_hooks rows, oldest first, each through '
'jq._take_hook and jq._run_hook. The background worker runs the same two steps in separate '
'transactions under jq.hook_timeout instead. Returns how many rows it settled. Never waits for a lock.';

CREATE OR REPLACE FUNCTION jq.clear_hook(id bigint, caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._redeem(clear_hook.caller_ticket);
    v_queue  text;
BEGIN
    -- The job's queue, or its pending hook's once retention pruned the job: checked whether or
    -- not a hook is pending, so that a role learns nothing of jobs of queues it may not use.
    v_queue := coalesce((SELECT j.queue FROM jq.jobs j WHERE j.id = clear_hook.id),
                        (SELECT p.queue FROM jq.pending_hooks p WHERE p.job_id = clear_hook.id));
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    IF jq._denial(v_caller, ARRAY[v_queue], 'admin') IS NOT NULL THEN
        -- Without the queue's name, as jq._authorize_job.
        RAISE EXCEPTION 'permission denied: role "%" may not administer the queue of job %',
            v_caller::regrole, clear_hook.id USING ERRCODE = '42501';
    END IF;
    DELETE FROM jq.pending_hooks p WHERE p.job_id = clear_hook.id;
    RETURN FOUND;
END $$;
COMMENT ON FUNCTION jq.clear_hook(bigint, bigint) IS
'Gives up on the pending on_dead hook of dead job id (jq.pending_hooks): maintenance calls it no '
'more. Returns false when the job has no pending hook. Errors: 42501 the caller holds no admin '
'grant on the job''s queue.';

CREATE OR REPLACE FUNCTION jq._check_kind_options(kind text, max_attempts integer, backoff_base interval,
                                                  backoff_max interval, timeout interval, reset text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_bad text;
BEGIN
    IF kind IS NULL THEN
        RAISE EXCEPTION 'kind must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF kind = '' OR pg_catalog.length(kind) > 200 THEN
        RAISE EXCEPTION 'kind must have 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    PERFORM jq._check_queue_options(max_attempts, NULL, backoff_base, backoff_max, NULL, NULL, NULL, NULL);
    IF timeout IS NOT NULL THEN
        PERFORM jq._check_interval('timeout', timeout, false);
    END IF;
    SELECT o INTO v_bad FROM pg_catalog.unnest(reset) AS o
    WHERE o IS NULL OR o NOT IN ('max_attempts', 'backoff', 'backoff_base', 'backoff_max', 'jitter',
                                 'timeout', 'on_dead')
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'cannot reset %: not an option of a kind', coalesce(pg_catalog.quote_literal(v_bad), 'NULL')
            USING ERRCODE = '22023',
                  HINT = 'Options: max_attempts, backoff, backoff_base, backoff_max, jitter, timeout, on_dead.';
    END IF;
END $$;
COMMENT ON FUNCTION jq._check_kind_options(text, integer, interval, interval, interval, text[]) IS
'Internal: validates jq.alter_kind''s arguments: 22004 NULL kind; 22023 kind not 1-200 characters, '
'max_attempts not in 1..1000000, a negative backoff interval, a timeout not over zero or over 100 '
'years or with a negative field, an unknown option in reset.';

CREATE OR REPLACE FUNCTION jq.alter_kind(
    queue        text,
    kind         text,
    max_attempts integer DEFAULT NULL,
    backoff      jq.backoff_policy DEFAULT NULL,
    backoff_base interval DEFAULT NULL,
    backoff_max  interval DEFAULT NULL,
    jitter       jq.jitter_mode DEFAULT NULL,
    timeout      interval DEFAULT NULL,
    on_dead      regprocedure DEFAULT NULL,
    reset        text[] DEFAULT NULL,
    caller_ticket bigint DEFAULT jq._ticket()
) RETURNS jq.kinds
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._authorize_queue(alter_kind.caller_ticket, alter_kind.queue, 'admin');
    v_owner  regrole;
    v_reset  text[] := coalesce(alter_kind.reset, '{}');
    k        jq.kinds;
BEGIN
    PERFORM jq._check_kind_options(alter_kind.kind, alter_kind.max_attempts, alter_kind.backoff_base,
                                   alter_kind.backoff_max, alter_kind.timeout, alter_kind.reset);
    -- The wall timeout as a length of time (days as 24 h, months as 30 days): added to a
    -- started_at, '1 day' would mean 23 or 25 hours across a daylight-saving change in the time
    -- zone of whoever adds it, and the claim (the worker's zone) and the reaper (the server's)
    -- would disagree (pg_test/tests/kinds/breakit.rs, a_timeout_in_days_is_a_timeout_whatever_the_time_zone_of_the_claim).
    alter_kind.timeout := pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', alter_kind.timeout));
    -- A reset and a new value of the same option in one call: refused (which one
    -- was meant?).
    IF (alter_kind.max_attempts IS NOT NULL AND 'max_attempts' = ANY (v_reset))
       OR (alter_kind.backoff IS NOT NULL AND 'backoff' = ANY (v_reset))
       OR (alter_kind.backoff_base IS NOT NULL AND 'backoff_base' = ANY (v_reset))
       OR (alter_kind.backoff_max IS NOT NULL AND 'backoff_max' = ANY (v_reset))
       OR (alter_kind.jitter IS NOT NULL AND 'jitter' = ANY (v_reset))
       OR (alter_kind.timeout IS NOT NULL AND 'timeout' = ANY (v_reset))
       OR (alter_kind.on_dead IS NOT NULL AND 'on_dead' = ANY (v_reset)) THEN
        RAISE EXCEPTION 'an option is both given and reset' USING ERRCODE = '22023';
    END IF;
    IF alter_kind.on_dead IS NOT NULL THEN
        v_owner := jq._check_hook(alter_kind.on_dead, v_caller);
    END IF;
    -- jq.jobs before the queue row, the order jq.drop_queue takes them in (no deadlock); the
    -- queue row locked, so a concurrent jq.drop_kind cannot clear has_kinds under this kind.
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;
    UPDATE jq.queues t SET has_kinds = true WHERE t.name = alter_kind.queue;
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(alter_kind.queue);
    END IF;
    INSERT INTO jq.kinds AS x (queue, kind, max_attempts, backoff, backoff_base, backoff_max, jitter,
                               timeout, on_dead, on_dead_owner, on_dead_by, updated_at)
    VALUES (alter_kind.queue, alter_kind.kind, alter_kind.max_attempts, alter_kind.backoff,
            alter_kind.backoff_base, alter_kind.backoff_max, alter_kind.jitter, alter_kind.timeout,
            jq._hook_name(alter_kind.on_dead), v_owner, CASE WHEN v_owner IS NOT NULL THEN v_caller::regrole END,
            pg_catalog.now())
    ON CONFLICT ON CONSTRAINT kinds_pkey DO UPDATE SET
        max_attempts  = CASE WHEN 'max_attempts' = ANY (v_reset) THEN NULL
                             ELSE coalesce(excluded.max_attempts, x.max_attempts) END,
        backoff       = CASE WHEN 'backoff' = ANY (v_reset) THEN NULL ELSE coalesce(excluded.backoff, x.backoff) END,
        backoff_base  = CASE WHEN 'backoff_base' = ANY (v_reset) THEN NULL
                             ELSE coalesce(excluded.backoff_base, x.backoff_base) END,
        backoff_max   = CASE WHEN 'backoff_max' = ANY (v_reset) THEN NULL
                             ELSE coalesce(excluded.backoff_max, x.backoff_max) END,
        jitter        = CASE WHEN 'jitter' = ANY (v_reset) THEN NULL ELSE coalesce(excluded.jitter, x.jitter) END,
        timeout       = CASE WHEN 'timeout' = ANY (v_reset) THEN NULL ELSE coalesce(excluded.timeout, x.timeout) END,
        on_dead       = CASE WHEN 'on_dead' = ANY (v_reset) THEN NULL ELSE coalesce(excluded.on_dead, x.on_dead) END,
        on_dead_owner = CASE WHEN 'on_dead' = ANY (v_reset) THEN NULL
                             WHEN excluded.on_dead IS NOT NULL THEN excluded.on_dead_owner ELSE x.on_dead_owner END,
        on_dead_by    = CASE WHEN 'on_dead' = ANY (v_reset) THEN NULL
                             WHEN excluded.on_dead IS NOT NULL THEN excluded.on_dead_by ELSE x.on_dead_by END,
        updated_at    = excluded.updated_at
    RETURNING * INTO k;
    RETURN k;
END $$;
COMMENT ON FUNCTION jq.alter_kind(text, text, integer, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, regprocedure, text[], bigint) IS
'Creates or changes the policy of kind (1-200 characters) in queue and returns its jq.kinds row. '
'Options left NULL stay as they are (NULL in the row: the queue''s); reset lists options to set '
'back to NULL. max_attempts (1..1000000) and timeout (interval > 0, at most 100 years, stored as a length of time: days as 24 hours, months as 30 days; the wall '
'timeout of each attempt, after which maintenance ends it as a failed attempt) are given to jobs '
'enqueued afterwards; backoff, backoff_base, backoff_max, jitter (as in jq.create_queue) apply '
'to the failures after the call. on_dead: a function of one argument of type jq.jobs, SECURITY '
'DEFINER, owned by the caller (or a role whose privileges it has; a superuser''s only for a '
'superuser caller), called as its owner in the transaction that moves a job of the kind to dead '
'(jq.fail, the reaper, a wall timeout, jq.expire_lease); one that raises is recorded in '
'jq.pending_hooks and retried by maintenance. Errors: 22004 NULL kind or queue, 22023 invalid '
'value or reset entry (or both given and reset), 42704 unknown queue, 42883 unknown function, '
'42P13 on_dead of the wrong signature or not SECURITY DEFINER, 42501 on_dead owned by another '
'role or a superuser, or the caller holds no admin grant on the queue; 0A000: the queue name '
'under a nondeterministic collation.';

CREATE OR REPLACE FUNCTION jq.drop_kind(queue text, kind text, caller_ticket bigint DEFAULT jq._ticket())
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_found boolean;
BEGIN
    PERFORM jq._authorize_queue(drop_kind.caller_ticket, drop_kind.queue, 'admin');
    PERFORM jq._check_kind_options(drop_kind.kind, NULL, NULL, NULL, NULL, NULL);
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;  -- before the queue row, as jq.drop_queue
    PERFORM 1 FROM jq.queues t WHERE t.name = drop_kind.queue FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM jq._unknown_queue(drop_kind.queue);
    END IF;
    DELETE FROM jq.kinds x WHERE x.queue = drop_kind.queue AND x.kind = drop_kind.kind;
    v_found := FOUND;
    UPDATE jq.queues t SET has_kinds = EXISTS (SELECT 1 FROM jq.kinds x WHERE x.queue = t.name)
    WHERE t.name = drop_kind.queue;
    RETURN v_found;
END $$;
COMMENT ON FUNCTION jq.drop_kind(text, text, bigint) IS
'Deletes the policy of kind in queue: its jobs take the queue''s policy from then on (jobs '
'enqueued before keep their max_attempts and timeout); its pending on_dead hooks are dropped by '
'the next maintenance pass. Returns false when the kind had no policy. Errors: 22004 NULL kind, '
'22023 invalid kind, 42704 unknown queue, 42501 the caller holds no admin grant on the queue.';

-- security_barrier, as jq.queue_stats: only the queues the reader holds a jq privilege on.
CREATE OR REPLACE VIEW jq.kind_policies WITH (security_barrier) AS
SELECT k.queue,
       k.kind,
       coalesce(k.max_attempts, t.max_attempts) AS max_attempts,
       coalesce(k.backoff, t.backoff) AS backoff,
       coalesce(k.backoff_base, t.backoff_base) AS backoff_base,
       coalesce(k.backoff_max, t.backoff_max) AS backoff_max,
       coalesce(k.jitter, t.jitter) AS jitter,
       k.timeout,
       k.on_dead,
       k.on_dead_owner,
       (SELECT count(*) FROM jq.pending_hooks p WHERE p.queue = k.queue AND p.kind = k.kind) AS hooks_pending,
       ARRAY(SELECT u.o FROM ROWS FROM (
                 pg_catalog.unnest(ARRAY['max_attempts', 'backoff', 'backoff_base', 'backoff_max', 'jitter']),
                 pg_catalog.unnest(ARRAY[k.max_attempts IS NULL, k.backoff IS NULL, k.backoff_base IS NULL,
                                         k.backoff_max IS NULL, k.jitter IS NULL])) AS u(o, inherited)
             WHERE u.inherited) AS from_queue,
       k.updated_at
FROM jq.kinds k JOIN jq.queues t ON t.name = k.queue
WHERE pg_catalog.pg_has_role('jq_admin', 'USAGE')
   OR EXISTS (SELECT 1 FROM jq.queue_grants g
              WHERE g.queue IN (t.name, '*') AND pg_catalog.pg_has_role(g.grantee, 'USAGE'));
COMMENT ON VIEW jq.kind_policies IS
'One row per kind with a policy (jq.alter_kind): the effective max_attempts, backoff, '
'backoff_base, backoff_max and jitter (the kind''s, else the queue''s; from_queue lists those '
'taken from the queue), the wall timeout (NULL: none), the on_dead hook and its owner, and '
'hooks_pending, its dead jobs whose hook has not succeeded yet. Shows only the queues the reader '
'may use, as jq.queue_stats.';
