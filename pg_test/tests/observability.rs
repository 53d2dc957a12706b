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
