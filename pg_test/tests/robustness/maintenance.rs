//! Maintenance passes never wait for each other, work through a backlog in bounded batches, share the prune budget.

use jq_pg_test::{broken, sabotage, TestDb};
use std::thread;
use std::time::{Duration, Instant};

const PRUNE: &str = "jq._prune(timestamptz,integer,integer)";
const PROMOTE: &str = "jq._promote(timestamptz,integer,integer)";
const REAP: &str = "jq._reap(timestamptz,integer,integer,boolean)";

/// A maintenance pass left open in one session (say a client without autocommit) must not
/// block the next pass in another: every duty skips locked rows. Broken variant
/// `prune_history_waits` (the history delete without SKIP LOCKED): the second jq.tick() waited
/// until its statement_timeout.
#[test]
fn a_maintenance_pass_left_open_does_not_block_the_next_one() {
    let db = TestDb::new("tickopen");
    let mut c = db.connect();
    c.batch_execute(
        // Failed executions leave history rows; completed jobs go to the history tables.
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
}

/// A queue that finishes more jobs between two maintenance passes than one batch must not pile
/// them up: retention empties whole history tables (sql/history.sql), so one pass retires a
/// backlog of any size past retention, and its storage with it, in one TRUNCATE.
#[test]
fn one_maintenance_pass_retires_a_backlog_of_any_size() {
    let db = TestDb::new("prunebig");
    let mut c = db.connect();
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
    // Two minutes on (the retention is 0, so the ring moves on every minute): the first pass
    // moves the ring on, the next truncates table 0, every job in it past retention.
    let moved: i32 = c.query_one("SELECT jq._maintain('prune', now() + interval '2 minutes')", &[]).unwrap().get(0);
    assert_eq!(moved, 0, "the current table is never truncated");
    let pruned: i32 = c.query_one("SELECT jq._maintain('prune', now() + interval '2 minutes')", &[]).unwrap().get(0);
    let left: i64 = c.query_one("SELECT count(*) FROM jq.jobs WHERE queue = 'big'", &[]).unwrap().get(0);
    assert_eq!(left, 0, "one pass pruned {pruned} of the 12,000 completed jobs");
    assert_eq!(pruned, 12000);
    let size: i64 = c.query_one("SELECT pg_relation_size('jq.jobs_done_0')", &[]).unwrap().get(0);
    assert_eq!(size, 0, "the truncated table keeps no pages");
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
         -- in each pass (an index-order scan is checked by pg_test/tests/plans/maintenance.rs).
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

/// Dead jobs go with their table as well: 12,000 jobs the reaper sent to dead at one instant,
/// past a dead_retention of 0, are all retired by one prune duty.
#[test]
fn dead_jobs_reaped_at_one_instant_are_all_retired_in_one_pass() {
    let db = TestDb::new("prunetie");
    let mut c = db.connect();
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
    let in_history: i64 = c.query_one("SELECT count(*) FROM jq.jobs_dead_0", &[]).unwrap().get(0);
    assert_eq!(in_history, 12000, "the reaped jobs moved to the dead ring");
    // The first pass moves the dead ring on, the next truncates the table it left.
    c.query_one("SELECT jq._maintain('prune', now() + interval '2 hours')", &[]).unwrap();
    let pruned: i32 = c.query_one("SELECT jq._maintain('prune', now() + interval '2 hours')", &[]).unwrap().get(0);
    let left: i64 = c.query_one("SELECT count(*) FROM jq.jobs", &[]).unwrap().get(0);
    assert_eq!(left, 0, "one prune duty left {left} of the 12,000 dead jobs (pruned {pruned})");
}

