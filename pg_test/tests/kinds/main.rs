//! Job kinds: per-kind policy (defaults at enqueue, backoff at failure), the wall timeout that
//! maintenance enforces, and the exhaustion hooks (on_dead) with their privileges, failures and
//! retries; the example deployment's policy table of docs/kinds.md run as written.
//!
//! The clock is never moved: maintenance functions get explicit instants (an attempt's own
//! lease expiry plus a margin), except in the background-worker test, which waits on the
//! database with a deadline.
//!
//! Negative controls: `JQ_TEST_BREAK=<name>` makes a test replace one jq function in its own
//! database with a broken copy (see `jq_pg_test::sabotage`), and the test must then fail. The
//! comment at each test records what was broken and how the test failed.

mod adversarial;
mod example;
mod hooks;
mod policy;
mod timeouts;

use jq_pg_test::{Claimed, Client};

/// The first column of a one-row query.
fn one<T: for<'a> postgres::types::FromSql<'a>>(c: &mut Client, sql: &str) -> T {
    c.query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
}

/// `jq.fail(job, error)` -> the new state as text.
fn fail(c: &mut Client, j: &Claimed, error: &str) -> Option<String> {
    c.query_one("SELECT jq.fail($1, $2, $3)::text", &[&j.id, &j.token, &error]).expect("jq.fail").get(0)
}

/// The lease expiry of a running job plus 1 ms, as text: the instant a reap passes it.
fn past_lease(c: &mut Client, id: i64) -> String {
    c.query_one("SELECT (lease_expires_at + interval '1 millisecond')::text FROM jq.jobs WHERE id = $1", &[&id])
        .expect("lease")
        .get(0)
}

/// `jq._reap(at)`: the reaper's pass at an explicit instant; returns the attempts it ended.
fn reap_at(c: &mut Client, at: &str) -> i32 {
    c.query_one("SELECT jq._reap($1::text::timestamptz)", &[&at]).expect("jq._reap").get(0)
}
