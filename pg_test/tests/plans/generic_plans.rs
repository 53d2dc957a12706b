//! Batch claims and writes run on one cached generic plan; functions with settings are never JIT-compiled.

use jq_pg_test::{broken, TestDb};
use serde_json::Value;

use super::plan_tree::{Explained, Failures};
use super::statements::Mode;
use super::traced::{one_statement, picking_statement, Traced};

/// A batch claim runs on one cached generic plan: jq.claim's batch statements take LIMIT n as a
/// parameter, which a generic plan costs at 10% of the rows below it, so under
/// plan_cache_mode = auto plpgsql found every custom plan cheaper and planned those statements
/// again on every call (pg_stat_statements with track_planning counted as many plans as calls;
/// the benchmark's batch-10 drain spent a fifth of its database CPU on it). The statements live
/// in jq._claim_batch, which pins plan_cache_mode = force_generic_plan (sql/claim.sql; jq.claim
/// itself has no SET clause); the generic plans are the same index walks (the tests above check
/// both modes). Checked through auto_explain: a custom plan has the queue's name folded into
/// its scan of jobs_claim_idx, the generic plan compares with a parameter ($1). (Until the
/// index was keyed on the name's hash this looked at the Limit's estimate: exactly n rows in a
/// custom plan, 10% of the ready jobs in the generic one; the hash and the name, both
/// compared, now estimate fewer rows than n.)
/// Negative control `JQ_TEST_BREAK=custom_batch_plans` (jq._claim_batch without the setting): seen
/// failing for all seven calls, "call 7: a custom plan (Limit estimated at Some(10.0) rows),
/// planned again for this call" (hints on; the message now names the pass); seen failing again
/// after the move to jq._claim_batch.
#[test]
fn batch_claims_reuse_one_generic_plan() {
    let db = TestDb::new("plans_generic");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('gen');
         SELECT count(*) FROM jq.enqueue_many('gen', (SELECT jsonb_agg(g) FROM generate_series(1, 20000) g));
         ANALYZE jq.jobs;",
    )
    .unwrap();
    if jq_pg_test::broken("custom_batch_plans") {
        c.batch_execute("ALTER FUNCTION jq._claim_batch(text, text, integer, interval, boolean, bigint, boolean) RESET plan_cache_mode")
            .unwrap();
    }
    let mut t = Traced::connect(&db);
    let mut f = Failures::default();
    // Both batch statements: with claim-start hints on, calls after the first run the hinted
    // one; with them off, every call runs the full claim. Seven calls each: under `auto`,
    // plpgsql plans a statement custom for its first five runs, then keeps whichever wins.
    for hints in ["on", "off"] {
    t.client.batch_execute(&format!("SET jq.claim_hints = {hints}")).unwrap();
    t.begin(Mode::Auto);
    for call in 1..=7 {
        let sql = "SELECT id FROM jq.claim('gen', 'plans-probe', 10)";
        let (rows, plans) = t.run(sql);
        assert_eq!(rows.len(), 10, "{sql}");
        let (stmt, _) = picking_statement(&plans, sql);
        let call = format!("hints {hints}, call {call}");
        // The selection's scan of jobs_claim_idx: a generic plan compares the queue's hash
        // with the parameter's ($1); a custom plan has the queue name folded into a constant.
        let cond = stmt.nodes().into_iter()
            .find(|n| n.get("Index Name").and_then(Value::as_str) == Some("jobs_claim_idx"))
            .and_then(|n| n.get("Index Cond").and_then(Value::as_str).map(str::to_owned));
        f.expect(cond.as_deref().is_some_and(|c| c.contains("hashtextextended($1")), || {
            stmt.fail(format!("{call}: a custom plan (jobs_claim_idx Index Cond {cond:?}), \
                                 planned again for this call"))
        });
    }
    t.rollback();
    }
    f.finish();
}

/// jq.complete_many and jq.enqueue_many run their big statement on one cached generic plan.
/// Their arrays reach the statement as parameters (unnest, jq._job_specs); a custom plan sees
/// the array and its length, so a caller that always sends the same small batch (one job per
/// complete_many, say) made every custom plan look cheaper than the generic one, and plpgsql
/// planned the statement again on every call: complete_many with one job spent ~200 µs per call
/// planning against ~40 µs executing (auto_explain and pg_stat_statements with track_planning,
/// docs/BENCHMARKS.md). Both functions pin plan_cache_mode = force_generic_plan
/// (in their CREATE FUNCTION). Checked through auto_explain (verbose): in a generic plan the function
/// scan over the array reads a parameter ("unnest($1)"), in a custom plan the array itself.
/// Negative control `JQ_TEST_BREAK=custom_batch_writes` (both functions without the setting):
/// seen failing for calls 1 to 7 of both functions, "a custom plan (function scan
/// unnest('{…}'::bigint[])), planned again for this call".
#[test]
fn batch_writes_reuse_one_generic_plan() {
    let db = TestDb::new("plans_generic_writes");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('genw');
         SELECT count(*) FROM jq.enqueue_many('genw', (SELECT jsonb_agg(g) FROM generate_series(1, 2000) g));
         ANALYZE jq.jobs;",
    )
    .unwrap();
    if jq_pg_test::broken("custom_batch_writes") {
        c.batch_execute(
            "ALTER FUNCTION jq.complete_many(bigint[], uuid[], jsonb[]) RESET plan_cache_mode;
             ALTER FUNCTION jq.enqueue_many(text, jsonb, text, timestamptz, interval, integer, integer, boolean, bigint)
                 RESET plan_cache_mode;",
        )
        .unwrap();
    }
    let mut t = Traced::connect(&db);
    t.client.batch_execute("SET auto_explain.log_verbose = on").unwrap();
    let mut f = Failures::default();
    t.begin(Mode::Auto);
    // Seven calls each, the same size every time (under `auto`, plpgsql plans a statement custom
    // for its first five runs, then keeps whichever wins).
    for call in 1..=7 {
        let claimed = t.client.query_one("SELECT id, lease_token FROM jq.claim('genw', 'plans-probe')", &[]).unwrap();
        let (id, token): (i64, uuid::Uuid) = (claimed.get(0), claimed.get(1));
        let sql = format!("SELECT jq.complete_many(ARRAY[{id}::bigint], ARRAY['{token}'::uuid])");
        let (rows, plans) = t.run(&sql);
        assert_eq!(rows.len(), 1, "{sql}");
        let stmt = one_statement(&plans, "WITH input AS", &sql);
        expect_generic(&mut f, stmt, &format!("complete_many, call {call}"));

        let sql = "SELECT * FROM jq.enqueue_many('genw', '[1, 2, 3]')";
        let (rows, plans) = t.run(sql);
        assert_eq!(rows.len(), 3, "{sql}");
        let stmt = one_statement(&plans, "WITH ins AS", sql);
        expect_generic(&mut f, stmt, &format!("enqueue_many, call {call}"));
    }
    t.rollback();
    f.finish();
}

/// A generic plan's function scan over a plpgsql array argument calls it through a parameter.
fn expect_generic(f: &mut Failures, stmt: &Explained, call: &str) {
    let scans: Vec<String> = stmt
        .nodes()
        .into_iter()
        .filter_map(|n| n.get("Function Call").and_then(Value::as_str).map(str::to_string))
        .collect();
    f.expect(!scans.is_empty() && scans.iter().all(|s| s.contains('$')), || {
        stmt.fail(format!("{call}: a custom plan (function scan {}), planned again for this call", scans.join(", ")))
    });
}

/// No jq function that carries settings of its own is JIT-compiled (each has SET jit = off in
/// its CREATE FUNCTION). A generic plan costs a LIMIT parameter at 10% of the queue, so over a
/// deep queue (millions of ready jobs) the batch claim's plan cost passed jit_above_cost, and
/// every call was compiled: code emission cost far more than the 10-job claim itself, and the
/// held-snapshot drain slowed by an order of magnitude (docs/BENCHMARKS.md). Here
/// jit_above_cost = 0 stands for the deep queue. Negative control `jit_allowed` (jit reset on the
/// batch claim and on complete_many): their statements carried a JIT section (seen failing).
#[test]
fn functions_with_settings_never_jit() {
    let db = TestDb::new("nojit");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q'); SELECT jq.enqueue_many('q', (SELECT jsonb_agg(i) FROM generate_series(1, 50) i))")
        .unwrap();
    if broken("jit_allowed") {
        c.batch_execute(
            "ALTER FUNCTION jq._claim_batch(text,text,integer,interval,boolean,bigint,boolean) RESET jit;
             ALTER FUNCTION jq.complete_many(bigint[],uuid[],jsonb[]) RESET jit",
        )
        .unwrap();
    }
    let unset: Vec<String> = c
        .query("SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
                WHERE p.pronamespace = 'jq'::regnamespace AND p.proconfig IS NOT NULL
                  AND NOT ('jit=off' = ANY (p.proconfig)) ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut t = Traced::connect(&db);
    t.client
        .batch_execute("SET jit = on; SET jit_above_cost = 0; SET jit_optimize_above_cost = -1; SET jit_inline_above_cost = -1")
        .unwrap();
    // JIT must work here at all, or this test would prove nothing.
    t.notices.lock().unwrap().clear();
    t.client.batch_execute("SELECT count(*) FROM generate_series(1, 10)").unwrap();
    let probe = std::mem::take(&mut *t.notices.lock().unwrap());
    assert!(probe.iter().any(|n| n.contains("\"JIT\"")), "no JIT in this cluster: {probe:?}");
    t.client
        .batch_execute("WITH c AS (SELECT id, lease_token FROM jq.claim('q', 'w', 10))
                        SELECT count(*) FROM jq.complete_many((SELECT array_agg(id) FROM c), (SELECT array_agg(lease_token) FROM c))")
        .unwrap();
    let notices = std::mem::take(&mut *t.notices.lock().unwrap());
    let writes: Vec<&String> =
        notices.iter().filter(|n| n.contains("UPDATE ONLY jq.jobs") || n.contains("DELETE FROM ONLY jq.jobs")).collect();
    assert!(writes.len() >= 2, "the claim and the completion were not traced: {notices:?}");
    let jitted: Vec<&&String> = writes.iter().filter(|n| n.contains("\"JIT\"")).collect();
    assert!(unset.is_empty() && jitted.is_empty(),
            "functions with settings but without jit = off: {unset:?}; JIT-compiled statements: {jitted:?}");
}
