-- Grants: who may call what, and on which queue (docs/security.md).
--
-- Two layers, as in PostgreSQL itself (schema USAGE, then object privileges):
--   * EXECUTE on the functions, held by three roles: jq_producer (enqueue), jq_worker (claim and
--     the calls that end a claim), jq_admin (everything). Nothing is granted to PUBLIC, and jq's
--     tables are granted to no one but jq_admin (read only): they change only through the
--     functions, which are SECURITY DEFINER with a pinned search_path.
--   * Per-queue rights in jq.queue_grants (jq.grant / jq.revoke): enqueue, work, admin. The
--     functions that name a queue check the calling role against them (jq._authorize), through
--     a caller ticket (src/security.rs): inside a SECURITY DEFINER function current_user is the
--     owner, so the caller's role travels in the default of the last parameter, caller_ticket.
--   Calls that act on a claimed job (complete, fail, heartbeat, release, snooze) are authorised
--   by its lease token: an unguessable capability that only an authorised claim hands out.
-- pg_test/tests/security/catalog.rs enumerates every function of the schema from the catalog and checks
-- every role against this file.
--
-- JIT is off for every jq function that carries settings of its own (SET jit = off in its
-- CREATE FUNCTION): jq's statements are short index walks that JIT cannot speed up, and a
-- generic plan's cost on a deep queue can pass jit_above_cost. pg_test/tests/plans/generic_plans.rs,
-- functions_with_settings_never_jit, fails for a function with settings but without it.

-- jq.queue_grants (sql/schema.sql) is dumped by pg_dump with the other configuration tables.
SELECT pg_catalog.pg_extension_config_dump('jq.queue_grants', '');

CREATE OR REPLACE FUNCTION jq._may(caller oid, queue text, privilege text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    -- Qualified to the operators: jq.claim and jq.complete, which have no SET search_path,
    -- reach it through jq._authorize_queue with the caller's search_path (see jq.claim).
    SELECT pg_catalog.pg_has_role(caller, 'jq_admin', 'USAGE')
        OR EXISTS (SELECT 1 FROM jq.queue_grants g
                   WHERE g.queue OPERATOR(pg_catalog.=) ANY (ARRAY[_may.queue, '*'])
                     AND (g.privilege OPERATOR(pg_catalog.=) _may.privilege
                          OR g.privilege OPERATOR(pg_catalog.=) 'admin'
                          OR _may.privilege OPERATOR(pg_catalog.=) 'any')
                     AND pg_catalog.pg_has_role(caller, g.grantee, 'USAGE'))
$$;
COMMENT ON FUNCTION jq._may(oid, text, text) IS
'Internal: whether role caller may exercise privilege (enqueue, work, admin, or any) on queue: '
'a superuser or member of jq_admin, or a jq.queue_grants row for the queue or ''*'' with that '
'privilege or admin, granted to caller or a role whose privileges caller has.';

CREATE OR REPLACE FUNCTION jq._denial(caller oid, queues text[], privilege text) RETURNS text
LANGUAGE sql STABLE AS $$
    -- Qualified to the operators, as jq._may.
    SELECT pg_catalog.format('permission denied: role "%s" may not %s queue "%s"', caller::pg_catalog.regrole,
               CASE WHEN privilege OPERATOR(pg_catalog.=) 'enqueue' THEN 'enqueue to'
                    WHEN privilege OPERATOR(pg_catalog.=) 'work' THEN 'claim from'
                    ELSE 'administer' END, q)
    FROM pg_catalog.unnest(queues) AS q
    WHERE NOT pg_catalog.pg_has_role(caller, 'jq_admin', 'USAGE')
      AND (q IS NULL OR NOT jq._may(caller, q, privilege))
    LIMIT 1
$$;
COMMENT ON FUNCTION jq._denial(oid, text[], text) IS
'Internal: NULL when role caller may exercise privilege (enqueue, work, admin) on every queue in '
'queues, else the 42501 message for the first one it may not use (NULL or unknown queues count as '
'not granted).';

CREATE OR REPLACE FUNCTION jq._check_schedule_owner(caller oid, schedule text, queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF jq._denial(caller, ARRAY[queue], 'admin') IS NOT NULL THEN
        -- Without the queue's name: schedule names are global, queue names are not to be learnt.
        RAISE EXCEPTION 'permission denied: schedule "%" targets a queue role "%" may not administer',
            schedule, caller::regrole USING ERRCODE = '42501';
    END IF;
END $$;
COMMENT ON FUNCTION jq._check_schedule_owner(oid, text, text) IS
'Internal: raises 42501, naming the schedule but not its queue, unless role caller may administer '
'queue (the queue of an existing schedule).';

CREATE OR REPLACE FUNCTION jq._check_may(caller oid, queues text[], privilege text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_message text := jq._denial(caller, queues, privilege);
BEGIN
    IF v_message IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = v_message,
            HINT = 'A member of jq_admin can grant it with jq.grant(queue, role, privilege).';
    END IF;
END $$;
COMMENT ON FUNCTION jq._check_may(oid, text[], text) IS
'Internal: raises 42501 unless role caller may exercise privilege (enqueue, work, admin) on every '
'queue in queues. A NULL or unknown queue counts as not granted, so a role learns nothing of '
'queues it may not use.';

-- jq._authorize(caller_ticket, queues, privilege) and jq._authorize_queue(caller_ticket, queue,
-- privilege) are Rust (src/security.rs): jq._redeem, a
-- syscache-only pass for superusers and jq_admin members, else jq._denial.
COMMENT ON FUNCTION jq._authorize(bigint, text[], text) IS
'Internal: redeems caller_ticket (42501 if it is not a ticket of this session), then, unless '
'that role is a superuser or has the privileges of jq_admin, raises jq._denial''s message; returns the calling '
'role. Rust (src/security.rs).';
COMMENT ON FUNCTION jq._authorize_queue(bigint, text, text) IS
'Internal: jq._authorize for the one queue queue (NULL: granted to no role but superusers and '
'jq_admin members; ''*'': every queue), with no array to build: the form every function naming one '
'queue calls. Errors: 42501. Rust (src/security.rs).';

CREATE OR REPLACE FUNCTION jq._authorize_job(caller_ticket bigint, id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_caller oid := jq._redeem(caller_ticket);
    v_queue  text;
BEGIN
    -- A job's queue never changes and ids are never reused, so the queue read here is the one of
    -- every later statement's row with this id; a job committed after this read is not acted on
    -- (the caller returns false), or a check on "no row" would let it through.
    SELECT j.queue INTO v_queue FROM jq.jobs j WHERE j.id = _authorize_job.id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF jq._denial(v_caller, ARRAY[v_queue], 'admin') IS NOT NULL THEN
        -- Without the queue's name: a role must not learn other tenants' queues by job id.
        RAISE EXCEPTION 'permission denied: role "%" may not administer the queue of job %',
            v_caller::regrole, _authorize_job.id USING ERRCODE = '42501';
    END IF;
    RETURN true;
END $$;
COMMENT ON FUNCTION jq._authorize_job(bigint, bigint) IS
'Internal: redeems caller_ticket; false when job id does not exist now (the caller then changes '
'nothing, even if such a job commits meanwhile); else raises 42501 unless that role may administer '
'the job''s queue, and returns true.';

CREATE OR REPLACE FUNCTION jq._queue_admin_functions() RETURNS regprocedure[]
LANGUAGE sql STABLE AS $$
    SELECT ARRAY['jq.alter_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, integer, integer, interval, integer, interval, interval, bigint)',
                 'jq.pause(text, bigint)',
                 'jq.resume(text, bigint)',
                 'jq.cancel(bigint, bigint)',
                 'jq.retry(bigint, bigint)',
                 'jq.expire_lease(bigint, uuid, bigint)',
                 'jq.schedule(text, text, text, jsonb, text, text, integer, integer, text, text, bigint)',
                 'jq.alter_schedule(text, text, text, jsonb, text, text, integer, integer, text, text, boolean, bigint)',
                 'jq.unschedule(text, boolean, bigint)',
                 'jq.alter_kind(text, text, integer, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, regprocedure, text[], bigint)',
                 'jq.drop_kind(text, text, bigint)',
                 'jq.clear_hook(bigint, bigint)',
                 'jq.retry_dead(text, text, text, text, integer, bigint)',
                 'jq.cancel_dead(text, text, text, text, integer, bigint)']::regprocedure[]
$$;
COMMENT ON FUNCTION jq._queue_admin_functions() IS
'Internal: the functions a per-queue admin grant lets a role execute (each checks the queue).';

CREATE OR REPLACE FUNCTION jq._settle_admin_execute(role regrole) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_role name;
    f      regprocedure;
BEGIN
    SELECT r.rolname INTO v_role FROM pg_catalog.pg_roles r WHERE r.oid = _settle_admin_execute.role;
    IF v_role IS NULL OR v_role IN ('jq_admin', 'jq_producer', 'jq_worker')
       OR EXISTS (SELECT 1 FROM jq.queue_grants g
                  WHERE g.grantee = _settle_admin_execute.role AND g.privilege = 'admin') THEN
        RETURN;
    END IF;
    FOREACH f IN ARRAY jq._queue_admin_functions() LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM %I', f, v_role);
    END LOOP;
END $$;
COMMENT ON FUNCTION jq._settle_admin_execute(regrole) IS
'Internal: when role holds no admin grant any more (jq.revoke, jq.drop_queue), revokes the EXECUTE '
'jq.grant gave it on the per-queue admin functions, which would otherwise keep DROP ROLE from '
'working. jq''s own roles are left alone.';

CREATE OR REPLACE FUNCTION jq.grant(queue text, role regrole, privilege text,
                         caller_ticket bigint DEFAULT jq._ticket()) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    -- "grant" is a reserved word, so the parameters cannot be qualified by the function name.
    g_queue     ALIAS FOR $1;
    g_role      ALIAS FOR $2;
    g_privilege ALIAS FOR $3;
    g_ticket    ALIAS FOR $4;
    v_role name;
    f      regprocedure;
BEGIN
    IF g_queue IS NULL OR g_role IS NULL OR g_privilege IS NULL THEN
        RAISE EXCEPTION 'queue, role and privilege must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF g_privilege NOT IN ('enqueue', 'work', 'admin') THEN
        RAISE EXCEPTION 'unknown privilege "%"', g_privilege
            USING ERRCODE = '22023', HINT = 'Privileges: enqueue, work, admin.';
    END IF;
    -- Before the queue row and the catalogs' pg_proc rows (GRANT EXECUTE below), as jq.drop_queue.
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;
    -- Then one grant or revoke at a time (self-conflicting; plain reads of the grants, as every
    -- authorization does, go on): two of them both run GRANT/REVOKE EXECUTE on the same pg_proc
    -- rows (or GRANT jq_producer TO the same role), and the second failed with XX000 "tuple
    -- concurrently updated" (or 23505 on pg_auth_members) once the first committed.
    LOCK TABLE jq.queue_grants IN SHARE ROW EXCLUSIVE MODE;
    IF g_queue <> '*' THEN
        PERFORM jq._check_queue_name(g_queue);
        PERFORM 1 FROM jq.queues t WHERE t.name = g_queue FOR KEY SHARE;
        IF NOT FOUND THEN
            PERFORM jq._unknown_queue(g_queue);
        END IF;
    END IF;
    SELECT r.rolname INTO v_role FROM pg_catalog.pg_roles r WHERE r.oid = g_role;
    IF v_role IS NULL THEN
        RAISE EXCEPTION 'role with OID % does not exist', g_role::oid USING ERRCODE = '42704';
    END IF;
    -- The EXECUTE the privilege needs (membership carries no queue rights of its own). jq's
    -- own roles are left as the extension made them: granting one of them a queue gives the
    -- queue to its members, who hold its EXECUTE already.
    IF v_role NOT IN ('jq_admin', 'jq_producer', 'jq_worker') THEN
        IF g_privilege IN ('enqueue', 'admin') AND NOT pg_catalog.pg_has_role(g_role, 'jq_producer', 'MEMBER') THEN
            EXECUTE pg_catalog.format('GRANT jq_producer TO %I', v_role);
        END IF;
        IF g_privilege IN ('work', 'admin') AND NOT pg_catalog.pg_has_role(g_role, 'jq_worker', 'MEMBER') THEN
            EXECUTE pg_catalog.format('GRANT jq_worker TO %I', v_role);
        END IF;
        IF g_privilege = 'admin' THEN
            FOREACH f IN ARRAY jq._queue_admin_functions() LOOP
                EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I', f, v_role);
            END LOOP;
        END IF;
    END IF;
    INSERT INTO jq.queue_grants (queue, grantee, privilege, granted_by, granted_at)
    VALUES (g_queue, g_role, g_privilege, jq._redeem(g_ticket)::regrole,
            pg_catalog.now())
    ON CONFLICT ON CONSTRAINT queue_grants_pkey DO NOTHING;
    RETURN FOUND;
END $$;
COMMENT ON FUNCTION jq.grant(text, regrole, text, bigint) IS
'grant(queue, role, privilege): lets role, and the roles that have its privileges, enqueue to '
'(enqueue), claim from and so read the payloads of (work), or administer (admin: pause, resume, '
'alter_queue, cancel, retry, retry_dead, cancel_dead, schedule, alter_schedule, unschedule, alter_kind, drop_kind, clear_hook; implies enqueue '
'and work) queue; queue ''*'' = every queue, present and future. Also gives role the EXECUTE '
'the privilege needs: membership in jq_producer (enqueue, admin) and jq_worker (work, admin), '
'and EXECUTE on the per-queue admin functions (admin), except to jq''s own three roles, which are '
'left as the extension made them; revoking the last admin grant takes that EXECUTE back, memberships stay (they grant no queue). Returns true when the grant is new. Executable by jq_admin. Errors: 22004 NULL '
'argument, 22023 unknown privilege or invalid queue name, 42704 unknown queue or role.';

CREATE OR REPLACE FUNCTION jq.revoke(queue text, role regrole, privilege text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    IF revoke.queue IS NULL OR revoke.role IS NULL OR revoke.privilege IS NULL THEN
        RAISE EXCEPTION 'queue, role and privilege must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF revoke.privilege NOT IN ('enqueue', 'work', 'admin') THEN
        RAISE EXCEPTION 'unknown privilege "%"', revoke.privilege
            USING ERRCODE = '22023', HINT = 'Privileges: enqueue, work, admin.';
    END IF;
    -- Before the grant row (which jq.drop_queue deletes) and pg_proc's rows, as jq.drop_queue;
    -- then one grant or revoke at a time (see jq.grant).
    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;
    LOCK TABLE jq.queue_grants IN SHARE ROW EXCLUSIVE MODE;
    -- Compared under the column's collation: a caller's nondeterministic one (say, case
    -- insensitive) would otherwise also revoke the grant on a queue differing only in case.
    DELETE FROM jq.queue_grants g
    WHERE g.queue = revoke.queue COLLATE pg_catalog."default" AND g.grantee = revoke.role
      AND g.privilege = revoke.privilege COLLATE pg_catalog."default";
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF revoke.privilege = 'admin' THEN
        PERFORM jq._settle_admin_execute(revoke.role);
    END IF;
    RETURN true;
END $$;
COMMENT ON FUNCTION jq.revoke(text, regrole, text) IS
'revoke(queue, role, privilege): removes exactly that jq.grant (queue ''*'' removes the '
'every-queue grant, not per-queue ones); returns whether it existed. Takes effect for the next '
'call: a job already claimed can still be completed with its lease token. Revoking a role''s last '
'admin grant also revokes the EXECUTE jq.grant gave it on the per-queue admin functions (so DROP '
'ROLE works); memberships in jq_producer / jq_worker stay (they grant no queue). Executable by jq_admin. Errors: 22004 NULL argument, 22023 '
'unknown privilege.';

-- ---------------------------------------------------------------------------------------------
-- The privilege policy. Every function that reads or writes jq's tables on a caller's behalf
-- runs as the owner (SECURITY DEFINER), with a search_path no caller can shadow (SET
-- search_path = pg_catalog, jq, pg_temp), both written in its CREATE FUNCTION; the two hot
-- calls, jq.claim and jq.complete, have no SET clause and qualify every name instead (see
-- sql/claim.sql's head). pg_test/tests/security/ checks both: every function against every
-- role, and hot_functions_ignore_the_callers_search_path. EXECUTE is granted below.

REVOKE ALL ON SCHEMA jq FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA jq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA jq FROM PUBLIC;
GRANT USAGE ON SCHEMA jq TO jq_admin, jq_producer, jq_worker;

-- Everyone with a jq role: the caller ticket, status, pure helpers, queue_stats (rows of the
-- queues the reader holds a privilege on).
GRANT EXECUTE ON FUNCTION
    jq._ticket(), jq.status(), jq.cron_next(text, timestamptz, text),
    jq.cron_fires(text, timestamptz, timestamptz, text, integer),
    jq.backoff_seconds(text, double precision, double precision, integer, text, double precision),
    jq.max_payload_bytes(), jq.max_error_length(), jq.max_claim_batch(), jq.max_progress_bytes(),
    jq.cron_log_retention(), jq.cron_misfire_grace(), jq.cron_max_catchup(), jq.hook_lock_timeout(),
    jq.worker_beat_interval(), jq.worker_retention(), jq.worker_state(timestamptz, timestamptz),
    -- jq.table_health's sizes (a role granted SELECT on the view calls it, src/table_size.rs)
    -- and jq.queue_stats' figures of one queue (it checks the caller's grants itself).
    jq._table_bytes(oid), jq._queue_figures(text, bigint)
    TO jq_admin, jq_producer, jq_worker;
-- jq.fleet shows each reader the workers of the queues it holds a privilege on (sql/fleet.sql).
GRANT SELECT ON jq.queue_stats, jq.kind_policies, jq.fleet TO jq_admin, jq_producer, jq_worker;
-- The dashboard's read API (sql/observe.sql): each returns only what the caller's grants allow.
GRANT EXECUTE ON FUNCTION
    jq.overview(text, integer, bigint), jq.throughput(text, interval, integer, bigint),
    jq.list_jobs(text, jq.job_state, text, text, text, bigint, integer, integer, bigint),
    jq.job_detail(bigint, bigint), jq.job_executions(bigint, bigint), jq.schedule_list(bigint),
    jq.cron_log(text, integer, bigint)
    TO jq_admin, jq_producer, jq_worker;
-- jq.await checks the caller's privilege on the job's queue itself (any of the three).
GRANT EXECUTE ON FUNCTION jq.await(bigint, interval, bigint) TO jq_admin, jq_producer, jq_worker;

GRANT EXECUTE ON FUNCTION
    jq.enqueue(text, jsonb, text, timestamptz, interval, integer, integer, text, text, bigint),
    jq.enqueue_many(text, jsonb, text, timestamptz, interval, integer, integer, boolean, bigint)
    TO jq_producer, jq_admin;

GRANT EXECUTE ON FUNCTION
    jq.claim(text, text, integer, interval, interval, bigint),
    jq.claim(text[], text, integer, interval, interval, bigint),
    jq.complete(bigint, uuid, jsonb), jq.complete_many(bigint[], uuid[], jsonb[]),
    jq.fail(bigint, uuid, text, interval), jq.heartbeat(bigint, uuid, interval, jsonb),
    jq.release(bigint, uuid), jq.snooze(bigint, uuid, interval)
    TO jq_worker, jq_admin;
-- The fleet registry (sql/fleet.sql): registering checks work on every queue named; a beat or
-- deregistration counts only from the registering role (or a jq_admin member).
GRANT EXECUTE ON FUNCTION
    jq.register_worker(text, text, integer, text, text[], integer, bigint),
    jq.worker_beat(uuid, integer, bigint, bigint), jq.deregister_worker(uuid, bigint)
    TO jq_worker, jq_admin;

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY jq._queue_admin_functions() || ARRAY[
        'jq.create_queue(text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, boolean, integer, interval)',
        'jq.drop_queue(text, boolean, bigint)', 'jq.tick()', 'jq.cron_tick(timestamptz)',
        'jq.grant(text, regrole, text, bigint)', 'jq.revoke(text, regrole, text)',
        'jq.history_tables(timestamptz)']::regprocedure[]
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO jq_admin', f);
    END LOOP;
END $$;
GRANT SELECT ON ALL TABLES IN SCHEMA jq TO jq_admin;

COMMENT ON FUNCTION jq._ticket() IS
'Internal: a caller ticket (bigint, 64 random bits) for the current role, kept in this backend '
'until jq._redeem uses it. The default of every caller_ticket parameter; never pass one '
'yourself. See src/security.rs and docs/security.md.';
COMMENT ON FUNCTION jq._in_transaction_block() IS
'Internal: whether the calling statement runs inside an explicit transaction block (BEGIN ... '
'COMMIT) rather than in a transaction of its own; maintenance truncates history tables only '
'outside one (jq._truncate_history; src/xact.rs).';
COMMENT ON FUNCTION jq._lease_token() IS
'Internal: a new lease token (uuid), a random version-4 UUID as gen_random_uuid makes it (RFC '
'9562, section 5.4), from CSPRNG bits this backend draws 1 KiB at a time (src/random.rs). Set '
'by the claim statements, once per job claimed. Errors: XX000 if the CSPRNG fails.';
COMMENT ON FUNCTION jq._redeem(bigint) IS
'Internal: the role (oid) a caller ticket of this session was issued to; uses the ticket up. '
'Errors: 42501 unknown, reused or NULL ticket.';
