//! The observability views: `jq.queue_stats`' recent-history columns and `jq.table_health`.
//! Instants come from the real clock here (the views read now()), so the test only relies on
//! things that happened within the last seconds.

use jq_pg_test::*;

#[test]
fn queue_stats_counts_recent_failures_expired_leases_and_the_wait() {
    let db = TestDb::new("obs_stats");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q'); SELECT jq.enqueue_many('q', '[1, 2, 3, 4, 5]')").unwrap();
    let done = claim(&mut c, "q", "w", 2, None);
    for j in &done {
        assert!(complete(&mut c, j));
    }
    let failing = claim(&mut c, "q", "w", 1, None).pop().unwrap();
    c.execute("SELECT jq.fail($1, $2, 'boom')", &[&failing.id, &failing.token]).unwrap();
    // An expired lease, reaped at an instant just after it expired (no clock games: the lease
    // is 1 ms long and we pass the real now).
    claim(&mut c, "q", "gone", 1, Some("1 millisecond"));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let reaped: i32 = c.query_one("SELECT jq._reap(clock_timestamp())", &[]).unwrap().get(0);
    assert_eq!(reaped, 1);
    let row = c
        .query_one(
            "SELECT completed_5m, failed_5m, failed_15m, lease_expired_15m,
                    wait_p95_5m IS NOT NULL AND wait_p95_5m >= interval '0' AND wait_p95_5m < interval '1 minute'
             FROM jq.queue_stats WHERE queue = 'q'",
            &[],
        )
        .unwrap();
    let got: (i64, i64, i64, i64, bool) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(got, (2, 1, 1, 1, true));
}

#[test]
fn table_health_names_the_transaction_holding_vacuum_back() {
    let db = TestDb::new("obs_health");
    let mut c = db.connect();
    let mut holder = db.connect();
    let pid = backend_pid(&mut holder);
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jq.jobs").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let rows = c
        .query("SELECT table_name, total_bytes > 0, oldest_xact_pid, oldest_xact_age > interval '100 ms'
                FROM jq.table_health", &[])
        .unwrap();
    let tables: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    for t in ["jobs", "execution_log", "queues", "schedules", "cron_runs"] {
        assert!(tables.iter().any(|x| x == t), "{t} missing from {tables:?}");
    }
    // Other tests' sessions may hold older snapshots, so the holder reported is the oldest one:
    // at least as old as ours, and the same on every row.
    let holders: Vec<Option<i32>> = rows.iter().map(|r| r.get(2)).collect();
    assert!(holders.iter().all(|h| *h == holders[0]) && holders[0].is_some(), "{holders:?}");
    let at_least_ours: bool = c
        .query_one(
            "SELECT (SELECT max(oldest_xact_age) FROM jq.table_health)
                    >= (SELECT clock_timestamp() - xact_start FROM pg_stat_activity WHERE pid = $1) - interval '50 ms'",
            &[&pid],
        )
        .unwrap()
        .get(0);
    assert!(at_least_ours);
    holder.batch_execute("COMMIT").unwrap();
}

/// jq.table_health never waits for a lock (src/table_size.rs): a table whose size it cannot read
/// at once shows a NULL total_bytes, the others their sizes. Two ways a scrape used to hang:
/// an ACCESS EXCLUSIVE request queued behind a reader of jq.jobs (an ALTER TABLE behind a
/// report), and an index held by an open REINDEX. Negative control: JQ_TEST_BREAK=health_waits
/// (jq._table_bytes as a plain pg_total_relation_size) made it fail with 57014 on both.
#[test]
fn table_health_never_waits_for_a_lock() {
    let db = TestDb::new("obs_health_nowait");
    let mut c = db.connect();
    if broken("health_waits") {
        c.batch_execute("CREATE OR REPLACE FUNCTION jq._table_bytes(rel oid) RETURNS bigint LANGUAGE sql
                         AS 'SELECT pg_catalog.pg_total_relation_size($1)'").unwrap();
    }
    let sizes = |c: &mut Client| -> Result<Vec<(String, Option<i64>)>, postgres::Error> {
        c.batch_execute("SET statement_timeout = '5s'")?;
        let rows = c.query("SELECT table_name, total_bytes FROM jq.table_health", &[])?;
        c.batch_execute("RESET statement_timeout")?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    };
    let unmeasured = |s: &[(String, Option<i64>)]| -> Vec<String> {
        s.iter().filter(|(_, b)| b.is_none()).map(|(t, _)| t.clone()).collect()
    };
    assert_eq!(unmeasured(&sizes(&mut c).unwrap()), Vec::<String>::new(), "every size, with nobody in the way");

    // An open REINDEX of one index of jq.jobs_done_3: ACCESS EXCLUSIVE on the index (SHARE on
    // the table, which readers do not conflict with).
    let mut reindex = db.connect();
    let index: String = reindex
        .query_one("SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = 'jq.jobs_done_3'::regclass
                    ORDER BY indexrelid LIMIT 1", &[])
        .unwrap()
        .get(0);
    reindex.batch_execute(&format!("BEGIN; REINDEX INDEX {index}")).unwrap();
    let s = sizes(&mut c).expect("jq.table_health answers beside an open REINDEX");
    assert_eq!(unmeasured(&s), vec!["jobs_done_3".to_string()], "{s:?}");
    reindex.batch_execute("ROLLBACK").unwrap();

    // A reader of jq.jobs, and an ACCESS EXCLUSIVE request on jq.jobs alone queued behind it.
    let mut reader = db.connect();
    reader.batch_execute("BEGIN; SELECT count(*) FROM ONLY jq.jobs").unwrap();
    let mut locker = db.connect();
    let locker_pid = backend_pid(&mut locker);
    let queued = std::thread::spawn(move || {
        locker.batch_execute("SET lock_timeout = '60s'; BEGIN; LOCK TABLE ONLY jq.jobs IN ACCESS EXCLUSIVE MODE; ROLLBACK")
    });
    await_lock_wait(&mut c, locker_pid, "the LOCK TABLE never queued behind the reader", || queued.is_finished());
    assert!(!queued.is_finished(), "the LOCK TABLE ended instead of queueing: {:?}", queued.join());
    let s = sizes(&mut c).expect("jq.table_health answers beside a queued exclusive lock");
    assert_eq!(unmeasured(&s), vec!["jobs".to_string()], "{s:?}");
    assert!(s.iter().filter(|(t, _)| t != "jobs").all(|(_, b)| b.unwrap() > 0), "{s:?}");
    reader.batch_execute("COMMIT").unwrap();
    queued.join().unwrap().expect("the queued lock is granted once the reader ends");
    assert_eq!(unmeasured(&sizes(&mut c).unwrap()), Vec::<String>::new(), "every size again");
    // It holds no lock once it has answered: an exclusive lock is granted at once after it.
    c.batch_execute("BEGIN; SELECT total_bytes FROM jq.table_health; SET LOCAL lock_timeout = '1s';").unwrap();
    let mut other = db.connect();
    other.batch_execute("SET lock_timeout = '5s'; BEGIN; LOCK TABLE ONLY jq.jobs_done_5 IN ACCESS EXCLUSIVE MODE; ROLLBACK")
        .expect("table_health left no lock behind in its open transaction");
    c.batch_execute("COMMIT").unwrap();
}
