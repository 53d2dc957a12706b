-- The worker fleet: a registry of running worker processes, for operators (jq.fleet, `jqctl
-- workers`, the metrics). A worker registers when it starts (jq.register_worker), beats every
-- jq.worker_beat_interval() (jq.worker_beat: jobs held, resident memory, one sample more) and
-- deregisters when it stops gracefully (jq.deregister_worker). A worker that stops beating is
-- shown stale after three intervals (computed by the view: nothing writes it) and pruned by
-- maintenance jq.worker_retention() later (jq._prune_workers, in the prune duty).
--
-- Nothing here is on the claim or completion path, and recovery never reads it: a job's lease
-- is the only truth about who runs it. A crashed worker's jobs come back through the reaper
-- whether or not its row is stale, pruned or was never written.
--
-- Who may do what (docs/security.md): registering needs `work` on every queue named (as a
-- claim from them would); a beat or a deregistration counts only from the role that
-- registered the worker (or a jq_admin member): from any other role it is a no-op returning
-- false, like a beat for an unknown worker id. jq.fleet shows a role the workers all of whose
-- queues it holds a privilege on (jq_admin members: all). pg_test/tests/fleet.rs.

CREATE OR REPLACE FUNCTION jq.worker_beat_interval() RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    -- The setting without loading jq's library first: its value, or a placeholder's (a
    -- database-level setting made before the library was loaded), or the default.
    SELECT coalesce(pg_catalog.current_setting('jq.worker_beat_interval', true), '5s')::interval
$$;
COMMENT ON FUNCTION jq.worker_beat_interval() IS
'The interval between two beats of a registered worker (jq.worker_beat): the setting '
'jq.worker_beat_interval, 5 s by default. Workers read it when they register. jq.fleet shows '
'a worker stale after 3 intervals without a beat.';

CREATE OR REPLACE FUNCTION jq.worker_retention() RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(pg_catalog.current_setting('jq.worker_retention', true), '1h')::interval
$$;
COMMENT ON FUNCTION jq.worker_retention() IS
'How long jq.workers keeps a worker after it stopped (stopped_at) or, without a stop, after its '
'last beat: the setting jq.worker_retention, 1 hour by default (superuser; per database with '
'ALTER DATABASE ... SET). Maintenance deletes it then (jq._prune_workers).';

CREATE OR REPLACE FUNCTION jq._check_worker_text(what text, value text, max_chars integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
BEGIN
    IF value IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', what USING ERRCODE = '22004';
    END IF;
    IF value = '' OR length(value) > max_chars THEN
        RAISE EXCEPTION '% must have 1 to % characters', what, max_chars USING ERRCODE = '22023';
    END IF;
END $$;
COMMENT ON FUNCTION jq._check_worker_text(text, text, integer) IS
'Internal: raises 22004 when value (the argument called what) is NULL, 22023 when it is empty '
'or longer than max_chars characters.';

CREATE OR REPLACE FUNCTION jq.register_worker(name text, hostname text, pid integer,
                                              client_version text, queues text[], concurrency integer,
                                              caller_ticket bigint DEFAULT jq._ticket())
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller  oid;
    v_missing text;
    v_id      uuid := pg_catalog.gen_random_uuid();
BEGIN
    IF register_worker.queues IS NULL THEN
        RAISE EXCEPTION 'queues must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.cardinality(register_worker.queues) NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'queues must name 1 to 100 queues' USING ERRCODE = '22023';
    END IF;
    -- Before anything is read: a role learns nothing of queues it may not work.
    v_caller := jq._authorize(register_worker.caller_ticket, register_worker.queues, 'work');
    PERFORM jq._check_worker_text('name', register_worker.name, 200);
    PERFORM jq._check_worker_text('hostname', register_worker.hostname, 255);
    IF register_worker.client_version IS NOT NULL THEN
        PERFORM jq._check_worker_text('client_version', register_worker.client_version, 100);
    END IF;
    IF register_worker.pid IS NULL OR register_worker.concurrency IS NULL THEN
        RAISE EXCEPTION 'pid and concurrency must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF register_worker.pid < 1 THEN
        RAISE EXCEPTION 'pid must be positive, got %', register_worker.pid USING ERRCODE = '22023';
    END IF;
    IF register_worker.concurrency NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION 'concurrency must be between 1 and 1000000, got %', register_worker.concurrency
            USING ERRCODE = '22023';
    END IF;
    SELECT u.q INTO v_missing FROM pg_catalog.unnest(register_worker.queues) AS u(q)
    WHERE u.q IS NULL OR NOT EXISTS (SELECT 1 FROM jq.queues t WHERE t.name = u.q)
    LIMIT 1;
    IF FOUND THEN
        PERFORM jq._unknown_queue(v_missing);
    END IF;
    INSERT INTO jq.workers (worker_id, name, hostname, pid, client_version, jq_version, queues,
                            concurrency, started_at, last_beat_at, registered_by)
    VALUES (v_id, register_worker.name, register_worker.hostname, register_worker.pid,
            register_worker.client_version,
            (SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'jq'),
            ARRAY(SELECT DISTINCT u.q FROM pg_catalog.unnest(register_worker.queues) AS u(q) ORDER BY 1),
            register_worker.concurrency, pg_catalog.now(), pg_catalog.now(), v_caller::regrole);
    RETURN v_id;
END $$;
COMMENT ON FUNCTION jq.register_worker(text, text, integer, text, text[], integer, bigint) IS
'register_worker(name, hostname, pid, client_version, queues, concurrency): adds a worker '
'process to the fleet (jq.workers, shown by jq.fleet) and returns its worker_id (uuid), which '
'its beats (jq.worker_beat, every jq.worker_beat_interval()) and jq.deregister_worker name. '
'name: 1-200 characters (the client''s default is hostname:pid); hostname: 1-255; pid > 0; '
'client_version: NULL or 1-100; queues: 1 to 100 existing queue names, stored sorted without '
'duplicates; concurrency: 1 to 1,000,000. Registering again (a new process, or after a beat '
'returned false) makes a new row: the old one goes stale and is pruned. The caller needs work '
'on every queue named. Errors: 42501 no work grant on one of the queues (checked first); 22004 '
'a NULL argument (client_version may be NULL); 22023 empty or too long text, no or more than '
'100 queues, pid < 1, concurrency out of range; 42704 unknown queue (22023/22004 for a '
'malformed or NULL name). Nothing is written on an error.';

CREATE OR REPLACE FUNCTION jq.worker_beat(worker_id uuid, in_flight integer, rss_bytes bigint,
                                          caller_ticket bigint DEFAULT jq._ticket())
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._redeem(worker_beat.caller_ticket);
BEGIN
    IF worker_beat.worker_id IS NULL OR worker_beat.in_flight IS NULL OR worker_beat.rss_bytes IS NULL THEN
        RAISE EXCEPTION 'worker_id, in_flight and rss_bytes must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF worker_beat.in_flight < 0 OR worker_beat.rss_bytes < 0 THEN
        RAISE EXCEPTION 'in_flight and rss_bytes must not be negative' USING ERRCODE = '22023';
    END IF;
    -- One row by its primary key, fenced on the registering role and on not being stopped;
    -- only unindexed columns change (a HOT update, sql/schema.sql). The oldest sample goes
    -- once there are 60 (jsonb - 0 removes the first element).
    UPDATE jq.workers w SET
        in_flight = worker_beat.in_flight,
        rss_bytes = worker_beat.rss_bytes,
        last_beat_at = pg_catalog.now(),
        samples = CASE WHEN pg_catalog.jsonb_array_length(w.samples) >= 60 THEN w.samples OPERATOR(pg_catalog.-) 0
                       ELSE w.samples END
                  OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                      'at', pg_catalog.floor(extract(epoch FROM pg_catalog.now()))::bigint,
                      'running', worker_beat.in_flight,
                      'rss', worker_beat.rss_bytes))
    WHERE w.worker_id = worker_beat.worker_id AND w.stopped_at IS NULL
      AND (w.registered_by = v_caller OR pg_catalog.pg_has_role(v_caller, 'jq_admin', 'USAGE'));
    RETURN FOUND;
END $$;
COMMENT ON FUNCTION jq.worker_beat(uuid, integer, bigint, bigint) IS
'worker_beat(worker_id, in_flight, rss_bytes): a registered worker''s beat, every '
'jq.worker_beat_interval(): records the jobs it holds (in_flight) and its resident memory in '
'bytes (rss_bytes, 0 when unknown) with last_beat_at = now(), and appends the sample '
'{"at": epoch seconds, "running": in_flight, "rss": rss_bytes} to samples, keeping the last 60 '
'(5 minutes at the default interval). Returns true when it did; false, writing nothing, when '
'worker_id is unknown (pruned: the worker should register again), stopped, or registered by '
'another role (a jq_admin member may beat any worker). One UPDATE of one row by primary key. '
'Errors: 22004 a NULL argument; 22023 a negative count.';

CREATE OR REPLACE FUNCTION jq.deregister_worker(worker_id uuid, caller_ticket bigint DEFAULT jq._ticket())
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_caller oid := jq._redeem(deregister_worker.caller_ticket);
BEGIN
    IF deregister_worker.worker_id IS NULL THEN
        RAISE EXCEPTION 'worker_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE jq.workers w SET stopped_at = pg_catalog.now(), in_flight = 0
    WHERE w.worker_id = deregister_worker.worker_id AND w.stopped_at IS NULL
      AND (w.registered_by = v_caller OR pg_catalog.pg_has_role(v_caller, 'jq_admin', 'USAGE'));
    RETURN FOUND;
END $$;
COMMENT ON FUNCTION jq.deregister_worker(uuid, bigint) IS
'deregister_worker(worker_id): marks a registered worker stopped (stopped_at = now(), '
'in_flight = 0), as a worker does when it shuts down gracefully; the row stays visible in '
'jq.fleet as stopped until maintenance prunes it jq.worker_retention() later. Returns false, '
'writing nothing, when worker_id is unknown, already stopped, or registered by another role '
'(a jq_admin member may deregister any worker). Errors: 22004 NULL worker_id.';

-- Maintenance (the prune duty, jq._maintain): a bounded batch, rows other sessions hold are
-- skipped (SKIP LOCKED) and the condition is checked again on the locked row, so a beat that
-- committed meanwhile keeps its worker. jq.workers is small (one row per process) and has no
-- index but its primary key, on purpose (an index on last_beat_at would make every beat a
-- non-HOT update), so the batch is picked by a sequential scan.
CREATE OR REPLACE FUNCTION jq._prune_workers(now timestamptz, batch integer DEFAULT 1000) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count   integer;
    v_horizon timestamptz := _prune_workers.now - jq.worker_retention();
BEGIN
    DELETE FROM jq.workers w
    WHERE w.worker_id = ANY (ARRAY(
            SELECT x.worker_id FROM jq.workers x
            WHERE coalesce(x.stopped_at, x.last_beat_at) < v_horizon
            LIMIT _prune_workers.batch
            FOR UPDATE SKIP LOCKED))
      AND coalesce(w.stopped_at, w.last_beat_at) < v_horizon;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END $$;
COMMENT ON FUNCTION jq._prune_workers(timestamptz, integer) IS
'Maintenance: deletes up to batch workers (jq.workers) stopped, or without a beat, for longer '
'than jq.worker_retention() before now; returns how many. Skips rows another session holds '
'(FOR UPDATE SKIP LOCKED); never waits for a lock.';

CREATE OR REPLACE FUNCTION jq.worker_state(stopped_at timestamptz, last_beat_at timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN stopped_at IS NOT NULL THEN 'stopped'
                WHEN last_beat_at < pg_catalog.now() OPERATOR(pg_catalog.-) (3 OPERATOR(pg_catalog.*) jq.worker_beat_interval())
                    THEN 'stale'
                ELSE 'active' END
$$;
COMMENT ON FUNCTION jq.worker_state(timestamptz, timestamptz) IS
'The state jq.fleet shows for a worker with this stopped_at and last_beat_at: stopped '
'(deregistered), stale (no beat for 3 x jq.worker_beat_interval() before now(): crashed, '
'killed, hung or cut off), else active. Inlined.';

-- security_barrier: a reader's own (leaky) function in a WHERE on this view sees only the rows
-- the view lets it see (as jq.queue_stats).
CREATE OR REPLACE VIEW jq.fleet WITH (security_barrier) AS
SELECT w.worker_id, w.name, w.hostname, w.pid, w.client_version, w.jq_version, w.queues,
       w.concurrency, w.in_flight, w.rss_bytes, w.started_at, w.last_beat_at, w.stopped_at,
       w.samples,
       jq.worker_state(w.stopped_at, w.last_beat_at) AS state
FROM jq.workers w
WHERE pg_catalog.pg_has_role('jq_admin', 'USAGE')
   OR NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(w.queues) AS u(q)
                  WHERE NOT EXISTS (SELECT 1 FROM jq.queue_grants g
                                    WHERE g.queue IN (u.q, '*') AND pg_catalog.pg_has_role(g.grantee, 'USAGE')));
COMMENT ON VIEW jq.fleet IS
'The worker fleet: jq.workers (worker_id, name, hostname, pid, client_version, jq_version, '
'queues, concurrency, in_flight, rss_bytes in bytes, started_at, last_beat_at, stopped_at, '
'samples) and state (jq.worker_state): stopped (deregistered), stale (no beat for 3 x '
'jq.worker_beat_interval(): crashed, killed, hung or cut off), else active. Shows a role only the workers all of whose '
'queues it holds a jq privilege on (a superuser or member of jq_admin: all). For operators '
'only: a job''s lease, not this view, says whether it is being worked.';
