//! Flow control with real connections (docs/flow-control.md): per-key serialisation (never two
//! running jobs of one key, per-key start order, a dead head blocks nobody, thousands of blocked
//! keys cost the claim nothing), rate limits, snooze, and the wakeups each of them owes a
//! long-polling claim.
//!
//! The clock is never moved: maintenance functions get explicit instants.
//!
//! Negative controls: `JQ_TEST_BREAK=<name>` makes a test replace one jq function in its own
//! database with a broken copy (see `jq_pg_test::sabotage`), and the test must then fail. The
//! comment at each test records what was broken and how the test failed.

mod aging;
mod keys;
mod rate_limits;

use jq_pg_test::{broken, sabotage, Client};
use serde_json::Value;

const KEY_FILL: &str = "jq._key_fill(text,text,integer)";
const CLAIM: &str = "jq.claim(text,text,integer,interval,interval,bigint)";

fn apply_breaks(c: &mut Client) {
    if broken("key_fill_ignores_limit") {
        // The fill admits every blocked job of a key, whatever key_concurrency says.
        sabotage(c, KEY_FILL, "v_k := coalesce(v_k, 1);", "v_k := 1000000;", 1);
    }
    if broken("key_fill_no_wake") {
        // A job made ready by its key's slot freeing wakes no waiting claim (nor moves the
        // claim-start hint back to it: jq._wake_ready does both, so jobs are also left behind
        // the hint and two more tests fail).
        sabotage(c, KEY_FILL, "WHERE jq._wake_ready(m.queue, m.priority, m.run_at)", "WHERE true", 1);
    }
    if broken("rate_no_tokens_taken") {
        // The claim computes the bucket but never takes tokens from it.
        sabotage(c, CLAIM, "rate_tokens = v_tokens OPERATOR(pg_catalog.-) v_got", "rate_tokens = v_tokens", 1);
    }
}

fn enqueue_key(c: &mut Client, key: Option<&str>, priority: i32, max_attempts: i32) -> i64 {
    c.query_one(
        "SELECT jq.enqueue('q', '{}', priority => $1, max_attempts => $2, concurrency_key => $3)",
        &[&priority, &max_attempts, &key],
    )
    .unwrap()
    .get(0)
}

fn explain(c: &mut Client, sql: &str) -> Value {
    let mut tx = c.transaction().unwrap();
    let v: Value = tx
        .query_one(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), &[])
        .unwrap()
        .get(0);
    tx.rollback().unwrap();
    v[0]["Plan"].clone()
}

/// The (only) index scan on jq.jobs in a plan and the rows it returned.
fn index_scan(plan: &Value) -> (String, i64) {
    fn walk(n: &Value, out: &mut Vec<(String, i64)>) {
        if n["Relation Name"] == "jobs" {
            let rows = n["Actual Rows"].as_f64().unwrap_or(0.0) * n["Actual Loops"].as_f64().unwrap_or(1.0);
            out.push((n["Index Name"].as_str().unwrap_or("(no index)").to_string(), rows as i64));
        }
        if let Some(Value::Array(ch)) = n.get("Plans") {
            for x in ch {
                walk(x, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(plan, &mut out);
    assert_eq!(out.len(), 1, "expected one scan of jq.jobs: {plan}");
    out.pop().unwrap()
}
