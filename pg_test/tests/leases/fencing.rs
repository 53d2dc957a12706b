//! Lease tokens fence stale workers off, and the reaper never overwrites an outcome in flight.

use jq_pg_test::{broken, claim, complete, executions, job_row, sabotage, state, TestDb};
use std::thread;

use super::{
    apply_breaks, enqueue, ex, fail, finished_or_blocked, heartbeat, job, reap, release, run_in_thread, Outcome,
};

// Negative controls: JQ_TEST_BREAK=complete_no_token (jq.complete fenced on id and state only)
// made this test fail: w1's late complete with the old token returned true and completed w2's
// execution. JQ_TEST_BREAK=heartbeat_no_token (jq.heartbeat fenced on id and state only) made
// it fail: w1's heartbeat returned a lease and extended w2's.
#[test]
fn stale_worker_with_an_old_lease_token_changes_nothing_after_its_job_was_reaped_and_reclaimed() {
    let db = TestDb::new("stale");
    let mut c = db.connect();
    apply_breaks(&mut c);
    if broken("heartbeat_no_token") {
        sabotage(
            &mut c,
            "jq.heartbeat(bigint,uuid,interval,jsonb)",
            "j.id = heartbeat.id AND j.lease_token = heartbeat.lease_token AND",
            "j.id = heartbeat.id AND",
            1,
        );
    }
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let id = enqueue(&mut c, "q");
    let (mut w1, mut w2) = (db.connect(), db.connect());

    let old = claim(&mut w1, "q", "w1", 1, Some("2 seconds")).pop().expect("w1 claims the job");
    assert_eq!((old.id, old.attempt), (id, 1));
    assert_eq!(reap(&mut c, "now() + interval '1 hour'"), 1, "the expired lease is reaped");
    let (st, attempt, expiries, _, _) = job(&mut c, id);
    assert_eq!((st.as_str(), attempt, expiries), ("ready", 0, 1), "reaped: ready, attempt refunded, one lease expiry");

    let new = claim(&mut w2, "q", "w2", 1, Some("10 minutes")).pop().expect("w2 claims the job");
    assert_eq!((new.id, new.attempt), (id, 1), "the refunded attempt is attempt 1 again");
    assert_ne!(new.token, old.token, "a new claim gets a new lease token");

    let before = job_row(&mut c, id);
    assert!(!complete(&mut w1, &old), "stale complete accepted");
    assert_eq!(fail(&mut w1, &old, "stale failure"), None, "stale fail accepted");
    assert_eq!(heartbeat(&mut w1, &old, None), (false, None), "stale heartbeat accepted");
    assert_eq!(heartbeat(&mut w1, &old, Some("1 day")), (false, None), "stale heartbeat with extend accepted");
    assert!(!release(&mut w1, &old), "stale release accepted");
    assert_eq!(job_row(&mut c, id), before, "a stale worker's calls changed the job row");
    assert_eq!(executions(&mut c, id), vec![ex(1, 1, "lease_expired")]);

    assert!(complete(&mut w2, &new), "the current holder completes");
    assert_eq!(state(&mut c, id).as_deref(), Some("completed"));
    assert_eq!(executions(&mut c, id), vec![ex(1, 1, "lease_expired"), ex(2, 1, "completed")]);
}

// Scenario (the reaper overwrote a job completed while it was deciding). Negative control:
// JQ_TEST_BREAK=reap_no_lock_no_fence (reaper scans without FOR UPDATE SKIP LOCKED and updates
// by id alone) made this test fail: the reaper waited for the worker's row lock instead of
// skipping the row, and once the completion committed it re-ran its update on the completed
// row and put the completed job back to ready ("the completed job was overwritten": ready; seen
// again after completions stopped writing history rows; before that, the duplicate
// (job_id, seq) history row also made it die with 23505).
#[test]
fn reaper_skips_a_job_whose_completion_is_in_flight_and_the_job_stays_completed() {
    let db = TestDb::new("q02");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let id = enqueue(&mut c, "q");
    let mut w = db.connect();
    let j = claim(&mut w, "q", "w1", 1, Some("1 second")).pop().unwrap();

    w.batch_execute("BEGIN").unwrap();
    assert!(complete(&mut w, &j), "complete inside the worker's open transaction");
    let (pid, rx, h) = run_in_thread(db.connect(), "SELECT jq._reap(now() + interval '1 hour')".into());
    let outcome = finished_or_blocked(&rx, &mut c, pid);
    w.batch_execute("COMMIT").unwrap();
    let (blocked, reaped) = match outcome {
        Outcome::Finished(r) => (false, r),
        Outcome::Blocked => (true, rx.recv().expect("reaper result")),
    };
    h.join().unwrap();

    assert_eq!(state(&mut c, id).as_deref(), Some("completed"), "the completed job was overwritten");
    assert_eq!(executions(&mut c, id), vec![ex(1, 1, "completed")]);
    assert_eq!(reaped, Ok(0), "the reaper must skip the row being completed");
    assert!(!blocked, "the reaper waited for the worker's row lock instead of skipping the row");
    assert_eq!(reap(&mut c, "now() + interval '1 hour'"), 0, "a completed job is not reaped");
}

// Scenario, variant: the job was re-claimed by w2 (in a transaction that reaped it and
// claimed it again) while another reaper pass was deciding. Negative control:
// JQ_TEST_BREAK=reap_no_lock_no_fence made this test fail: the second reaper waited for w2's
// row lock and, once w2 committed, overwrote w2's fresh claim back to 'ready' (attempt 0,
// lease_expiries 2), so w2's complete would have been rejected.
// JQ_TEST_BREAK=complete_no_token made it fail too: w1's late complete returned true.
#[test]
fn reaper_leaves_a_job_reclaimed_in_flight_by_another_worker_running_under_the_new_lease() {
    let db = TestDb::new("q02b");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let id = enqueue(&mut c, "q");
    let (mut w1, mut w2) = (db.connect(), db.connect());
    let old = claim(&mut w1, "q", "w1", 1, Some("1 second")).pop().unwrap();
    let expiry: String = c
        .query_one("SELECT lease_expires_at::text FROM jq.jobs WHERE id = $1", &[&id])
        .unwrap()
        .get(0);

    // w2's transaction: reap w1's expired lease, claim the job again; still open.
    w2.batch_execute("BEGIN").unwrap();
    let reaped: i32 = w2
        .query_one("SELECT jq._reap($1::text::timestamptz + interval '1 millisecond')", &[&expiry])
        .unwrap()
        .get(0);
    assert_eq!(reaped, 1);
    let new = claim(&mut w2, "q", "w2", 1, Some("1 hour")).pop().expect("w2 re-claims");
    assert_eq!((new.id, new.attempt), (id, 1));

    // A second reaper pass at an instant past w1's lease but long before w2's.
    let late = format!("SELECT jq._reap('{expiry}'::timestamptz + interval '1 minute')");
    let (pid, rx, h) = run_in_thread(db.connect(), late.clone());
    let outcome = finished_or_blocked(&rx, &mut c, pid);
    w2.batch_execute("COMMIT").unwrap();
    let (blocked, reaped) = match outcome {
        Outcome::Finished(r) => (false, r),
        Outcome::Blocked => (true, rx.recv().expect("reaper result")),
    };
    h.join().unwrap();

    let (st, attempt, expiries, worker, token) = job(&mut c, id);
    assert_eq!(
        (st.as_str(), attempt, expiries, worker.as_deref()),
        ("running", 1, 1, Some("w2")),
        "w2's claim was overwritten by the reaper"
    );
    assert_eq!(token, Some(new.token.to_string()));
    assert_eq!(reaped, Ok(0), "the reaper must skip the row being re-claimed");
    assert!(!blocked, "the reaper waited for w2's row lock instead of skipping the row");
    let again: i32 = c.query_one(late.as_str(), &[]).unwrap().get(0);
    assert_eq!(again, 0, "w2's lease has not expired at that instant");
    assert!(!complete(&mut w1, &old), "w1's late complete");
    assert!(complete(&mut w2, &new), "w2 completes");
    assert_eq!(executions(&mut c, id), vec![ex(1, 1, "lease_expired"), ex(2, 1, "completed")]);
}

// Lease tokens come from backend-local pools of CSPRNG bits (src/random.rs): across 8 sessions
// (each drawing its pool again several times), one-job and batch claims get 900 tokens, all
// different, shaped as gen_random_uuid's (version 4, RFC 9562 variant). A token is the fence of
// every call after the claim, so two claims sharing one would let a stale worker act on a newer
// claim. (The pool's redraw in a forked process is not exercised: no backend inherits a filled
// pool, since the postmaster never draws.)
// Negative control: JQ_TEST_BREAK=lease_token_per_attempt made this test fail ("lease tokens
// repeat": the one-job claims' tokens derived from the attempt number, so the 500 tokens of
// one-job claims across 4 sessions were one value).
#[test]
fn every_claim_in_every_session_gets_a_lease_token_of_its_own() {
    let db = TestDb::new("lease_tokens");
    let mut c = db.connect();
    if broken("lease_token_per_attempt") {
        sabotage(
            &mut c,
            "jq.claim(text,text,integer,interval,interval,bigint)",
            "lease_token = jq._lease_token(),",
            "lease_token = pg_catalog.md5(j.attempt::pg_catalog.text)::uuid,",
            2,
        );
    }
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    c.execute("SELECT jq.enqueue_many('q', (SELECT jsonb_agg(g) FROM generate_series(1, 1400) g))", &[]).unwrap();
    // 8 sessions: 4 claim one job a call (125 calls), 4 claim batches of 10 (10 calls).
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let mut s = db.connect();
            thread::spawn(move || {
                let (n, calls) = if w < 4 { (1, 125) } else { (10, 10) };
                let mut tokens = Vec::new();
                for _ in 0..calls {
                    tokens.extend(claim(&mut s, "q", &format!("w{w}"), n, None).into_iter().map(|j| j.token));
                }
                tokens
            })
        })
        .collect();
    let tokens: Vec<uuid::Uuid> = workers.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert_eq!(tokens.len(), 900);
    let distinct: std::collections::HashSet<_> = tokens.iter().collect();
    assert_eq!(distinct.len(), tokens.len(), "lease tokens repeat");
    for t in &tokens {
        assert_eq!(t.get_version_num(), 4, "{t} is not a version-4 UUID");
        assert_eq!(t.get_variant(), uuid::Variant::RFC4122, "{t} has the wrong variant");
    }
    // The stored token is the one returned.
    let stored: i64 = c
        .query_one("SELECT count(*) FROM jq.jobs WHERE state = 'running' AND lease_token = ANY ($1)", &[&tokens])
        .unwrap()
        .get(0);
    assert_eq!(stored, 900);
}
