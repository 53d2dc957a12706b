//! Heartbeats: each job of a batch has its own lease, a silent worker loses its job, a cancel reaches the worker.

use jq_pg_test::{broken, claim, complete, executions, sabotage, state, TestDb};

use super::{apply_breaks, enqueue, ex, fail, heartbeat, reap, release};

// Scenario (a batch shared one visibility deadline; late completes of redelivered jobs).
// Negative control: JQ_TEST_BREAK=complete_no_token made this test fail: w1's late complete
// of a job redelivered to w2 returned true.
#[test]
fn each_job_of_a_claimed_batch_has_its_own_lease_and_only_heartbeated_jobs_survive_the_reaper() {
    let db = TestDb::new("q03");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    c.execute("SELECT jq.enqueue_many('q', (SELECT jsonb_agg(g) FROM generate_series(1, 10) g))", &[]).unwrap();
    let (mut w1, mut w2) = (db.connect(), db.connect());
    let batch = claim(&mut w1, "q", "w1", 10, Some("3 seconds"));
    assert_eq!(batch.len(), 10);
    let tokens: std::collections::HashSet<_> = batch.iter().map(|j| j.token).collect();
    assert_eq!(tokens.len(), 10, "each job of the batch has its own lease token");

    let kept = &batch[0];
    let others: Vec<i64> = batch[1..].iter().map(|j| j.id).collect();
    assert_eq!(heartbeat(&mut w1, kept, Some("1 hour")), (true, Some(false)));
    // The heartbeat moved only its own job's lease.
    let (other_max, other_min, kept_expiry_later): (String, String, bool) = {
        let r = c
            .query_one(
                "SELECT date_trunc('second', max(lease_expires_at))::text,
                        date_trunc('second', min(lease_expires_at) + interval '1 second')::text,
                        (SELECT lease_expires_at FROM jq.jobs WHERE id = $2) > max(lease_expires_at) + interval '50 minutes'
                 FROM jq.jobs WHERE id = ANY($1)",
                &[&others, &kept.id],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    // Each job's lease starts when its row is claimed, so leases of one batch differ by
    // microseconds; none moved by as much as a second.
    assert!(other_max <= other_min, "the other jobs keep the lease of the claim: {other_max} vs {other_min}");
    assert!(kept_expiry_later, "the heartbeat extended its job's lease");

    // An instant past the batch's lease but long before the heartbeat's.
    let n = reap(&mut c, &format!("'{other_max}'::timestamptz + interval '1 second'"));
    assert_eq!(n, 9, "only the jobs without a heartbeat are reaped");
    assert_eq!(state(&mut c, kept.id).as_deref(), Some("running"));
    let ready: i64 = c
        .query_one("SELECT count(*) FROM jq.jobs WHERE id = ANY($1) AND state = 'ready' AND attempt = 0", &[&others])
        .unwrap()
        .get(0);
    assert_eq!(ready, 9);

    let redelivered = claim(&mut w2, "q", "w2", 10, Some("3 seconds"));
    let mut got: Vec<i64> = redelivered.iter().map(|j| j.id).collect();
    got.sort();
    assert_eq!(got, others, "w2 gets exactly the reaped jobs");
    assert!(redelivered.iter().all(|j| j.attempt == 1));

    let stale = batch.iter().find(|j| j.id == others[0]).unwrap();
    assert!(!complete(&mut w1, stale), "w1's late complete of a job redelivered to w2");
    assert!(complete(&mut w1, kept), "w1 completes the job it kept alive");
    for j in &redelivered {
        assert!(complete(&mut w2, j), "w2 completes job {}", j.id);
    }
    let done: i64 = c
        .query_one("SELECT count(*) FROM jq.jobs WHERE queue = 'q' AND state = 'completed'", &[])
        .unwrap()
        .get(0);
    assert_eq!(done, 10);
}

// Scenario (shutdown stopped the heartbeat first; jobs ended both completed and failed).
// Negative control: JQ_TEST_BREAK=complete_no_token made this test fail: w1's complete after
// losing its lease returned true ("w1 finishes after losing its lease: complete must be
// rejected"), completing w2's execution.
#[test]
fn worker_that_stops_heartbeating_loses_its_job_and_each_execution_has_one_outcome() {
    let db = TestDb::new("q04");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let id = enqueue(&mut c, "q");
    let (mut w1, mut w2) = (db.connect(), db.connect());
    let j1 = claim(&mut w1, "q", "w1", 1, Some("2 seconds")).pop().unwrap();
    assert_eq!(heartbeat(&mut w1, &j1, None), (true, Some(false)), "w1 renews once, then stops");

    // The lease runs out: reap at an instant just past it.
    let n = reap(&mut c, &format!("(SELECT lease_expires_at + interval '1 second' FROM jq.jobs WHERE id = {id})"));
    assert_eq!(n, 1);
    let j2 = claim(&mut w2, "q", "w2", 1, Some("1 minute")).pop().expect("w2 re-claims");
    assert_eq!((j2.id, j2.attempt), (id, 1));

    assert!(!complete(&mut w1, &j1), "w1 finishes after losing its lease: complete must be rejected");
    assert_eq!(fail(&mut w1, &j1, "shutdown"), None, "and so must a fail");
    assert!(complete(&mut w2, &j2), "w2 completes");

    assert_eq!(executions(&mut c, id), vec![ex(1, 1, "lease_expired"), ex(2, 1, "completed")]);
    let (st, last_error): (String, Option<String>) = {
        let r = c.query_one("SELECT state::text, last_error FROM jq.jobs WHERE id = $1", &[&id]).unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((st.as_str(), last_error), ("completed", None), "a completed job with a recorded failure");
    // One terminal outcome per execution, never completed and failed for the same seq.
    let mixed: i64 = c
        .query_one(
            "SELECT count(*) FROM (SELECT job_id, seq FROM jq.executions GROUP BY job_id, seq
                                   HAVING count(*) > 1) s",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(mixed, 0);
}

// Negative control: JQ_TEST_BREAK=release_ignores_cancel (jq.release always puts the job back
// to ready) made this test fail: the released job was 'ready' instead of 'cancelled'.
// JQ_TEST_BREAK=heartbeat_hides_cancel (heartbeat returns false for cancel_requested) made it
// fail at the heartbeat after jq.cancel.
#[test]
fn heartbeat_reports_a_cancel_request_and_release_then_ends_the_job_cancelled() {
    let db = TestDb::new("cancel");
    let mut c = db.connect();
    if broken("release_ignores_cancel") {
        sabotage(
            &mut c,
            "jq.release(bigint,uuid)",
            "CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'ready' END::jq.job_state",
            "'ready'::jq.job_state",
            1,
        );
    }
    if broken("heartbeat_hides_cancel") {
        sabotage(&mut c, "jq.heartbeat(bigint,uuid,interval,jsonb)", "RETURNING j.lease_expires_at, j.cancel_requested", "RETURNING j.lease_expires_at, false", 1);
    }
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let id = enqueue(&mut c, "q");
    let mut w = db.connect();
    let j = claim(&mut w, "q", "w", 1, None).pop().unwrap();
    assert_eq!(heartbeat(&mut w, &j, None), (true, Some(false)));

    let cancelled: bool = c.query_one("SELECT jq.cancel($1)", &[&id]).unwrap().get(0);
    assert!(cancelled, "jq.cancel on a running job");
    assert_eq!(state(&mut c, id).as_deref(), Some("running"), "a running job keeps running until its worker stops");
    assert_eq!(heartbeat(&mut w, &j, None), (true, Some(true)), "the heartbeat must report the cancel request");

    assert!(release(&mut w, &j), "release of the cancel-requested job");
    let (st, finished): (String, bool) = {
        let r = c.query_one("SELECT state::text, finished_at IS NOT NULL FROM jq.jobs WHERE id = $1", &[&id]).unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((st.as_str(), finished), ("cancelled", true));
    assert_eq!(executions(&mut c, id), vec![ex(1, 1, "cancelled")]);
    assert!(claim(&mut w, "q", "w", 1, None).is_empty(), "a cancelled job is claimed");
    let again: bool = c.query_one("SELECT jq.cancel($1)", &[&id]).unwrap().get(0);
    assert!(!again, "jq.cancel of a finished job returns false");
}
