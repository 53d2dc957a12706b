-- Execution history, as one view over jq.execution_log and the completed job rows (both in
-- sql/schema.sql). A view is re-creatable, so it lives outside the schema file: an upgrade drops
-- it with the functions and creates it again from this file (docs/upgrades.md).

-- The log has no completed row of a job that is still there, except one restored from a dump of
-- 0.1.0 (whose history table held every outcome; see the trigger below): the view shows such a
-- row once, from the job.
CREATE OR REPLACE VIEW jq.executions AS
SELECT l.job_id, l.seq, l.attempt, l.outcome, l.started_at, l.lease_expires_at, l.finished_at,
       l.queue, l.worker, l.error
FROM jq.execution_log l
WHERE l.outcome <> 'completed'
   OR NOT EXISTS (SELECT FROM jq.jobs d WHERE d.id = l.job_id AND d.claims = l.seq AND d.state = 'completed')
UNION ALL
SELECT j.id, j.claims, j.attempt, 'completed'::jq.execution_outcome, j.started_at,
       j.lease_expires_at, j.finished_at, j.queue, j.worker, NULL::text
FROM jq.jobs j
WHERE j.state = 'completed';
COMMENT ON VIEW jq.executions IS
'Execution history: one row per execution once it has ended (job_id, seq = the job''s claims '
'count when it started, attempt = the attempt number it ran as, outcome, started_at, '
'lease_expires_at, finished_at, queue, worker, error). Completed executions come from the job '
'rows of completed jobs, so they are kept as long as the job (the queue''s retention); the '
'other outcomes from jq.execution_log, kept for history_retention. For outcomes lease_expired, '
'released and snoozed the attempt was refunded. A running execution is visible in its jq.jobs '
'row (started_at, worker, lease_expires_at).';

-- A dump taken under 0.1.0, when jq.executions was the history table, restores its rows with
-- COPY jq.executions: they go to the log (docs/upgrades.md, "Dump and restore").
CREATE OR REPLACE FUNCTION jq._executions_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jq.execution_log (job_id, seq, attempt, outcome, started_at, lease_expires_at,
                                  finished_at, queue, worker, error)
    VALUES (NEW.job_id, NEW.seq, NEW.attempt, NEW.outcome, NEW.started_at, NEW.lease_expires_at,
            NEW.finished_at, NEW.queue, NEW.worker, NEW.error);
    RETURN NEW;
END $$;
COMMENT ON FUNCTION jq._executions_insert() IS
'Internal: INSTEAD OF INSERT trigger of the view jq.executions; writes the row to '
'jq.execution_log. For restoring dumps taken under jq 0.1.0 (COPY jq.executions); jq itself '
'never inserts into the view.';
CREATE OR REPLACE TRIGGER executions_insert INSTEAD OF INSERT ON jq.executions
    FOR EACH ROW EXECUTE FUNCTION jq._executions_insert();

-- Where finished jobs go (sql/schema.sql, "Finished jobs leave the hot table"). A job that
-- finishes (completed, dead, cancelled) is moved out of the hot table by this trigger, in the
-- statement that finished it: deleted from ONLY jq.jobs and inserted as it is into the current
-- table of its ring. Every path that finishes a job (jq.complete, jq.fail, jq.cancel, the
-- reaper, a restore of an old dump) therefore leaves no finished row in the hot table
-- (pg_test/tests/history.rs, every_way_a_job_finishes_moves_it_out_of_the_hot_table).
-- Trigger functions run with the caller's search_path (the hot calls set none): every name is
-- schema-qualified, operators too.
-- IF chains with qualified operators, not CASE v WHEN n (which compares with the caller's =);
-- a ring without a row (never, once installed) writes to table 0. jq.complete has the done
-- ring's chain inline, for one row (sql/finish.sql).
CREATE OR REPLACE FUNCTION jq._archive(ring text, jobs jq.jobs[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_slot integer;
BEGIN
    IF pg_catalog.cardinality(jobs) IS NULL THEN
        RETURN 0;
    END IF;
    SELECT r.current INTO v_slot FROM jq.history_rings r WHERE r.ring OPERATOR(pg_catalog.=) _archive.ring;
    IF ring OPERATOR(pg_catalog.=) 'dead' THEN
        IF v_slot OPERATOR(pg_catalog.=) 1 THEN INSERT INTO jq.jobs_dead_1 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 2 THEN INSERT INTO jq.jobs_dead_2 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 3 THEN INSERT INTO jq.jobs_dead_3 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 4 THEN INSERT INTO jq.jobs_dead_4 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 5 THEN INSERT INTO jq.jobs_dead_5 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 6 THEN INSERT INTO jq.jobs_dead_6 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 7 THEN INSERT INTO jq.jobs_dead_7 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSE INSERT INTO jq.jobs_dead_0 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        END IF;
    ELSE
        IF v_slot OPERATOR(pg_catalog.=) 1 THEN INSERT INTO jq.jobs_done_1 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 2 THEN INSERT INTO jq.jobs_done_2 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 3 THEN INSERT INTO jq.jobs_done_3 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 4 THEN INSERT INTO jq.jobs_done_4 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 5 THEN INSERT INTO jq.jobs_done_5 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 6 THEN INSERT INTO jq.jobs_done_6 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSIF v_slot OPERATOR(pg_catalog.=) 7 THEN INSERT INTO jq.jobs_done_7 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        ELSE INSERT INTO jq.jobs_done_0 SELECT u.* FROM pg_catalog.unnest(jobs) u;
        END IF;
    END IF;
    RETURN pg_catalog.cardinality(jobs);
END $$;
COMMENT ON FUNCTION jq._archive(text, jq.jobs[]) IS
'Internal: inserts finished job rows (all of ring: ''done'' for completed and cancelled, ''dead''; '
'NULL or empty: none) into the current table of the ring. Called by jq._retire_job, '
'jq.complete_many and jq.cancel_dead, which delete the rows from the hot table. Returns how many '
'rows it got.';

CREATE OR REPLACE FUNCTION jq._retire_job() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM ONLY jq.jobs j WHERE j.id OPERATOR(pg_catalog.=) NEW.id;
    PERFORM jq._archive(CASE WHEN NEW.state OPERATOR(pg_catalog.=) 'dead' THEN 'dead' ELSE 'done' END, ARRAY[NEW]);
    RETURN NULL;
END $$;
COMMENT ON FUNCTION jq._retire_job() IS
'Internal: AFTER INSERT OR UPDATE trigger of jq.jobs for rows that are finished (completed, dead, '
'cancelled): moves the row from the hot table to the history (jq._archive). jq.complete and '
'jq.complete_many move their rows themselves (a delete, not an update and then a delete).';
CREATE OR REPLACE TRIGGER jobs_retire AFTER INSERT OR UPDATE ON jq.jobs
    FOR EACH ROW WHEN (NEW.state IN ('completed', 'dead', 'cancelled'))
    EXECUTE FUNCTION jq._retire_job();

-- How long a ring keeps a finished job: the longest retention of its state over all queues
-- (done: retention, but at least min(history_retention, 5 minutes), as jq.queue_stats counts the
-- last 5 minutes of completions from the job rows; dead: dead_retention).
CREATE OR REPLACE FUNCTION jq._ring_retention(ring text) RETURNS interval
LANGUAGE sql STABLE AS $$
    SELECT coalesce(max(CASE WHEN ring = 'dead' THEN q.dead_retention
                             ELSE pg_catalog.interval_larger(q.retention,
                                      pg_catalog.interval_smaller(q.history_retention, interval '5 minutes')) END),
                    interval '0')
    FROM jq.queues q
$$;
COMMENT ON FUNCTION jq._ring_retention(text) IS
'Internal: the longest retention (interval) of the jobs of ring (done or dead) over all queues.';

-- A history table is emptied only when every job in it is past its own queue's retention (a
-- job whose queue is gone counts as past it: jq.drop_queue deletes a queue's jobs). The check
-- runs again after the table is locked ACCESS EXCLUSIVE (NOWAIT: a reader or writer holding it
-- leaves it for the next pass), in READ COMMITTED, so its snapshot postdates every write the
-- lock waited out: TRUNCATE ignores snapshots and must not take a job that is still retained
-- (pg_test/tests/history.rs, a_history_table_is_truncated_only_when_every_job_is_past_retention).
CREATE OR REPLACE FUNCTION jq._history_retained(tbl text, ring text, now timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_retained boolean;
BEGIN
    EXECUTE pg_catalog.format(
        'SELECT EXISTS (SELECT 1 FROM jq.queues q WHERE EXISTS ('
        '    SELECT 1 FROM jq.%I f WHERE f.queue = q.name AND f.finished_at >= $1 - %s))',
        tbl,
        CASE WHEN ring = 'dead' THEN 'q.dead_retention'
             ELSE 'pg_catalog.interval_larger(q.retention, pg_catalog.interval_smaller(q.history_retention, interval ''5 minutes''))' END)
    INTO v_retained USING now;
    RETURN v_retained;
END $$;
COMMENT ON FUNCTION jq._history_retained(text, text, timestamptz) IS
'Internal: whether history table jq.<tbl> of ring (done or dead) holds a job still within its '
'queue''s retention at now.';

-- The sessions holding a lock on each history table, from one read of pg_locks (a snapshot of
-- the whole lock table): one entry per holder, a session's pid, or 0 for each prepared
-- transaction (its locks have no pid); the caller's own locks left out.
CREATE OR REPLACE FUNCTION jq._history_holders() RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
    SELECT coalesce(jsonb_object_agg(h.relname, h.pids), '{}')
    FROM (SELECT c.relname, jsonb_agg(x.pid ORDER BY x.pid) AS pids
          FROM (SELECT DISTINCT l.relation, coalesce(l.pid, 0) AS pid, l.virtualtransaction
                FROM pg_locks l
                WHERE l.locktype = 'relation' AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
                  AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())) x
          JOIN pg_class c ON c.oid = x.relation
          WHERE c.relnamespace = 'jq'::regnamespace AND c.relname ~ '^jobs_(done|dead)_[0-7]$'
          GROUP BY c.relname) h
$$;
COMMENT ON FUNCTION jq._history_holders() IS
'Internal: {history table name: [holder, ...]} (jsonb) over the other sessions of this database '
'holding a granted lock on jq.jobs_done_N / jq.jobs_dead_N: a pid, or 0 for each prepared '
'transaction. Read by jq.history_tables().';

-- What an operator asks when the history does not shrink: which history table is due to be
-- emptied, and which sessions keep it (jq._truncate_history leaves a table another session
-- holds a lock on for the next pass, without a word). The same checks as that pass, at the
-- time of the call (pg_test/tests/history.rs,
-- history_tables_names_the_sessions_that_keep_a_due_table_from_truncation). It reads the
-- tables, whose locks last until the caller's transaction ends, so no view calls it: a
-- monitor reading a view in a transaction left open would itself keep the history. Like the
-- pass it never waits for a lock: a table it cannot lock at once (a TRUNCATE waits for it behind
-- its holders) is reported as undecided, with its holders. Volatile: it takes locks.
CREATE OR REPLACE FUNCTION jq.history_tables(at timestamptz DEFAULT NULL)
RETURNS TABLE (table_name text, ring text, slot integer, is_current boolean, truncation_due boolean,
               truncation_blocked_by integer[])
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, jq, pg_temp
SET jit = off
AS $$
DECLARE
    v_now     timestamptz := coalesce(history_tables.at, clock_timestamp());
    v_spare   boolean;
    v_held    boolean;
    v_holders jsonb;  -- history table name -> its holders, from one read of pg_locks
BEGIN
    IF NOT isfinite(v_now) THEN
        RAISE EXCEPTION 'jq.history_tables: at must be a finite instant, not %', v_now USING ERRCODE = '22023';
    END IF;
    FOR ring, slot, is_current, v_spare IN
        SELECT r.ring, s.slot, s.slot = r.current,
               -- the table the ring left less than 10 s ago, spared by the pass for that long
               s.slot = (r.current + 7) % 8 AND v_now - r.since < interval '10 seconds'
        FROM jq.history_rings r CROSS JOIN generate_series(0, 7) AS s(slot)
        ORDER BY r.ring DESC, s.slot
    LOOP
        table_name := format('jobs_%s_%s', ring, slot);
        truncation_due := false;
        truncation_blocked_by := NULL;
        IF NOT is_current AND NOT v_spare THEN
            BEGIN
                EXECUTE format('LOCK TABLE jq.%I IN ACCESS SHARE MODE NOWAIT', table_name);
                EXECUTE format('SELECT EXISTS (SELECT 1 FROM jq.%I)', table_name) INTO STRICT v_held;
                truncation_due := v_held AND NOT jq._history_retained(table_name, ring, v_now);
            EXCEPTION WHEN lock_not_available THEN
                truncation_due := NULL;  -- undecided: a lock on it is waited for
            END;
        END IF;
        IF truncation_due IS DISTINCT FROM false THEN
            v_holders := coalesce(v_holders, jq._history_holders());
            truncation_blocked_by := ARRAY(SELECT e::integer FROM jsonb_array_elements_text(v_holders -> table_name) e);
        END IF;
        RETURN NEXT;
    END LOOP;
END $$;
COMMENT ON FUNCTION jq.history_tables(timestamptz) IS
'The 16 history tables that finished jobs move to (docs/semantics.md, "Where finished jobs live"), '
'judged at at (default: now), one row each: table_name (jobs_done_N, jobs_dead_N), ring (done or dead), slot (0..7), '
'is_current (finishing jobs are written to it; never truncated), truncation_due (not current, '
'not left by its ring less than 10 seconds ago, holds jobs, and every one is past its queue''s '
'retention at at: maintenance empties it at its next pass; NULL: undecided, as the table could '
'not be locked without waiting, which a TRUNCATE queued behind its holders causes), '
'truncation_blocked_by (when due or undecided, else NULL: one entry per other session of this '
'server holding a lock on the table, its pid, or 0 for each prepared transaction; they keep it '
'from being truncated until their transactions end; a query '
'of jq.jobs holds every history table). Reads each table that may be due: its ACCESS SHARE lock '
'lasts until the caller''s transaction ends, so call it in a transaction of its own. Never waits '
'for a lock. Errors: 22023 at not finite. jq_admin only.';

CREATE OR REPLACE FUNCTION jq._truncate_history(now timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_ring  text;
    v_slot  integer;
    v_table text;
    v_cur   integer;
    v_since timestamptz;
    v_rows  integer;
    v_empty boolean;
    v_total integer := 0;
BEGIN
    -- Under REPEATABLE READ or SERIALIZABLE the snapshot predates the lock: the check could miss
    -- a retained job committed in between, so nothing is truncated then. Nor inside a
    -- transaction block: a truncated table stays locked until the transaction ends, and every
    -- reader of jq.jobs would wait for a pass left open (the background worker, pg_cron and an
    -- autocommit jq.tick() run each pass as a transaction of its own).
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' OR jq._in_transaction_block() THEN
        RETURN 0;
    END IF;
    FOREACH v_ring IN ARRAY ARRAY['done', 'dead'] LOOP
        SELECT h.current, h.since INTO v_cur, v_since FROM jq.history_rings h WHERE h.ring = v_ring;
        FOR v_slot IN 0..7 LOOP
            -- Never the current table: the completions writing into it would wait for the lock.
            -- Nor, for 10 s, the one the ring just left: a completion that read the ring before
            -- it moved on may still be about to write there.
            CONTINUE WHEN v_slot = coalesce(v_cur, 0)
                       OR (v_slot = (coalesce(v_cur, 0) + 7) % 8
                           AND _truncate_history.now - v_since < interval '10 seconds');
            v_table := pg_catalog.format('jobs_%s_%s', v_ring, v_slot);
            BEGIN
                -- Every lock NOWAIT: a table another pass is truncating, or a reader or writer
                -- holds, is left for the next pass (a lock taken and not needed ends with the
                -- pass's transaction, which the background worker keeps short).
                EXECUTE pg_catalog.format('LOCK TABLE jq.%I IN ACCESS SHARE MODE NOWAIT', v_table);
                EXECUTE pg_catalog.format('SELECT NOT EXISTS (SELECT 1 FROM jq.%I)', v_table) INTO STRICT v_empty;
                CONTINUE WHEN v_empty OR jq._history_retained(v_table, v_ring, _truncate_history.now);
                -- Counted before the exclusive lock, so that readers wait for the truncation
                -- only: a late write the count misses is truncated all the same.
                EXECUTE pg_catalog.format('SELECT count(*) FROM jq.%I', v_table) INTO STRICT v_rows;
                EXECUTE pg_catalog.format('LOCK TABLE jq.%I IN ACCESS EXCLUSIVE MODE NOWAIT', v_table);
                CONTINUE WHEN jq._history_retained(v_table, v_ring, _truncate_history.now);
                EXECUTE pg_catalog.format('TRUNCATE jq.%I', v_table);
                v_total := v_total + v_rows;
            EXCEPTION WHEN lock_not_available THEN
                NULL;  -- held by a reader, a writer or another pass: the next pass
            END;
        END LOOP;
    END LOOP;
    RETURN v_total;
END $$;
COMMENT ON FUNCTION jq._truncate_history(timestamptz) IS
'Maintenance (jq._prune): empties with TRUNCATE every history table (jq.jobs_done_N, '
'jq.jobs_dead_N) whose jobs are all past their queue''s retention at now, except the current '
'table of its ring and, for 10 seconds after the ring moved on, the one it left; returns how many '
'jobs went. Never waits for a lock (a table in use is left for the next pass); truncates nothing '
'outside READ COMMITTED or inside a transaction block (a plpgsql block with EXCEPTION included).';

-- A ring moves on to its next table once the current one has been written for a sixth of the
-- ring's retention (at least a minute) and the next one is empty: eight tables then hold the
-- retention with room to spare, and each is emptied whole. If the next table still holds
-- retained jobs (a queue's retention was raised), the current one is written on, and covers
-- a longer span: nothing is lost, it is only emptied later.
CREATE OR REPLACE FUNCTION jq._rotate_history(now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r      record;
    v_next integer;
    v_empty boolean;
BEGIN
    FOR r IN SELECT h.ring, h.current, h.since FROM jq.history_rings h ORDER BY h.ring FOR UPDATE SKIP LOCKED LOOP
        CONTINUE WHEN _rotate_history.now - r.since
                      < pg_catalog.interval_larger(jq._ring_retention(r.ring) / 6, interval '1 minute');
        v_next := (r.current + 1) % 8;
        BEGIN
            -- NOWAIT: a table another pass is truncating is not waited for.
            EXECUTE pg_catalog.format('LOCK TABLE jq.%I IN ACCESS SHARE MODE NOWAIT',
                                      pg_catalog.format('jobs_%s_%s', r.ring, v_next));
            EXECUTE pg_catalog.format('SELECT NOT EXISTS (SELECT 1 FROM jq.%I)',
                                      pg_catalog.format('jobs_%s_%s', r.ring, v_next)) INTO STRICT v_empty;
        EXCEPTION WHEN lock_not_available THEN
            v_empty := false;
        END;
        CONTINUE WHEN NOT v_empty;
        UPDATE jq.history_rings h
        SET current = v_next, since = LEAST(_rotate_history.now, pg_catalog.clock_timestamp())
        WHERE h.ring = r.ring;
    END LOOP;
END $$;
COMMENT ON FUNCTION jq._rotate_history(timestamptz) IS
'Maintenance (jq._prune): moves each history ring (jq.history_rings) on to its next table when '
'the current one has been written for a sixth of the ring''s retention (at least 1 minute) and '
'the next one is empty. Skips a ring row another session holds.';
