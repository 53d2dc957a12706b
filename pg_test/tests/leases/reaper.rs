//! The reaper recovers jobs from their own lease: dead workers and sessions, the expiry ceiling, no live workers.

use jq_pg_test::{backend_pid, broken, claim, complete, executions, sabotage, state, Claimed, Client, TestDb};
use std::thread;
use std::time::{Duration, Instant};

use super::{enqueue, ex, heartbeat, job, reap, END_LEASES, REAP};

// Negative control: JQ_TEST_BREAK=reap_no_ceiling (the reaper sends a job over the ceiling back
// to ready instead of dead) made this test fail: after the third reap the job was 'ready'.
#[test]
fn job_whose_lease_expires_more_than_max_lease_expiries_times_goes_dead() {
    let db = TestDb::new("ceiling");
    let mut c = db.connect();
    if broken("reap_no_ceiling") {
        sabotage(&mut c, END_LEASES, "THEN 'dead'", "THEN 'ready'", 1);
    }
    c.execute("SELECT jq.create_queue('q', max_lease_expiries => 2)", &[]).unwrap();
    let id = enqueue(&mut c, "q");
    let mut w = db.connect();
    for round in 1..=3 {
        let j = claim(&mut w, "q", "w", 1, Some("1 second")).pop().expect("claimable");
        assert_eq!((j.id, j.attempt), (id, 1), "round {round}");
        assert_eq!(reap(&mut c, "now() + interval '1 hour'"), 1, "round {round}");
        let (st, attempt, expiries, _, _) = job(&mut c, id);
        let want = if round < 3 { "ready" } else { "dead" };
        assert_eq!((st.as_str(), attempt, expiries), (want, 0, round), "after reap {round}");
    }
    let (last_error, finished): (Option<String>, bool) = {
        let r = c.query_one("SELECT last_error, finished_at IS NOT NULL FROM jq.jobs WHERE id = $1", &[&id]).unwrap();
        (r.get(0), r.get(1))
    };
    let last_error = last_error.expect("a dead job says why");
    assert!(
        last_error.contains("lease expired 3 times") && last_error.contains("max_lease_expiries"),
        "last_error should name the lease expiries: {last_error:?}"
    );
    assert!(finished, "a dead job has finished_at");
    assert!(claim(&mut w, "q", "w", 1, None).is_empty(), "a dead job is claimed");
    assert_eq!(
        executions(&mut c, id),
        vec![ex(1, 1, "lease_expired"), ex(2, 1, "lease_expired"), ex(3, 1, "lease_expired")]
    );
}

/// Claims one job as `worker` on a new session with a 10 minute lease, then kills that session
/// with pg_terminate_backend from `admin` and waits until it is gone.
fn claim_then_kill_session(db: &TestDb, admin: &mut Client, queue: &str, worker: &str) -> Claimed {
    let mut a = db.connect();
    let pid = backend_pid(&mut a);
    let j = claim(&mut a, queue, worker, 1, Some("10 minutes")).pop().expect("claim before the kill");
    let killed: bool = admin.query_one("SELECT pg_terminate_backend($1)", &[&pid]).unwrap().get(0);
    assert!(killed, "pg_terminate_backend");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        admin.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
        let alive: bool = admin
            .query_one("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", &[&pid])
            .unwrap()
            .get(0);
        if !alive {
            break;
        }
        assert!(Instant::now() < deadline, "killed backend {pid} still there after 30 s");
        thread::sleep(Duration::from_millis(20));
    }
    drop(a);
    j
}

// Scenario (a job stuck running forever once its worker died). Negative control:
// JQ_TEST_BREAK=reap_needs_live_worker (the reaper only recovers jobs whose worker still has a
// session, the way stalled-job detection joined on a worker registry) made this test fail: the
// killed worker's job stayed 'running' and the reap returned 0.
#[test]
fn killed_workers_job_is_claimable_again_once_its_lease_expires() {
    let db = TestDb::new("q01");
    let mut c = db.connect();
    if broken("reap_needs_live_worker") {
        sabotage(
            &mut c,
            REAP,
            "AND x.lease_expires_at < _reap.now\n",
            "AND x.lease_expires_at < _reap.now
              AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = x.worker)\n",
            1,
        );
    }
    c.execute("SELECT jq.create_queue('q1')", &[]).unwrap();
    let id = enqueue(&mut c, "q1");
    let j = claim_then_kill_session(&db, &mut c, "q1", "pod-a");
    assert_eq!(j.id, id);
    assert_eq!(state(&mut c, id).as_deref(), Some("running"), "the job stays running until its lease expires");
    assert_eq!(reap(&mut c, "now()"), 0, "reaped before its lease expired");
    assert_eq!(reap(&mut c, "now() + interval '10 minutes'"), 1, "the dead worker's job is reaped at lease expiry");
    let (st, attempt, expiries, _, _) = job(&mut c, id);
    assert_eq!((st.as_str(), attempt, expiries), ("ready", 0, 1));
    let mut w = db.connect();
    let again = claim(&mut w, "q1", "pod-b", 1, None).pop().expect("claimable again");
    assert_eq!((again.id, again.attempt), (id, 1));
    assert!(complete(&mut w, &again));
    assert_eq!(executions(&mut c, id), vec![ex(1, 1, "lease_expired"), ex(2, 1, "completed")]);
}

// Scenario (a serialised named queue locked for good once its job hit its limit during a
// connection drop). A queue capped at one running job whose jobs share a concurrency key: the
// holder's session is killed, and its job may not outlive one more lease expiry
// (max_lease_expiries 0), so the reaper ends it dead. The cap and the key's slot must both be
// free again: the key's next job and an unkeyed job of the queue are claimable.
// Negative control: JQ_TEST_BREAK=reap_keeps_key_slot (the reaper's key refill left out for
// jobs it ends) made this test fail: the key's next job stayed blocked and the claim returned
// only the unkeyed job.
#[test]
fn x08_a_capped_keyed_queue_unlocks_when_its_crashed_holders_lease_expires() {
    let db = TestDb::new("x08");
    let mut c = db.connect();
    if broken("reap_keeps_key_slot") {
        sabotage(&mut c, END_LEASES, "FROM back b WHERE b.concurrency_key IS NOT NULL AND b.state <> 'ready'", "FROM back b WHERE false", 1);
    }
    c.batch_execute("SELECT jq.create_queue('x8', max_concurrency => 1, max_lease_expiries => 0)").unwrap();
    let first: i64 = c.query_one("SELECT jq.enqueue('x8', '{}', concurrency_key => 'k')", &[]).unwrap().get(0);
    let second: i64 = c.query_one("SELECT jq.enqueue('x8', '{}', concurrency_key => 'k')", &[]).unwrap().get(0);
    let j = claim_then_kill_session(&db, &mut c, "x8", "pod-a");
    assert_eq!(j.id, first);
    let plain = enqueue(&mut c, "x8");
    // Held: the cap is taken, and the key's next job waits behind its head.
    assert!(claim(&mut c, "x8", "pod-b", 10, None).is_empty(), "claimed past the cap or the key");
    assert_eq!(reap(&mut c, "now() + interval '10 minutes'"), 1);
    assert_eq!(state(&mut c, first).as_deref(), Some("dead"));
    let mut got: Vec<i64> = Vec::new();
    for _ in 0..2 {
        let j = claim(&mut c, "x8", "pod-b", 1, None).pop().expect("the queue stays locked after the reap");
        assert!(complete(&mut c, &j));
        got.push(j.id);
    }
    got.sort();
    assert_eq!(got, vec![second, plain]);
}

// Scenario, variant b (a restarted pod under the same worker name makes its
// predecessor's job look alive). Negative control: JQ_TEST_BREAK=reap_skips_live_worker_name
// (the reaper skips a job while another running job of the same worker name holds a live
// lease) made this test fail: the killed session's job stayed 'running' and the reap returned 0.
#[test]
fn new_session_under_a_killed_workers_name_does_not_keep_its_old_job_running() {
    let db = TestDb::new("q01b");
    let mut c = db.connect();
    if broken("reap_skips_live_worker_name") {
        sabotage(
            &mut c,
            REAP,
            "AND x.lease_expires_at < _reap.now\n",
            "AND x.lease_expires_at < _reap.now
              AND NOT EXISTS (SELECT 1 FROM jq.jobs o WHERE o.worker = x.worker AND o.id <> x.id
                              AND o.state = 'running' AND o.lease_expires_at >= _reap.now)\n",
            1,
        );
    }
    c.execute("SELECT jq.create_queue('q1')", &[]).unwrap();
    let first = enqueue(&mut c, "q1");
    let second = enqueue(&mut c, "q1");
    let old = claim_then_kill_session(&db, &mut c, "q1", "pod-a");
    assert_eq!(old.id, first);

    // Same name, new incarnation: claims other work and keeps it alive.
    let mut b = db.connect();
    let cur = claim(&mut b, "q1", "pod-a", 1, Some("10 minutes")).pop().expect("second job");
    assert_eq!(cur.id, second);
    assert_eq!(heartbeat(&mut b, &cur, Some("1 day")), (true, Some(false)));

    assert_eq!(reap(&mut c, "now() + interval '10 minutes'"), 1, "only the killed session's job is reaped");
    let (st, attempt, _, _, _) = job(&mut c, first);
    assert_eq!((st.as_str(), attempt), ("ready", 0), "the killed session's job");
    let (st, _, _, worker, token) = job(&mut c, second);
    assert_eq!((st.as_str(), worker.as_deref()), ("running", Some("pod-a")), "the live session's job");
    assert_eq!(token, Some(cur.token.to_string()));
    assert!(complete(&mut b, &cur), "the live session completes its own job");
    let again = claim(&mut b, "q1", "pod-a", 1, None).pop().expect("the recovered job");
    assert_eq!((again.id, again.attempt), (first, 1));
}

// Scenario (a rescuer discarded jobs of kinds it did not know). Negative control:
// JQ_TEST_BREAK=reap_discards (the reaper ends expired jobs dead instead of ready) made this
// test fail: the job was 'dead' after the reap.
#[test]
fn expired_lease_on_a_queue_without_live_workers_is_retried_not_dropped() {
    let db = TestDb::new("x05");
    let mut c = db.connect();
    if broken("reap_discards") {
        sabotage(&mut c, END_LEASES, "ELSE 'ready' END::jq.job_state", "ELSE 'dead' END::jq.job_state", 1);
    }
    c.execute("SELECT jq.create_queue('orphans')", &[]).unwrap();
    let id: i64 = c
        .query_one("SELECT jq.enqueue('orphans', '{\"x\":1}', kind => 'kind_nobody_handles')", &[])
        .unwrap()
        .get(0);
    {
        // The only worker that ever served this queue claims the job and goes away for good.
        let mut gone = db.connect();
        claim(&mut gone, "orphans", "gone", 1, Some("30 seconds")).pop().expect("claim");
    }
    assert_eq!(reap(&mut c, "now() + interval '1 hour'"), 1);
    let (st, attempt, expiries, _, _) = job(&mut c, id);
    assert_eq!((st.as_str(), attempt, expiries), ("ready", 0, 1), "the orphaned job must be retried");
    let (finished, last_error, payload): (bool, Option<String>, String) = {
        let r = c
            .query_one("SELECT finished_at IS NOT NULL, last_error, payload::text FROM jq.jobs WHERE id = $1", &[&id])
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!((finished, last_error, payload.as_str()), (false, None, "{\"x\": 1}"));
    let mut w = db.connect();
    let again = claim(&mut w, "orphans", "late-worker", 1, None).pop().expect("still claimable");
    assert_eq!((again.id, again.attempt), (id, 1));
}

/// A real 0x00 byte bound as the error of jq.fail is refused by the
/// server (text cannot hold NUL) before anything changes; the job is not stranded: its lease
/// expires, it comes back, and a worker can fail it again with a sanitised message. (The reap
/// path it relies on is the one the broken variants above were seen failing against.)
#[test]
fn fail_with_a_nul_byte_is_refused_and_the_job_still_comes_back_through_its_lease() {
    let db = TestDb::new("nulfail");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('nul'); SELECT jq.enqueue('nul', '{}')").unwrap();
    let job = claim(&mut c, "nul", "w1", 1, Some("30 seconds")).pop().unwrap();
    let err = c
        .query_one("SELECT jq.fail($1, $2, $3)::text", &[&job.id, &job.token, &"boom \0 tail"])
        .unwrap_err();
    assert_eq!(err.code().map(|s| s.code()), Some("22021"), "invalid byte sequence: {err}");
    assert_eq!(state(&mut c, job.id).as_deref(), Some("running"));
    let reaped: i32 = c
        .query_one("SELECT jq._reap(now() + interval '1 minute')", &[])
        .unwrap()
        .get(0);
    assert_eq!(reaped, 1);
    let again = claim(&mut c, "nul", "w2", 1, None).pop().expect("the job came back");
    assert_eq!(again.id, job.id);
    assert_eq!(again.attempt, 1, "the crash was refunded");
    let st: String = c
        .query_one("SELECT jq.fail($1, $2, $3)::text", &[&again.id, &again.token, &"boom \\0 tail"])
        .unwrap()
        .get(0);
    assert_eq!(st, "scheduled");
}
