//! A caller's search_path cannot make jq run its objects: the low-privilege trigger attack, the hot functions.

use jq_pg_test::{broken, sabotage, Client, TestDb};
use postgres::error::SqlState;

use super::Roles;

/// The hot one-queue claim, as sabotage names it.
pub(crate) const CLAIM: &str = "jq.claim(text,text,integer,interval,interval,bigint)";

/// The trigger attack (as reported against pgmq on Supabase): a trigger owned by a low-privilege role enqueues, and a
/// caller's search_path cannot shadow what jq's functions call. The attack: a role that may
/// create schemas defines `evil.>(timestamptz, timestamptz)`, which jq.enqueue uses, and puts
/// its schema before pg_catalog; an unpinned SECURITY DEFINER function would run it as the
/// owner (a superuser). Negative control `unpinned_search_path` shows exactly that.
#[test]
fn q16_trigger_enqueue_as_a_low_privilege_role_and_search_path_attack() {
    let roles;
    let db = TestDb::new("sec_q16");
    let mut c = db.connect();
    let mut a = jq_pg_test::admin();
    roles = Roles::new(&mut a, "secq16", &[("app", "NOLOGIN"), ("web", "LOGIN")]);
    let (app, web) = (roles.get("app").to_string(), roles.get("web").to_string());
    a.batch_execute(&format!("GRANT {app} TO {web}")).unwrap();
    c.batch_execute(&format!(
        "SELECT jq.create_queue('q');
         SELECT jq.grant('q', '{app}', 'enqueue');
         GRANT CREATE ON DATABASE {db} TO {web};
         CREATE TABLE public.orders (id int);
         GRANT INSERT ON public.orders TO {web};
         CREATE TABLE public.pwned (who text);
         GRANT INSERT, SELECT ON public.pwned TO PUBLIC;
         CREATE FUNCTION public.orders_job() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM jq.enqueue('q', jsonb_build_object('order', NEW.id)); RETURN NEW; END $$;
         ALTER FUNCTION public.orders_job() OWNER TO {app};
         CREATE TRIGGER orders_job AFTER INSERT ON public.orders
             FOR EACH ROW EXECUTE FUNCTION public.orders_job();",
        db = db.name
    ))
    .unwrap();
    if broken("unpinned_search_path") {
        c.batch_execute(
            "ALTER FUNCTION jq.enqueue(text,jsonb,text,timestamptz,interval,integer,integer,text,text,bigint) RESET search_path",
        )
        .unwrap();
    }
    let mut t = c.transaction().unwrap();
    t.batch_execute(&format!("SET LOCAL ROLE {web}")).unwrap();
    t.batch_execute("INSERT INTO public.orders VALUES (1)").unwrap();
    t.query_one("SELECT jq.enqueue('q', '{\"direct\": true}')", &[]).unwrap();
    t.batch_execute(
        "CREATE SCHEMA evil;
         CREATE FUNCTION evil.gt(a timestamptz, b timestamptz) RETURNS boolean LANGUAGE sql AS
             $$ INSERT INTO public.pwned VALUES (current_user) RETURNING a OPERATOR(pg_catalog.>) b $$;
         CREATE OPERATOR evil.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.gt);
         CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '2000-01-01'::timestamptz $$;
         SET LOCAL search_path = evil, pg_catalog, public, pg_temp;",
    )
    .unwrap();
    t.query_one("SELECT jq.enqueue('q', '{\"after_attack\": true}')", &[]).unwrap();
    for denied in ["SELECT * FROM jq.jobs", "SELECT * FROM jq.claim('q', 'w')", "SELECT jq.pause('q')"] {
        let e = t.batch_execute(&format!("SAVEPOINT s; {denied}")).unwrap_err();
        assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{denied}");
        t.batch_execute("ROLLBACK TO SAVEPOINT s").unwrap();
    }
    let pwned: Vec<String> = t.query("SELECT who FROM public.pwned", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    t.commit().unwrap();
    assert!(pwned.is_empty(), "the caller's operator ran inside jq.enqueue as {pwned:?}");
    let jobs: Vec<String> = c
        .query("SELECT payload::text FROM jq.jobs WHERE queue = 'q' AND created_at > '2001-01-01' ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(jobs, vec![r#"{"order": 1}"#, r#"{"direct": true}"#, r#"{"after_attack": true}"#]);
}

/// jq.claim and jq.complete run as the owner with the caller's search_path (no SET clause:
/// sql/claim.sql's head), so every name in them, and in the internal SQL functions that run inside
/// them with that search_path (jq._authorize's jq._denial and jq._may,
/// jq._interval_fields_nonnegative), must be schema-qualified. A worker role
/// that may create schemas shadows every pg_catalog operator of the comparison and arithmetic
/// families (=, <>, <, >, <=, >=, +, -, *, /, ||, LIKE and regular-expression matches) on
/// concrete types, and the enum comparisons on jq.job_state, with operators of its own that
/// raise, puts its schema before pg_catalog, and defines temporary domains named text, timestamptz, oid, uuid, jsonb and regrole (pg_temp is
/// searched first for types when the search_path does not name it), plus count(*). Then, from a
/// new connection (so that plpgsql compiles the functions under that search_path), these paths
/// of claim and complete run as usual: one job (hinted and not), a batch, a batch that takes
/// the rest from below the hint's priority, an explicit lease, a capped queue, a rate-limited
/// queue, a keyed job whose completion fills its key's slot, long-polls that time out (empty
/// queue, capped queue at its cap, rate-limited queue with no token), a paused queue, bad
/// arguments (22023), a queue the role may not use (42501), an unknown queue (42704), a stale
/// lease token. None of the role's objects may run. The internal functions they call on these
/// paths that are not qualified keep their own search_path (PINNED_CALLEES, checked by the
/// catalog matrix above).
/// Negative controls (each seen failing): `unqualified_operator` (jq.claim's queue-row
/// join `q.name = claim.queue` unqualified, in its two one-job copies): "evil operator =(text, text)
/// ran"; `unqualified_type` (jq.claim's v_now declared `timestamptz`): the rate-limited claim
/// fails assigning a timestamp to the caller's temporary domain; `unqualified_may` (jq._may's
/// privilege test unqualified): "evil operator =(text, text) ran" in the first claim, through
/// jq._authorize; `unqualified_complete` (jq.complete's test of the id unqualified): "evil
/// operator =(bigint, bigint) ran" in the first completion; `unpinned_callees` (jq._unknown_queue
/// and jq._rate_next_token without their search_path): the rate-limited long-poll fails
/// assigning a timestamp to the caller's temporary domain timestamptz.
#[test]
fn hot_functions_ignore_the_callers_search_path() {
    let roles;
    let db = TestDb::new("sec_path");
    let mut c = db.connect();
    let mut a = jq_pg_test::admin();
    roles = Roles::new(&mut a, "secpath", &[("w", "NOLOGIN")]);
    let w = roles.get("w").to_string();
    c.batch_execute(&format!(
        "GRANT jq_worker TO {w};
         GRANT CREATE ON DATABASE {db} TO {w};
         SELECT jq.create_queue('h');
         SELECT jq.create_queue('hc', max_concurrency => 2);
         SELECT jq.create_queue('hr');
         SELECT jq.alter_queue('hr', rate_limit => 100, rate_period => '1 second', burst => 10);
         SELECT jq.create_queue('hk', key_concurrency => 1);
         SELECT jq.create_queue('he');
         SELECT jq.create_queue('hp', paused => true);
         SELECT jq.create_queue('other');
         SELECT jq.create_queue('hr1');
         SELECT jq.create_queue('hc1', max_concurrency => 1);
         SELECT jq.alter_queue('hr1', rate_limit => 1, rate_period => '1 hour', burst => 1);
         SELECT jq.create_queue('hv');
         SELECT jq.grant(q, '{w}', 'work') FROM unnest(ARRAY['h', 'hc', 'hr', 'hk', 'he', 'hp', 'hr1', 'hv', 'hc1']) q;
         SELECT count(jq.enqueue('h', jsonb_build_object('n', g))) FROM generate_series(1, 20) g;
         SELECT count(jq.enqueue(q, '{{}}')) FROM unnest(ARRAY['hc', 'hr', 'hp', 'other', 'hr1', 'hr1', 'hc1', 'hc1']) q;
         SELECT count(jq.enqueue('hv', '{{}}', priority => p)) FROM unnest(ARRAY[5, 5, 0, 0]) p;
         SELECT jq.enqueue('hk', '{{\"k\": 1}}', concurrency_key => 'k');
         SELECT jq.enqueue('hk', '{{\"k\": 2}}', concurrency_key => 'k');",
        db = db.name
    ))
    .unwrap();
    if broken("unqualified_operator") {
        sabotage(&mut c, CLAIM, "WHERE q.name OPERATOR(pg_catalog.=) claim.queue", "WHERE q.name = claim.queue", 2);
    }
    if broken("unqualified_type") {
        sabotage(&mut c, CLAIM, "v_now      pg_catalog.timestamptz;", "v_now      timestamptz;", 1);
    }
    if broken("unqualified_complete") {
        sabotage(&mut c, "jq.complete(bigint,uuid,jsonb)", "WHERE j.id OPERATOR(pg_catalog.=) complete.id",
                 "WHERE j.id = complete.id", 1);
    }
    if broken("unpinned_callees") {
        c.batch_execute(
            "ALTER FUNCTION jq._unknown_queue(text) RESET search_path;
             ALTER FUNCTION jq._rate_next_token(text) RESET search_path;",
        )
        .unwrap();
    }
    if broken("unqualified_may") {
        sabotage(&mut c, "jq._may(oid,text,text)", "g.privilege OPERATOR(pg_catalog.=) _may.privilege",
                 "g.privilege = _may.privilege", 1);
    }
    let mut h = db.connect();
    h.batch_execute(&format!("SET ROLE {w}")).unwrap();
    h.batch_execute(
        r#"CREATE SCHEMA evil;
        DO $$
        DECLARE
            o record;
            n integer := 0;
        BEGIN
            FOR o IN
                SELECT op.oprname, op.oprleft::regtype AS l, op.oprright::regtype AS r, op.oprresult::regtype AS res
                FROM pg_catalog.pg_operator op
                JOIN pg_catalog.pg_type tl ON tl.oid = op.oprleft
                JOIN pg_catalog.pg_type tr ON tr.oid = op.oprright
                WHERE op.oprnamespace = 'pg_catalog'::regnamespace
                  AND op.oprname IN ('=', '<>', '<', '>', '<=', '>=', '+', '-', '*', '/', '||', '~~', '!~~',
                                     '~', '!~', '~*', '!~*')
                  AND tl.typtype IN ('b', 'r', 'm') AND tr.typtype IN ('b', 'r', 'm')
                  AND tl.typcategory <> 'P' AND tr.typcategory <> 'P'
                UNION ALL
                SELECT o2, 'jq.job_state'::regtype, 'jq.job_state'::regtype, 'boolean'::regtype
                FROM unnest(ARRAY['=', '<>', '<', '>', '<=', '>=']) o2
            LOOP
                n := n + 1;
                EXECUTE format('CREATE FUNCTION evil.op%s(a %s, b %s) RETURNS %s LANGUAGE plpgsql AS '
                               '$f$BEGIN RAISE EXCEPTION %L; END$f$',
                               n, o.l, o.r, o.res, format('evil operator %s(%s, %s) ran', o.oprname, o.l, o.r));
                EXECUTE format('CREATE OPERATOR evil.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = evil.op%s)',
                               o.oprname, o.l, o.r, n);
            END LOOP;
            RAISE NOTICE '% evil operators', n;
        END $$;
        CREATE FUNCTION evil.cnt(bigint) RETURNS bigint LANGUAGE plpgsql AS
            $f$BEGIN RAISE EXCEPTION 'evil count(*) ran'; END$f$;
        CREATE AGGREGATE evil.count(*) (SFUNC = evil.cnt, STYPE = bigint, INITCOND = '0');
        CREATE DOMAIN pg_temp.text AS integer;
        CREATE DOMAIN pg_temp.timestamptz AS integer;
        CREATE DOMAIN pg_temp.oid AS integer;
        CREATE DOMAIN pg_temp.uuid AS integer;
        CREATE DOMAIN pg_temp.jsonb AS integer;
        CREATE DOMAIN pg_temp.regrole AS integer;
        SET search_path = evil, pg_catalog, public;"#,
    )
    .unwrap();
    let evil_ops: i64 = h.query_one("SELECT pg_catalog.count(*) FROM pg_catalog.pg_operator WHERE oprnamespace OPERATOR(pg_catalog.=) 'evil'::pg_catalog.regnamespace", &[]).unwrap().get(0);
    assert!(evil_ops > 300, "only {evil_ops} evil operators");
    // (id, lease_token::pg_catalog.text): the caller's own SQL avoids its operators and types too.
    let claim = |h: &mut Client, args: &str| -> Result<Vec<(i64, String)>, postgres::Error> {
        h.query(&format!("SELECT id, lease_token::pg_catalog.text FROM jq.claim({args})"), &[])
            .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    };
    let complete = |h: &mut Client, id: i64, token: &str| -> bool {
        h.query_one(&format!("SELECT jq.complete({id}, '{token}')"), &[])
            .unwrap_or_else(|e| panic!("jq.complete({id}): {}", db_message(&e)))
            .get(0)
    };
    // Leases held to the end: the capped queue at its cap, the rate-limited one out of tokens.
    for (args, expect) in [("'hc1', 'w'", 1), ("'hr1', 'w'", 1)] {
        let jobs = claim(&mut h, args).unwrap_or_else(|e| panic!("jq.claim({args}): {}", db_message(&e)));
        assert_eq!(jobs.len(), expect, "jq.claim({args})");
    }
    let mut claimed = 0;
    for (args, expect) in [
        ("'h', 'w'", 1),
        ("'h', 'w'", 1), // after a claim: the queue has a claim-start hint
        ("'h', 'w', 3", 3),
        ("'h', 'w', lease => '1 minute'", 1),
        ("'hc', 'w'", 1),
        ("'hr', 'w'", 1),
        ("'hk', 'w'", 1), // the key's first job; its completion makes the second ready
        ("'hk', 'w'", 1),
        ("'he', 'w', wait => '0.1 s'", 0),
        ("'hc1', 'w', wait => '0.1 s'", 0), // long-poll on a capped queue at its cap
        ("'hr1', 'w', wait => '0.1 s'", 0), // long-poll on a rate-limited queue with no token
        ("'hp', 'w'", 0),
        ("'hv', 'w'", 1),    // a priority-5 job; the hint is now at priority 5
        ("'hv', 'w', 3", 3), // the other one from the hint, the rest from below it (v_below)
    ] {
        let jobs = claim(&mut h, args).unwrap_or_else(|e| panic!("jq.claim({args}): {}", db_message(&e)));
        assert_eq!(jobs.len(), expect, "jq.claim({args})");
        for (id, token) in &jobs {
            let stale = "00000000-0000-0000-0000-000000000000";
            assert!(!complete(&mut h, *id, stale), "jq.complete({id}) with a stale token");
            assert!(complete(&mut h, *id, token), "jq.complete({id})");
            claimed += 1;
        }
    }
    assert_eq!(claimed, 14);
    for (args, state) in [
        ("'h', 'w', 0", SqlState::INVALID_PARAMETER_VALUE),
        ("'h', 'w', lease => '-1 second'", SqlState::INVALID_PARAMETER_VALUE),
        ("'h', 'w', wait => '2 hours'", SqlState::INVALID_PARAMETER_VALUE),
        ("'other', 'w'", SqlState::INSUFFICIENT_PRIVILEGE),
    ] {
        let e = claim(&mut h, args).unwrap_err();
        assert_eq!(e.code(), Some(&state), "jq.claim({args}): {}", db_message(&e));
    }
    // With a grant on every queue, an unknown queue gets past the grant check to 42704
    // (jq._unknown_queue and the name check it calls).
    c.batch_execute(&format!("SELECT jq.grant('*', '{w}', 'work')")).unwrap();
    let e = claim(&mut h, "'no_such_queue', 'w'").unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::UNDEFINED_OBJECT), "unknown queue: {}", db_message(&e));
    drop(h);
    let done: i64 = c.query_one("SELECT count(*) FROM jq.jobs WHERE state = 'completed'", &[]).unwrap().get(0);
    assert_eq!(done, 14);
    drop(c);
    drop(db);
    drop(roles);
}

/// The server's message of a database error (postgres::Error's Display says only "db error").
fn db_message(e: &postgres::Error) -> String {
    e.as_db_error().map(|d| d.message().to_string()).unwrap_or_else(|| e.to_string())
}
