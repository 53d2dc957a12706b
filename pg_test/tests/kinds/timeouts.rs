//! The wall timeout: the lease never runs past started_at + timeout, and maintenance ends an
//! attempt that reached it as a failed one (charged, backoff, error, execution row), fenced; an
//! attempt whose worker vanished earlier is an expired lease (refunded) as before.

use std::time::Duration;

use jq_pg_test::waiting::wait_until;
use jq_pg_test::{broken, claim, complete, executions, sabotage, TestDb};

use super::{one, past_lease, reap_at};

const CLAIM: &str = "jq.claim(text,text,integer,interval,interval,bigint)";
const CLAIM_BATCH: &str = "jq._claim_batch(text,text,integer,interval,boolean,bigint,boolean)";
const REAP: &str = "jq._reap(timestamptz,integer,integer,boolean)";

// Negative controls: JQ_TEST_BREAK=claim_ignores_timeout (the claims' lease not capped at the
// timeout) made this test fail: "the lease runs past the timeout"; JQ_TEST_BREAK=reap_refunds_timeouts
// (the reaper ends overdue attempts as expired leases) made it fail: the state after the
// deadline was ready with attempt 0 (refunded), not a failed attempt.
#[test]
fn an_attempt_past_its_timeout_is_failed_by_maintenance_charged_and_recorded() {
    let db = TestDb::new("kind_timeout");
    let mut c = db.connect();
    if broken("claim_ignores_timeout") {
        sabotage(&mut c, CLAIM, "q.max_lease, j.timeout)", "q.max_lease)", 2);
        sabotage(&mut c, CLAIM_BATCH, "q.max_lease, j.timeout)", "q.max_lease)", 2);
    }
    if broken("reap_refunds_timeouts") {
        sabotage(&mut c, REAP, "jq._time_out(v_ids, _reap.now, _reap.defer_hooks)", "0", 1);
        sabotage(&mut c, REAP, "NOT jq._overdue(x.timeout, x.started_at, x.lease_expires_at)", "true", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('q', backoff => 'fixed', backoff_base => '0', jitter => 'none');
         SELECT jq.alter_kind('q', 'slow', max_attempts => 2, timeout => '2 seconds')",
    )
    .unwrap();
    let id: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'slow')");
    let mut w = db.connect();
    for n in [1, 2] {
        // A batch claim (n = 2) and a one-job claim: both copies cap the lease.
        let j = claim(&mut w, "q", "w", if n == 1 { 2 } else { 1 }, Some("1 hour")).pop().expect("claim");
        let (capped, returned): (bool, String) = {
            let r = c
                .query_one(&format!("SELECT lease_expires_at <= started_at + timeout + interval '1 millisecond',
                                            timeout::text FROM jq.jobs WHERE id = {id}"), &[])
                .unwrap();
            (r.get(0), r.get(1))
        };
        assert!(capped, "attempt {n}: the lease runs past the timeout");
        assert_eq!(returned, "00:00:02");
        let hb: bool = one(&mut w, &format!(
            "SELECT h.lease_expires_at <= j.started_at + j.timeout FROM jq.jobs j,
             jq.heartbeat({id}, '{}', '1 hour') h WHERE j.id = {id}", j.token));
        assert!(hb, "attempt {n}: a heartbeat extended the lease past the timeout");
        let at = past_lease(&mut c, id);
        assert_eq!(reap_at(&mut c, &at), 1, "attempt {n}: not ended");
        let (state, attempt, error): (String, i32, String) = {
            let r = c.query_one(&format!("SELECT state::text, attempt, last_error FROM jq.jobs WHERE id = {id}"), &[]).unwrap();
            (r.get(0), r.get(1), r.get::<_, Option<String>>(2).unwrap_or_default())
        };
        assert_eq!((state.as_str(), attempt), (if n == 1 { "ready" } else { "dead" }, n), "attempt {n}: charged");
        assert!(error.starts_with("timed out after 00:00:02"), "attempt {n}: error {error:?}");
        assert_eq!(executions(&mut c, id).last().unwrap(), &(n, n, "failed".to_string()), "attempt {n}: history");
        // Fenced: the worker's late verdict changes nothing.
        assert!(!complete(&mut w, &j), "attempt {n}: a late completion went through");
    }
    // A worker that vanished before the timeout: an expired lease, refunded.
    let id2: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'slow')");
    c.batch_execute("SELECT jq.alter_kind('q', 'slow', timeout => '1 hour')").unwrap();
    let id3: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'slow')");
    assert_eq!(one::<String>(&mut c, &format!("SELECT timeout::text FROM jq.jobs WHERE id = {id2}")), "00:00:02",
               "a kind's change rewrote an enqueued job");
    c.batch_execute(&format!("SELECT jq.cancel({id2})")).unwrap();
    let j = claim(&mut w, "q", "w", 1, Some("1 second")).pop().expect("claim");
    assert_eq!(j.id, id3);
    let at = past_lease(&mut c, id3);
    assert_eq!(reap_at(&mut c, &at), 1);
    assert_eq!(one::<i32>(&mut c, &format!("SELECT attempt FROM jq.jobs WHERE id = {id3}")), 0, "refunded");
    assert_eq!(executions(&mut c, id3).last().unwrap().2, "lease_expired");
}

/// The background worker ends an overdue attempt on its own: nothing but the cluster runs
/// maintenance here (the database is named for jq.databases = 'jqt_bgw_*').
#[test]
fn the_background_worker_fails_an_overdue_attempt() {
    let db = TestDb::new("bgw_kind_timeout");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('q', backoff => 'fixed', backoff_base => '1 hour', jitter => 'none');
         SELECT jq.alter_kind('q', 'slow', timeout => '1 second')",
    )
    .unwrap();
    let id: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'slow')");
    let mut w = db.connect();
    let j = claim(&mut w, "q", "w", 1, None).pop().expect("claim");
    wait_until(Duration::from_secs(30), "the overdue attempt is failed", || {
        one::<String>(&mut c, &format!("SELECT state::text FROM jq.jobs WHERE id = {id}")) == "scheduled"
    });
    assert_eq!(executions(&mut c, id), vec![(1, 1, "failed".to_string())]);
    assert!(!complete(&mut w, &j));
}
