//! Robustness under concurrency that is easy to get wrong: older snapshots racing a drop,
//! lock ordering across capped queues and idempotency keys, and maintenance passes that must
//! not wait for each other.
//!
//! Each test was seen failing against the broken variant named in its comment
//! (`JQ_TEST_BREAK=<name>` installs it in the test's own database).

use jq_pg_test::{broken, sabotage, sqlstate, Client, TestDb};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const CLAIM_MANY: &str = "jq.claim(text[],text,integer,interval,interval,bigint)";
const ENQUEUE_MANY: &str = "jq.enqueue_many(text,jsonb,text,timestamptz,interval,integer,integer,boolean,bigint)";
const PRUNE: &str = "jq._prune(timestamptz,integer,integer)";
const MAINTAIN: &str = "jq._maintain(text,timestamptz)";
const PRUNE_JOBS: &str = "jq._prune_jobs(text,timestamptz,timestamptz,integer,integer)";
const PROMOTE: &str = "jq._promote(timestamptz,integer,integer)";
const REAP: &str = "jq._reap(timestamptz,integer,integer)";
const ENQUEUE: &str = "jq.enqueue(text,jsonb,text,timestamptz,interval,integer,integer,text,text,bigint)";

/// A transaction under REPEATABLE READ whose snapshot predates a committed jq.drop_queue must
/// not enqueue into the dropped queue: 40001, and no job is left behind. A drop from such a
/// transaction is refused (25000). Broken variant `enqueue_no_snapshot_lock` (no FOR KEY SHARE
/// outside READ COMMITTED): the enqueue returned an id and an orphan job stayed in jq.jobs.
#[test]
fn enqueue_under_an_older_snapshot_never_leaves_a_job_in_a_dropped_queue() {
    let db = TestDb::new("rrdrop");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('gone')").unwrap();
    if broken("enqueue_no_snapshot_lock") {
        sabotage(&mut c, ENQUEUE, "        PERFORM 1 FROM jq.queues t WHERE t.name = enqueue.queue FOR KEY SHARE;\n", "", 1);
    }
    let mut a = db.connect();
    a.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jq.queues").unwrap();
    c.batch_execute("SELECT jq.drop_queue('gone')").unwrap();
    let code = sqlstate(a.query_one("SELECT jq.enqueue('gone', '{\"orphan\":true}')", &[]));
    assert_eq!(code, "40001", "the enqueue must fail as a serialization failure");
    a.batch_execute("ROLLBACK").unwrap();
    let orphans: i64 = c.query_one("SELECT count(*) FROM jq.jobs WHERE queue = 'gone'", &[]).unwrap().get(0);
    assert_eq!(orphans, 0);

    c.batch_execute("SELECT jq.create_queue('kept')").unwrap();
    let mut b = db.connect();
    b.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    assert_eq!(sqlstate(b.query_one("SELECT jq.drop_queue('kept')", &[])), "25000");
    b.batch_execute("ROLLBACK").unwrap();
}

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

/// A maintenance pass left open in one session (say a client without autocommit) must not
/// block the next pass in another: every duty skips locked rows. Broken variant
/// `prune_history_waits` (the history delete without SKIP LOCKED): the second jq.tick() waited
/// until its statement_timeout.
#[test]
fn a_maintenance_pass_left_open_does_not_block_the_next_one() {
    let db = TestDb::new("tickopen");
    let mut c = db.connect();
    c.batch_execute(
        // Failed executions leave history rows, completed ones completed job rows: both pruned.
        "SELECT jq.create_queue('h', history_retention => '0', retention => '0', max_attempts => 1);
         SELECT jq.enqueue('h') FROM generate_series(1, 20);
         SELECT jq.fail(id, lease_token, 'x') FROM jq.claim('h', 'w', 10);
         SELECT jq.complete(id, lease_token) FROM jq.claim('h', 'w', 10);",
    )
    .unwrap();
    if broken("prune_history_waits") {
        sabotage(&mut c, PRUNE, "            FOR UPDATE OF h SKIP LOCKED));", "            FOR UPDATE OF h));", 1);
    }
    let mut a = db.connect();
    a.batch_execute("BEGIN; SELECT jq.tick();").unwrap();
    // New work for the second pass: a due retry to promote and more history to prune.
    c.batch_execute(
        "SELECT jq.enqueue('h', delay => '1 second');
         SELECT jq.enqueue('h') FROM generate_series(1, 10);
         SELECT jq.fail(id, lease_token, 'x') FROM jq.claim('h', 'w', 5);
         SELECT jq.complete(id, lease_token) FROM jq.claim('h', 'w', 5);",
    )
    .unwrap();
    let mut b = db.connect();
    b.batch_execute("SET statement_timeout = '5s'").unwrap();
    thread::sleep(Duration::from_millis(1100));
    let t0 = Instant::now();
    let row = b
        .query_one("SELECT promoted, pruned FROM jq.tick()", &[])
        .unwrap_or_else(|e| panic!("the second pass was blocked: {e}"));
    let (promoted, _pruned): (i32, i32) = (row.get(0), row.get(1));
    assert_eq!(promoted, 1);
    assert!(t0.elapsed() < Duration::from_secs(4), "the second pass waited {:?}", t0.elapsed());
    a.batch_execute("COMMIT").unwrap();
    let left: i64 = c.query_one("SELECT count(*) FROM jq.execution_log", &[]).unwrap().get(0);
    assert!(left <= 5, "the passes together pruned the old history, {left} rows left");
    let left: i64 = c.query_one("SELECT count(*) FROM jq.jobs WHERE state = 'completed'", &[]).unwrap().get(0);
    assert!(left <= 5, "the passes together pruned the old completed jobs, {left} left");
}

/// A queue that finishes more jobs between two maintenance passes than one prune batch (5,000
/// per queue and kind) must not pile them up: one pass prunes the whole backlog past retention.
/// Broken variant `prune_one_batch` (one jq._prune call per pass): 5,000
/// of 12,000 pruned, 7,000 left (seen failing). With it, bench/run's steady load at 7,158
/// jobs/s (1-minute retention, a pass a second) grew jq.jobs from 128 MB to 739 MB in 7 minutes.
/// And the passes read each index entry about once: a pass that started from the head of
/// jobs_finished_idx again walked every entry the earlier passes of its transaction had deleted
/// (entries vacuum has not removed and that transaction cannot mark dead), so a prune of k
/// batches read ~k²/2 batches of entries: at 7,200 jobs/s the prune duty took 9-18 s a tick and
/// fell behind, and jq.jobs grew without bound again (docs/BENCHMARKS.md). Broken variant
/// `prune_from_start` (each pass from the head): 27,000 entries read for 12,000 pruned (seen
/// failing).
#[test]
fn one_maintenance_pass_prunes_a_backlog_larger_than_a_batch() {
    let db = TestDb::new("prunebig");
    let mut c = db.connect();
    if broken("prune_one_batch") {
        sabotage(&mut c, MAINTAIN, "jq._prune(_maintain.now, 5000, 100000)", "jq._prune(_maintain.now, 5000)", 1);
    }
    if broken("prune_from_start") {
        sabotage(&mut c, PRUNE_JOBS, "(f.finished_at, f.id) > (v_at, v_id)", "true", 2);
    }
    c.batch_execute(
        "SELECT jq.create_queue('big', retention => '0', history_retention => '0');
         SELECT count(*) FROM jq.enqueue_many('big', (SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, 12000)));",
    )
    .unwrap();
    for _ in 0..12 {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM (SELECT array_agg(id) AS i, array_agg(lease_token) AS t FROM jq.claim('big', 'w', 1000)) x,
                        jq.complete_many(x.i, x.t)",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(n, 1000);
    }
    // In one transaction: the index's entries returned to the executor in this transaction
    // (pg_stat_get_xact_tuples_returned: dead-marked entries are skipped inside the index and
    // not counted; entries of rows this transaction deleted are).
    let mut t = c.transaction().unwrap();
    let before: i64 = t
        .query_one("SELECT pg_stat_get_xact_tuples_returned('jq.jobs_finished_idx'::regclass)", &[])
        .unwrap()
        .get(0);
    let pruned: i32 = t.query_one("SELECT pruned FROM jq.tick()", &[]).unwrap().get(0);
    let read: i64 = t
        .query_one("SELECT pg_stat_get_xact_tuples_returned('jq.jobs_finished_idx'::regclass) - $1", &[&before])
        .unwrap()
        .get(0);
    t.commit().unwrap();
    let left: i64 = c.query_one("SELECT count(*) FROM jq.jobs WHERE queue = 'big'", &[]).unwrap().get(0);
    assert_eq!(left, 0, "one pass pruned {pruned} of the 12,000 completed jobs");
    assert_eq!(pruned, 12000);
    // 12,000 and the first pass's 5,000 once more: the duty's second round starts from the head
    // (jq._prune); 27,000 when every pass starts there.
    assert!(read <= 17_500, "the prune passes read {read} entries of jobs_finished_idx for 12,000 \
                              pruned: later passes walked the rows earlier ones deleted");
}

/// Promotion and reaping run in passes too (up to 50,000 jobs in passes of 5,000; up to 10,000
/// leases in passes of 1,000), and each pass must start where the previous one ended: the
/// entries of the rows the earlier passes moved stay in jobs_scheduled_idx / jobs_running_idx
/// until vacuum, invisible but read again by a pass that starts from the head. Broken variants
/// `promote_from_start` and `reap_from_start` (each pass from the head):
/// 27,000 entries read for 12,000 promoted and 12,000 for 3,000 reaped (seen failing).
#[test]
fn promotion_and_reaping_passes_read_each_entry_about_once() {
    let db = TestDb::new("passes");
    let mut c = db.connect();
    if broken("promote_from_start") {
        sabotage(&mut c, PROMOTE, "(d.run_at, d.id) > (v_at, v_id)", "true", 1);
    }
    if broken("reap_from_start") {
        sabotage(&mut c, REAP, "x.lease_expires_at >= v_at", "true", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('later');
         SELECT count(*) FROM jq.enqueue_many('later', (SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, 12000)),
                                              run_at => now() + interval '10 minutes');
         SELECT jq.create_queue('leased');
         SELECT count(*) FROM jq.enqueue_many('leased', (SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, 3000)));
         SELECT count(*) FROM jq.claim('leased', 'w', 1000, lease => '1 second');
         SELECT count(*) FROM jq.claim('leased', 'w', 1000, lease => '1 second');
         SELECT count(*) FROM jq.claim('leased', 'w', 1000, lease => '1 second');
         -- As autovacuum would: never analyzed, the planner sorted a bitmap scan of every due row
         -- in each pass (an index-order scan is checked by pg_test/tests/plans.rs).
         ANALYZE jq.jobs;",
    )
    .unwrap();
    // The worker's duties at a later instant (the clock skipped, the duties as they run).
    // Reaping starts each pass at the last expiry it reached and reads that instant's rows again:
    // the jobs of one batch claim share their expiry, so up to twice as many entries (6,003 for
    // 3,000 here; 12,000 from the head).
    for (duty, index, expect, most) in [("promote", "jobs_scheduled_idx", 12000, 12600),
                                        ("reap", "jobs_running_idx", 3000, 6300)] {
        // The counter also holds this session's earlier transactions not yet sent: a difference.
        let mut t = c.transaction().unwrap();
        let index = format!("jq.{index}");
        let before: i64 = t
            .query_one("SELECT pg_stat_get_xact_tuples_returned($1::text::regclass)", &[&index])
            .unwrap()
            .get(0);
        let done: i32 = t
            .query_one("SELECT jq._maintain($1, now() + interval '1 hour')", &[&duty])
            .unwrap()
            .get(0);
        let read: i64 = t
            .query_one("SELECT pg_stat_get_xact_tuples_returned($1::text::regclass) - $2", &[&index, &before])
            .unwrap()
            .get(0);
        t.commit().unwrap();
        assert_eq!(done, expect, "{duty}");
        assert!(read <= most,
                "{duty}: its passes read {read} entries of {index} for {done} rows: later passes walked \
                 the rows earlier ones had moved");
    }
}

/// Rows often share a finished_at: every job one reaper pass sends to dead gets that pass's
/// instant. The prune passes key on (finished_at, id), so a second pass starts inside such a
/// group, past the rows already deleted. Broken variants (seen failing): `prune_key_time_only`
/// (`finished_at > last`): a later pass skipped the rest of the group, dead jobs left;
/// `prune_dead_from_start`: 27,000 entries of jobs_dead_idx read for 12,000 pruned.
#[test]
fn dead_jobs_sharing_one_finished_at_are_all_pruned_in_one_pass() {
    let db = TestDb::new("prunetie");
    let mut c = db.connect();
    if broken("prune_key_time_only") {
        sabotage(&mut c, PRUNE_JOBS, "(f.finished_at, f.id) > (v_at, v_id)", "f.finished_at > v_at", 2);
    }
    if broken("prune_dead_from_start") {
        sabotage(&mut c, PRUNE_JOBS,
                 "(f.finished_at, f.id) > (v_at, v_id) AND f.finished_at < _prune_jobs.dead_before",
                 "f.finished_at < _prune_jobs.dead_before", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('t', max_lease_expiries => 0, dead_retention => '0');
         SELECT count(*) FROM jq.enqueue_many('t', (SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, 12000)));",
    )
    .unwrap();
    for _ in 0..12 {
        c.batch_execute("SELECT count(*) FROM jq.claim('t', 'w', 1000, lease => '1 second')").unwrap();
    }
    // Two reaper duties (10,000 each at most) in one transaction, at one instant (the clock
    // skipped), send all 12,000 to dead with one finished_at.
    let mut t = c.transaction().unwrap();
    let mut reaped = 0;
    for _ in 0..2 {
        reaped += t
            .query_one("SELECT jq._maintain('reap', now() + interval '1 hour')", &[])
            .unwrap()
            .get::<_, i32>(0);
    }
    t.commit().unwrap();
    assert_eq!(reaped, 12000);
    let instants: i64 = c
        .query_one("SELECT count(DISTINCT finished_at) FROM jq.jobs WHERE state = 'dead'", &[])
        .unwrap()
        .get(0);
    assert_eq!(instants, 1, "the reaped jobs share one finished_at");
    let mut t = c.transaction().unwrap();
    let before: i64 = t
        .query_one("SELECT pg_stat_get_xact_tuples_returned('jq.jobs_dead_idx'::regclass)", &[])
        .unwrap()
        .get(0);
    let pruned: i32 = t
        .query_one("SELECT jq._maintain('prune', now() + interval '2 hours')", &[])
        .unwrap()
        .get(0);
    let read: i64 = t
        .query_one("SELECT pg_stat_get_xact_tuples_returned('jq.jobs_dead_idx'::regclass) - $1", &[&before])
        .unwrap()
        .get(0);
    t.commit().unwrap();
    let left: i64 = c.query_one("SELECT count(*) FROM jq.jobs", &[]).unwrap().get(0);
    assert_eq!(left, 0, "one prune duty left {left} of the 12,000 dead jobs (pruned {pruned})");
    // 12,000 and the first pass's 5,000 again (the second round starts from the head).
    assert!(read <= 17_500, "the prune passes read {read} entries of jobs_dead_idx for 12,000 pruned");
}

/// The prune budget is shared: every queue gets one pass, then the queues whose pass was full
/// share the rest, each getting what is left divided by the queues still to come. So one busy
/// queue among idle ones gets nearly all of it, and many busy queues together stay near the
/// budget. Broken variant `prune_budget_per_queue` (the whole budget for each queue, as in the
/// first version of the passes): five busy queues pruned 3,000 rows under a budget of 1,000
/// (seen failing).
#[test]
fn the_prune_budget_is_shared_among_the_queues() {
    let db = TestDb::new("prunefair");
    let mut c = db.connect();
    if broken("prune_budget_per_queue") {
        sabotage(&mut c, PRUNE,
                 "pg_catalog.int4larger(_prune.batch,\n                                                (_prune.budget - v_total) / q.still::integer)",
                 "_prune.budget", 1);
    }
    let fill = |c: &mut Client, q: &str, n: i32| {
        c.batch_execute(&format!(
            "SELECT jq.create_queue('{q}', retention => '0', history_retention => '0');
             SELECT count(*) FROM jq.enqueue_many('{q}', (SELECT jsonb_agg('{{}}'::jsonb) FROM generate_series(1, {n})));
             SELECT count(*) FROM (SELECT array_agg(id) AS i, array_agg(lease_token) AS t FROM jq.claim('{q}', 'w', {n})) x,
                    jq.complete_many(x.i, x.t);"))
            .unwrap();
    };
    // One busy queue between idle ones: batch 100, budget 1,000: it gets nearly all of it.
    fill(&mut c, "a-idle", 10);
    fill(&mut c, "b-busy", 900);
    fill(&mut c, "c-idle", 10);
    let pruned: i32 = c.query_one("SELECT jq._prune(now() + interval '1 hour', 100, 1000)", &[]).unwrap().get(0);
    assert_eq!(pruned, 920, "one busy queue among idle ones");
    // Five busy queues: together about the budget, every queue some.
    for q in ["d", "e", "f", "g", "h"] {
        fill(&mut c, q, 600);
    }
    let pruned: i32 = c.query_one("SELECT jq._prune(now() + interval '1 hour', 100, 1000)", &[]).unwrap().get(0);
    assert!(pruned <= 1100, "five busy queues pruned {pruned} rows under a budget of 1,000");
    let least: i64 = c
        .query_one("SELECT 600 - coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM jq.jobs GROUP BY queue) c", &[])
        .unwrap()
        .get(0);
    assert!(least >= 100, "a queue got less than one pass: {least}");
}

/// Intervals whose fields have mixed signs ('1 mon -30 days 1 second') compare as positive but
/// end before they start in a 31-day month: refused wherever a lease or delay is given.
#[test]
fn intervals_with_negative_fields_are_refused() {
    let db = TestDb::new("mixed");
    let mut c: Client = db.connect();
    let bad = "1 mon -30 days 1 second";
    assert_eq!(sqlstate(c.query_one("SELECT jq.create_queue('m', lease => $1::text::interval)", &[&bad])), "22023");
    c.batch_execute("SELECT jq.create_queue('m'); SELECT jq.enqueue('m')").unwrap();
    assert_eq!(sqlstate(c.query("SELECT * FROM jq.claim('m', 'w', 1, $1::text::interval)", &[&bad])), "22023");
    let row = c.query_one("SELECT id, lease_token FROM jq.claim('m', 'w')", &[]).unwrap();
    let (id, token): (i64, uuid::Uuid) = (row.get(0), row.get(1));
    assert_eq!(sqlstate(c.query_one("SELECT * FROM jq.heartbeat($1, $2, $3::text::interval)", &[&id, &token, &bad])), "22023");
    assert_eq!(sqlstate(c.query_one("SELECT jq.fail($1, $2, 'x', $3::text::interval)", &[&id, &token, &bad])), "22023");
    let st: String = c.query_one("SELECT state::text FROM jq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!(st, "running", "nothing changed");
    // A plainly negative retry_in is not refused: it means "retry now".
    let st: String = c
        .query_one("SELECT jq.fail($1, $2, 'x', interval '-5 seconds')::text", &[&id, &token])
        .unwrap()
        .get(0);
    assert_eq!(st, "ready");
}

/// jq.drop_queue takes the jobs table lock before the queue row, the order every other jq
/// function ends up in (a capped claim writes jq.jobs before it locks its queue row), so a
/// transaction that wrote jobs and then claims from a capped queue being dropped does not
/// deadlock with the drop: the drop waits, then goes on. Broken variant `drop_row_lock_first`
/// (queue row locked before the table lock): the drop failed with 40P01.
#[test]
fn dropping_a_capped_queue_does_not_deadlock_with_a_transaction_claiming_from_it() {
    let db = TestDb::new("dropdl");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('other'); SELECT jq.create_queue('capd', max_concurrency => 2);
         SELECT jq.enqueue('capd');",
    )
    .unwrap();
    if broken("drop_row_lock_first") {
        sabotage(
            &mut c,
            "jq.drop_queue(text,boolean,bigint)",
            "    PERFORM 1 FROM jq.queues t WHERE t.name = drop_queue.name;\n",
            "    PERFORM 1 FROM jq.queues t WHERE t.name = drop_queue.name FOR UPDATE;\n",
            1,
        );
    }
    let mut t1 = db.connect();
    t1.batch_execute("SET deadlock_timeout = '100ms'; BEGIN; SELECT jq.enqueue('other');").unwrap();
    let dropper = {
        let mut t2 = db.connect();
        thread::spawn(move || {
            t2.batch_execute("SET deadlock_timeout = '100ms'").unwrap();
            t2.query_one("SELECT jq.drop_queue('capd', force => true)", &[]).map(|r| r.get::<_, bool>(0))
        })
    };
    thread::sleep(Duration::from_millis(300)); // the drop is now waiting for t1
    let claimed = t1.query("SELECT id FROM jq.claim('capd', 'w')", &[]);
    let t1_result = match claimed {
        Ok(rows) => {
            t1.batch_execute("COMMIT").unwrap();
            Ok(rows.len())
        }
        Err(e) => {
            t1.batch_execute("ROLLBACK").unwrap();
            Err(e)
        }
    };
    let drop_result = dropper.join().unwrap();
    let t1_code = t1_result.as_ref().err().and_then(|e| e.code().map(|s| s.code().to_string()));
    let drop_code = drop_result.as_ref().err().and_then(|e| e.code().map(|s| s.code().to_string()));
    assert_eq!((t1_code, drop_code), (None, None), "claim {t1_result:?}, drop {drop_result:?}");
    assert_eq!(t1_result.unwrap(), 1);
    assert!(drop_result.unwrap());
}

/// jq.fail row-locks its job before it writes: a forced drop must wait for it rather than take
/// a table lock that jq.fail's row lock does not conflict with, then wait for that row while
/// jq.fail waits for the table. Another drop held open lines the three up deterministically.
/// Broken variant `drop_share_row_exclusive` (the table lock that ignores row locks): the
/// fail or the drop died with 40P01.
#[test]
fn a_forced_drop_does_not_deadlock_with_a_worker_failing_its_job() {
    let db = TestDb::new("faildrop");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('qa'); SELECT jq.create_queue('qb');
         SELECT jq.enqueue('qb');",
    )
    .unwrap();
    if broken("drop_share_row_exclusive") {
        sabotage(&mut c, "jq.drop_queue(text,boolean,bigint)", "LOCK TABLE jq.jobs IN EXCLUSIVE MODE", "LOCK TABLE jq.jobs IN SHARE ROW EXCLUSIVE MODE", 1);
    }
    let row = c.query_one("SELECT id, lease_token FROM jq.claim('qb', 'w')", &[]).unwrap();
    let (id, token): (i64, uuid::Uuid) = (row.get(0), row.get(1));

    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT jq.drop_queue('qa');").unwrap();
    let spawn = |sql: String| {
        let mut conn = db.connect();
        thread::spawn(move || {
            conn.batch_execute("SET deadlock_timeout = '100ms'").unwrap();
            conn.simple_query(&sql).map(|_| ()).map_err(|e| e.code().map(|s| s.code().to_string()))
        })
    };
    let dropper = spawn("SELECT jq.drop_queue('qb', force => true)".into());
    thread::sleep(Duration::from_millis(300));
    let failer = spawn(format!("SELECT jq.fail({id}, '{token}', 'boom')"));
    thread::sleep(Duration::from_millis(300));
    holder.batch_execute("COMMIT").unwrap();
    let (d, f) = (dropper.join().unwrap(), failer.join().unwrap());
    assert_eq!((d, f), (Ok(()), Ok(())), "drop and fail must both finish, without 40P01");
    let left: i64 = c.query_one("SELECT count(*) FROM jq.jobs", &[]).unwrap().get(0);
    assert_eq!(left, 0);
}

/// An admin transaction that pauses a queue and then writes its jobs must not deadlock with a
/// drop of that queue: jq.pause locks jq.jobs before the queue row, as the drop does. Broken
/// variant `pause_row_first` (pause without its table lock): one of the two died with 40P01.
#[test]
fn pausing_then_cancelling_does_not_deadlock_with_a_drop() {
    let db = TestDb::new("pausedrop");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('p1')").unwrap();
    let id: i64 = c.query_one("SELECT jq.enqueue('p1')", &[]).unwrap().get(0);
    if broken("pause_row_first") {
        sabotage(&mut c, "jq.pause(text,bigint)", "    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;\n", "", 1);
    }
    let mut admin = db.connect();
    admin.batch_execute("SET deadlock_timeout = '100ms'; BEGIN; SELECT jq.pause('p1');").unwrap();
    let dropper = {
        let mut d = db.connect();
        thread::spawn(move || {
            d.batch_execute("SET deadlock_timeout = '100ms'").unwrap();
            d.simple_query("SELECT jq.drop_queue('p1', force => true)")
                .map(|_| ())
                .map_err(|e| e.code().map(|s| s.code().to_string()))
        })
    };
    thread::sleep(Duration::from_millis(300));
    let cancel = admin
        .simple_query(&format!("SELECT jq.cancel({id})"))
        .map(|_| ())
        .map_err(|e| e.code().map(|s| s.code().to_string()));
    admin.batch_execute(if cancel.is_ok() { "COMMIT" } else { "ROLLBACK" }).unwrap();
    let dropped = dropper.join().unwrap();
    assert_eq!((cancel, dropped), (Ok(()), Ok(())), "no 40P01 on either side");
}

/// The same for every other admin call that locks a row jq.drop_queue locks or deletes:
/// jq.schedule and jq.alter_schedule(queue => ...) (the queue row, FOR KEY SHARE),
/// jq.alter_schedule and jq.unschedule (the schedule row, which a forced drop deletes), jq.grant
/// (the queue row) and jq.revoke (the grant row, which the drop deletes). Each locks jq.jobs
/// first, as the drop does. Broken variants, one per function, each without its table lock:
/// `schedule_row_first` (jq._lock_schedule_queue), `alter_schedule_row_first`,
/// `unschedule_row_first`, `grant_row_first`, `revoke_row_first`: the enqueue that follows in
/// the admin's transaction and the drop each waited for the other, and one died with 40P01.
#[test]
fn admin_calls_then_enqueuing_do_not_deadlock_with_a_drop() {
    let db = TestDb::new("admindrop");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('other'); SELECT jq.schedule('moved', '0 0 1 1 *', 'other');")
        .unwrap();
    if broken("schedule_row_first") {
        sabotage(&mut c, "jq._lock_schedule_queue(text)",
                 "    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;  -- before the queue row, as jq.drop_queue\n", "", 1);
    }
    if broken("alter_schedule_row_first") {
        sabotage(&mut c, "jq.alter_schedule(text,text,text,jsonb,text,text,integer,integer,text,text,boolean,bigint)",
                 "    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;\n    IF alter_schedule.queue IS NOT NULL THEN",
                 "    IF alter_schedule.queue IS NOT NULL THEN", 1);
    }
    if broken("unschedule_row_first") {
        sabotage(&mut c, "jq.unschedule(text,boolean,bigint)",
                 "    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;  -- before the schedule row, as jq.drop_queue (see jq.alter_schedule)\n",
                 "", 1);
    }
    if broken("grant_row_first") {
        sabotage(&mut c, "jq.grant(text,regrole,text,bigint)",
                 "    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;\n    -- Then one grant or revoke at a time",
                 "    -- Then one grant or revoke at a time", 1);
    }
    if broken("revoke_row_first") {
        sabotage(&mut c, "jq.revoke(text,regrole,text)",
                 "    LOCK TABLE jq.jobs IN ROW EXCLUSIVE MODE;\n    LOCK TABLE jq.queue_grants",
                 "    LOCK TABLE jq.queue_grants", 1);
    }
    let cases = [
        ("s1", "", "SELECT jq.schedule('daily', '0 0 * * *', 's1')"),
        ("s2", "", "SELECT jq.alter_schedule('moved', queue => 's2')"),
        ("s3", "SELECT jq.schedule('s3_daily', '0 0 * * *', 's3')", "SELECT jq.alter_schedule('s3_daily', cron => '0 1 * * *')"),
        ("s4", "SELECT jq.schedule('s4_daily', '0 0 * * *', 's4')", "SELECT jq.unschedule('s4_daily')"),
        ("s5", "", "SELECT jq.grant('s5', 'jq_worker', 'work')"),
        ("s6", "SELECT jq.grant('s6', 'jq_worker', 'work')", "SELECT jq.revoke('s6', 'jq_worker', 'work')"),
    ];
    let mut failures = Vec::new();
    for (q, setup, call) in cases {
        c.batch_execute(&format!("SELECT jq.create_queue('{q}'); {setup}")).unwrap();
        let mut admin = db.connect();
        admin.batch_execute(&format!("SET deadlock_timeout = '100ms'; BEGIN; {call};")).unwrap();
        let mut d = db.connect();
        let dropper_pid = jq_pg_test::backend_pid(&mut d);
        let dropper = {
            let q = q.to_string();
            thread::spawn(move || {
                d.batch_execute("SET deadlock_timeout = '100ms'").unwrap();
                d.simple_query(&format!("SELECT jq.drop_queue('{q}', force => true)"))
                    .map(|_| ())
                    .map_err(|e| e.code().map(|s| s.code().to_string()))
            })
        };
        // The drop waits (for the table with the fix, for a row without it) before the enqueue.
        jq_pg_test::await_lock_wait(&mut c, dropper_pid, &format!("{call}: the drop never waited"), || false);
        let enqueue = admin
            .simple_query(&format!("SELECT jq.enqueue('{q}')"))
            .map(|_| ())
            .map_err(|e| e.code().map(|s| s.code().to_string()));
        admin.batch_execute(if enqueue.is_ok() { "COMMIT" } else { "ROLLBACK" }).unwrap();
        let dropped = dropper.join().unwrap();
        let left: i64 = c.query_one("SELECT count(*) FROM jq.queues WHERE name = $1", &[&q]).unwrap().get(0);
        if (&enqueue, &dropped, left) != (&Ok(()), &Ok(()), 0) {
            failures.push(format!("{call}: enqueue {enqueue:?}, drop {dropped:?}, queue rows left {left}"));
        }
    }
    assert!(failures.is_empty(), "no 40P01 on either side, and the drop goes through after the transaction:\n{}",
            failures.join("\n"));
}

/// jq.drop_queue deletes the queue's history before it locks jq.jobs. A transaction that holds
/// jq.jobs already (here an earlier drop) and then drops a queue that another session is
/// dropping: that drop holds the history rows and waits for jq.jobs, and this one waited for the
/// history rows: a deadlock, one of them 40P01 (the earlier drop rolled back with it). The
/// history delete now skips rows another transaction holds (FOR UPDATE SKIP LOCKED; the other
/// drop deletes them, or jq._prune does as orphans). Negative control
/// JQ_TEST_BREAK=drop_history_waits (the plain DELETE): seen failing with 40P01.
#[test]
fn a_drop_does_not_deadlock_with_another_drop_of_the_same_queue() {
    let db = TestDb::new("dropdrop");
    let mut c = db.connect();
    if broken("drop_history_waits") {
        sabotage(&mut c, "jq.drop_queue(text,boolean,bigint)",
                 "    DELETE FROM jq.execution_log e\n    WHERE e.ctid = ANY (ARRAY(SELECT h.ctid FROM jq.execution_log h WHERE h.queue = drop_queue.name\n                              FOR UPDATE SKIP LOCKED));",
                 "    DELETE FROM jq.execution_log e WHERE e.queue = drop_queue.name;", 1);
    }
    c.batch_execute("SELECT jq.create_queue('a'); SELECT jq.create_queue('b'); SELECT jq.enqueue('b');").unwrap();
    // A history row for b: a failed attempt.
    let job = &jq_pg_test::claim(&mut c, "b", "w", 1, None)[0];
    c.execute("SELECT jq.fail($1, $2, 'boom')", &[&job.id, &job.token]).unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM jq.execution_log WHERE queue = 'b'", &[]).unwrap().get(0);
    assert_eq!(n, 1);
    let mut t1 = db.connect();
    t1.batch_execute("SET deadlock_timeout = '100ms'; BEGIN; SELECT jq.drop_queue('a', force => true);").unwrap();
    let mut t2 = db.connect();
    let pid = jq_pg_test::backend_pid(&mut t2);
    let other = thread::spawn(move || {
        t2.batch_execute("SET deadlock_timeout = '100ms'").unwrap();
        t2.simple_query("SELECT jq.drop_queue('b', force => true)")
            .map(|_| ())
            .map_err(|e| e.code().map(|s| s.code().to_string()))
    });
    // The other drop has deleted b's history and waits for jq.jobs.
    jq_pg_test::await_lock_wait(&mut c, pid, "the other drop never waited", || false);
    let mine = t1
        .simple_query("SELECT jq.drop_queue('b', force => true)")
        .map(|_| ())
        .map_err(|e| e.code().map(|s| s.code().to_string()));
    let committed = mine.is_ok() && t1.batch_execute("COMMIT").is_ok();
    if !committed {
        let _ = t1.batch_execute("ROLLBACK");
    }
    let theirs = other.join().unwrap();
    // Mine drops both queues; theirs then finds b gone (42704) or timed out on the lock (55P03).
    assert!(committed, "the transaction's second drop: {mine:?} (the other drop: {theirs:?})");
    assert!(matches!(theirs.as_ref().map_err(|e| e.as_deref()), Err(Some("42704")) | Err(Some("55P03"))),
            "the other drop: {theirs:?}");
    let left: i64 = c.query_one("SELECT count(*) FROM jq.queues WHERE name IN ('a', 'b')", &[]).unwrap().get(0);
    assert_eq!(left, 0);
}

#[test]
fn a_delay_with_a_negative_field_is_refused() {
    let db = TestDb::new("mixdelay");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('d')").unwrap();
    assert_eq!(sqlstate(c.query_one("SELECT jq.enqueue('d', delay => '1 mon -29 days')", &[])), "22023");
    assert_eq!(
        sqlstate(c.query("SELECT jq.enqueue_many('d', '[{\"delay\": \"1 mon -29 days\"}]', specs => true)", &[])),
        "22023"
    );
    let n: i64 = c.query_one("SELECT count(*) FROM jq.jobs", &[]).unwrap().get(0);
    assert_eq!(n, 0);
    // A plainly negative delay is not refused: it means now.
    let id: i64 = c.query_one("SELECT jq.enqueue('d', delay => '-1 day')", &[]).unwrap().get(0);
    assert_eq!(jq_pg_test::state(&mut c, id).as_deref(), Some("ready"));
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
                 "IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL\n       OR NOT jq._wait(",
                 "IF false\n       OR NOT jq._wait(", 1);
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

/// Queue names share the claim index's key space (pg_catalog.hashtextextended(name, 0), made
/// unique among queues by queues_name_hash_idx). 'emails' and 'tenant-evil.:ocLqum5eMGI' have
/// the same hash (found by a birthday search): the second create is
/// refused with 23505 and a message saying so, with or without if_not_exists, and the first
/// queue keeps working. A create of a name another session is creating waits for it, then
/// returns its row (if_not_exists) instead of failing.
/// Negative control: JQ_TEST_BREAK=create_queue_no_hash_check (every conflict without a row of
/// that name taken for a concurrent drop and retried) fails: 40001 after ten tries, not 23505.
#[test]
fn a_name_with_another_queues_hash_is_refused_and_concurrent_creates_of_one_name_agree() {
    let db = TestDb::new("rob_create");
    let mut c = db.connect();
    if broken("create_queue_no_hash_check") {
        sabotage(
            &mut c,
            "jq.create_queue(text,integer,interval,jq.backoff_policy,interval,interval,jq.jitter_mode,interval,interval,interval,integer,integer,boolean,boolean,integer)",
            "IF EXISTS (SELECT 1 FROM jq.queues t\n",
            "IF false AND EXISTS (SELECT 1 FROM jq.queues t\n",
            1,
        );
    }
    let same: bool = c
        .query_one("SELECT hashtextextended('emails', 0) = hashtextextended('tenant-evil.:ocLqum5eMGI', 0)", &[])
        .unwrap()
        .get(0);
    assert!(same, "the pair no longer collides");
    c.batch_execute("SELECT jq.create_queue('emails'); SELECT jq.enqueue('emails', '{}');").unwrap();
    for sql in [
        "SELECT jq.create_queue('tenant-evil.:ocLqum5eMGI')",
        "SELECT jq.create_queue('tenant-evil.:ocLqum5eMGI', if_not_exists => true)",
    ] {
        let e = c.batch_execute(sql).expect_err(sql);
        assert_eq!(e.code().map(|c| c.code()), Some("23505"), "{sql}: {e:?}");
        let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(message.contains("same hash"), "{message}");
    }
    let n: i64 = c.query_one("SELECT count(*) FROM jq.queues", &[]).unwrap().get(0);
    assert_eq!(n, 1);
    let claimed: i64 = c.query_one("SELECT count(*) FROM jq.claim('emails', 'w')", &[]).unwrap().get(0);
    assert_eq!(claimed, 1);

    // Two sessions create one name: the second waits for the first's commit.
    let mut a = db.connect();
    let mut ta = a.transaction().unwrap();
    ta.batch_execute("SELECT jq.create_queue('cc', max_attempts => 3)").unwrap();
    let conninfo = jq_pg_test::conninfo(&db.name);
    let waiter = thread::spawn(move || {
        let mut b = jq_pg_test::Client::connect(&conninfo, jq_pg_test::NoTls).unwrap();
        let r = b.query_one("SELECT max_attempts FROM jq.create_queue('cc', if_not_exists => true)", &[]);
        r.map(|row| row.get::<_, i32>(0)).map_err(|e| e.to_string())
    });
    thread::sleep(Duration::from_millis(300));
    ta.commit().unwrap();
    assert_eq!(waiter.join().unwrap(), Ok(3), "the waiting create did not return the committed queue");
}
