//! jq.expire_lease: an operator takes back a running attempt now, as the reaper would, fenced on
//! the job's state and (optionally) its lease token.

use jq_pg_test::{broken, claim, complete, executions, sabotage, state, Client, TestDb};

use super::{enqueue, ex, finished_or_blocked, heartbeat, job, run_in_thread, Outcome, END_LEASES};

const EXPIRE: &str = "jq.expire_lease(bigint,uuid,bigint)";

fn expire(c: &mut Client, id: i64, token: Option<uuid::Uuid>) -> bool {
    c.query_one("SELECT jq.expire_lease($1, $2)", &[&id, &token]).expect("jq.expire_lease").get(0)
}

/// A worker claimed with a lease of a century (seconds taken for milliseconds): the operator takes
/// the attempt back, the job is claimable at once with the attempt refunded, the history says who
/// took it back, and the old worker's heartbeat and completion change nothing.
///
/// Negative control `expire_lease_no_refund` (the attempt not refunded by jq._end_leases): seen
/// failing with "left: (\"ready\", 1, 1, Some(\"w1\"))".
#[test]
fn an_operator_takes_back_a_century_lease_and_the_old_worker_is_fenced_off() {
    let db = TestDb::new("take_back");
    let mut c = db.connect();
    if broken("expire_lease_no_refund") {
        sabotage(&mut c, END_LEASES, "attempt = j.attempt - 1,", "", 1);
    }
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let id = enqueue(&mut c, "q");
    let mut w1 = db.connect();
    let old = claim(&mut w1, "q", "w1", 1, Some("100 years")).remove(0);

    assert!(expire(&mut c, id, None), "a running job was not taken back");
    let (st, attempt, expiries, worker, _) = job(&mut c, id);
    assert_eq!((st.as_str(), attempt, expiries, worker.as_deref()), ("ready", 0, 1, Some("w1")));
    assert_eq!(executions(&mut c, id), vec![ex(1, 1, "lease_expired")]);
    let error: String = c
        .query_one("SELECT error FROM jq.executions WHERE job_id = $1", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(error, "lease taken back by postgres");

    assert_eq!(heartbeat(&mut w1, &old, None).0, false, "the old worker's heartbeat extended a lease");
    assert!(!complete(&mut w1, &old), "the old worker completed a job taken back from it");
    let new = claim(&mut c, "q", "w2", 1, None).remove(0);
    assert_eq!(new.attempt, 1, "the attempt taken back was charged");
    assert!(complete(&mut c, &new));
    assert!(!expire(&mut c, id, None), "a completed job was taken back");
    assert!(!expire(&mut c, id + 1000, None), "an unknown job was taken back");
}

/// With a lease token the call acts only on that attempt: a token of an earlier attempt (the
/// operator looked, the job was reaped and claimed again meanwhile) changes nothing.
///
/// Negative control `expire_lease_no_token` (the token test left out): seen failing with "an
/// attempt under another lease was taken back".
#[test]
fn a_lease_token_limits_the_take_back_to_that_attempt() {
    let db = TestDb::new("take_back_token");
    let mut c = db.connect();
    if broken("expire_lease_no_token") {
        sabotage(&mut c, EXPIRE, "AND (expire_lease.lease_token IS NULL OR j.lease_token = expire_lease.lease_token)", "", 1);
    }
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let id = enqueue(&mut c, "q");
    let first = claim(&mut c, "q", "w1", 1, None).remove(0);
    assert!(expire(&mut c, id, Some(first.token)));
    let second = claim(&mut c, "q", "w2", 1, None).remove(0);
    assert!(!expire(&mut c, id, Some(first.token)), "an attempt under another lease was taken back");
    assert_eq!(state(&mut c, id).as_deref(), Some("running"));
    assert!(complete(&mut c, &second));
}

/// Taking back frees the slots the attempt held: a capped queue's, and (for a job whose
/// cancellation was requested, which ends cancelled) its key's, which passes to the key's next
/// job.
#[test]
fn a_take_back_frees_the_capped_queues_slot_and_a_cancelled_jobs_key() {
    let db = TestDb::new("take_back_slots");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('cap', max_concurrency => 1); SELECT jq.create_queue('k')").unwrap();
    let pinned = enqueue(&mut c, "cap");
    enqueue(&mut c, "cap");
    assert_eq!(claim(&mut c, "cap", "w", 2, Some("100 years")).len(), 1);
    assert!(claim(&mut c, "cap", "w", 1, None).is_empty(), "the cap let a second job run");
    assert!(expire(&mut c, pinned, None));
    assert_eq!(claim(&mut c, "cap", "w", 2, None).len(), 1, "the taken-back slot stayed taken");

    let head: i64 = c.query_one("SELECT jq.enqueue('k', concurrency_key => 'x')", &[]).unwrap().get(0);
    let next: i64 = c.query_one("SELECT jq.enqueue('k', concurrency_key => 'x')", &[]).unwrap().get(0);
    assert_eq!(claim(&mut c, "k", "w", 1, Some("100 years")).len(), 1);
    assert_eq!(state(&mut c, next).as_deref(), Some("blocked"));
    c.batch_execute(&format!("SELECT jq.cancel({head})")).unwrap();
    assert!(expire(&mut c, head, None));
    assert_eq!(state(&mut c, head).as_deref(), Some("cancelled"));
    assert_eq!(state(&mut c, next).as_deref(), Some("ready"), "the key's slot was not passed on");
}

/// A worker's completion in flight (its transaction open) makes the take-back wait for it, and
/// then change nothing: the job stays completed.
///
/// Negative control `expire_lease_no_fence` (the state tests left out of jq.expire_lease and
/// jq._end_leases): seen failing with "the completed job was taken back".
#[test]
fn a_take_back_waits_for_a_completion_in_flight_and_leaves_it_completed() {
    let db = TestDb::new("take_back_inflight");
    let mut c = db.connect();
    if broken("expire_lease_no_fence") {
        sabotage(&mut c, EXPIRE, "WHERE j.id = expire_lease.id AND j.state = 'running'", "WHERE j.id = expire_lease.id", 1);
        sabotage(&mut c, END_LEASES, "AND j.state::text = 'running'\n          AND j.lease_expires_at < _end_leases.expired_before", "", 1);
    }
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let id = enqueue(&mut c, "q");
    let mut w = db.connect();
    let j = claim(&mut w, "q", "w", 1, None).remove(0);
    w.batch_execute("BEGIN").unwrap();
    assert!(complete(&mut w, &j));
    let (pid, rx, h) = run_in_thread(db.connect(), format!("SELECT jq.expire_lease({id})::int"));
    let outcome = finished_or_blocked(&rx, &mut c, pid);
    w.batch_execute("COMMIT").unwrap();
    let taken = match outcome {
        Outcome::Finished(r) => r,
        Outcome::Blocked => rx.recv().expect("jq.expire_lease result"),
    };
    h.join().unwrap();
    assert_eq!(state(&mut c, id).as_deref(), Some("completed"), "the completed job was taken back");
    assert_eq!(taken, Ok(0));
}

/// A queue's max_lease bounds the lease every claim path asks for (one job, a batch) and what a
/// heartbeat extends to; max_lease => '0' removes the bound, and 0 at creation is refused.
///
/// Negative controls: `claim_unbounded_lease` (the bound left out of jq.claim and
/// jq._claim_batch): seen failing with "a claim took a lease past max_lease";
/// `heartbeat_unbounded_lease` (left out of jq.heartbeat): "a heartbeat extended past max_lease".
#[test]
fn max_lease_bounds_claims_and_heartbeats() {
    let db = TestDb::new("max_lease");
    let mut c = db.connect();
    if broken("claim_unbounded_lease") {
        sabotage(&mut c, "jq.claim(text,text,integer,interval,interval,bigint)",
                 "coalesce(claim.lease, q.lease), q.max_lease", "coalesce(claim.lease, q.lease), NULL::interval", 4);
        sabotage(&mut c, "jq._claim_batch(text,text,integer,interval,boolean,bigint,boolean)",
                 "coalesce(_claim_batch.lease, q.lease), q.max_lease", "coalesce(_claim_batch.lease, q.lease), NULL::interval", 4);
    }
    if broken("heartbeat_unbounded_lease") {
        sabotage(&mut c, "jq.heartbeat(bigint,uuid,interval,jsonb)",
                 "(SELECT q.max_lease FROM jq.queues q WHERE q.name = j.queue)", "NULL::interval", 1);
    }
    assert_eq!(jq_pg_test::sqlstate(c.batch_execute("SELECT jq.create_queue('z', max_lease => '0')")), "22023");
    c.batch_execute("SELECT jq.create_queue('q', max_lease => '1 hour')").unwrap();
    for _ in 0..3 {
        enqueue(&mut c, "q");
    }
    // Seconds left on the lease of each job claimed (one-job claim, then a batch of two).
    let left = |c: &mut Client, n: i32| -> Vec<(i64, uuid::Uuid, f64)> {
        c.query(
            "SELECT id, lease_token, extract(epoch FROM lease_expires_at - now())::float8
               FROM jq.claim('q', 'w', $1, lease => '100 years')",
            &[&n],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
    };
    let mut claimed = left(&mut c, 1);
    claimed.extend(left(&mut c, 2));
    assert_eq!(claimed.len(), 3);
    for (_, _, secs) in &claimed {
        assert!(*secs <= 3600.0 + 60.0, "a claim took a lease past max_lease: {secs} s");
    }
    let (id, token, _) = claimed[0];
    let extended: f64 = c
        .query_one("SELECT extract(epoch FROM lease_expires_at - now())::float8 FROM jq.heartbeat($1, $2, '10 years')",
                   &[&id, &token])
        .unwrap()
        .get(0);
    assert!(extended <= 3600.0 + 60.0, "a heartbeat extended past max_lease: {extended} s");
    c.batch_execute("SELECT jq.alter_queue('q', max_lease => '0')").unwrap();
    let free: f64 = c
        .query_one("SELECT extract(epoch FROM lease_expires_at - now())::float8 FROM jq.heartbeat($1, $2, '10 years')",
                   &[&id, &token])
        .unwrap()
        .get(0);
    assert!(free > 86400.0 * 365.0, "max_lease => '0' did not remove the bound: {free} s");
}
