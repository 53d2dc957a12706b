//! The worker's duties with no client ticking: promotion, reaping, cron, notifications, failures, statistics.

use jq_pg_test::*;
use std::time::{Duration, Instant};
use postgres::fallible_iterator::FallibleIterator;

use super::{eventually, served, status, TICK};

#[test]
fn a_failed_job_with_a_1s_backoff_is_claimable_again_within_1s_plus_one_tick() {
    let db = TestDb::new("bgw_retry");
    let mut c = db.connect();
    if broken("no_promote") {
        sabotage(&mut c, "jq._maintain(text,timestamptz)", "v_total := jq._promote(_maintain.now, 5000, 50000);",
                 "v_total := 0;", 1);
    }
    served(&db, Duration::from_secs(5));
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    c.batch_execute("SELECT jq.enqueue('q', '{\"n\": 1}')").unwrap();
    let job = claim(&mut c, "q", "w", 1, None).pop().unwrap();
    let failed_at = Instant::now();
    let st: String = c
        .query_one("SELECT jq.fail($1, $2, 'boom', '1 second')::text", &[&job.id, &job.token])
        .unwrap()
        .get(0);
    assert_eq!(st, "scheduled");
    // Long-poll: promotion by the worker wakes this claim.
    let rows = c
        .query("SELECT id, attempt FROM jq.claim('q', 'w', wait => '10 s')", &[])
        .unwrap();
    let took = failed_at.elapsed();
    assert_eq!(rows.len(), 1, "not claimable again within 10 s");
    assert_eq!(rows[0].get::<_, i64>(0), job.id);
    assert_eq!(rows[0].get::<_, i32>(1), 2);
    // The backoff, one tick, and room for a loaded machine to schedule the pass and the wakeup.
    assert!(took < Duration::from_secs(1) + TICK + Duration::from_secs(2), "took {took:?}");
    eprintln!("retry due after 1 s was claimed {took:?} after the failure");
}

#[test]
fn an_expired_lease_comes_back_with_the_attempt_refunded() {
    let db = TestDb::new("bgw_lease");
    let mut c = db.connect();
    if broken("no_reap") {
        sabotage(&mut c, "jq._maintain(text,timestamptz)", "v_total := jq._reap(_maintain.now, 1000, 10000);",
                 "v_total := 0;", 1);
    }
    served(&db, Duration::from_secs(5));
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    c.batch_execute("SELECT jq.enqueue('q', '{}')").unwrap();
    // A worker claims with a 1 s lease and vanishes.
    let job = claim(&mut c, "q", "crashed", 1, Some("1 second"));
    assert_eq!(job[0].attempt, 1);
    let rows = c
        .query("SELECT id, attempt FROM jq.claim('q', 'w2', wait => '6 s')", &[])
        .unwrap();
    assert_eq!(rows.len(), 1, "the expired lease never came back");
    assert_eq!(rows[0].get::<_, i64>(0), job[0].id);
    assert_eq!(rows[0].get::<_, i32>(1), 1, "attempt refunded");
    let stale = complete(&mut c, &job[0]);
    assert!(!stale, "the vanished worker's token must be fenced out");
}

#[test]
fn a_listener_gets_one_notify_per_queue_when_the_worker_makes_jobs_ready() {
    let db = TestDb::new("bgw_notify");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    served(&db, Duration::from_secs(5));
    let mut l = db.connect();
    l.batch_execute("LISTEN jq_ready").unwrap();
    c.batch_execute("SELECT jq.enqueue_many('q', '[1, 2, 3]', delay => '1 second')").unwrap();
    let mut got = Vec::new();
    let mut n = l.notifications();
    let mut it = n.timeout_iter(Duration::from_secs(4));
    while let Ok(Some(msg)) = it.next() {
        got.push(msg.payload().to_string());
        if got.len() == 1 {
            break;
        }
    }
    assert_eq!(got, vec!["q".to_string()]);
}

#[test]
fn a_failing_duty_is_recorded_and_the_worker_goes_on() {
    let db = TestDb::new("bgw_poison");
    let mut c = db.connect();
    served(&db, Duration::from_secs(5));
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    // Poison the reaper: any history row it writes violates a constraint.
    c.batch_execute(
        "ALTER TABLE jq.execution_log ADD CONSTRAINT poison CHECK (outcome <> 'lease_expired')",
    )
    .unwrap();
    c.batch_execute("SELECT jq.enqueue('q', '{}')").unwrap();
    claim(&mut c, "q", "gone", 1, Some("1 second"));
    c.batch_execute("SELECT jq.enqueue('q', '{}', delay => '1 second')").unwrap();
    let err = eventually(Duration::from_secs(6), || {
        matches!(status(&mut c, &db.name), Some((_, _, _, Some(e))) if e.contains("reap") && e.contains("23514"))
    });
    assert!(err.is_some(), "{:?}", status(&mut c, &db.name));
    // The other duties go on: the scheduled job gets promoted.
    let promoted = eventually(Duration::from_secs(4), || {
        c.query_one("SELECT count(*) FROM jq.jobs WHERE state = 'ready'", &[]).unwrap().get::<_, i64>(0) == 1
    });
    assert!(promoted.is_some());
    let (state, pid, _, _) = status(&mut c, &db.name).unwrap();
    assert_eq!(state, "running");
    // Cured, the reaper catches up.
    c.batch_execute("ALTER TABLE jq.execution_log DROP CONSTRAINT poison").unwrap();
    let reaped = eventually(Duration::from_secs(4), || {
        c.query_one("SELECT count(*) FROM jq.jobs WHERE state = 'running'", &[]).unwrap().get::<_, i64>(0) == 0
    });
    assert!(reaped.is_some());
    assert_eq!(status(&mut c, &db.name).unwrap().1, pid, "the worker never restarted");
}

#[test]
fn a_cron_schedule_fires_with_no_client_ticking() {
    let db = TestDb::new("bgw_cron");
    let mut c = db.connect();
    if broken("no_cron_duty") {
        sabotage(&mut c, "jq._maintain(text,timestamptz)", "v_total := jq.cron_tick(_maintain.now);",
                 "v_total := 0;", 1);
    }
    served(&db, Duration::from_secs(5));
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    // Every second (6 fields, seconds first).
    c.batch_execute("SELECT jq.schedule('every-second', '* * * * * *', 'q', '{\"from\": \"cron\"}')")
        .unwrap();
    let rows = c.query("SELECT kind, payload::text FROM jq.claim('q', 'w', wait => '5 s')", &[]).unwrap();
    assert_eq!(rows.len(), 1, "the schedule never fired");
    assert_eq!(rows[0].get::<_, String>(0), "every-second");
    let fired: i64 = c
        .query_one("SELECT count(*) FROM jq.cron_runs WHERE schedule = 'every-second' AND outcome = 'enqueued'", &[])
        .unwrap()
        .get(0);
    assert!(fired >= 1);
}

/// The worker sends its table statistics: autovacuum decides when to vacuum jq.jobs from the
/// rows counted dead there, and at load the worker's promotions and reaps leave a dead row
/// version for every job they move. Seen failing without the worker's pgstat_report_stat call
/// (src/bgworker/worker.rs), when this test counted the worker's prune deletes (finished jobs
/// now leave jq.jobs in the completing session): n_tup_del stayed 0 after the worker had pruned
/// all 500 jobs; the statistics were sent only when the worker exited. The promotions counted
/// here go out by the same call.
#[test]
fn the_workers_updates_reach_the_statistics_autovacuum_reads() {
    let db = TestDb::new("bgw_stats");
    let mut c = db.connect();
    served(&db, Duration::from_secs(5));
    c.batch_execute(
        "SELECT jq.create_queue('s');
         SELECT count(*) FROM jq.enqueue_many('s', (SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, 500)),
                                               delay => '1 second');",
    )
    .unwrap();
    let mut ready = -1i64;
    eventually(Duration::from_secs(10), || {
        ready = c.query_one("SELECT count(*) FROM ONLY jq.jobs WHERE state = 'ready'", &[]).unwrap().get(0);
        ready == 500
    })
    .unwrap_or_else(|| panic!("the worker did not promote the 500 delayed jobs: {ready} ready"));
    // This session updated nothing: every update counted is the worker's.
    let mut updated = 0i64;
    let sent = eventually(Duration::from_secs(5), || {
        updated = c
            .query_one("SELECT n_tup_upd FROM pg_catalog.pg_stat_user_tables WHERE relid = 'jq.jobs'::regclass", &[])
            .unwrap()
            .get(0);
        updated >= 500
    });
    assert!(sent.is_some(), "n_tup_upd of jq.jobs is {updated} 5 s after the worker promoted 500 jobs");
}

/// The worker retires finished jobs with no client calling anything: once its history ring has
/// moved on, a history table whose jobs are all past retention is truncated by the worker's
/// next pass. Seen failing before the worker ran the truncation in a transaction of its own
/// (src/bgworker/worker.rs, truncate_history): inside the guarded prune duty's subtransaction
/// jq._truncate_history saw a transaction block and truncated nothing; the job stayed.
#[test]
fn the_worker_truncates_history_tables_past_retention() {
    let db = TestDb::new("bgw_history");
    let mut c = db.connect();
    served(&db, Duration::from_secs(5));
    c.batch_execute("SELECT jq.create_queue('h', retention => '0', history_retention => '0')").unwrap();
    let id: i64 = c.query_one("SELECT jq.enqueue('h')", &[]).unwrap().get(0);
    let job = claim(&mut c, "h", "w", 1, None).pop().unwrap();
    assert!(complete(&mut c, &job));
    assert_eq!(state(&mut c, id).as_deref(), Some("completed"));
    // With retention 0 the ring moves on once its table has been current for a minute (since
    // the install), and the worker truncates the table it left 10 s later (a completion that
    // read the ring before it moved may still write there): real time, no clock skipped.
    let mut left = Some(String::new());
    eventually(Duration::from_secs(100), || {
        left = state(&mut c, id);
        left.is_none()
    })
    .unwrap_or_else(|| panic!("the worker did not retire the completed job: {left:?}"));
}
