"""Generates sql/jq--0.1.0--0.2.0.sql from the 0.2.0 sources while 0.2.0 is unreleased.

Usage: cargo pgrx schema pg15 -p jq --out /tmp/jq.sql && python3 sql/tools/upgrade_0.1.0_to_0.2.0.py /tmp/jq.sql
It copies, verbatim, the statements of sql/*.sql that 0.2.0 added or changed (and the Rust
functions' CREATE statements from the generated install script). Once 0.2.0 is released the
script is frozen and this tool is obsolete (docs/upgrades.md). pg_test/tests/upgrade.rs checks
the result against a fresh install."""
import re, sys
import os
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..') + '/'

def statements(path):
    """Top-level statements of a SQL file (dollar quotes and comments respected), with preceding comment lines."""
    text = open(path).read()
    out, cur, i, n = [], '', 0, len(text)
    dollar = None
    while i < n:
        if dollar:
            j = text.find(dollar, i)
            cur += text[i:j + len(dollar)]
            i = j + len(dollar); dollar = None; continue
        c = text[i]
        if text.startswith('--', i):
            j = text.find('\n', i); j = n if j < 0 else j + 1
            cur += text[i:j]; i = j; continue
        if c == "'":
            j = i + 1
            while True:
                j = text.find("'", j)
                if text.startswith("''", j): j += 2; continue
                break
            cur += text[i:j + 1]; i = j + 1; continue
        m = re.match(r'\$[A-Za-z_]*\$', text[i:])
        if m:
            dollar = m.group(0); cur += dollar; i += len(dollar); continue
        cur += c; i += 1
        if c == ';':
            out.append(cur.strip('\n') + '\n'); cur = ''
    return out

def body(stmt):
    # statement without leading comment lines
    lines = stmt.split('\n')
    while lines and (lines[0].startswith('--') or not lines[0].strip()):
        lines.pop(0)
    return '\n'.join(lines)

files = {f: statements(ROOT + f) for f in ['schema.sql', 'queues.sql', 'enqueue.sql', 'work.sql', 'flow.sql', 'cron.sql', 'maintenance.sql', 'security.sql']}

def find(file, pattern, replace_create=False):
    hits = [s for s in files[file] if re.search(pattern, body(s).split('\n', 1)[0])]
    assert len(hits) >= 1, (file, pattern)
    res = []
    for h in hits:
        if replace_create:
            h = h.replace('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION', 1).replace('CREATE VIEW', 'CREATE OR REPLACE VIEW', 1)
        res.append(h)
    return res

changed_sig = {  # name -> (file, old signature)
    'enqueue': ('enqueue.sql', 'text, jsonb, text, timestamptz, interval, integer, integer, text, text'),
    'enqueue_many': ('enqueue.sql', 'text, jsonb, text, timestamptz, interval, integer, integer, boolean'),
    'claim': ('work.sql', None),
    'cancel': ('work.sql', 'bigint'),
    'retry': ('work.sql', 'bigint'),
    'alter_queue': ('queues.sql', 'text, integer, interval, jq.backoff_policy, interval, interval, jq.jitter_mode, interval, interval, interval, integer, integer, boolean, integer, integer, interval, integer, interval'),
    'drop_queue': ('queues.sql', 'text, boolean'),
    'pause': ('queues.sql', 'text'),
    'resume': ('queues.sql', 'text'),
    'schedule': ('cron.sql', 'text, text, text, jsonb, text, text, integer, integer, text, text'),
    'alter_schedule': ('cron.sql', 'text, text, text, jsonb, text, text, integer, integer, text, text, boolean'),
    'unschedule': ('cron.sql', 'text, boolean'),
    # A budget parameter (passes until a pass moves fewer or budget went, 2026-12-04).
    '_promote': ('maintenance.sql', 'timestamptz, integer'),
    '_reap': ('maintenance.sql', 'timestamptz, integer'),
    '_prune': ('maintenance.sql', 'timestamptz, integer'),
}
out = []
w = out.append
w("""-- jq 0.1.0 -> 0.2.0: least privilege (docs/security.md).
--
-- Released upgrade script: never edit it once released; later changes go into the next
-- version's script (docs/upgrades.md). ALTER EXTENSION jq UPDATE runs it in one transaction.
-- pg_test/tests/upgrade.rs checks that 0.1.0 + this script has exactly the catalog of a fresh
-- 0.2.0 install, and that a populated database keeps every row and lease.
--
-- What changes:
--   * roles jq_admin, jq_producer, jq_worker; table jq.queue_grants; jq.grant / jq.revoke;
--   * jq.schedules.created_by, checked by every cron fire;
--   * the functions that name a queue take a last parameter caller_ticket (so their signatures
--     change: dropped and created again) and check the caller's grants;
--   * SECURITY DEFINER with a pinned search_path (jq.claim and jq.complete: every name
--     schema-qualified instead, no SET clause; batch claims in the new jq._claim_batch);
--     nothing granted to PUBLIC;
--   * claim-start hints (src/claim_hint.rs): the claim, and the paths that make jobs claimable,
--     call the new internal functions jq._claim_hint, jq._hint_* and jq._wake_ready.
--   * jq.jobs is rebuilt with its columns in a new order (less WAL per claim and completion).
--   * a completion writes no history row: the completed job row records its execution. The
--     table jq.executions becomes jq.execution_log (the other outcomes) and jq.executions a view
--     over both; a completed execution is kept as long as its job (retention).
-- Jobs, leases and history are kept: a worker holding a lease completes it after the upgrade
-- with the same token.

""")
w('-- Roles and per-queue grants (as in sql/schema.sql).\n')
sch = files['schema.sql']
start = next(i for i, s in enumerate(sch) if 'DO $$' in s)
for s in sch[start:]:
    w(s + '\n')
w('-- Queues are keyed by the hash of their name in jobs_claim_idx (as in sql/schema.sql).\n')
for s in find('schema.sql', r'^CREATE UNIQUE INDEX queues_name_hash_idx'):
    w(s + '\n')
w('-- Schedules remember who defined them (as in sql/cron.sql).\n')
w('ALTER TABLE jq.schedules ADD COLUMN created_by regrole;\n\n')
for s in find('cron.sql', r'^COMMENT ON TABLE jq\.schedules'):
    w(s + '\n')
gen = open(sys.argv[1]).read()  # cargo pgrx schema pg15 -p jq --out FILE
w('-- Caller tickets (src/security.rs), lease tokens (src/random.rs) and claim-start hints (src/claim_hint.rs).\n')
for fn in ('_ticket', '_lease_token', '_redeem', '_authorize', '_authorize_queue', '_wake_ready', '_claim_hint', '_hint_priority',
           '_hint_run_at', '_hint_id', '_hint_advance', '_hint_clear', '_hint_turn_end'):
    m = re.search(r'CREATE\s+FUNCTION "' + fn + r'"\(.*?;\n', gen, re.S)
    assert m, fn
    w(m.group(0) + '\n')
for fn in ('_wake', '_wake_n', '_wake_on_abort', '_wake_ready', '_claim_hint', '_hint_priority',
           '_hint_run_at', '_hint_id', '_hint_advance', '_hint_clear', '_hint_turn_end'):
    for s in find('maintenance.sql', r'^COMMENT ON FUNCTION jq\.' + fn + r'\('):
        w(s + '\n')
w('-- Functions whose signature changes: dropped, then created as in 0.2.0.\n')
for name, (f, old) in changed_sig.items():
    if name == 'claim':
        w('DROP FUNCTION jq.claim(text, text, integer, interval, interval);\n')
        w('DROP FUNCTION jq.claim(text[], text, integer, interval, interval);\n')
    else:
        w(f'DROP FUNCTION jq.{name}({old});\n')
w('\n')
for name, (f, old) in changed_sig.items():
    for s in find(f, r'^CREATE FUNCTION jq\.' + name + r'\('):
        w(s + '\n')
    for s in find(f, r'^(ALTER|COMMENT ON) FUNCTION jq\.' + name + r'\('):
        w(s + '\n')
w('-- Changed bodies.\n')
for f, name in (('cron.sql', '_cron_fire'), ('cron.sql', 'cron_tick'), ('cron.sql', '_lock_schedule_queue'), ('work.sql', '_claimable'), ('queues.sql', 'create_queue'), ('queues.sql', '_interval_fields_nonnegative'), ('work.sql', '_claim_batch'), ('maintenance.sql', '_prune_jobs'), ('maintenance.sql', '_age'),
                ('maintenance.sql', '_maintain'), ('flow.sql', '_key_fill'),
                ('flow.sql', 'snooze'), ('work.sql', 'release'), ('work.sql', 'complete'),
                ('work.sql', 'complete_many'), ('work.sql', 'fail')):
    for s in find(f, r'^CREATE FUNCTION jq\.' + name + r'\(', True):
        w(s + '\n')
    for s in find(f, r'^COMMENT ON FUNCTION jq\.' + name + r'\('):
        w(s + '\n')
w('-- Changed comments.\n')
for s in find('maintenance.sql', r'^COMMENT ON FUNCTION jq\.tick\('):
    w(s + '\n')
for s in find('maintenance.sql', r'^COMMENT ON FUNCTION jq\.status\('):
    w(s + '\n')
REVOKE_OTHERS = """DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT c.oid::regclass AS rel, pg_catalog.format('jq.%I', c.relname) AS label,
                    c.relkind, a.grantee::regrole AS grantee
             FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
             WHERE c.relnamespace = 'jq'::regnamespace AND c.relkind IN ('r', 'S', 'v')
               AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        -- WARNING, not NOTICE: PostgreSQL raises client_min_messages to WARNING while it runs
        -- an extension script, so a NOTICE would never reach the DBA.
        RAISE WARNING 'jq 0.2.0: revoking the privileges of role % on %; give it queues with jq.grant', r.grantee, r.label;
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s',
            CASE r.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, r.rel, r.grantee);
    END LOOP;
END $$;

"""
w('''-- 0.1.0 granted nothing and told DBAs to give their roles USAGE on jq and privileges on its
-- tables. In 0.2.0 the tables change only through the functions and payloads are visible only
-- per queue: take back every privilege a role other than the owner holds on jq's tables, views
-- and sequences (jq_admin's SELECT is granted again below). Give those roles queues with
-- jq.grant (docs/upgrades.md).
''' + REVOKE_OTHERS)
# jq.jobs in 0.2.0's column order (sql/schema.sql: less WAL per transition). After the revoke
# above, so that the WARNING names the roles that had privileges on the old table.
cols = re.findall(r'^    ([a-z_]+)\s+(?:bigint|integer|text|jq\.job_state|timestamptz|boolean|interval|uuid|jsonb)\b',
                  find('schema.sql', r'^CREATE TABLE jq\.jobs ')[0], re.M)
assert len(cols) == 25 and cols[0] == 'id', cols
collist = ', '.join(cols)
w('''-- jq.jobs is rebuilt with its columns in 0.2.0's order (sql/schema.sql says why: a claim or a
-- completion logs only the columns it writes). Every row is copied with its id, state, lease
-- token and lease; the id sequence is kept. Workers and producers wait on the table's lock
-- for as long as the copy takes.
LOCK TABLE jq.jobs IN ACCESS EXCLUSIVE MODE;
DROP VIEW jq.queue_stats;
-- History: the table keeps the executions that did not complete their job; a completed one is
-- its job row (sql/schema.sql). The rows of completions whose job row is still there go (the
-- view jq.executions shows them from the job); those of pruned jobs stay, until
-- history_retention.
-- The rename needs jq.executions' ACCESS EXCLUSIVE lock while this holds jq.jobs'. A 0.1.0
-- jq.complete running a cached plan locks jq.executions first and then waits for jq.jobs,
-- behind this script: waiting for it would be a deadlock, and the deadlock check would as
-- likely abort the upgrade as the worker (seen in a test run). So the upgrade cancels the
-- statements of exactly those sessions (they hold a lock on jq.executions and wait for this
-- one; their calls fail with 57014 and their clients retry) and queues its own lock request at
-- once, before their retries, which then wait behind it. It waits 200 ms per round for the
-- sessions that were not waiting for it to finish.
DO $$
DECLARE
    v_rel     regclass := 'jq.executions'::regclass;
    v_timeout text := pg_catalog.current_setting('lock_timeout');
BEGIN
    FOR i IN 1 .. 50 LOOP
        PERFORM pg_catalog.pg_cancel_backend(l.pid)
        FROM pg_catalog.pg_locks l
        WHERE l.relation = v_rel AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
          AND pg_catalog.pg_backend_pid() = ANY (pg_catalog.pg_blocking_pids(l.pid));
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', '200ms', true);
            LOCK TABLE jq.executions IN ACCESS EXCLUSIVE MODE;
            PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- the setting is rolled back with the block
        END;
    END LOOP;
    LOCK TABLE jq.executions IN ACCESS EXCLUSIVE MODE;  -- after ~10 s: wait like any DDL
END $$;
ALTER TABLE jq.executions RENAME TO execution_log;
ALTER INDEX jq.executions_pkey RENAME TO execution_log_pkey;
ALTER INDEX jq.executions_finished_brin RENAME TO execution_log_finished_brin;
DELETE FROM jq.execution_log e USING jq.jobs j
WHERE e.outcome = 'completed' AND j.id = e.job_id AND j.claims = e.seq AND j.state = 'completed';
ALTER SEQUENCE jq.jobs_id_seq OWNED BY NONE;
ALTER TABLE jq.jobs RENAME TO jobs_0_1_0;
-- Free the names the new table's constraints take (constraint names are unique per schema).
ALTER TABLE jq.jobs_0_1_0 DROP CONSTRAINT jobs_pkey, DROP CONSTRAINT jobs_max_attempts_check;
DROP INDEX jq.jobs_claim_idx, jq.jobs_scheduled_idx, jq.jobs_running_idx, jq.jobs_idempotency_idx,
           jq.jobs_blocked_idx, jq.jobs_aging_idx, jq.jobs_finished_idx, jq.jobs_dead_idx;

''')
sch_all = files['schema.sql']
i = next(k for k, st in enumerate(sch_all) if body(st).startswith('CREATE TABLE jq.jobs '))
j = next(k for k, st in enumerate(sch_all) if body(st).startswith('CREATE TABLE jq.execution_log'))
for st in sch_all[i:j]:
    w(st + '\n')
    if body(st).startswith('CREATE TABLE jq.jobs '):
        w(f'''INSERT INTO jq.jobs ({collist})
SELECT {collist}
FROM jq.jobs_0_1_0;
-- Out of the extension first: that also takes the old table out of pg_extension.extconfig (the
-- list pg_dump reads), which DROP TABLE alone would leave pointing at a dropped table.
ALTER EXTENSION jq DROP TABLE jq.jobs_0_1_0;
DROP TABLE jq.jobs_0_1_0;

''')
for st in find('schema.sql', r"^SELECT pg_catalog\.pg_extension_config_dump\('jq\.jobs'"):
    w(st + '\n')
w('ANALYZE jq.jobs;\n\n')
for st in find('schema.sql', r'^COMMENT ON TABLE jq\.execution_log'):
    w(st + '\n')
for st in find('schema.sql', r'^CREATE VIEW jq\.executions'):
    w(st + '\n')
for pat in (r'^COMMENT ON VIEW jq\.executions', r'^CREATE FUNCTION jq\._executions_insert\(',
            r'^COMMENT ON FUNCTION jq\._executions_insert\(', r'^CREATE TRIGGER executions_insert '):
    for st in find('schema.sql', pat):
        w(st + '\n')
w('''-- Again for the relations this script created: default privileges a DBA set on schema jq
-- (ALTER DEFAULT PRIVILEGES IN SCHEMA jq GRANT SELECT ON TABLES ..., as 0.1.0's docs invited)
-- gave them to the new jq.jobs and jq.executions.
''' + REVOKE_OTHERS)
for st in find('maintenance.sql', r'^CREATE VIEW jq\.queue_stats'):
    w(st + '\n')
for st in find('maintenance.sql', r'^COMMENT ON VIEW jq\.queue_stats'):
    w(st + '\n')
w('-- The privilege policy (sql/security.sql, whole).\n')
for s in files['security.sql']:
    w(s + '\n')
open(ROOT + 'jq--0.1.0--0.2.0.sql', 'w').write(''.join(out))
print('ok', len(''.join(out)))
