//! jq.await: returns a job's outcome once it is final, woken through shared memory by the
//! commit that ends it (src/awaiting.rs), or its current state when the wait runs out.
//!
//! The wakeup tests await with a long wait (WAIT) and require the outcome within WOKEN_WITHIN of
//! the finish's commit: an awaiter nobody wakes returns at its deadline (a latch set by
//! PostgreSQL itself makes it look again only if a committer marked it: src/awaiting.rs), so
//! the broken variants fail them by a wide margin.

use jq_pg_test::{broken, claim, complete, sabotage, sqlstate, Client, TestDb};
use serde_json::{json, Value};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const AWAIT: &str = "jq.await(bigint,interval,bigint)";
const CANCEL: &str = "jq.cancel(bigint,bigint)";
const WAIT: &str = "40 seconds";
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

/// The broken variants. await_wrong_queue: the awaiter registers under another queue's hash,
/// so no commit wakes it. cancel_wakes_nobody: jq.cancel of a job that is not running notes no
/// wakeup for its awaiters.
fn apply_breaks(c: &mut Client) {
    if broken("await_wrong_queue") {
        sabotage(c, AWAIT, "jq._await_register(v_queue)", "jq._await_register(v_queue || '#')", 1);
    }
    if broken("cancel_wakes_nobody") {
        sabotage(c, CANCEL, "PERFORM jq._wake_awaiters(v_job.queue);", "PERFORM true;", 1);
    }
}

/// Held by every test that finishes jobs while awaiters may be registered: `jq._await_wakeups()`
/// counts the latches set for awaiters of the whole cluster, and
/// `an_await_that_fails_inside_a_savepoint_ends_its_registration` requires that count not to
/// move while it finishes a job (the test runner runs several tests at once).
static WAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`WAKING`] (also after a test that held it panicked).
fn waking() -> std::sync::MutexGuard<'static, ()> {
    WAKING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The row jq.await returns.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    state: String,
    result: Option<Value>,
    last_error: Option<String>,
    finished: bool,
}

fn await_job(c: &mut impl postgres::GenericClient, id: i64, wait: Option<&str>) -> Result<Outcome, postgres::Error> {
    c.query_one(
        "SELECT state::text, result, last_error, finished_at IS NOT NULL FROM jq.await($1, $2::text::interval)",
        &[&id, &wait],
    )
    .map(|r| Outcome { state: r.get(0), result: r.get(1), last_error: r.get(2), finished: r.get(3) })
}

/// Awaits `id` on a connection of its own in a new thread (after `start`); returns the outcome
/// and when it arrived.
fn awaiter(db: &TestDb, id: i64, start: Arc<Barrier>) -> thread::JoinHandle<(Outcome, Instant)> {
    let mut c = db.connect();
    thread::spawn(move || {
        start.wait();
        let o = await_job(&mut c, id, Some(WAIT)).expect("jq.await");
        (o, Instant::now())
    })
}

/// Waits until `n` backends sleep in jq.await (their wait event), so the finish comes after
/// they registered and looked: the wakeup, not their first look, must bring the outcome.
fn until_sleeping(c: &mut Client, n: i64) {
    jq_pg_test::waiting::wait_until(Duration::from_secs(30), "awaiters asleep", || {
        let k: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                   AND query LIKE '%jq.await(%' AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .get(0);
        k >= n
    });
}

#[test]
fn await_returns_a_finished_job_at_once_and_the_current_state_when_the_wait_runs_out() {
    let _waking = waking();
    let db = TestDb::new("await_basic");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q', max_attempts => 1)").unwrap();
    let dead: i64 = c.query_one("SELECT jq.enqueue('q', '{}')", &[]).unwrap().get(0);
    let j = claim(&mut c, "q", "w", 1, None).pop().unwrap();
    c.execute("SELECT jq.fail($1, $2, 'no luck')", &[&j.id, &j.token]).unwrap();
    let o = await_job(&mut c, dead, Some(WAIT)).unwrap();
    assert_eq!(o, Outcome { state: "dead".into(), result: None, last_error: Some("no luck".into()), finished: true });

    let ready: i64 = c.query_one("SELECT jq.enqueue('q', '{}')", &[]).unwrap().get(0);
    let t = Instant::now();
    assert_eq!(await_job(&mut c, ready, None).unwrap().state, "ready", "no wait: the state now");
    assert_eq!(await_job(&mut c, ready, Some("0")).unwrap().state, "ready");
    assert!(t.elapsed() < Duration::from_secs(5));
    let t = Instant::now();
    let o = await_job(&mut c, ready, Some("300 milliseconds")).unwrap();
    assert_eq!((o.state.as_str(), o.finished), ("ready", false), "wait ran out: the current state");
    assert!(t.elapsed() >= Duration::from_millis(300), "returned before its wait ran out: {:?}", t.elapsed());
}

#[test]
fn await_refuses_bad_input_with_clear_sqlstates() {
    let db = TestDb::new("await_bad");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let id: i64 = c.query_one("SELECT jq.enqueue('q', '{}')", &[]).unwrap().get(0);
    assert_eq!(sqlstate(await_job(&mut c, id + 1000, Some("1 second"))), "42704", "unknown job");
    assert_eq!(sqlstate(c.query_one("SELECT * FROM jq.await(NULL)", &[])), "22004", "NULL id");
    for bad in ["-1 second", "2 hours", "1 hour 1 second", "1 day -23 hours"] {
        assert_eq!(sqlstate(await_job(&mut c, id, Some(bad))), "22023", "wait {bad}");
    }
    let mut t = c.transaction().unwrap();
    t.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").unwrap();
    assert_eq!(sqlstate(await_job(&mut t, id, Some("1 second"))), "25000", "a wait needs READ COMMITTED");
    t.rollback().unwrap();
    // Its own enqueue, not committed: no worker can ever see the job, so no wait.
    let mut t = c.transaction().unwrap();
    let mine: i64 = t.query_one("SELECT jq.enqueue('q', '{}')", &[]).unwrap().get(0);
    assert_eq!(sqlstate(await_job(&mut t, mine, Some("1 second"))), "25000", "a wait after writing");
    t.rollback().unwrap();
    let mut t = c.transaction().unwrap();
    let mine: i64 = t.query_one("SELECT jq.enqueue('q', '{}')", &[]).unwrap().get(0);
    assert_eq!(await_job(&mut t, mine, None).unwrap().state, "ready", "no wait is fine in any transaction");
    t.rollback().unwrap();
}

// Concurrent finishes: 24 jobs in one queue, an awaiter per job (and three more on job 0), all
// asleep before anything finishes; then 3 workers end them concurrently (completed with a
// result, failed to dead, cancelled through a cancellation request). Every awaiter must return
// its job's final outcome well before its wait.
// Negative control: JQ_TEST_BREAK=await_wrong_queue (awaiters register under another queue)
// made this test fail: the awaiters returned only at their deadline, after 40 s.
#[test]
fn awaiters_are_woken_by_concurrent_finishes_and_each_gets_its_own_outcome() {
    let _waking = waking();
    let db = TestDb::new("await_many");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.batch_execute("SELECT jq.create_queue('q', max_attempts => 1)").unwrap();
    const JOBS: i64 = 24;
    let ids: Vec<i64> = (0..JOBS)
        .map(|i| c.query_one("SELECT jq.enqueue('q', jsonb_build_object('i', $1::int8))", &[&i]).unwrap().get(0))
        .collect();
    let mut targets: Vec<i64> = ids.clone();
    targets.extend([ids[0], ids[0], ids[0]]);
    let start = Arc::new(Barrier::new(targets.len() + 1));
    let awaiters: Vec<_> = targets.iter().map(|id| (*id, awaiter(&db, *id, start.clone()))).collect();
    start.wait();
    until_sleeping(&mut c, targets.len() as i64);
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let mut wc = db.connect();
            let mut admin = db.connect();
            thread::spawn(move || {
              let mut finished = Vec::new();
              loop {
                let Some(j) = claim(&mut wc, "q", &format!("w{w}"), 1, None).pop() else { return finished };
                let i: i64 = wc.query_one("SELECT (payload->>'i')::int8 FROM jq.jobs WHERE id = $1", &[&j.id]).unwrap().get(0);
                match i % 3 {
                    0 => {
                        let r = wc.query_one("SELECT jq.complete($1, $2, jsonb_build_object('done', $3::int8))", &[&j.id, &j.token, &i]).unwrap();
                        assert!(r.get::<_, bool>(0));
                    }
                    1 => {
                        wc.execute("SELECT jq.fail($1, $2, 'failed ' || $3::text)", &[&j.id, &j.token, &i.to_string()]).unwrap();
                    }
                    _ => {
                        admin.execute("SELECT jq.cancel($1)", &[&j.id]).unwrap();
                        wc.execute("SELECT jq.fail($1, $2, 'stopped')", &[&j.id, &j.token]).unwrap();
                    }
                }
                finished.push((j.id, Instant::now()));  // committed (autocommit)
              }
            })
        })
        .collect();
    let finished: std::collections::HashMap<i64, Instant> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    for (id, h) in awaiters {
        let (o, at) = h.join().unwrap();
        let i = ids.iter().position(|x| *x == id).unwrap() as i64;
        let expected = match i % 3 {
            0 => Outcome { state: "completed".into(), result: Some(json!({"done": i})), last_error: None, finished: true },
            1 => Outcome { state: "dead".into(), result: None, last_error: Some(format!("failed {i}")), finished: true },
            _ => Outcome { state: "cancelled".into(), result: None, last_error: Some("stopped".into()), finished: true },
        };
        assert_eq!(o, expected, "job {id}");
        let after = at.saturating_duration_since(finished[&id]);
        assert!(after < WOKEN_WITHIN, "job {id}: its awaiter returned {after:?} after the job's end committed");
    }
}

// The one event is a cancellation of a job nobody runs (no slot freed, no other job ends).
// Negative control: JQ_TEST_BREAK=cancel_wakes_nobody (jq.cancel notes no await wakeup) made
// this test fail: the awaiter returned only at its deadline. JQ_TEST_BREAK=await_wrong_queue
// too.
#[test]
fn a_cancelled_waiting_job_and_a_dropped_queue_wake_their_awaiters() {
    let _waking = waking();
    let db = TestDb::new("await_cancel");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.batch_execute("SELECT jq.create_queue('q'); SELECT jq.create_queue('gone')").unwrap();
    let id: i64 = c.query_one("SELECT jq.enqueue('q', '{}', delay => '1 hour')", &[]).unwrap().get(0);
    let start = Arc::new(Barrier::new(2));
    let h = awaiter(&db, id, start.clone());
    start.wait();
    until_sleeping(&mut c, 1);
    let t0 = Instant::now();
    assert!(c.query_one("SELECT jq.cancel($1)", &[&id]).unwrap().get::<_, bool>(0));
    let (o, at) = h.join().unwrap();
    assert_eq!((o.state.as_str(), o.finished), ("cancelled", true));
    assert!(at.duration_since(t0) < WOKEN_WITHIN, "woken after {:?}", at.duration_since(t0));

    // A dropped queue: the awaiter learns at once that the job is gone (42704).
    let gone: i64 = c.query_one("SELECT jq.enqueue('gone', '{}')", &[]).unwrap().get(0);
    let mut w = db.connect();
    let t = thread::spawn(move || {
        let r = await_job(&mut w, gone, Some(WAIT));
        (r.map_err(|e| e.code().map(|s| s.code().to_string())), Instant::now())
    });
    until_sleeping(&mut c, 1);
    let t0 = Instant::now();
    c.batch_execute("SELECT jq.drop_queue('gone', force => true)").unwrap();
    let (r, at) = t.join().unwrap();
    assert_eq!(r.unwrap_err(), Some("42704".to_string()));
    assert!(at.duration_since(t0) < WOKEN_WITHIN, "woken after {:?}", at.duration_since(t0));
}

// The race between an awaiter's first look and the finish: in each round the completion
// commits while the awaiter starts (no sleep between them), so it lands before the
// registration, between the registration and the look, or after the look. Every round must
// return the outcome well before the wait: a completion between the look and a registration
// that came after it would be lost.
#[test]
fn a_finish_racing_the_awaiters_first_look_is_never_lost() {
    let _waking = waking();
    let db = TestDb::new("await_race");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let mut w = db.connect();
    for round in 0..60 {
        let id: i64 = c.query_one("SELECT jq.enqueue('q', '{}')", &[]).unwrap().get(0);
        let j = claim(&mut w, "q", "w", 1, None).pop().unwrap();
        let start = Arc::new(Barrier::new(2));
        let h = awaiter(&db, id, start.clone());
        start.wait();
        let t0 = Instant::now();
        assert!(complete(&mut w, &j));
        let (o, at) = h.join().unwrap();
        assert_eq!(o.state, "completed", "round {round}");
        assert!(at.duration_since(t0) < WOKEN_WITHIN, "round {round}: returned after {:?}", at.duration_since(t0));
    }
    let woken: Option<i64> = c.query_one("SELECT jq._await_wakeups()", &[]).unwrap().get(0);
    assert!(woken.is_some(), "jq is preloaded in the test cluster: awaiters use shared memory");
}

/// An await that fails inside a savepoint (here its statement timeout) ends its registration when
/// the savepoint is rolled back (src/awaiting.rs, at_subxact_abort): a job of its queue that
/// ends afterwards sets no latch of it. Seen failing before the fix: "a finish after the
/// rollback still woke 1 awaiter".
#[test]
fn an_await_that_fails_inside_a_savepoint_ends_its_registration() {
    let _waking = waking();
    let db = TestDb::new("await_savepoint");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('sv')").unwrap();
    let id: i64 = c.query_one("SELECT jq.enqueue('sv', '{}')", &[]).unwrap().get(0);
    let mut a = db.connect();
    a.batch_execute("BEGIN").unwrap();
    a.batch_execute("SAVEPOINT s").unwrap();
    a.batch_execute("SET LOCAL statement_timeout = '300ms'").unwrap();
    let r = a.query("SELECT state FROM jq.await($1, '10 s')", &[&id]);
    assert_eq!(sqlstate(r), "57014", "the await times out");
    a.batch_execute("ROLLBACK TO SAVEPOINT s").unwrap();
    let before: Option<i64> = c.query_one("SELECT jq._await_wakeups()", &[]).unwrap().get(0);
    let j = claim(&mut c, "sv", "w", 1, None).pop().unwrap();
    assert!(complete(&mut c, &j));
    let after: Option<i64> = c.query_one("SELECT jq._await_wakeups()", &[]).unwrap().get(0);
    a.batch_execute("COMMIT").unwrap();
    let woken = after.unwrap() - before.expect("jq is preloaded in the test cluster");
    assert_eq!(woken, 0, "a finish after the rollback still woke {woken} awaiter");
}
