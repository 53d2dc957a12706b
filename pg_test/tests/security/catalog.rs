//! The catalog matrix: what every function, table, view and sequence of schema jq grants, and how it runs.

use jq_pg_test::{broken, TestDb};

use super::Roles;
use super::search_path::CLAIM;

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
        | "max_error_length" | "max_claim_batch" | "max_progress_bytes" | "cron_log_retention"
        | "cron_misfire_grace" | "cron_max_catchup" | "hook_lock_timeout" | "await"
        | "worker_beat_interval" | "worker_retention" | "worker_state" => EVERYONE,
        // jq.table_health's sizes, called by whoever reads the view (src/table_size.rs).
        "_table_bytes" => EVERYONE,
        // jq.queue_stats' figures of one queue, called by whoever reads the view; it checks the
        // caller's grants on the queue itself (sql/maintenance.sql).
        "_queue_figures" => EVERYONE,
        // The dashboard's read API (sql/observe.sql): filtered by the caller's grants inside.
        n if OBSERVE.contains(&n) => EVERYONE,
        "enqueue" | "enqueue_many" => PRODUCE,
        "claim" | "complete" | "complete_many" | "fail" | "heartbeat" | "release" | "snooze"
        | "register_worker" | "worker_beat" | "deregister_worker" => WORK,
        "alter_queue" | "pause" | "resume" | "cancel" | "retry" | "expire_lease" | "schedule"
        | "alter_schedule" | "unschedule" | "alter_kind" | "drop_kind" | "clear_hook" | "retry_dead"
        | "cancel_dead" => QUEUE_ADMIN,
        // drop_queue locks jq.jobs against writes until its transaction ends: global admins only.
        "create_queue" | "drop_queue" | "tick" | "cron_tick" | "grant" | "revoke" => ADMIN,
        // Reads every history table and pg_locks (sql/history.sql).
        "history_tables" => ADMIN,
        n if n.starts_with('_') => NOBODY,
        _ => return None,
    })
}

/// The read API of sql/observe.sql: executable by every jq role, running as the owner.
const OBSERVE: &[&str] = &["overview", "throughput", "list_jobs", "job_detail", "job_executions",
                           "schedule_list", "cron_log"];

/// Functions that run as the owner: everything a role calls that reads or writes jq's tables,
/// i.e. every function granted to some roles but not to all (those are pure helpers and the
/// caller ticket, which must run as the caller), plus status.
fn must_be_definer(proname: &str) -> bool {
    matches!(
        expected_execute(proname),
        Some(r) if (!r.is_empty() && r != EVERYONE) || proname == "status" || proname == "await"
            || proname == "_queue_figures"
            || OBSERVE.contains(&proname)
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
            problems.push(format!("{sig}: not classified in expected_execute (tests/security/catalog.rs)"));
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
                    && (r == "jq_admin" || ((name == "jq.queue_stats" || name == "jq.kind_policies" || name == "jq.fleet") && r != "nobody"));
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
