//! Lock ordering across capped queues and concurrency keys, and a long-poll that never sleeps holding row locks.

use jq_pg_test::{broken, sabotage, TestDb};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const CLAIM_MANY: &str = "jq.claim(text[],text,integer,interval,interval,bigint)";
const ENQUEUE_MANY: &str = "jq.enqueue_many(text,jsonb,text,timestamptz,interval,integer,integer,boolean,bigint)";

/// Workers that list the same capped queues in different orders must not deadlock: with two or
/// more capped queues, jq.claim(text[]) locks their rows up front in name order. Broken variant
/// `claim_many_no_prelock` (the up-front lock removed, and the claims waiting for the queue rows
/// they reach): 394 40P01 in 480 calls (with the up-front lock removed alone the
/// control had stopped failing, since the claims take queue rows with SKIP LOCKED).
#[test]
fn claims_over_capped_queues_in_different_orders_do_not_deadlock() {
    let db = TestDb::new("capdl");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('ca', max_concurrency => 5);
         SELECT jq.create_queue('cb', max_concurrency => 5);
         SET deadlock_timeout = '50ms';",
    )
    .unwrap();
    if broken("claim_many_no_prelock") {
        sabotage(&mut c, CLAIM_MANY, "ORDER BY t.name COLLATE \"C\"\n                        FOR NO KEY UPDATE", "ORDER BY t.name COLLATE \"C\"", 1);
        // And the claims wait for the queue rows they reach (without this, SKIP LOCKED on a
        // queue row never waits, so nothing could deadlock: the control passed).
        sabotage(&mut c, CLAIM_MANY, "PERFORM pg_catalog.set_config('jq.claim_cap_skip_locked', 'on', true);", "", 1);
    }
    let threads = 8;
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let mut conn = db.connect();
            let start = start.clone();
            thread::spawn(move || {
                conn.batch_execute("SET deadlock_timeout = '50ms'").unwrap();
                let order = if i % 2 == 0 { "ARRAY['ca', 'cb']" } else { "ARRAY['cb', 'ca']" };
                start.wait();
                let mut deadlocks = 0;
                for _ in 0..60 {
                    // Each call enqueues one job in each queue and claims, then completes, in
                    // one transaction: the cap locks are held while the second queue is tried.
                    let r = conn.batch_execute(&format!(
                        "BEGIN;
                         SELECT jq.enqueue('ca'); SELECT jq.enqueue('cb');
                         SELECT jq.complete(id, lease_token) FROM jq.claim({order}, 'w{i}', 2);
                         COMMIT;"
                    ));
                    if let Err(e) = r {
                        conn.batch_execute("ROLLBACK").unwrap();
                        match e.code().map(|s| s.code()) {
                            Some("40P01") => deadlocks += 1,
                            other => panic!("unexpected error {other:?}: {e}"),
                        }
                    }
                }
                deadlocks
            })
        })
        .collect();
    let deadlocks: i32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(deadlocks, 0, "claims over capped queues deadlocked {deadlocks} times");
}

/// A multi-queue claim that lists one capped queue waits for that queue's row while another
/// claimer holds it, as the single-queue claim does, and then claims: it does not return empty
/// while the queue has ready jobs and free slots. Session A claims from `cap` in an open
/// transaction (holding the row); B's `jq.claim(ARRAY['cap', 'plain'])` must block until A
/// commits, then get a job. Earlier queues still come first, and a call that already claimed
/// does not wait (that would shorten the leases it holds): `jq.claim(ARRAY['plain', 'cap'], n
/// => 2)` returns `plain`'s job at once, without waiting for `cap`'s row.
///
/// Negative controls: JQ_TEST_BREAK=claim_many_one_capped_skips (the capped queue's claim skips
/// a busy row, as before the fix) fails: B returned 0 jobs at once, without waiting.
/// JQ_TEST_BREAK=claim_many_capped_waits_after_claiming (its claim waits for the row also after
/// jobs were claimed, as in a first version of the fix) fails the second check: 55P03.
#[test]
fn a_multi_queue_claim_waits_for_a_busy_capped_queue_row() {
    let db = TestDb::new("capone");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('cap', max_concurrency => 5);
         SELECT jq.create_queue('plain');
         SELECT jq.enqueue('cap'); SELECT jq.enqueue('cap');",
    )
    .unwrap();
    if broken("claim_many_one_capped_skips") {
        sabotage(&mut c, CLAIM_MANY, "CASE WHEN v_queue = v_one_capped AND v_got = 0 THEN '' ELSE 'on' END", "'on'", 1);
    }
    if broken("claim_many_capped_waits_after_claiming") {
        sabotage(&mut c, CLAIM_MANY, "WHEN v_queue = v_one_capped AND v_got = 0 THEN", "WHEN v_queue = v_one_capped THEN", 1);
    }
    let mut a = db.connect();
    a.batch_execute("BEGIN").unwrap();
    assert_eq!(a.query("SELECT id FROM jq.claim('cap', 'a')", &[]).unwrap().len(), 1);
    // Earlier queues first; with a job claimed, 'cap' is taken only if its row is free.
    let mut p = db.connect();
    p.batch_execute("SELECT jq.enqueue('plain'); SET lock_timeout = '2s'").unwrap();
    let first = p.query("SELECT queue FROM jq.claim(ARRAY['plain', 'cap'], 'p', 2)", &[]).expect("not blocked by 'cap'");
    assert_eq!(first.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>(), vec!["plain".to_string()]);
    let mut b = db.connect();
    let b_pid = jq_pg_test::backend_pid(&mut b);
    let claimer = thread::spawn(move || {
        b.query("SELECT id FROM jq.claim(ARRAY['cap', 'plain'], 'b')", &[]).map(|r| r.len())
    });
    // B either waits on the row lock (correct) or has already returned (the broken variant).
    let until = Instant::now() + Duration::from_secs(20);
    while !claimer.is_finished() && !jq_pg_test::waiting_on_lock(&mut c, b_pid) && Instant::now() < until {
        thread::sleep(Duration::from_millis(20));
    }
    let returned_early = claimer.is_finished();
    a.batch_execute("COMMIT").unwrap();
    let got = claimer.join().unwrap().expect("B's claim");
    assert!(!returned_early, "B returned {got} job(s) without waiting for the capped queue's row");
    assert_eq!(got, 1, "B claims the other ready job once A commits");
}

/// Batches that share idempotency keys, sent concurrently in different orders, must not
/// deadlock on each other's keys: keyed elements are enqueued in key order. Broken variant
/// `enqueue_many_array_order` (keyed elements in array order): 40P01 within a few rounds.
#[test]
fn concurrent_keyed_batches_in_different_orders_do_not_deadlock() {
    let db = TestDb::new("keydl");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('k')").unwrap();
    if broken("enqueue_many_array_order") {
        sabotage(&mut c, ENQUEUE_MANY, "s.idempotency_key COLLATE \"C\" NULLS LAST, s.ord", "s.ord", 1);
    }
    let threads = 4;
    for round in 0..5 {
        let start = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let mut conn = db.connect();
                let start = start.clone();
                thread::spawn(move || {
                    conn.batch_execute("SET deadlock_timeout = '50ms'").unwrap();
                    // Same 200 keys, each thread in its own order (rotated and reversed).
                    let mut keys: Vec<i32> = (0..200).collect();
                    keys.rotate_left(i * 50);
                    if i % 2 == 1 {
                        keys.reverse();
                    }
                    let specs: Vec<String> = keys
                        .iter()
                        .map(|k| format!("{{\"payload\":{k},\"idempotency_key\":\"r{round}-{k}\"}}"))
                        .collect();
                    let sql = format!("SELECT count(*) FROM jq.enqueue_many('k', '[{}]', specs => true)", specs.join(","));
                    start.wait();
                    conn.query_one(&sql, &[]).map(|r| r.get::<_, i64>(0))
                })
            })
            .collect();
        for h in handles {
            match h.join().unwrap() {
                Ok(n) => assert_eq!(n, 200),
                Err(e) => panic!("round {round}: {e} ({:?})", e.code()),
            }
        }
        let jobs: i64 = c
            .query_one("SELECT count(*) FROM jq.jobs WHERE idempotency_key LIKE $1", &[&format!("r{round}-%")])
            .unwrap()
            .get(0);
        assert_eq!(jobs, 200, "one job per key");
    }
}

/// A long-poll never sleeps holding row locks. Under READ COMMITTED a claim whose snapshot
/// predates another claimer's commit of the same job locks that job's new, running version,
/// and the recheck then rejects it but keeps the lock; a long-poll that found nothing else and
/// slept would block that job's jq.complete, heartbeat and fail for up to its wait (shown by
/// hand on PostgreSQL 15.20 with a plain table: the rejected row stayed locked, and an UPDATE of
/// it waited for the sleeper's transaction to end). A row lock needs a transaction id, so
/// jq.claim (one queue and several) sleeps only while its transaction has none, and otherwise
/// returns empty at once. Here the transaction gets an id from an enqueue before the call (the
/// race itself cannot be timed from outside); a fresh transaction still waits.
/// Negative controls, seen failing: `JQ_TEST_BREAK=long_poll_sleeps_with_xid` (the
/// test removed from jq.claim(text, ...)), "SELECT count(*) FROM jq.claim('empty', 'w', wait =>
/// '3 seconds'): a long-poll in a transaction with an id slept 3.0 s";
/// `JQ_TEST_BREAK=multi_long_poll_sleeps_with_xid` (from jq.claim(text[], ...)), the same for the
/// ARRAY['empty', 'empty2'] call.
#[test]
fn a_long_poll_never_sleeps_holding_row_locks() {
    let db = TestDb::new("robust_poll_xid");
    let mut c = db.connect();
    if broken("long_poll_sleeps_with_xid") {
        sabotage(&mut c, "jq._claim_sleep(timestamptz,timestamptz)",
                 "IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL\n       OR (NOT jq._wait(",
                 "IF false\n       OR (NOT jq._wait(", 1);
    }
    if broken("multi_long_poll_sleeps_with_xid") {
        sabotage(&mut c, CLAIM_MANY,
                 "IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN\n        EXIT poll;",
                 "IF false THEN\n        EXIT poll;", 1);
    }
    c.batch_execute("SELECT jq.create_queue('empty'); SELECT jq.create_queue('empty2'); SELECT jq.create_queue('other');")
        .unwrap();
    let calls = [
        "SELECT count(*) FROM jq.claim('empty', 'w', wait => '3 seconds')",
        "SELECT count(*) FROM jq.claim(ARRAY['empty', 'empty2'], 'w', wait => '3 seconds')",
    ];
    for sql in calls {
        let mut t = c.transaction().unwrap();
        t.query_one("SELECT jq.enqueue('other', '{}')", &[]).unwrap();
        let start = Instant::now();
        let n: i64 = t.query_one(sql, &[]).unwrap().get(0);
        let slept = start.elapsed();
        t.rollback().unwrap();
        assert_eq!(n, 0, "{sql}");
        assert!(slept < Duration::from_millis(1500),
                "{sql}: a long-poll in a transaction with an id slept {:.1} s", slept.as_secs_f64());
    }
    // A fresh transaction has no id: the long-poll does wait (the test can see sleeping).
    for sql in calls {
        let sql = sql.replace("3 seconds", "1 second");
        let start = Instant::now();
        let n: i64 = c.query_one(sql.as_str(), &[]).unwrap().get(0);
        assert_eq!(n, 0, "{sql}");
        assert!(start.elapsed() >= Duration::from_millis(900), "{sql}: returned after {:?}", start.elapsed());
    }
}
