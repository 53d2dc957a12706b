//! Least privilege (docs/security.md, sql/grants.sql): the three roles, per-queue grants,
//! SECURITY DEFINER functions with a pinned search_path, and the low-privilege trigger attack (see below).
//!
//! The matrix tests take every function, table, view and sequence of schema jq from the catalog,
//! not from a list kept here: a new function fails them until it is classified below, and a new
//! function that takes a `caller_ticket` (names a queue) fails until it has a call in
//! [`queue_call`] that proves its per-queue check.
//!
//! Negative controls (each seen failing; run with `JQ_TEST_BREAK=<name>`):
//! - `no_queue_check`: jq.pause without its per-queue check; the behaviour matrix fails.
//! - `invoker_complete`: jq.complete SECURITY INVOKER; the catalog matrix fails.
//! - `public_execute`: EXECUTE on jq.enqueue granted to PUBLIC; the catalog matrix fails.
//! - `unpinned_search_path`: jq.enqueue without its search_path; the trigger attack runs as the owner.
//! - `leaky_view`: jq.queue_stats without security_barrier; a reader's function sees every queue.
//! - `unqualified_operator`, `unqualified_type`, `unqualified_may`, `unqualified_complete`,
//!   `unpinned_callees` (the last: two callees without their own search_path):
//!   jq.claim, jq._may (which jq.claim reaches through jq._authorize_queue) or jq.complete with one
//!   operator or one variable's type left to the caller's search_path; the hostile
//!   search_path test fails.

use jq_pg_test::{broken, sabotage, Client, TestDb};
use postgres::error::SqlState;

/// Cluster-wide roles made for one test, dropped after its database.
struct Roles {
    names: Vec<String>,
}

impl Roles {
    fn new(c: &mut Client, tag: &str, specs: &[(&str, &str)]) -> Roles {
        let mut names = Vec::new();
        for (name, options) in specs {
            let full = format!("jqt_{tag}_{}_{name}", std::process::id());
            c.batch_execute(&format!("DROP ROLE IF EXISTS {full}")).unwrap();
            c.batch_execute(&format!("CREATE ROLE {full} {options}")).unwrap();
            names.push(full);
        }
        Roles { names }
    }

    fn get(&self, short: &str) -> &str {
        self.names.iter().find(|n| n.ends_with(&format!("_{short}"))).expect("role")
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let mut a = jq_pg_test::admin();
        for n in &self.names {
            let _ = a.batch_execute(&format!("DROP ROLE IF EXISTS {n}"));
        }
    }
}

/// The roles a function's EXECUTE is meant for (sql/grants.sql), by function name; `None`:
/// not classified yet.
const EVERYONE: &[&str] = &["jq_admin", "jq_producer", "jq_worker", "queue_admin"];

fn expected_execute(proname: &str) -> Option<&'static [&'static str]> {
    const PRODUCE: &[&str] = &["jq_admin", "jq_producer", "queue_admin"];
    const WORK: &[&str] = &["jq_admin", "jq_worker", "queue_admin"];
    const QUEUE_ADMIN: &[&str] = &["jq_admin", "queue_admin"];
    const ADMIN: &[&str] = &["jq_admin"];
    const NOBODY: &[&str] = &[];
    Some(match proname {
        "_ticket" | "status" | "cron_next" | "cron_fires" | "backoff_seconds" | "max_payload_bytes"
        | "max_error_length" | "max_claim_batch" | "cron_log_retention" | "cron_misfire_grace"
        | "cron_max_catchup" => EVERYONE,
        "enqueue" | "enqueue_many" => PRODUCE,
        "claim" | "complete" | "complete_many" | "fail" | "heartbeat" | "release" | "snooze" => WORK,
        "alter_queue" | "pause" | "resume" | "cancel" | "retry" | "schedule" | "alter_schedule"
        | "unschedule" => QUEUE_ADMIN,
        // drop_queue locks jq.jobs against writes until its transaction ends: global admins only.
        "create_queue" | "drop_queue" | "tick" | "cron_tick" | "grant" | "revoke" => ADMIN,
        n if n.starts_with('_') => NOBODY,
        _ => return None,
    })
}

/// Functions that run as the owner: everything a role calls that reads or writes jq's tables,
/// i.e. every function granted to some roles but not to all (those are pure helpers and the
/// caller ticket, which must run as the caller), plus status.
fn must_be_definer(proname: &str) -> bool {
    matches!(
        expected_execute(proname),
        Some(r) if (!r.is_empty() && r != EVERYONE) || proname == "status"
    )
}

/// SECURITY DEFINER functions with no SET clause (sql/claim.sql's head: the settings' save and
/// restore cost the hot path, docs/BENCHMARKS.md): every name in them is schema-qualified, operators included,
/// which [`hot_functions_ignore_the_callers_search_path`] checks with a hostile search_path.
const UNPINNED_DEFINERS: &[&str] = &[CLAIM, "jq.complete(bigint,uuid,jsonb)"];

/// The plpgsql and non-inlined SQL functions those two call on their slower paths: unqualified
/// inside, so they must keep their own search_path (SET in their CREATE FUNCTION).
const PINNED_CALLEES: &[&str] = &["jq._wait_deadline(interval)", "jq._unknown_queue(text)",
                                  "jq._rate_tokens(text,timestamp with time zone)", "jq._rate_next_token(text)",
                                  "jq._key_fill(text,text,integer)",
                                  "jq._claim_batch(text,text,integer,interval,boolean,bigint,boolean)",
                                  "jq._claim_bad_arguments(integer,text,interval)",
                                  "jq._claim_gate(text,integer,boolean,integer,integer)",
                                  "jq._claim_sleep(timestamp with time zone,timestamp with time zone)"];

/// The hot one-queue claim, as sabotage names it.
const CLAIM: &str = "jq.claim(text,text,integer,interval,interval,bigint)";

/// Per-queue roles of the behaviour matrix and what jq.grant gave them.
const TENANTS: &[(&str, &[(&str, &str)])] = &[
    ("enq", &[("qa", "enqueue")]),
    ("work", &[("qa", "work")]),
    ("qadm", &[("qa", "admin")]),
    ("star", &[("*", "work")]),
    ("viagroup", &[]), // member of role "grp", which has enqueue on qa
    ("nobody", &[]),
];

fn set_up_tenants(c: &mut Client, tag: &str) -> Roles {
    let mut a = jq_pg_test::admin();
    let roles = Roles::new(
        &mut a,
        tag,
        &[
            ("enq", "LOGIN"),
            ("work", "LOGIN"),
            ("qadm", "LOGIN"),
            ("star", "LOGIN"),
            ("grp", "NOLOGIN"),
            ("viagroup", "LOGIN"),
            ("nobody", "LOGIN"),
            ("admin", "LOGIN IN ROLE jq_admin"),
        ],
    );
    a.batch_execute(&format!("GRANT {} TO {}", roles.get("grp"), roles.get("viagroup"))).unwrap();
    c.batch_execute("SELECT jq.create_queue('qa'); SELECT jq.create_queue('qb');").unwrap();
    for (short, grants) in TENANTS {
        for (q, p) in *grants {
            c.execute("SELECT jq.grant($1, $2::text::regrole, $3)", &[q, &roles.get(short), p]).unwrap();
        }
    }
    c.execute("SELECT jq.grant('qa', $1::text::regrole, 'enqueue')", &[&roles.get("grp")]).unwrap();
    roles
}

/// Grants of a tenant (or "admin") for `queue`: whether it may exercise `privilege`.
fn tenant_may(short: &str, queue: &str, privilege: &str) -> bool {
    match short {
        "admin" => return true,
        "viagroup" => return queue == "qa" && privilege == "enqueue",
        _ => {}
    }
    let grants = TENANTS.iter().find(|(s, _)| *s == short).unwrap().1;
    grants.iter().any(|(q, p)| {
        (*q == queue || *q == "*") && (*p == privilege || *p == "admin")
    })
}

/// One valid call of a function that takes a caller_ticket, on `queue`, and the privilege it
/// needs ("global": only jq_admin). Jobs and schedules it acts on were made by `prepare`.
fn queue_call(regprocedure: &str, queue: &str, ids: &Ids) -> Option<(String, &'static str)> {
    let q = queue;
    let (ready, dead) = if q == "qa" { (ids.ready_a, ids.dead_a) } else { (ids.ready_b, ids.dead_b) };
    Some(match regprocedure.split('(').next().unwrap().replace('"', "").as_str() {
        "jq.enqueue" => (format!("SELECT jq.enqueue('{q}', '{{}}')"), "enqueue"),
        "jq.enqueue_many" => (format!("SELECT jq.enqueue_many('{q}', '[1, 2]')"), "enqueue"),
        "jq.claim" if regprocedure.contains("text[]") => {
            (format!("SELECT * FROM jq.claim(ARRAY['{q}'], 'w')"), "work")
        }
        "jq.claim" => (format!("SELECT * FROM jq.claim('{q}', 'w')"), "work"),
        "jq.alter_queue" => (format!("SELECT jq.alter_queue('{q}', max_attempts => 7)"), "admin"),
        "jq.drop_queue" => (format!("SELECT jq.drop_queue('{q}', force => true)"), "global"),
        "jq.pause" => (format!("SELECT jq.pause('{q}')"), "admin"),
        "jq.resume" => (format!("SELECT jq.resume('{q}')"), "admin"),
        "jq.cancel" => (format!("SELECT jq.cancel({ready})"), "admin"),
        "jq.retry" => (format!("SELECT jq.retry({dead})"), "admin"),
        "jq.schedule" => (format!("SELECT jq.schedule('new_{q}', '0 * * * *', '{q}')"), "admin"),
        "jq.alter_schedule" => (format!("SELECT jq.alter_schedule('s_{q}', priority => 3)"), "admin"),
        "jq.unschedule" => (format!("SELECT jq.unschedule('s_{q}')"), "admin"),
        "jq.grant" => (format!("SELECT jq.grant('{q}', 'jq_worker', 'work')"), "global"),
        _ => return None,
    })
}

struct Ids {
    ready_a: i64,
    ready_b: i64,
    dead_a: i64,
    dead_b: i64,
}

/// A ready and a dead job in each queue and a schedule on each, made through jq's functions.
fn prepare(c: &mut Client) -> Ids {
    let mut one = |sql: &str| -> i64 { c.query_one(sql, &[]).unwrap().get(0) };
    let ready_a = one("SELECT jq.enqueue('qa', '{\"n\":1}')");
    let ready_b = one("SELECT jq.enqueue('qb', '{\"secret\":\"b\"}')");
    let mut dead = |q: &str| -> i64 {
        c.query_one(&format!("SELECT jq.enqueue('{q}', '{{}}', kind => 'd', max_attempts => 1, priority => 100)"), &[])
            .unwrap();
        let row = c.query_one(&format!("SELECT id, lease_token FROM jq.claim('{q}', 'prep')"), &[]).unwrap();
        let (id, token): (i64, uuid::Uuid) = (row.get(0), row.get(1));
        let s: String = c.query_one("SELECT jq.fail($1, $2, 'x')::text", &[&id, &token]).unwrap().get(0);
        assert_eq!(s, "dead");
        id
    };
    let dead_a = dead("qa");
    let dead_b = dead("qb");
    c.batch_execute("SELECT jq.schedule('s_qa', '0 * * * *', 'qa'); SELECT jq.schedule('s_qb', '0 * * * *', 'qb');")
        .unwrap();
    Ids { ready_a, ready_b, dead_a, dead_b }
}

/// Runs `sql` as `role` in a transaction that is rolled back; Ok or the SQLSTATE.
fn as_role(c: &mut Client, role: &str, sql: &str) -> Result<(), String> {
    let mut t = c.transaction().unwrap();
    t.batch_execute(&format!("SET LOCAL ROLE {role}")).unwrap();
    let r = t.batch_execute(sql).map_err(|e| {
        e.code().map(|c| c.code().to_string()).unwrap_or_else(|| e.to_string())
    });
    let _ = t.rollback();
    r
}

#[test]
fn every_function_and_relation_grants_exactly_what_sql_security_says() {
    let db = TestDb::new("sec_catalog");
    let mut c = db.connect();
    let mut a = jq_pg_test::admin();
    let roles = Roles::new(&mut a, "seccat", &[("qadm", "LOGIN"), ("nobody", "LOGIN")]);
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    c.execute("SELECT jq.grant('q', $1::text::regrole, 'admin')", &[&roles.get("qadm")]).unwrap();
    if broken("invoker_complete") {
        c.batch_execute("ALTER FUNCTION jq.complete(bigint, uuid, jsonb) SECURITY INVOKER").unwrap();
    }
    if broken("public_execute") {
        c.batch_execute(
            "GRANT EXECUTE ON FUNCTION jq.enqueue(text,jsonb,text,timestamptz,interval,integer,integer,text,text,bigint) TO PUBLIC",
        )
        .unwrap();
    }
    let role_of = |r: &str| -> String {
        match r {
            "queue_admin" => roles.get("qadm").to_string(),
            "nobody" => roles.get("nobody").to_string(),
            other => other.to_string(),
        }
    };
    let all_roles = ["jq_admin", "jq_producer", "jq_worker", "queue_admin", "nobody"];
    let mut problems = Vec::new();

    let functions = c
        .query(
            "SELECT p.oid::regprocedure::text, p.proname::text, p.prosecdef,
                    coalesce(array_to_string(p.proconfig, ';'), ''),
                    aclexplode_public.public_execute
               FROM pg_proc p
               CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) x
                                                  WHERE x.grantee = 0) AS public_execute) aclexplode_public
              WHERE p.pronamespace = 'jq'::regnamespace ORDER BY 1",
            &[],
        )
        .unwrap();
    assert!(functions.len() > 60, "only {} functions found", functions.len());
    for f in &functions {
        let (sig, name, secdef, config, public): (String, String, bool, String, bool) =
            (f.get(0), f.get(1), f.get(2), f.get(3), f.get(4));
        let Some(expected) = expected_execute(&name) else {
            problems.push(format!("{sig}: not classified in expected_execute (tests/security.rs)"));
            continue;
        };
        if public {
            problems.push(format!("{sig}: EXECUTE granted to PUBLIC"));
        }
        for r in all_roles {
            let has: bool = c
                .query_one("SELECT has_function_privilege($1, $2::text::regprocedure, 'EXECUTE')", &[&role_of(r), &sig])
                .unwrap()
                .get(0);
            if has != expected.contains(&r) {
                problems.push(format!("{sig}: EXECUTE for {r} is {has}, expected {}", !has));
            }
        }
        let definer = must_be_definer(&name);
        if secdef != definer {
            problems.push(format!("{sig}: SECURITY DEFINER is {secdef}, expected {definer}"));
        }
        if UNPINNED_DEFINERS.contains(&sig.as_str()) {
            // qualified throughout instead (hot_functions_ignore_the_callers_search_path)
            if !config.is_empty() {
                problems.push(format!("{sig}: a SET clause ({config}) on a function that must have none"));
            }
        } else if (secdef || PINNED_CALLEES.contains(&sig.as_str()))
            && !config.contains("search_path=pg_catalog, jq, pg_temp")
        {
            problems.push(format!("{sig}: SECURITY DEFINER or called by one without a SET clause, \
                                   and without the pinned search_path ({config})"));
        }
    }

    let relations = c
        .query(
            "SELECT c.oid::regclass::text, c.relkind::text FROM pg_class c
              WHERE c.relnamespace = 'jq'::regnamespace AND c.relkind IN ('r', 'v', 'S') ORDER BY 1",
            &[],
        )
        .unwrap();
    assert!(relations.len() >= 9, "relations: {}", relations.len());
    for rel in &relations {
        let (name, kind): (String, String) = (rel.get(0), rel.get(1));
        let privileges: &[&str] = if kind == "S" {
            &["USAGE", "SELECT", "UPDATE"]
        } else {
            &["SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"]
        };
        for r in all_roles {
            for p in privileges {
                let sql = if kind == "S" {
                    "SELECT has_sequence_privilege($1, $2, $3)"
                } else {
                    "SELECT has_table_privilege($1, $2, $3)"
                };
                let has: bool = c.query_one(sql, &[&role_of(r), &name, p]).unwrap().get(0);
                let expected = *p == "SELECT"
                    && kind != "S"
                    && (r == "jq_admin" || (name == "jq.queue_stats" && r != "nobody"));
                if has != expected {
                    problems.push(format!("{name}: {p} for {r} is {has}, expected {expected}"));
                }
            }
        }
    }
    for r in all_roles {
        let has: bool =
            c.query_one("SELECT has_schema_privilege($1, 'jq', 'USAGE')", &[&role_of(r)]).unwrap().get(0);
        if has != (r != "nobody") {
            problems.push(format!("schema jq: USAGE for {r} is {has}"));
        }
    }
    assert!(problems.is_empty(), "privilege matrix violations:\n{}", problems.join("\n"));
    drop(c);
    drop(db);
    drop(roles);
}

#[test]
fn every_queue_function_checks_the_callers_grant_on_that_queue() {
    let roles;
    let db = TestDb::new("sec_matrix");
    let mut c = db.connect();
    roles = set_up_tenants(&mut c, "secmx");
    let ids = prepare(&mut c);
    if broken("no_queue_check") {
        sabotage(
            &mut c,
            "jq.pause(text,bigint)",
            "PERFORM jq._authorize_queue(pause.caller_ticket, pause.name, 'admin');",
            "PERFORM jq._redeem(pause.caller_ticket);",
            1,
        );
    }
    let functions = ticketed_functions(&mut c);
    assert!(functions.len() >= 14, "functions with caller_ticket: {functions:?}");
    let mut problems = Vec::new();
    let mut checked = 0;
    let shorts: Vec<&str> = TENANTS.iter().map(|(s, _)| *s).chain(["admin"]).collect();
    for f in &functions {
        for queue in ["qa", "qb"] {
            let Some((sql, privilege)) = queue_call(f, queue, &ids) else {
                problems.push(format!("{f}: no call in queue_call (tests/security.rs)"));
                break;
            };
            for short in &shorts {
                let allowed = if privilege == "global" { *short == "admin" } else { tenant_may(short, queue, privilege) };
                let got = as_role(&mut c, roles.get(short), &sql);
                checked += 1;
                match (&got, allowed) {
                    (Ok(()), true) => {}
                    (Err(code), false) if code == "42501" => {}
                    _ => problems.push(format!("{short} on {queue}: {sql} -> {got:?}, allowed: {allowed}")),
                }
            }
        }
    }
    assert!(problems.is_empty(), "per-queue check violations ({checked} calls):\n{}", problems.join("\n"));
    assert!(checked >= 14 * 2 * 7);
}

/// A queue name under a nondeterministic collation is refused (0A000) by every function that
/// takes one, before it reads or writes anything . PL/pgSQL
/// parameters take the caller's collation, which wins over the column's default in `t.name =
/// pause.name`: under a case-insensitive ICU collation `jq.pause('acme')` also paused `ACME`,
/// another tenant's queue, while the grant check looked at `acme` alone. The functions are taken
/// from the catalog as in the per-queue matrix above, so a new one is covered by construction.
/// A deterministic non-default collation ("C") compares exactly and stays accepted.
/// Negative control: JQ_TEST_BREAK=collation_unchecked (jq.pause hands jq._authorize_queue its
/// name under the default collation) fails: the call succeeds and ACME is paused.
#[test]
fn a_nondeterministic_collation_cannot_widen_a_queue_name() {
    let db = TestDb::new("sec_collation");
    let mut c = db.connect();
    if broken("collation_unchecked") {
        sabotage(
            &mut c,
            "jq.pause(text,bigint)",
            "jq._authorize_queue(pause.caller_ticket, pause.name, 'admin')",
            "jq._authorize_queue(pause.caller_ticket, pause.name COLLATE pg_catalog.\"default\", 'admin')",
            1,
        );
    }
    c.batch_execute(
        "CREATE COLLATION jqt_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
         SELECT jq.create_queue('qa'); SELECT jq.create_queue('qb'); SELECT jq.create_queue('QA');
         SELECT jq.create_queue('ACME');",
    )
    .unwrap();
    let ids = prepare(&mut c);
    let functions = ticketed_functions(&mut c);
    // Every quoted name of the call becomes 'qa' COLLATE jqt_ci || '' (explicit, so it wins).
    let widened = "qa' COLLATE jqt_ci || '";
    let mut problems = Vec::new();
    let mut calls: Vec<(String, bool)> = Vec::new();
    for f in &functions {
        let Some((sql, _)) = queue_call(f, widened, &ids) else {
            problems.push(format!("{f}: no call in queue_call"));
            continue;
        };
        // jq.cancel and jq.retry take a job id, no name: nothing to widen.
        let takes_a_name = !(f.starts_with("jq.cancel(") || f.starts_with("jq.retry("));
        calls.push((sql, takes_a_name));
    }
    calls.push(("SELECT jq.revoke('QA' COLLATE jqt_ci, 'jq_worker', 'work')".into(), false));
    for (sql, refused) in &calls {
        let mut t = c.transaction().unwrap();
        let got = t.batch_execute(sql).map_err(|e| e.code().map(|c| c.code().to_string()).unwrap_or_else(|| e.to_string()));
        let _ = t.rollback();
        match (&got, refused) {
            (Err(code), true) if code == "0A000" => {}
            (Ok(()), false) => {}
            _ => problems.push(format!("{sql} -> {got:?}, expected {}", if *refused { "0A000" } else { "success" })),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(calls.len() >= 15, "{calls:?}");

    // The effect the refusal prevents, committed: only qa may be paused, QA untouched.
    let r = c.batch_execute("SELECT jq.pause('acme' COLLATE jqt_ci)");
    assert!(r.is_err(), "pause under a case-insensitive collation was accepted");
    let paused: i64 = c.query_one("SELECT count(*) FROM jq.queues WHERE paused", &[]).unwrap().get(0);
    assert_eq!(paused, 0);
    // revoke compares under the column's collation: the grant on qa stays.
    c.batch_execute("SELECT jq.grant('qa', 'jq_worker', 'work')").unwrap();
    let revoked: bool = c.query_one("SELECT jq.revoke('QA' COLLATE jqt_ci, 'jq_worker', 'work')", &[]).unwrap().get(0);
    assert!(!revoked);
    // A deterministic collation other than the default compares exactly: accepted.
    c.batch_execute("SELECT jq.pause('qa' COLLATE \"C\")").unwrap();
    let paused: Vec<String> =
        c.query("SELECT name FROM jq.queues WHERE paused", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(paused, vec!["qa".to_string()]);
}

#[test]
fn a_tenant_sees_and_claims_only_its_own_queues_payloads() {
    let roles;
    let db = TestDb::new("sec_tenant");
    let mut c = db.connect();
    roles = set_up_tenants(&mut c, "secten");
    prepare(&mut c);
    let work = roles.get("work");
    // Its own queue: the claim returns the payload.
    let mut t = c.transaction().unwrap();
    t.batch_execute(&format!("SET LOCAL ROLE {work}")).unwrap();
    let rows = t.query("SELECT payload::text FROM jq.claim('qa', 'w', 10)", &[]).unwrap();
    assert_eq!(rows.len(), 1);
    let stats: Vec<String> = t.query("SELECT queue FROM jq.queue_stats", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(stats, vec!["qa"]);
    t.rollback().unwrap();
    // Another tenant's: no claim, no table, no stats row, no multi-queue claim smuggling it in.
    for sql in [
        "SELECT * FROM jq.claim('qb', 'w', 10)",
        "SELECT * FROM jq.claim(ARRAY['qa', 'qb'], 'w', 10)",
        "SELECT payload FROM jq.jobs",
        "SELECT * FROM jq.executions",
        "SELECT * FROM jq.queue_grants",
        "UPDATE jq.jobs SET state = 'ready'",
        "SELECT jq._may('postgres'::regrole, 'qb', 'work')",
        "SELECT jq._authorize(jq._ticket(), ARRAY['qb'], 'work')",
        "SELECT jq._authorize_queue(jq._ticket(), 'qb', 'work')",
        "SELECT jq._authorize_queue(jq._ticket(), NULL, 'work')",
    ] {
        assert_eq!(as_role(&mut c, work, sql), Err("42501".to_string()), "{sql}");
    }
    // A function of the reader's in a WHERE sees only the rows it may (security_barrier): it
    // records every queue name it is called with.
    if broken("leaky_view") {
        c.batch_execute("ALTER VIEW jq.queue_stats RESET (security_barrier)").unwrap();
    }
    let mut t = c.transaction().unwrap();
    t.batch_execute(&format!(
        "SET LOCAL ROLE {work};
         CREATE TEMP TABLE seen (q text);
         CREATE FUNCTION pg_temp.leak(q text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 AS
             $$ BEGIN INSERT INTO seen VALUES (q); RETURN true; END $$;
         SELECT * FROM jq.queue_stats WHERE pg_temp.leak(queue);"
    ))
    .unwrap();
    let seen: Vec<String> = t.query("SELECT DISTINCT q FROM seen ORDER BY 1", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    t.rollback().unwrap();
    assert_eq!(seen, vec!["qa"], "a reader's function saw other tenants' queues");
    // A ticket cannot be forged or reused.
    assert_eq!(as_role(&mut c, work, "SELECT * FROM jq.claim('qa', 'w', caller_ticket => 42)"), Err("42501".into()));
    // The every-queue grant reaches a queue created later.
    c.batch_execute("SELECT jq.create_queue('later'); SELECT jq.enqueue('later', '{}');").unwrap();
    assert_eq!(as_role(&mut c, roles.get("star"), "SELECT * FROM jq.claim('later', 'w')"), Ok(()));
    // Revoking takes effect at the next call; dropping a queue drops its grants.
    c.execute("SELECT jq.revoke('qa', $1::text::regrole, 'work')", &[&work]).unwrap();
    assert_eq!(as_role(&mut c, work, "SELECT * FROM jq.claim('qa', 'w')"), Err("42501".into()));
    // Revoking a role's last admin grant takes back the EXECUTE jq.grant gave it.
    let qadm = roles.get("qadm");
    c.execute("SELECT jq.revoke('qa', $1::text::regrole, 'admin')", &[&qadm]).unwrap();
    let still: bool = c
        .query_one("SELECT has_function_privilege($1, 'jq.pause(text,bigint)', 'EXECUTE')", &[&qadm])
        .unwrap()
        .get(0);
    assert!(!still, "the per-queue admin functions stayed executable after the last admin grant was revoked");
    // ... and so does dropping the queue of its last admin grant.
    c.execute("SELECT jq.grant('qa', $1::text::regrole, 'admin')", &[&qadm]).unwrap();
    c.batch_execute("SELECT jq.drop_queue('qa', force => true)").unwrap();
    let still: bool = c
        .query_one("SELECT has_function_privilege($1, 'jq.pause(text,bigint)', 'EXECUTE')", &[&qadm])
        .unwrap()
        .get(0);
    assert!(!still, "the per-queue admin functions stayed executable after the queue was dropped");
    let left: i64 = c.query_one("SELECT count(*) FROM jq.queue_grants WHERE queue = 'qa'", &[]).unwrap().get(0);
    assert_eq!(left, 0);
    let e = c.query_one("SELECT jq.grant('qa', 'jq_worker', 'work')", &[]).unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::UNDEFINED_OBJECT));
    let e = c.query_one("SELECT jq.grant('qb', 'jq_worker', 'read')", &[]).unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INVALID_PARAMETER_VALUE));
    // Granting a queue to one of jq's own roles leaves the roles as the extension made them.
    c.batch_execute("SELECT jq.grant('qb', 'jq_producer', 'work')").unwrap();
    let changed: bool = c.query_one("SELECT pg_has_role('jq_producer', 'jq_worker', 'MEMBER')", &[]).unwrap().get(0);
    assert!(!changed, "jq.grant made jq_producer a member of jq_worker");
}

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

/// A schedule fires with the rights of the role that defined it: revoked or dropped, its fires
/// are logged as failed and skipped, and the other schedules and the pass go on.
#[test]
fn a_schedule_fires_only_while_its_creator_may_enqueue() {
    let roles;
    let db = TestDb::new("sec_cron");
    let mut c = db.connect();
    let mut a = jq_pg_test::admin();
    roles = Roles::new(&mut a, "seccron", &[("owner", "LOGIN"), ("gone", "LOGIN")]);
    let (owner, gone) = (roles.get("owner").to_string(), roles.get("gone").to_string());
    c.batch_execute("SELECT jq.create_queue('q'); SELECT jq.schedule('by_admin', '* * * * *', 'q');").unwrap();
    for r in [&owner, &gone] {
        c.execute("SELECT jq.grant('q', $1::text::regrole, 'admin')", &[r]).unwrap();
        let name = format!("by_{}", if r == &owner { "owner" } else { "gone" });
        let mut t = c.transaction().unwrap();
        t.batch_execute(&format!("SET LOCAL ROLE {r}; SELECT jq.schedule('{name}', '* * * * *', 'q')")).unwrap();
        t.commit().unwrap();
    }
    let creator: String =
        c.query_one("SELECT created_by::text FROM jq.schedules WHERE name = 'by_owner'", &[]).unwrap().get(0);
    assert_eq!(creator, owner);
    let fired = |c: &mut Client, at: &str| -> i32 {
        c.query_one(&format!("SELECT jq.cron_tick(date_trunc('minute', now()) + interval '{at}')"), &[]).unwrap().get(0)
    };
    assert_eq!(fired(&mut c, "1 minute"), 3);
    c.execute("SELECT jq.revoke('q', $1::text::regrole, 'admin')", &[&owner]).unwrap();
    drop(c);
    let mut c2 = db.connect();
    // What jq.grant gave it in this database (EXECUTE on the per-queue admin functions).
    c2.batch_execute(&format!("DROP OWNED BY {gone}")).unwrap();
    a.batch_execute(&format!("DROP ROLE {gone}")).unwrap();
    assert_eq!(fired(&mut c2, "2 minutes"), 1, "only the admin's schedule may fire");
    let outcomes: Vec<(String, String, Option<String>)> = c2
        .query(
            "SELECT s.name, r.outcome, left(s.last_error, 5) FROM jq.schedules s
               JOIN jq.cron_runs r ON r.schedule = s.name
              WHERE r.fire_time = date_trunc('minute', now()) + interval '2 minutes' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ("by_admin".into(), "enqueued".into(), None),
            ("by_gone".into(), "failed".into(), Some("42704".into())),
            ("by_owner".into(), "failed".into(), Some("42501".into())),
        ]
    );
    // Maintenance disables and unbinds the dropped creator's schedule; enabling it binds it to
    // the role that does.
    c2.batch_execute("SELECT jq.tick()").unwrap();
    let row = c2
        .query_one("SELECT enabled, created_by IS NULL, last_error LIKE 'disabled:%' FROM jq.schedules WHERE name = 'by_gone'", &[])
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, bool>(1), row.get::<_, bool>(2)), (false, true, true));
    let by: String = c2
        .query_one("SELECT (jq.alter_schedule('by_gone', enabled => true)).created_by::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(by, "postgres");
    drop(c2);
    drop(db);
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

/// The public jq functions that take a caller ticket (the internal ones, `_` first, are
/// executable by no role: the catalog test).
fn ticketed_functions(c: &mut Client) -> Vec<String> {
    c.query(
        "SELECT p.oid::regprocedure::text FROM pg_proc p
          WHERE p.pronamespace = 'jq'::regnamespace AND 'caller_ticket' = ANY (p.proargnames)
            AND p.proname NOT LIKE '\\_%'
          ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Two jq.grant / jq.revoke calls at once both run GRANT or REVOKE EXECUTE on the same pg_proc
/// rows (a per-queue admin grant, or a role's last one revoked), or GRANT jq_producer TO the same
/// role. Without a lock of their own the second waited for the first's catalog row and then
/// failed with XX000 "tuple concurrently updated" (23505 on pg_auth_members for the membership)
/// once the first committed; with `LOCK TABLE jq.queue_grants IN SHARE ROW EXCLUSIVE MODE` it
/// waits for the first to end and succeeds. Negative control: JQ_TEST_BREAK=grants_unserialized
/// (both functions without that lock).
#[test]
fn concurrent_grants_and_revokes_queue_up() {
    let mut a = jq_pg_test::admin();
    let roles = Roles::new(&mut a, "grantrace", &[("r1", ""), ("r2", ""), ("r3", ""), ("r4", ""), ("r5", "")]);
    let db = TestDb::new("grantrace");
    let mut c = db.connect();
    if broken("grants_unserialized") {
        sabotage(&mut c, "jq.grant(text,regrole,text,bigint)", "    LOCK TABLE jq.queue_grants IN SHARE ROW EXCLUSIVE MODE;\n", "", 1);
        sabotage(&mut c, "jq.revoke(text,regrole,text)", "    LOCK TABLE jq.queue_grants IN SHARE ROW EXCLUSIVE MODE;\n", "", 1);
    }
    let (r1, r2, r3, r4, r5) = (roles.get("r1"), roles.get("r2"), roles.get("r3"), roles.get("r4"), roles.get("r5"));
    c.batch_execute(&format!(
        "SELECT jq.create_queue('g1'); SELECT jq.create_queue('g2'); SELECT jq.grant('g2', '{r4}', 'admin');"
    ))
    .unwrap();
    let cases = [
        (format!("SELECT jq.grant('g1', '{r1}', 'admin')"), format!("SELECT jq.grant('g2', '{r2}', 'admin')")),
        (format!("SELECT jq.grant('g1', '{r3}', 'enqueue')"), format!("SELECT jq.grant('g2', '{r3}', 'admin')")),
        (format!("SELECT jq.grant('g1', '{r5}', 'admin')"), format!("SELECT jq.revoke('g2', '{r4}', 'admin')")),
    ];
    let mut failures = Vec::new();
    for (first, second) in cases {
        let mut t1 = db.connect();
        t1.batch_execute(&format!("BEGIN; {first};")).unwrap();
        let mut t2 = db.connect();
        let pid = jq_pg_test::backend_pid(&mut t2);
        let other = {
            let second = second.clone();
            std::thread::spawn(move || {
                t2.simple_query(&second).map(|_| ()).map_err(|e| e.code().map(|s| s.code().to_string()))
            })
        };
        jq_pg_test::await_lock_wait(&mut c, pid, &format!("{second} neither waited nor ended"), || other.is_finished());
        t1.batch_execute("COMMIT").unwrap();
        let got = other.join().unwrap();
        if got.is_err() {
            failures.push(format!("{first} then {second}: {got:?}"));
        }
    }
    assert!(failures.is_empty(), "the second call must wait and succeed:\n{}", failures.join("\n"));
    // Every grant is in place (and r4's admin grant gone).
    let n: i64 = c.query_one("SELECT count(*) FROM jq.queue_grants", &[]).unwrap().get(0);
    assert_eq!(n, 5, "g1: r1 admin, r3 enqueue, r5 admin; g2: r2 admin, r3 admin");
    drop(c);
    drop(db);
}
