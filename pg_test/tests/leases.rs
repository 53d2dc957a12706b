//! Leases with real connections: stale workers are fenced off by their lease token, the reaper
//! recovers jobs from the job's own lease and never overwrites a newer outcome, each job of a
//! batch has its own lease, and cancellation reaches the worker through its heartbeat.
//!
//! The clock is never moved: maintenance functions get explicit instants (`now() + ...` or a
//! lease's own expiry plus a margin).
//!
//! Negative controls: `JQ_TEST_BREAK=<name>` makes a test replace one jq function in its own
//! database with a broken copy (see `jq_pg_test::sabotage`), and the test must then fail. The
//! comment at each test records what was broken and how the test failed.

use jq_pg_test::{
    backend_pid, broken, claim, complete, executions, job_row, sabotage, state, waiting_on_lock, Claimed, Client,
    TestDb,
};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

const REAP: &str = "jq._reap(timestamptz,integer,integer)";
const COMPLETE: &str = "jq.complete(bigint,uuid,jsonb)";

/// The broken variants shared by several tests.
fn apply_breaks(c: &mut Client) {
    if broken("complete_no_token") {
        // A completion fenced on the job id and state only (no lease token).
        sabotage(c, COMPLETE, "AND j.lease_token OPERATOR(pg_catalog.=) complete.lease_token", "AND true", 1);
    }
    if broken("reap_no_lock_no_fence") {
        // A reaper that picks without locking and updates by id alone: the
        // picking sub-select loses FOR UPDATE SKIP LOCKED, the UPDATE its state and lease fence.
        sabotage(
            c,
            REAP,
            "\n            FOR UPDATE SKIP LOCKED)) AND j.state::text = 'running' AND j.lease_expires_at < _reap.now\n",
            "))\n",
            1,
        );
    }
}

fn enqueue(c: &mut Client, queue: &str) -> i64 {
    c.query_one("SELECT jq.enqueue($1)", &[&queue]).expect("enqueue").get(0)
}

fn reap(c: &mut Client, instant_sql: &str) -> i32 {
    c.query_one(&format!("SELECT jq._reap({instant_sql})"), &[]).expect("jq._reap").get(0)
}

/// (state, attempt, lease_expiries, worker, lease token as text) of a job.
fn job(c: &mut Client, id: i64) -> (String, i32, i32, Option<String>, Option<String>) {
    let r = c
        .query_one(
            "SELECT state::text, attempt, lease_expiries, worker, lease_token::text FROM jq.jobs WHERE id = $1",
            &[&id],
        )
        .expect("job");
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
}

fn ex(seq: i32, attempt: i32, outcome: &str) -> (i32, i32, String) {
    (seq, attempt, outcome.to_string())
}

/// jq.fail -> the new state as text, or None.
fn fail(c: &mut Client, j: &Claimed, error: &str) -> Option<String> {
    c.query_one("SELECT jq.fail($1, $2, $3)::text", &[&j.id, &j.token, &error]).expect("jq.fail").get(0)
}

/// jq.heartbeat -> (lease_expires_at is not NULL, cancel_requested).
fn heartbeat(c: &mut Client, j: &Claimed, extend: Option<&str>) -> (bool, Option<bool>) {
    let r = c
        .query_one(
            "SELECT lease_expires_at IS NOT NULL, cancel_requested FROM jq.heartbeat($1, $2, $3::text::interval)",
            &[&j.id, &j.token, &extend],
        )
        .expect("jq.heartbeat");
    (r.get(0), r.get(1))
}

fn release(c: &mut Client, j: &Claimed) -> bool {
    c.query_one("SELECT jq.release($1, $2)", &[&j.id, &j.token]).expect("jq.release").get(0)
}

enum Outcome<T> {
    Finished(T),
    Blocked,
}

/// Waits (bounded) until the statement running in another thread on backend `pid` either
/// finishes (its result arrives on `rx`) or is seen waiting for a lock.
fn finished_or_blocked<T>(rx: &Receiver<T>, admin: &mut Client, pid: i32) -> Outcome<T> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(v) => return Outcome::Finished(v),
            Err(RecvTimeoutError::Timeout) => {
                if waiting_on_lock(admin, pid) {
                    return Outcome::Blocked;
                }
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the statement's thread died"),
        }
    }
    panic!("backend {pid} neither finished nor waited for a lock within 60 s");
}

/// Runs `sql` (one integer result) on `conn` in a new thread; returns its backend pid, the
/// result channel and the thread.
fn run_in_thread(
    mut conn: Client,
    sql: String,
) -> (i32, Receiver<Result<i32, String>>, thread::JoinHandle<()>) {
    let pid = backend_pid(&mut conn);
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let r = conn.query_one(sql.as_str(), &[]).map(|r| r.get::<_, i32>(0)).map_err(|e| match e.as_db_error() {
            Some(d) => format!("{}: {}", d.code().code(), d.message()),
            None => e.to_string(),
        });
        let _ = tx.send(r);
    });
    (pid, rx, h)
}

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
            "jq.heartbeat(bigint,uuid,interval)",
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

// Negative control: JQ_TEST_BREAK=reap_no_ceiling (the reaper sends a job over the ceiling back
// to ready instead of dead) made this test fail: after the third reap the job was 'ready'.
#[test]
fn job_whose_lease_expires_more_than_max_lease_expiries_times_goes_dead() {
    let db = TestDb::new("ceiling");
    let mut c = db.connect();
    if broken("reap_no_ceiling") {
        sabotage(&mut c, REAP, "THEN 'dead'", "THEN 'ready'", 1);
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
        sabotage(&mut c, REAP, "FROM back b WHERE b.concurrency_key IS NOT NULL AND b.state <> 'ready'", "FROM back b WHERE false", 1);
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
        sabotage(&mut c, "jq.heartbeat(bigint,uuid,interval)", "RETURNING j.lease_expires_at, j.cancel_requested", "RETURNING j.lease_expires_at, false", 1);
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

// Scenario (a rescuer discarded jobs of kinds it did not know). Negative control:
// JQ_TEST_BREAK=reap_discards (the reaper ends expired jobs dead instead of ready) made this
// test fail: the job was 'dead' after the reap.
#[test]
fn expired_lease_on_a_queue_without_live_workers_is_retried_not_dropped() {
    let db = TestDb::new("x05");
    let mut c = db.connect();
    if broken("reap_discards") {
        sabotage(&mut c, REAP, "ELSE 'ready' END::jq.job_state", "ELSE 'dead' END::jq.job_state", 1);
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
